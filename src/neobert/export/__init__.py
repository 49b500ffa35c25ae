"""Deployable artefacts outside PyTorch.

- :mod:`neobert.export.onnx`: ``export_onnx(model_dir, output, quantize=None)`` writes a directory that ONNX
  Runtime (or transformers.js) runs with nothing from this package: ``model.onnx`` (+ ``model_int8.onnx``),
  the tokenizer and ``onnx_config.json`` (inputs, outputs, pooling, labels, parity measured at export);
- :mod:`neobert.export.openvino`: the static int8 of such a directory for OpenVINO (NNCF), accepted only if it
  keeps the vectors.

Running an export is inference (:mod:`neobert.inference.onnx_encoder`, :mod:`neobert.inference.openvino_encoder`,
:mod:`neobert.inference.backends`), so that the batch jobs below the tasks run one too.
"""
