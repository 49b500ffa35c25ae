"""Recipes: whole runs put together from the tasks (the embedded default run; the shipped YAML recipes it
and the ablation ladders read live in :mod:`neobert.configs`)."""
