"""ModelConfig (the one source of truth) and NeoBERTConfig (its transformers view)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml
from transformers import AutoConfig

from neobert import PRESETS, ConfigError, ModelConfig, NeoBERTConfig

# --- presets ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["neobert", "neobert-1024", "120m", "250m-wide", "bert-baseline", "small", "tiny"]
)
def test_preset_exists_and_validates(name):
    assert name in PRESETS
    config = ModelConfig.from_name(name)
    assert config.dim_head * config.num_attention_heads == config.hidden_size
    assert config.rope_original_max_length == config.max_length
    # round trip through a plain dict rebuilds the same (validated) config
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_released_preset_matches_the_spec():
    c = ModelConfig.from_name("neobert")
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads) == (28, 768, 12)
    assert (c.vocab_size, c.max_length, c.pad_token_id, c.norm_eps) == (30522, 4096, 0, 1e-5)
    assert (c.position_embedding, c.ffn, c.norm, c.rope_theta) == ("rope", "swiglu", "rmsnorm", 10000.0)
    assert c.dim_head == 64
    assert c.hidden_dropout == 0.0


def test_ablation_presets_match_the_spec():
    assert ModelConfig.from_name("neobert-1024").max_length == 1024
    m120 = ModelConfig.from_name("120m")
    assert (m120.num_hidden_layers, m120.hidden_size) == (12, 768)
    wide = ModelConfig.from_name("250m-wide")
    assert (wide.num_hidden_layers, wide.hidden_size, wide.intermediate_size) == (16, 1008, 4032)
    base = ModelConfig.from_name("bert-baseline")
    assert (base.position_embedding, base.ffn, base.norm) == ("learned", "gelu", "layernorm")


def test_unknown_preset_raises():
    with pytest.raises(ConfigError, match="no-such-preset"):
        ModelConfig.from_name("no-such-preset")


def test_preset_overrides():
    c = ModelConfig.from_name("tiny", num_hidden_layers=3)
    assert c.num_hidden_layers == 3
    assert c.hidden_size == PRESETS["tiny"]["hidden_size"]
    with pytest.raises(ConfigError, match="bogus_field"):
        ModelConfig.from_name("tiny", bogus_field=1)


# --- unknown keys ---------------------------------------------------------------------------------------


def test_from_dict_rejects_unknown_keys_naming_them():
    data = {**ModelConfig.from_name("tiny").to_dict(), "dropout_prob": 0.1, "zzz_key": 1}
    with pytest.raises(ConfigError) as info:
        ModelConfig.from_dict(data)
    assert "dropout_prob" in str(info.value)
    assert "zzz_key" in str(info.value)


def test_from_file_yaml(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(PRESETS["tiny"]), encoding="utf-8")
    assert ModelConfig.from_file(path) == ModelConfig.from_name("tiny")
    yml = tmp_path / "model.yml"
    yml.write_text(yaml.safe_dump({"hidden_size": 128, "num_attention_heads": 2}), encoding="utf-8")
    c = ModelConfig.from_file(str(yml))
    assert (c.hidden_size, c.dim_head) == (128, 64)


def test_from_file_json(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(PRESETS["tiny"]), encoding="utf-8")
    assert ModelConfig.from_file(path) == ModelConfig.from_name("tiny")


def test_empty_yaml_gives_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    assert ModelConfig.from_file(path) == ModelConfig()


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_from_file_rejects_unknown_keys(tmp_path, suffix):
    data = {**PRESETS["tiny"], "dropout": 0.1}
    path = tmp_path / f"model{suffix}"
    text = yaml.safe_dump(data) if suffix == ".yaml" else json.dumps(data)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="dropout"):
        ModelConfig.from_file(path)


def test_from_file_rejects_non_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping"):
        ModelConfig.from_file(path)


# --- bad values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"hidden_size": 64, "num_attention_heads": 5}, "divisible"),
        ({"ffn": "relu"}, "ffn"),
        ({"norm": "batchnorm"}, "norm"),
        ({"position_embedding": "alibi"}, "position_embedding"),
        ({"rope_scaling_type": "dynamic"}, "rope_scaling_type"),
        ({"classifier_pooling": 3}, "classifier_pooling"),
        ({"pad_token_id": 128}, "pad_token_id"),  # tiny vocab is 128: ids 0..127
        ({"pad_token_id": -1}, "pad_token_id"),
        ({"dim_head": 32}, "dim_head"),  # tiny: 64 / 4 heads = 16
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_hidden_layers": -2}, "num_hidden_layers"),
        ({"vocab_size": 12.5}, "vocab_size"),
        ({"rope_scaling_factor": 0.0}, "rope_scaling_factor"),
        ({"hidden_dropout": 1.0}, "hidden_dropout"),
        ({"classifier_dropout": -0.1}, "classifier_dropout"),
        ({"hidden_size": 60, "num_attention_heads": 4}, "even"),  # RoPE needs an even head dim (15)
        ({"position_embedding": "learned", "rope_scaling_type": "yarn", "rope_scaling_factor": 2.0}, "rope"),
    ],
)
def test_bad_values_raise(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ModelConfig.from_name("tiny", **overrides)


@pytest.mark.parametrize("pooling", ["last", "max"])
def test_a_classifier_pooling_the_registry_does_not_offer_the_head_raises(pooling):
    """The pooling registry says which poolings a classifier head takes ("last" is a pooling, not for heads);
    every model is built through NeoBERTConfig, which checks it."""
    config = ModelConfig.from_name("tiny", classifier_pooling=pooling)  # torch-free: no registry here
    with pytest.raises(ConfigError, match=f"classifier_pooling must be one of mean, cls; got '{pooling}'"):
        NeoBERTConfig.from_model_config(config)
    assert NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny", classifier_pooling="mean"))


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_odd_head_dim_is_fine_with_learned_positions():
    c = ModelConfig.from_name("tiny", hidden_size=60, position_embedding="learned")
    assert c.dim_head == 15


# --- derived fields -------------------------------------------------------------------------------------


def test_dim_head_is_derived():
    assert ModelConfig.from_name("neobert").dim_head == 64
    assert ModelConfig.from_name("250m-wide").dim_head == 1008 // 12
    assert ModelConfig.from_name("tiny").dim_head == 16
    # an explicit matching value is accepted
    assert ModelConfig.from_name("tiny", dim_head=16).head_dim == 16


@pytest.mark.parametrize(
    ("name", "expected"),
    [("neobert", 2048), ("120m", 2048), ("250m-wide", 2688), ("tiny", 128), ("small", 688)],
)
def test_swiglu_hidden_size(name, expected):
    # int(2 * intermediate / 3) rounded up to a multiple of 8
    assert ModelConfig.from_name(name).ffn_hidden_size == expected


def test_swiglu_hidden_size_rounds_up_to_multiple_of_8():
    c = ModelConfig.from_name("tiny", intermediate_size=100)  # int(66.67) = 66 -> 72
    assert c.ffn_hidden_size == 72


def test_gelu_ffn_keeps_intermediate_size():
    assert ModelConfig.from_name("bert-baseline").ffn_hidden_size == 3072


def test_rope_original_max_length_defaults_to_max_length():
    c = ModelConfig.from_name("tiny", max_length=64)
    assert c.rope_original_max_length == 64
    c = ModelConfig.from_name("tiny", rope_original_max_length=32)
    assert c.rope_original_max_length == 32


def test_replace_validates():
    c = ModelConfig.from_name("tiny")
    assert c.replace(num_hidden_layers=5).num_hidden_layers == 5
    assert c.num_hidden_layers == 2  # the original is unchanged
    with pytest.raises(ConfigError):
        c.replace(num_attention_heads=3)


def test_with_context():
    c = ModelConfig.from_name("tiny")  # trained length 128
    long = c.with_context(512, "yarn")
    assert (long.max_length, long.rope_scaling_type, long.rope_scaling_factor) == (512, "yarn", 4.0)
    assert long.rope_original_max_length == 128
    # extending an already extended config scales from the trained length, not the extended one
    longer = long.with_context(1024, "ntk")
    assert (longer.rope_scaling_factor, longer.rope_original_max_length) == (8.0, 128)
    # a length within the trained context is factor 1
    same = c.with_context(64, "linear")
    assert same.rope_scaling_factor == 1.0
    assert same.max_length == 128
    with pytest.raises(ConfigError, match="RoPE"):
        ModelConfig.from_name("bert-baseline").with_context(1024)


# --- the transformers view -----------------------------------------------------------------------------


def test_neobert_config_declares_model_config_fields_with_same_defaults():
    hf_defaults = NeoBERTConfig()
    model_defaults = ModelConfig()
    for field in dataclasses.fields(ModelConfig):
        assert hasattr(NeoBERTConfig, field.name), field.name
        assert getattr(NeoBERTConfig, field.name) == field.default, field.name
        # after validation the derived fields are filled the same way
        assert getattr(hf_defaults, field.name) == getattr(model_defaults, field.name), field.name
    assert hf_defaults.to_model_config() == model_defaults
    assert NeoBERTConfig.model_type == "neobert"
    assert hf_defaults.tie_word_embeddings is False


def test_neobert_config_dict_round_trip():
    model_config = ModelConfig.from_name("tiny", rope_scaling_type="yarn", rope_scaling_factor=2.0)
    config = NeoBERTConfig.from_model_config(model_config)
    data = config.to_dict()
    assert data["model_type"] == "neobert"
    for key, value in model_config.to_dict().items():
        assert data[key] == value, key
    again = NeoBERTConfig.from_dict(data)
    assert again.to_model_config() == model_config
    assert again.to_dict() == data


def test_neobert_config_save_and_load(tmp_path):
    model_config = ModelConfig.from_name("bert-baseline", num_hidden_layers=3, vocab_size=1000)
    config = NeoBERTConfig.from_model_config(model_config, num_labels=5)
    config.save_pretrained(tmp_path)
    on_disk = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert on_disk["model_type"] == "neobert"
    assert on_disk["num_hidden_layers"] == 3
    loaded = NeoBERTConfig.from_pretrained(tmp_path)
    assert loaded.to_model_config() == model_config
    assert loaded.num_labels == 5
    # registered with the Auto classes
    auto = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(auto, NeoBERTConfig)
    assert auto.to_model_config() == model_config


def test_neobert_config_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="dropout_prob"):
        NeoBERTConfig(dropout_prob=0.1)
    data = {**NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny")).to_dict(), "mystery": 3}
    with pytest.raises(ConfigError, match="mystery"):
        NeoBERTConfig.from_dict(data)


def test_neobert_config_rejects_unknown_keys_on_disk(tmp_path):
    NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny")).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["hidden_dropout_prob"] = 0.1
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="hidden_dropout_prob"):
        NeoBERTConfig.from_pretrained(tmp_path)


def test_neobert_config_validates_values():
    with pytest.raises(ConfigError, match="divisible"):
        NeoBERTConfig(hidden_size=64, num_attention_heads=5)
    with pytest.raises(ConfigError, match="ffn"):
        NeoBERTConfig(ffn="relu")
    with pytest.raises(ConfigError, match="model_type"):
        NeoBERTConfig(model_type="bert")


def test_neobert_config_accepts_released_config_keys():
    # the released config.json: its own fields, plus auto_map / architectures and a few leftovers
    released = {
        "architectures": ["NeoBERTLMHead"],
        "auto_map": {"AutoConfig": "model.NeoBERTConfig"},
        "model_type": "neobert",
        "hidden_size": 768,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "vocab_size": 30522,
        "max_length": 4096,
        "norm_eps": 1e-05,
        "pad_token_id": 0,
        "embedding_init_range": 0.02,
        "decoder_init_range": 0.02,
        "classifier_init_range": 0.02,
        "dim_head": 64,
        "kwargs": {},
        "trust_remote_code": True,
        "torch_dtype": "float32",
    }
    config = NeoBERTConfig.from_dict(released)
    assert config.to_model_config() == ModelConfig.from_name("neobert")


def test_load_mapping_reads_yaml_and_json_and_names_bad_files(tmp_path):
    from neobert.common.config import ConfigError, load_mapping

    (tmp_path / "a.yaml").write_text("hidden_size: 64\nnested: {x: 1}\n")
    (tmp_path / "b.json").write_text('{"hidden_size": 64}')
    (tmp_path / "empty.yaml").write_text("")
    assert load_mapping(tmp_path / "a.yaml") == {"hidden_size": 64, "nested": {"x": 1}}
    assert load_mapping(tmp_path / "b.json") == {"hidden_size": 64}
    assert load_mapping(tmp_path / "empty.yaml") == {}
    cases = {
        "list.yaml": ("- 1\n- 2\n", "expected a mapping of settings, got list"),
        "broken.yaml": ("a: [1, 2\n", "not valid YAML"),
        "broken.json": ('{"a": 1,', "not valid JSON"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match=message) as err:
            load_mapping(tmp_path / name)
        assert name in str(err.value)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_mapping(tmp_path / "missing.yaml")
    with pytest.raises(KeyError):  # the caller's error type
        load_mapping(tmp_path / "list.yaml", KeyError)


def test_old_training_setting_names_load_with_a_deprecation_message():
    """One name per training setting across every task; settings files with an old name still load."""
    from neobert.common.config import ConfigError, renamed_settings
    from neobert.finetuning import ClassifyConfig

    old = {
        "model": "tiny",
        "train": "t.csv",
        "validation": "v.csv",
        "output": "o",
        "learning_rate": 1e-4,
        "grad_clip": 0.5,
    }
    with pytest.warns(FutureWarning) as caught:
        config = ClassifyConfig.from_dict(old)
    assert (config.lr, config.clip_grad_norm) == (1e-4, 0.5)
    assert sorted(str(w.message) for w in caught) == [
        "ClassifyConfig: 'grad_clip' is deprecated, use 'clip_grad_norm'",
        "ClassifyConfig: 'learning_rate' is deprecated, use 'lr'",
    ]
    with pytest.warns(FutureWarning, match="'gradient_checkpointing' is deprecated"):
        assert renamed_settings({"gradient_checkpointing": True}, "x") == {"activation_checkpointing": True}
    with pytest.raises(ConfigError, match="give only 'lr'"):
        renamed_settings({"lr": 1e-4, "learning_rate": 1e-4}, "x")
    # bf16: true|false (contrastive training's old switch) is precision: bf16|fp32; a grid's list element-wise
    with pytest.warns(
        FutureWarning, match=r"'bf16' is deprecated, use 'precision' \(bf16: False is precision: 'fp32'\)"
    ):
        assert renamed_settings({"bf16": False}, "x") == {"precision": "fp32"}
    with pytest.warns(FutureWarning):
        assert renamed_settings({"bf16": [True, False]}, "grid") == {"precision": ["bf16", "fp32"]}


def test_one_rename_table_serves_settings_files_and_the_command_line(monkeypatch):
    """A rename is one entry of config.RENAMES: settings files and the command line both read it (issue 32)."""
    import neobert.common.config as config_module
    from neobert.cli import options

    assert {(r.old, r.new) for r in config_module.RENAMES} >= {("bf16", "precision"), ("task", "head")}
    # bf16 -> precision is one translation: the switch on the command line means what `bf16: true` means
    bf16 = next(r for r in config_module.RENAMES if r.old == "bf16")
    assert options.renamed_options(["finetune", "contrastive", "--bf16"], {"finetune contrastive"})[0][
        -2:
    ] == ["--precision", bf16.value(True)]
    with pytest.warns(
        FutureWarning, match=r"'bf16' is deprecated, use 'precision' \(bf16: True is precision: 'bf16'"
    ):
        assert (
            config_module.renamed_settings({"bf16": True}, "x")
            == {"precision": bf16.value(True)}
            == {"precision": "bf16"}
        )
    # a new entry reaches a settings file (only of its own kind) and the command it names
    toy = config_module.Rename("warmup", "warmup_steps", "training", ("finetune glue",))
    monkeypatch.setattr(config_module, "RENAMES", (*config_module.RENAMES, toy))
    with pytest.warns(FutureWarning, match="'warmup' is deprecated, use 'warmup_steps'"):
        assert config_module.renamed_settings({"warmup": 3}, "x") == {"warmup_steps": 3}
    assert config_module.renamed_settings({"warmup": 3}, "serve config", "serve") == {"warmup": 3}
    argv, notes = options.renamed_options(["finetune", "glue", "--warmup=3"], {"finetune glue"})
    assert (
        argv == ["finetune", "glue", "--warmup-steps=3"] and "--warmup was renamed --warmup-steps" in notes[0]
    )
    with pytest.raises(ValueError, match="give the value it meant"):
        config_module.Rename("fp16", "precision", "training", switch=True)


def test_a_setting_is_read_as_its_fields_type_or_refused_naming_key_and_value(tmp_path):
    """YAML 1.1 reads ``1e-4`` (no dot) as a string: ``--set optim.lr=1e-4``, the example of the docs and of
    ``pretrain --help``, ended in a TypeError deep in the optimizer (issue 42)."""
    from neobert.finetuning.classify import ClassifyConfig
    from neobert.finetuning.config import FinetuneConfigError
    from neobert.training.config import PretrainConfig

    config = PretrainConfig.from_file(None, **{"optim.lr": "1e-4", "data.seq_len": "128", "max_steps": 20.0})
    assert (config.optim.lr, config.data.seq_len, config.max_steps) == (1e-4, 128, 20)
    assert type(config.optim.lr) is float and type(config.max_steps) is int
    (tmp_path / "run.yaml").write_text("optim:\n  lr: 3e-4\n  weight_decay: 1\n")
    config = PretrainConfig.from_file(tmp_path / "run.yaml")
    assert config.optim.lr == 3e-4 and type(config.optim.weight_decay) is float
    for key, value, words in (
        ("optim.lr", "fast", "optim.lr: 'fast' is not a float"),
        ("max_steps", 2.5, "max_steps: 2.5 is not a int"),
        ("data.seq_len", "many", "data.seq_len: 'many' is not a int"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            PretrainConfig.from_file(None, **{key: value})
    assert ModelConfig.from_name("tiny", hidden_size="64").hidden_size == 64
    settings = {"model": "tiny", "train": "t.csv", "validation": "v.csv", "output": "o", "lr": "5e-5"}
    assert ClassifyConfig.from_dict(settings).lr == 5e-5
    with pytest.raises(FinetuneConfigError, match=r"epochs: 'three' is not a int"):
        ClassifyConfig.from_dict({**settings, "epochs": "three"})
