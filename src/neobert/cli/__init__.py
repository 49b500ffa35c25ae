"""The ``neobert`` command line: a thin layer over ``run(...)`` functions that tests call directly."""
