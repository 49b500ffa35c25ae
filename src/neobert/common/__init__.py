"""Floor 0: what every floor above uses and nothing of neobert's own.

``config`` (:class:`~neobert.common.config.ModelConfig`, presets, settings files, the one table of renamed
settings), ``io`` (atomic writes, a job's hold on its output directory), ``tables`` (numbers and Markdown
tables for people) and ``progress`` (progress bars; in a log, a line at a steady interval).

Nothing is imported here: ``import neobert.common.io`` loads that module alone.
"""
