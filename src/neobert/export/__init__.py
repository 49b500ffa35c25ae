"""Deployable artefacts outside PyTorch.

- :mod:`neobert.export.onnx`: ``export_onnx(model_dir, output, quantize=None)`` writes a directory that ONNX
  Runtime (or transformers.js) runs with nothing from this package: ``model.onnx`` (+ ``model_int8.onnx``),
  the tokenizer and ``onnx_config.json`` (inputs, outputs, pooling, labels, parity measured at export);
- :mod:`neobert.export.runtime`: :class:`~neobert.export.runtime.OnnxEncoder`, which loads such a directory
  with onnxruntime + tokenizers only (no torch) and encodes or classifies texts.
"""
