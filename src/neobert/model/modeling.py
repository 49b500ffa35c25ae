"""NeoBERT as transformers models: the encoder and its heads, in the released checkpoint's layout.

Tensor names are the released ones (``model.encoder.weight``, ``model.transformer_encoder.{i}.qkv.weight``,
``decoder.weight`` ...), so a released directory loads with the Auto classes and no remote code, and what we
save can be read by the original code too.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from ..common.config import ModelConfig
from .attention import (
    VARLEN_KERNELS,
    AttentionContext,
    AttentionRuntime,
    packed_context,
    padded_context,
    positions_from_cu_seqlens,
    resolve_backend,
    unpad,
)
from .checkpoint import check_loading_info
from .configuration import NeoBERTConfig
from .layers import EncoderBlock, RMSNorm, make_norm
from .losses import mlm_loss, sequence_loss, sequence_problem, token_loss
from .pooling import pool
from .rope import rope_rotations


class SequenceTooLongError(ValueError):
    """An input is longer than the positions the model has."""


class RotaryTables(nn.Module):
    """(cos, sin) of every position, float32, built once per device on first use, never in checkpoints.

    Deliberately not a buffer: ``model.to(torch.bfloat16)`` casts buffers, and the rotation must use the
    exact float32 table whatever the weights' dtype (nothing is cast per call either).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self._tables: dict[torch.device, torch.Tensor] = {}

    def table(self, device: torch.device) -> torch.Tensor:
        """(max_length, D/2, 2) float32 on ``device``."""
        if device not in self._tables:
            self._tables[device] = rope_rotations(self.config, device)
        return self._tables[device]

    def reset(self) -> None:
        self._tables.clear()


class NeoBERTPreTrainedModel(PreTrainedModel):
    config_class = NeoBERTConfig
    config: NeoBERTConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["EncoderBlock"]
    # Another task's head in the checkpoint (e.g. the MLM decoder when loading the bare encoder from the
    # released checkpoint) is expected: skip it quietly instead of printing transformers' load report.
    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^dense\.", r"^classifier\."]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Uniform init in [-r, r] for linears and embeddings (the paper's scheme), ones/zeros for norms."""
        cfg = self.config
        if isinstance(module, nn.Embedding):
            init.uniform_(module.weight, -cfg.embedding_init_range, cfg.embedding_init_range)
        elif isinstance(module, nn.Linear):
            r = (
                cfg.decoder_init_range
                if module is getattr(self, "decoder", None)
                else cfg.embedding_init_range
            )
            if module is getattr(self, "classifier", None) or module is getattr(self, "dense", None):
                r = cfg.classifier_init_range
            init.uniform_(module.weight, -r, r)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (RMSNorm, nn.RMSNorm, nn.LayerNorm)):
            init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, RotaryTables):
            module.reset()

    def _head_output(self, output_class: type, loss, logits, hidden_states, return_dict: bool | None):
        """A head's ``output_class(loss, logits, hidden_states)``, or with ``return_dict`` false (default: the
        config's) the tuple of those that are set."""
        if not (return_dict if return_dict is not None else self.config.return_dict):
            return tuple(v for v in (loss, logits, hidden_states) if v is not None)
        return output_class(loss=loss, logits=logits, hidden_states=hidden_states)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """transformers' loader, made strict: missing, unexpected or wrongly shaped tensors raise, listed.

        A new task head (classifier) is the only thing allowed to be missing.
        """
        want_info = kwargs.pop("output_loading_info", False)
        ignore_sizes = kwargs.pop("ignore_mismatched_sizes", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path,
            *model_args,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
            **kwargs,
        )
        check_loading_info(model, info, str(pretrained_model_name_or_path), ignore_sizes)
        return (model, info) if want_info else model


class NeoBERTModel(NeoBERTPreTrainedModel):
    """The bare encoder: token embedding, pre-norm blocks, final norm. Returns the last hidden state."""

    def __init__(self, config: NeoBERTConfig):
        super().__init__(config)
        cfg = config.to_model_config()
        self.model_config = cfg
        self.encoder = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        if cfg.position_embedding == "learned":
            self.positional_embedding = nn.Embedding(cfg.max_length, cfg.hidden_size)
        else:
            self.rotary = RotaryTables(cfg)
        self.transformer_encoder = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.num_hidden_layers))
        self.layer_norm = make_norm(cfg)
        self.runtime = AttentionRuntime()  # kernel and unpadding: see neobert.model.set_runtime
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        """Encode token ids.

        input_ids: (B, L) right-padded with ``attention_mask`` (B, L) 0/1, or packed sequences: any shape
        holding T tokens with ``cu_seqlens`` (N + 1,) offsets and ``max_seqlen`` (positions then restart at
        each sequence, and no token attends outside its own sequence).
        Returns ``last_hidden_state`` of shape input_ids.shape + (C,) (zeros at padding when unpadded) and, on
        request, ``hidden_states``: the embedding output and each block's output.
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        shape = input_ids.shape
        input_ids, position_ids, ctx, indices = self._layout(
            input_ids, attention_mask, position_ids, cu_seqlens, max_seqlen
        )
        x, rope = self._embed(input_ids, position_ids)
        hidden_states = [x] if output_hidden_states else None
        for block in self.transformer_encoder:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, ctx, rope, use_reentrant=False)
            else:
                x = block(x, ctx, rope)
            if hidden_states is not None:
                hidden_states.append(x)
        x = self.layer_norm(x)

        x, *hidden_states = (_restore(h, indices, ctx.packed, shape) for h in (x, *(hidden_states or ())))
        hidden_states = tuple(hidden_states) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (x, hidden_states) if v is not None)
        return BaseModelOutput(last_hidden_state=x, hidden_states=hidden_states)

    def _layout(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        cu_seqlens: torch.Tensor | None,
        max_seqlen: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, AttentionContext, torch.Tensor | None]:
        """How the blocks see the batch: padded rows, or packed tokens (given as ``cu_seqlens``, or unpadded
        here where the runtime asks for it). Returns the ids and positions in that layout, the attention
        context, and the real tokens' positions (``indices``) where a padded batch was unpadded."""
        cfg = self.model_config
        if (
            cfg.position_embedding == "learned"
            and position_ids is None
            and cu_seqlens is None
            and (attention_mask is not None)
        ):
            # RoBERTa-style learned positions count real tokens only (padding gets 0), so a left-padded row
            # gets the positions it has alone, and the padded and unpadded paths agree. RoPE needs no such
            # ids: its scores depend on relative positions only.
            mask = attention_mask.long()
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0) * mask
        backend = resolve_backend(
            self.runtime.backend, input_ids.device, self._compute_dtype(input_ids.device)
        )
        unpad_batch = self.runtime.unpad if self.runtime.unpad is not None else backend in VARLEN_KERNELS
        indices = None
        if cu_seqlens is None and attention_mask is not None and unpad_batch and input_ids.dim() == 2:
            indices, cu_seqlens, max_seqlen = unpad(attention_mask)
            input_ids = input_ids.flatten()[indices]
            if position_ids is not None:
                position_ids = position_ids.flatten()[indices]
        if cu_seqlens is None:
            self._check_length(input_ids.shape[-1])
            return input_ids, position_ids, padded_context(attention_mask), None
        if max_seqlen is None:
            max_seqlen = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
        self._check_length(max_seqlen)
        input_ids = input_ids.flatten()  # (T,)
        if position_ids is None:
            position_ids = positions_from_cu_seqlens(cu_seqlens, input_ids.shape[0])
        else:
            position_ids = position_ids.flatten()
        ctx = packed_context(cu_seqlens, max_seqlen, backend, allow_runs=not self.runtime.compiled)
        return input_ids, position_ids, ctx, indices

    def _compute_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype attention will see: autocast's when it is on, else the weights'."""
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
        return self.encoder.weight.dtype

    def _check_length(self, length: int) -> None:
        cfg = self.model_config
        if length > cfg.max_length:
            hint = (
                "extend the context with RoPE scaling, e.g. ModelConfig.with_context(length, 'yarn') or "
                "`rope_scaling_type`/`rope_scaling_factor` in config.json"
                if cfg.position_embedding == "rope"
                else "a learned position table cannot be extended; truncate the input"
            )
            raise SequenceTooLongError(
                f"input of {length} tokens is longer than the model's max_length {cfg.max_length}: {hint}"
            )

    def _embed(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token embedding (+ learned positions), and the RoPE (cos, sin) of these positions, shaped
        (..., L, 1, 1, D/2, 2) to broadcast against the (..., L, H, 2, D/2) pairs of q and k."""
        x = self.encoder(input_ids)
        rope = None
        if self.model_config.position_embedding == "learned":
            if position_ids is None:
                position_ids = torch.arange(input_ids.shape[-1], device=input_ids.device)
            x = x + self.positional_embedding(position_ids)
        elif position_ids is None:  # padded, positions 0..L-1: a view of the table, no gather
            rope = self.rotary.table(input_ids.device)[: input_ids.shape[-1], None, None]
        else:
            rope = self.rotary.table(input_ids.device)[position_ids][..., None, None, :, :]
        return x, rope


def _restore(x: torch.Tensor, indices: torch.Tensor | None, packed: bool, shape: torch.Size) -> torch.Tensor:
    """Hidden states back in the caller's layout: (T, C) real tokens -> (B, L, C) with zeros at padding
    where the batch was unpadded here; packed input -> its own shape + (C,)."""
    if indices is not None:
        out = x.new_zeros(shape.numel(), x.shape[-1])
        out.index_copy_(0, indices, x)
        return out.view(*shape, -1)
    return x.view(*shape, -1) if packed else x


class _Head(NeoBERTPreTrainedModel):
    """What every head shares: the encoder (``self.model``) and the forward around it. A head turns the last
    hidden states into ``(logits, loss)`` (:meth:`_head`; the loss only with ``labels``) and names its
    ``output_class``; a head that reads whole rows (a pooled classifier) sets ``packs = False``."""

    output_class: type
    packs = True  # accepts packed input (cu_seqlens)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput | SequenceClassifierOutput | TokenClassifierOutput | tuple:
        """The head's logits, and with ``labels`` its loss; inputs as :meth:`NeoBERTModel.forward`'s."""
        if cu_seqlens is not None and not self.packs:
            raise ValueError(f"{type(self).__name__} reads whole rows: give padded rows, not cu_seqlens")
        out = self.model(
            input_ids,
            attention_mask,
            position_ids,
            cu_seqlens,
            max_seqlen,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits, loss = self._head(out.last_hidden_state, attention_mask, labels, **kwargs)
        return self._head_output(self.output_class, loss, logits, out.hidden_states, return_dict)


class NeoBERTForMaskedLM(_Head):
    """Encoder + untied MLM decoder with bias (``decoder.weight``, ``decoder.bias``)."""

    output_class = MaskedLMOutput

    def __init__(self, config: NeoBERTConfig):
        super().__init__(config)
        self.model = NeoBERTModel(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.decoder

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.decoder = value

    def _head(
        self,
        h: torch.Tensor,
        attention_mask: torch.Tensor | None,
        labels: torch.Tensor | None,
        masked_positions: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MLM logits (..., V); with ``labels`` (``IGNORE_INDEX`` = ignore) also the mean cross-entropy over labelled tokens.

        ``masked_positions`` (bool, shaped like ``input_ids``; a keyword of ``forward``) decodes only those
        positions: logits are (N, V) for the N selected tokens in row-major order, which saves the
        full-vocabulary projection of every other token (labels, when given, are read at the same positions).
        Without ``labels`` no loss is computed: a caller with its own reduction (the pretraining task sums)
        computes it once, itself.
        """
        loss = None
        if masked_positions is not None:
            logits = self.decoder(h[masked_positions])  # (N, V)
            if labels is not None:
                loss = mlm_loss(logits, labels[masked_positions])
        else:
            logits = self.decoder(h)  # (..., V)
            if labels is not None:
                loss = mlm_loss(logits, labels)
        return logits, loss


class _LabelHead(_Head):
    """What the sequence and token classifiers share: dropout and a linear classifier over ``num_labels``.
    A head says how hidden states become logits (:meth:`_logits`) and how logits meet labels (:meth:`_loss`)."""

    def __init__(self, config: NeoBERTConfig, dense: bool = False):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = NeoBERTModel(config)
        if dense:
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _head(
        self, h: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor | None, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self._logits(h, attention_mask)
        return logits, self._loss(logits, labels) if labels is not None else None


class NeoBERTForSequenceClassification(_LabelHead):
    """The released head: pooled -> dropout -> dense -> tanh -> dropout -> classifier.

    Pooling is ``classifier_pooling``: the first token ([CLS], released) or the masked mean.
    """

    output_class = SequenceClassifierOutput
    packs = False  # pools one vector per row

    def __init__(self, config: NeoBERTConfig):
        super().__init__(config, dense=True)

    def _logits(self, h: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        pooled = pool(h, attention_mask, self.config.classifier_pooling)  # (B, C)
        x = torch.tanh(self.dense(self.dropout(pooled)))
        return self.classifier(self.dropout(x))  # (B, num_labels)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        problem = sequence_problem(self.config.problem_type, self.num_labels, labels)
        return sequence_loss(logits, labels, problem)


class NeoBERTForTokenClassification(_LabelHead):
    """Encoder -> dropout -> per-token classifier."""

    output_class = TokenClassifierOutput

    def _logits(self, h: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.classifier(self.dropout(h))  # (B, L, num_labels)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return token_loss(logits, labels)
