"""Bridges to other libraries; each submodule imports its library, so import the one you use."""
