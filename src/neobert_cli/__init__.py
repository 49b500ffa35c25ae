"""The ``neobert`` console script: a launcher outside the ``neobert`` package that answers at once.

``import neobert`` registers the model with transformers' Auto classes, which imports torch and transformers
(seconds); Python runs a package's ``__init__`` before any module in it, so no ``neobert.*`` module can answer
``neobert --help`` without that cost. :mod:`neobert_cli.launcher` answers ``neobert``, ``--help``, ``COMMAND
[SUBCOMMAND] --help`` and ``--version`` from ``parsers.json``, a description of the real parser
(``neobert.cli.main.build_parser``) written by :mod:`neobert_cli.generate`, which it rebuilds with argparse;
every other command line goes to ``neobert.cli.main.main``. docs/architecture.md says why.
"""
