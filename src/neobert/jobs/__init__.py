"""Batch jobs beyond one process: corpus embedding (:mod:`neobert.jobs.embed`) and pretraining-data preparation
(:mod:`neobert.jobs.prepare`), each run in this process or over a Ray cluster (:mod:`neobert.jobs.engine`).

Nothing is imported here, so that a module of a lower floor can import :mod:`neobert.jobs.engine` alone.
"""
