"""Benchmarks: inference throughput and memory of NeoBERT beside other encoders."""
