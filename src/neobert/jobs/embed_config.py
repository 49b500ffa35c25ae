"""The settings of ``neobert embed`` (:class:`EmbedConfig`): every field is an option of the command; the job
(:mod:`neobert.jobs.embed`) and its workers (:mod:`neobert.jobs.embed_workers`) read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.pieces import ON_DUPLICATE
from ..data.readers import ON_ERROR
from ..inference.backends import BACKENDS, EXPORT_VARIANTS
from ..inference.quantization import CALIBRATED, TYPES, calibration_ranges
from ..model.pooling import POOLING_NAMES
from .file_job import MAX_TOKENS_HELP, FileJob, precision_field
from .settings import EngineSettings

# Settings that change the vectors: a re-run under other values would mix two sets of embeddings.
CONTENT_KEYS = (
    "model",
    "tokenizer",
    "pooling",
    "normalize",
    "precision",
    "backend",
    "onnx_variant",
    "dtype",
    "long_documents",
    "stride",
    "rope_scaling",
    "max_length",
    "text_column",
    "id_column",
    "on_error",
    "shard_rows",
)


@dataclass(kw_only=True)
class EmbedConfig(EngineSettings, FileJob):
    """``neobert embed``: embed texts. Into a directory (the default): any number of .txt (one text per line),
    .jsonl, .csv and .parquet files, directories and globs, as parquet shards of (id, embedding, tokens,
    truncated, windows) plus a manifest, resumable, in this process or on a Ray cluster. Into a .npy file:
    the lines of one text file, row i is line i (the same pipeline, its shards gathered into one array)."""

    input: list[str] = field(
        metadata={
            "nargs": "+",
            "help": (
                "files, directories or globs of .txt (one text per line), .jsonl, .csv, .parquet; local or URLs "
                "(s3://, gs://, ... where fsspec's library for it is installed)"
            ),
        }
    )
    # a directory (parquet shards + _manifest.json), or a .npy file (one text file's lines x hidden)
    output: str
    max_tokens: int | None = field(default=None, metadata={"help": MAX_TOKENS_HELP})
    pooling: str | None = field(
        default=None,
        metadata={
            "choices": POOLING_NAMES,
            "help": f"{' | '.join(POOLING_NAMES)} (default: the model's, as the service embeds: a "
            "sentence-transformers directory's Pooling, else mean)",
        },
    )
    # unit L2 norm (default: the model's, as the service: a sentence-transformers directory's Normalize, else on)
    normalize: bool | None = None
    max_length: int | None = None  # truncate texts to this many tokens (default: the model's max_length)
    precision: str = precision_field("cosine > 0.99 to fp32")
    backend: str = field(
        default="auto",
        metadata={
            "choices": BACKENDS,
            "help": (
                "torch: PyTorch; onnx (ONNX Runtime) or openvino (OpenVINO) on a `neobert export onnx` directory; "
                "auto: for an export the fastest of ONNX Runtime and OpenVINO (fp32, and bf16 where the CPU has it "
                "and its vectors keep cosine 0.99 to PyTorch fp32), measured at start; for a model directory "
                "carrying its export in DIR/onnx those and PyTorch (fp32, bf16); torch for another model"
            ),
        },
    )
    # a JSON file keeping --backend auto's measured choice per export, machine and thread count (as neobert serve's)
    backend_cache: str | None = None
    onnx_variant: str = field(
        default="fp32",
        metadata={
            "choices": EXPORT_VARIANTS,
            "help": "an export's graph: fp32, int8 (ONNX Runtime's dynamic) or int8-static (NNCF's, on openvino)",
        },
    )
    text_column: str = "text"  # tables: the column of texts
    # tables: a column of ids (default: FILE:ROW, the input path and the 1-based row or line)
    id_column: str | None = None
    dtype: str = field(
        default="float32",
        metadata={
            "choices": TYPES,
            "help": (
                "the stored vectors' type: float32, float16, int8 / uint8 (256 buckets per dimension between the "
                "calibration minimum and maximum), binary / ubinary (signs, 8 dimensions per byte)"
            ),
        },
    )
    # int8 / uint8: a .npy of float embeddings (N, dim) of representative texts (e.g. `neobert embed --model
    # MODEL --input SAMPLE.txt --output cal.npy`); their per-dimension minimum and maximum are the buckets,
    # stored with the output
    calibration: str | None = None
    shard_rows: int = 4096  # texts per output shard (and per piece of work)
    on_error: str = field(
        default="raise",
        metadata={
            "choices": ON_ERROR,
            "help": (
                "a bad row (empty text, invalid UTF-8 or JSON, no id): raise naming file and row, or skip and count it"
            ),
        },
    )
    on_duplicate: str = field(
        default="refuse",
        metadata={
            "choices": ON_DUPLICATE,
            "help": (
                "--id-column: an id that two rows hold stops the job naming both rows (refuse), or only its first row "
                "is embedded and the others counted (keep-first)"
            ),
        },
    )
    overwrite: bool = False  # replace an output directory made with other settings instead of refusing

    def __post_init__(self) -> None:
        if isinstance(self.input, (str, Path)):
            self.input = [str(self.input)]
        self.input = [str(i) for i in self.input]
        FileJob.__post_init__(self)
        EngineSettings.__post_init__(self)
        if self.shard_rows < 1:
            raise ValueError(f"shard rows must be positive, got {self.shard_rows}")
        if self.on_duplicate not in ON_DUPLICATE:
            raise ValueError(
                f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}; got {self.on_duplicate!r}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        if self.onnx_variant not in EXPORT_VARIANTS:
            raise ValueError(
                f"onnx_variant must be one of {', '.join(EXPORT_VARIANTS)}; got {self.onnx_variant!r}"
            )
        if self.dtype in CALIBRATED and self.calibration is None:
            raise ValueError(
                f"--dtype {self.dtype} needs --calibration FILE.npy (float embeddings of sample texts)"
            )

    def ranges(self) -> np.ndarray | None:
        """The int8 / uint8 calibration ranges (2, dim) from ``calibration``; None for the other types."""
        if self.dtype not in CALIBRATED:
            return None
        path = Path(self.calibration)
        if not path.is_file():
            raise ValueError(f"calibration file {path} does not exist")
        return calibration_ranges(np.load(path))

    @property
    def to_npy(self) -> bool:
        return str(self.output).lower().endswith(".npy")
