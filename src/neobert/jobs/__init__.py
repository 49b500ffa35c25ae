"""Batch jobs beyond one process: corpus embedding (:mod:`neobert.jobs.embed`) and pretraining-data preparation
(:mod:`neobert.jobs.prepare`), each run on an engine (:mod:`neobert.jobs.engine`: this process or a Ray cluster),
over one job output (:mod:`neobert.jobs.output`), with the engine settings in every job's config
(:mod:`neobert.jobs.settings`).

Nothing is imported here: a job's modules load only when one is used.
"""
