"""Floor 2, the inference core between the model (floor 1) and its users (floor 3: the service, the jobs,
evaluation, the exports).

- ``registration``: the head registry (what a head is); ``directories``: the kinds of model directory
  (what a source is, how it loads, what it serves);
- ``encoders``: loading an encoder and its tokenizer (the ``Encoder`` bundle); ``capabilities``: what a
  loaded model can do (``load_for_inference``);
- ``batching``: how texts are cut into forwards (``token_batches``, ``CPU_MAX_TOKENS``), for PyTorch and
  the exports alike;
- ``run``: a loaded model over texts (``encode``, ``classifier_logits``, ``classifier_rows``,
  ``fill_mask``, ...); ``long_documents``: texts longer than the model's window;
- ``sparse`` (SPLADE), ``late_interaction`` (ColBERT), ``quantization`` (int8 / binary embeddings),
  ``model_info`` (architecture and exact parameter counts).

The package itself defines nothing: import from the module (``from neobert.inference.run import encode``).
``import neobert`` loads ``registration`` and no other module of this package.
"""
