"""neobert.cli.options: command-line options derived from config dataclasses (a new field is one line)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from neobert.cli.main import build_parser
from neobert.cli.options import add_options, config_from_args, field_help, given
from neobert.finetuning import GlueConfig, TrainSettings


@dataclass
class Base:
    # a comment above the field
    # on two lines
    alpha: int = 3  # and one beside it
    name: str | None = None


@dataclass
class Settings(Base):
    required: str = field(default="x", metadata={"help": "from metadata"})
    sizes: tuple[int, ...] = (8, 32)  # sizes
    span: tuple[int, int] = (1, 2)
    words: list[str] = field(
        default_factory=lambda: ["a", "b"]
    )  # a comment on the closing line of a field spread over lines
    flag: bool = False  # turn it on
    on: bool = True  # the thing that is on
    mapping: dict[str, int] = field(default_factory=dict)  # no command-line form
    rate: float = 0.5


@dataclass
class Needs:
    path: str  # required: no default
    size: int = 1


def parser_for(cls, **kw) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    add_options(parser, cls, **kw)
    return parser


def test_help_comes_from_the_comments_above_beside_and_inherited():
    helps = field_help(Settings)
    assert helps["alpha"] == "a comment above the field on two lines and one beside it"
    assert helps["name"] == ""
    assert helps["required"] == "from metadata"
    assert helps["words"] == "a comment on the closing line of a field spread over lines"
    text = parser_for(Settings).format_help()
    assert "--no-on" in text and "--flag" in text and "--mapping" not in text
    assert "(default: 8,32)" in text


def test_values_parse_into_the_config_and_defaults_are_the_fields():
    parser = parser_for(Settings)
    assert config_from_args(Settings, parser.parse_args([])) == Settings()
    args = parser.parse_args(
        ["--alpha", "5", "--sizes", "1,2,3", "--span", "4,9", "--words", "x, y", "--flag", "--no-on"]
    )
    config = config_from_args(Settings, args, rate=2.0)
    assert config == Settings(
        alpha=5, sizes=(1, 2, 3), span=(4, 9), words=["x", "y"], flag=True, on=False, rate=2.0
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--sizes", "1,x"])


def test_given_only_sets_just_what_the_command_line_gave():
    parser = parser_for(Settings, given_only=True)
    assert given(Settings, parser.parse_args([])) == {}
    assert given(Settings, parser.parse_args(["--no-on", "--rate", "1"])) == {"on": False, "rate": 1.0}


def test_a_field_without_default_is_a_required_option_unless_given_only():
    with pytest.raises(SystemExit):
        parser_for(Needs).parse_args([])
    assert config_from_args(Needs, parser_for(Needs).parse_args(["--path", "p"])) == Needs(path="p")
    assert given(Needs, parser_for(Needs, given_only=True).parse_args([])) == {}


def test_every_train_setting_is_a_finetune_option():
    """A new TrainSettings field reaches `neobert finetune glue` without touching the CLI."""
    parser = build_parser()
    glue = parser.parse_args(
        ["finetune", "glue", "--clip-grad-norm", "0.5", "--seed", "7", "--no-mnli-transfer"]
    )
    assert given(GlueConfig, glue) == {"clip_grad_norm": 0.5, "seed": 7, "transfer_from_mnli": False}
    text = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    glue_help = text.choices["finetune"]._subparsers._group_actions[0].choices["glue"].format_help()
    for name in TrainSettings.__dataclass_fields__:
        assert "--" + name.replace("_", "-") in glue_help
