"""Batch jobs beyond one process: corpus embedding (:mod:`neobert.jobs.embed`) and pretraining-data preparation
(:mod:`neobert.jobs.prepare`), each run on an engine (:mod:`neobert.jobs.engine`: this process or a Ray cluster),
over one job output (:mod:`neobert.jobs.output`), with the engine settings in every job's config
(:mod:`neobert.jobs.settings`).

Nothing is imported here, so that a module of a lower floor can import :mod:`neobert.jobs.settings` and
:mod:`neobert.jobs.output` alone (``neobert.data.prepare`` does).
"""
