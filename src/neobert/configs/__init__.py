"""Shipped pretraining configurations (YAML files mapping 1:1 onto PretrainConfig)."""
