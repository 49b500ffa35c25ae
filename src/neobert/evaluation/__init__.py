"""Evaluation: task metrics, embedding evaluation, MTEB and pseudo-perplexity (one module per concern)."""
