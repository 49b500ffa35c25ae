"""Floor 1, beside the model: what runs fastest on this machine.

``hardware`` (the CPU, its flags, precision ``auto`` measured per shape and device; imports
:mod:`neobert.common.config` only) and ``fastpath`` (bf16 + unpadded inference and the fused CPU epilogues,
applied to a pure :mod:`neobert.model` from outside).

Nothing is imported here: ``import neobert.runtime.hardware`` loads that module alone.
"""
