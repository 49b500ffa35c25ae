"""The PyTorch backend of ``neobert serve`` (:class:`TorchBackend`): a model loaded for inference, and one
model call per merged batch of requests.

Every task (:mod:`.tasks`) goes through the library's own functions (``long_documents.embed`` / ``classify``
over ``inference.encode`` / ``classify``, ``token_classification.tag``, ``inference.fill_mask``), so the
service computes exactly what the command-line tools compute. What the model can do is
:mod:`neobert.inference.capabilities`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..data.tokenizer import whole_texts
from ..inference.encoders import Encoder
from ..inference.kinds import load_for_inference
from ..inference.kinds.adapter import module_bytes
from ..inference.long_documents import LongDocuments
from .catalog import ModelEntry
from .config import ServeConfig
from .served import ServedModel
from .tasks import COUNT, LENGTHS, TASKS, Backend, Done
from .threads import ServingProbe, ThreadChoice, ThreadPolicy


@dataclass
class TorchBackend(Backend):
    """The PyTorch backend: a model loaded for inference (:func:`neobert.inference.kinds.load_for_inference`)
    and the one function the queue calls, ``call(model_call, texts)`` (:class:`.tasks.Backend`), which runs the
    task's function of :data:`.tasks.TASKS`."""

    config: ServeConfig
    loaded: Encoder
    threads: ThreadChoice | None = None  # what the model's thread count is, and why
    backend_reason: str | None = None  # why PyTorch, where auto measured it against the model's export

    def __post_init__(self) -> None:
        self.model, self.tokenizer = self.loaded.model, self.loaded.tokenizer
        self.capabilities = self.loaded.capabilities
        self.policy = self.config.long_documents
        self.long_policy = LongDocuments(
            self.config.long_documents, self.config.stride, self.config.rope_scaling
        )
        self.budget = {"batch_size": self.config.max_batch_texts, "max_tokens": self.config.max_batch_tokens}
        self._whole: Any = None
        self.spec = self.loaded.spec  # its kind's settings beside the weights (a ColBERT model's)
        self.aliases = self.capabilities.aliases  # a task asked by its common name -> its kind's task

    @classmethod
    def load(
        cls, config: ServeConfig, entry: ModelEntry | None = None, threads: ThreadChoice | None = None
    ) -> TorchBackend:
        """``entry`` (default: the config's default model) loaded; its threads measured at start unless
        ``threads`` (the process's count, chosen on the first model it loaded) is given."""
        entry = entry or config.default
        loaded = load_for_inference(
            entry.source, entry.tokenizer, entry.head, config.precision, config.sparse, entry.fields
        )
        fixed = loaded.capabilities.fixed_window
        if fixed and config.long_documents != "truncate":
            raise ValueError(f"--long-documents {config.long_documents} does not apply: {fixed}")
        model = cls(config, loaded, threads)
        if threads is None:
            key = (entry.source, config.precision, loaded.capabilities.head)
            model.threads = ThreadPolicy.at_start(config, ServingProbe(model), key=key)
        return model

    def info(self) -> ServedModel:
        """What the model is and serves (it crosses processes): its capabilities, the backend, the
        precision and the threads chosen at start."""
        dtype = next(self.model.parameters()).dtype
        return ServedModel.of(
            self.capabilities,
            backend="torch",
            mask_token=self.tokenizer.mask_token,
            vocab_size=self.text_tokenizer().get_vocab_size(),
            threads=self.threads,
            precision="bf16" if dtype == torch.bfloat16 else "fp32",
            backend_reason=self.backend_reason
            or (
                "named"
                if self.config.backend == "torch"
                else "a model directory runs on PyTorch (ONNX Runtime and OpenVINO run its `neobert export onnx`; "
                "auto measures them beside PyTorch where the directory carries it in DIR/onnx)"
            ),
        )

    def nbytes(self) -> int:
        """The bytes of the model's parameters and buffers (each storage once)."""
        return module_bytes(self.model)

    def run_task(self, name: str, texts: list[Any], options: dict[str, Any]) -> Done:
        return TASKS[self.aliases.get(name, name)](self, texts, **options)

    def lengths(self, texts: list[Any]) -> list[int]:
        return LENGTHS[self.aliases.get(COUNT, COUNT)](self, texts)

    def text_tokenizer(self) -> Any:
        if self._whole is None:
            if not hasattr(self.tokenizer, "backend_tokenizer"):
                raise ValueError("tokenize and decode need a fast (Rust) tokenizer")
            self._whole = whole_texts(self.tokenizer.backend_tokenizer)
        return self._whole
