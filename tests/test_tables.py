"""Every table for people goes through neobert.common.tables.markdown_table, with one spelling of a missing value."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from neobert.benchmarks import attention
from neobert.common.tables import MISSING, markdown_table

SRC = Path(__file__).resolve().parents[1] / "src" / "neobert"


def test_markdown_table_alignment_and_missing_values():
    text = markdown_table(
        ["name", "value", "note"], [["a", 1.5, None], ["b", float("nan"), "x"]], align="lrl"
    )
    assert text.splitlines() == [
        "| name | value | note |",
        "|---|---:|---|",
        "| a | 1.50 | n/a |",
        "| b | n/a | x |",
    ]
    with pytest.raises(ValueError, match="align needs one of l, r per column"):
        markdown_table(["a", "b"], [], align="l")


def test_attention_rows_are_as_long_as_the_header():
    """A kernel not run at a length shows n/a there (it used to leave the row short of the header)."""
    results = {
        "config": {
            "heads": 2,
            "head_dim": 8,
            "tokens": 64,
            "repeats": 1,
            "lengths": [16, 32],
            "kernels": ["sdpa", "varlen"],
        },
        "machine": {"torch": "t", "threads": 1},
        "matmul_peak_tflops": 1.0,
        "rows": [
            {"kernel": "sdpa", "length": 16, "tflops": 0.5, "max_abs_error": 0.001},
            {"kernel": "sdpa", "length": 32, "tflops": 0.6, "max_abs_error": 0.002},
            {"kernel": "varlen", "length": 16, "tflops": 0.7, "max_abs_error": 0.003},
        ],
    }
    table = [line for line in attention.markdown(results).splitlines() if line.startswith("|")]
    assert all(line.count("|") == table[0].count("|") for line in table)
    assert table[-1] == f"| varlen | 0.70 (0.0030) | {MISSING} |"


def test_no_table_is_built_by_hand():
    """No module but tables.py writes a Markdown separator row ("|---")."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("|---")
            ):
                found.add(path.name)
    assert found == set()


def test_missing_is_spelled_once():
    """No module but tables.py spells a missing value itself: "n/a", "(unset)", "(none)" (issue 32)."""
    spellings = {"n/a", "(unset)", "(none)"}
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in SRC.rglob("*.py")
        if path.name != "tables.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in spellings
    ]
    assert found == []


def test_a_card_settings_table_shows_unset_and_empty_values_as_missing():
    from neobert.cards.render import _cell

    assert (_cell(None), _cell([]), _cell(["a", "b"]), _cell(0.5)) == (MISSING, MISSING, "a, b", "0.5")
