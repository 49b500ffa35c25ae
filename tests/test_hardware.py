"""Hardware probes and first-use checks, on both sides of every probe whatever this machine is.

Each probe's real answer is exercised where this machine has the path, and the other answers ("unavailable",
"disagrees", "bf16 faster", "fp32 faster") are forced with monkeypatch, so no side goes untested on either
CPU kind. The CUDA-only kernels themselves run in tests/test_gpu.py.
"""

from __future__ import annotations

import json
import platform
import warnings

import pytest
import torch

from neobert import ModelConfig, NeoBERTConfig, NeoBERTModel
from neobert.benchmarks import doctor
from neobert.cli.main import main
from neobert.inference.encoders import apply_precision, load_model
from neobert.model import attention, compile_blocks, set_runtime
from neobert.model.checks import BackendCheck, relative_error, run_check
from neobert.model.execution import check_compiled_blocks
from neobert.runtime import hardware
from neobert.training import optim
from neobert.training import trainer as trainer_module


@pytest.fixture
def measured(monkeypatch):
    """'auto' measured for real (the suite pins it to fp32), with fresh caches."""
    monkeypatch.delenv(hardware.AUTO_PRECISION_ENV)
    hardware.choose_precision.cache_clear()
    yield
    hardware.choose_precision.cache_clear()


def force_timings(monkeypatch, fp32: float, bf16: float) -> None:
    seconds = {torch.float32: fp32, torch.bfloat16: bf16}
    monkeypatch.setattr(
        hardware, "_time_block", lambda h, i, device, dtype, training, give_up: seconds[dtype]
    )


# --- precision "auto" ------------------------------------------------------------------------------------


def test_auto_takes_bf16_only_when_it_is_clearly_faster(monkeypatch, measured):
    force_timings(monkeypatch, fp32=1.0, bf16=0.5)
    assert hardware.resolve_precision("auto", 128, 512) == "bf16"
    hardware.choose_precision.cache_clear()
    force_timings(monkeypatch, fp32=1.0, bf16=0.95)  # within the margin: exact fp32 wins
    assert hardware.choose_precision(128, 512, "cpu", False).precision == "fp32"
    hardware.choose_precision.cache_clear()
    force_timings(monkeypatch, fp32=1.0, bf16=60.0)  # emulated bf16
    choice = hardware.choose_precision(128, 512, "cpu", True)
    assert choice.precision == "fp32" and "60.00x the time" in choice.reason
    assert hardware.resolve_precision("bf16", 128, 512) == "bf16"  # explicit choices pass through
    assert hardware.resolve_precision("fp32", 128, 512) == "fp32"
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, bf16"):
        hardware.resolve_precision("int4", 128, 512)


def test_real_measurement_times_both_and_restores_threads(measured):
    threads = torch.get_num_threads()
    choice = hardware.choose_precision(64, 128, "cpu", False)
    assert choice.precision in ("fp32", "bf16")
    assert choice.fp32_ms > 0 and choice.bf16_ms > 0
    assert (choice.precision == "bf16") == (choice.bf16_ms * hardware.BF16_MARGIN <= choice.fp32_ms)
    assert torch.get_num_threads() == threads


def test_the_pin_decides_without_measuring(monkeypatch, measured):
    monkeypatch.setenv(hardware.AUTO_PRECISION_ENV, "bf16")
    monkeypatch.setattr(hardware, "_time_block", lambda *a: pytest.fail("measured despite the pin"))
    assert hardware.choose_precision(128, 512, "cpu", False).precision == "bf16"


@pytest.mark.parametrize(("fp32", "bf16", "dtype"), [(1.0, 0.5, torch.bfloat16), (1.0, 5.0, torch.float32)])
def test_inference_auto_follows_the_measurement(monkeypatch, measured, fp32, bf16, dtype):
    force_timings(monkeypatch, fp32, bf16)
    model = apply_precision(load_model("tiny"), "auto")
    assert next(model.parameters()).dtype == dtype
    # any other encoder follows the same measurement (at its own widths), cast rather than on the fast path
    from transformers import BertConfig, BertModel

    bert = BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    )
    assert next(apply_precision(bert, "auto").parameters()).dtype == dtype


@pytest.mark.parametrize(("fp32", "bf16", "mixed"), [(1.0, 0.5, "bf16"), (1.0, 5.0, "no")])
def test_training_auto_follows_the_measurement(monkeypatch, measured, fp32, bf16, mixed):
    force_timings(monkeypatch, fp32, bf16)
    settings = trainer_module.TrainerSettings(
        max_steps=1, precision="auto", device="cpu", probe_shape=(64, 128)
    )
    assert trainer_module.make_accelerator(settings).mixed_precision == mixed


def test_machine_summary_names_the_cpu_and_its_flags(monkeypatch):
    hardware.cpu_info.cache_clear()
    monkeypatch.setattr(
        hardware, "cpu_info", lambda: ("Some Xeon", frozenset({"avx2", "avx512f", "amx_bf16"}))
    )
    assert hardware.cpu_flags() == {"avx2": True, "avx512f": True, "avx512_bf16": False, "amx_bf16": True}
    assert hardware.machine_summary().startswith("Some Xeon (")
    assert "avx2 avx512f amx_bf16" in hardware.machine_summary()


@pytest.mark.parametrize(
    ("name", "flags", "kind"),
    [
        (
            "Intel(R) Xeon(R) Platinum 8480+",
            {"avx2", "avx512f", "avx512_bf16", "amx_bf16"},
            "intel-avx512-bf16-amx",
        ),
        ("AMD EPYC 9R14 96-Core Processor", {"avx2", "avx512f", "avx512_bf16"}, "amd-avx512-bf16"),
        ("Intel(R) Xeon(R) Platinum 8259CL", {"avx2", "avx512f"}, "intel-avx512"),
        ("AMD EPYC 7R13 Processor", {"avx2"}, "amd-avx2"),
        ("", set(), f"{platform.machine().lower()}-baseline"),
    ],
)
def test_cpu_kind_names_the_maker_and_the_widest_path(monkeypatch, name, flags, kind):
    """Every kind the runtime tables are kept for (docs/benchmarks/runtimes/KIND), from injected CPU info."""
    monkeypatch.setattr(hardware, "cpu_info", lambda: (name, frozenset(flags | {"sse2", "fma"})))
    assert hardware.cpu_kind() == kind
    assert f"kind {kind};" in hardware.machine_summary()


AMX_XEON = ("Intel(R) Xeon(R) Platinum 8480+", frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}))


@pytest.mark.parametrize(
    ("cap", "usable", "kind"),
    [
        ("AVX2", {"avx2"}, "intel-avx2-capped"),
        ("avx512_core", {"avx2", "avx512f"}, "intel-avx512-capped"),
        ("AVX512_CORE_BF16", {"avx2", "avx512f", "avx512_bf16"}, "intel-avx512-bf16-capped"),
        ("AVX512_CORE_AMX", {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}, "intel-avx512-bf16-amx"),
        ("ALL", {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}, "intel-avx512-bf16-amx"),
        ("", {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}, "intel-avx512-bf16-amx"),
    ],
)
def test_an_isa_cap_hides_the_flags_above_it(monkeypatch, cap, usable, kind):
    """oneDNN's cap makes the AMX Xeon a smaller kind for the probes (how other kinds are emulated), named so."""
    monkeypatch.setattr(hardware, "cpu_info", lambda: AMX_XEON)
    monkeypatch.setenv(hardware.ISA_CAP_ENV, cap)
    assert {flag for flag, present in hardware.cpu_flags().items() if present} == usable
    assert hardware.cpu_kind() == kind
    assert (f"{hardware.ISA_CAP_ENV}=" in hardware.machine_summary()) == kind.endswith("-capped")


def test_a_cap_above_the_cpu_hides_nothing_and_an_unknown_cap_is_refused(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_info", lambda: ("AMD EPYC 7R13 Processor", frozenset({"avx2"})))
    monkeypatch.setenv(hardware.ISA_CAP_ENV, "AVX512_CORE_BF16")
    assert hardware.cpu_kind() == "amd-avx2"  # nothing the CPU has is hidden: the real kind, not "capped"
    monkeypatch.setenv(hardware.ISA_CAP_ENV, "AVX9000")
    with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA='AVX9000' is not a cap"):
        hardware.cpu_flags()


def test_doctor_cpu_kind_prints_only_the_kind(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "cpu_info", lambda: ("AMD EPYC 7R13 Processor", frozenset({"avx2"})))
    assert main(["doctor", "--cpu-kind"]) == 0
    assert capsys.readouterr().out == "amd-avx2\n"


# --- the check machinery ---------------------------------------------------------------------------------


def test_run_check_judges_errors_and_exceptions():
    exact = torch.ones(4)
    assert run_check("same", "cpu", torch.float32, lambda: [(exact, exact)]).ok
    off = run_check("off", "cpu", torch.bfloat16, lambda: [(exact * 1.1, exact)])
    assert off.checked and not off.ok and off.max_error == pytest.approx(0.1) and "0.1 > 3e-02" in off.error

    def boom():
        raise RuntimeError("kernel exploded")

    failed = run_check("boom", "cpu", torch.float32, boom)
    assert not failed.ok and not failed.checked and failed.error == "RuntimeError: kernel exploded"
    assert relative_error(torch.ones(3), torch.ones(4)) == float("inf")
    assert relative_error(torch.tensor([float("nan")]), torch.ones(1)) == float("inf")


# --- attention kernels -------------------------------------------------------------------------------------


@pytest.fixture
def fresh_checks():
    attention.check_attention.cache_clear()
    yield
    attention.check_attention.cache_clear()


def test_flex_passes_its_real_forward_check_on_this_cpu(fresh_checks):
    for dtype in (torch.float32, torch.bfloat16):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # flex without compile: unfused, and says so
            check = attention.check_attention("flex", "cpu", dtype, False)
        assert check.ok, check.describe()
    # no CPU backward in FlexAttention: an explicit training choice fails loudly, before any step
    assert not attention.check_attention("flex", "cpu", torch.float32, True).ok


def _break_flex(monkeypatch):
    """Auto picks flex here, and flex computes something else."""
    monkeypatch.setattr(attention, "auto_candidate", lambda device, dtype: "flex")
    real = attention._attend_flex
    monkeypatch.setattr(attention, "_attend_flex", lambda q, k, v, mask: 1.5 * real(q, k, v, mask))


def test_auto_falls_back_to_sdpa_with_one_warning_when_a_kernel_disagrees(monkeypatch, fresh_checks):
    _break_flex(monkeypatch)
    cpu = torch.device("cpu")
    with (
        torch.no_grad(),
        pytest.warns(RuntimeWarning, match=r"attention:flex .*first-use check .*disagrees.*SDPA"),
    ):
        assert attention.resolve_backend("auto", cpu, torch.float32) == "sdpa"
    torch.manual_seed(0)
    model = NeoBERTModel(NeoBERTConfig.from_model_config(ModelConfig.from_name("tiny"))).eval()
    ids = torch.randint(1, 100, (2, 9))
    mask = torch.tensor([[1] * 9, [1] * 4 + [0] * 5])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process: not again
        out = set_runtime(model, unpad=True)(ids, attention_mask=mask).last_hidden_state
        reference = set_runtime(model, attn_backend="sdpa", unpad=False)(
            ids, attention_mask=mask
        ).last_hidden_state
    torch.testing.assert_close(out[mask.bool()], reference[mask.bool()])


def test_an_explicit_kernel_that_fails_its_check_raises(monkeypatch, fresh_checks):
    _break_flex(monkeypatch)
    with pytest.raises(attention.AttentionBackendError, match="'flex' failed its first-use check"):
        attention.resolve_backend("flex", torch.device("cpu"), torch.float32)


def test_an_auto_kernel_that_crashes_falls_back(monkeypatch, fresh_checks):
    monkeypatch.setattr(attention, "auto_candidate", lambda device, dtype: "flex")

    def crash(*args):
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(attention, "_attend_flex", crash)
    with pytest.warns(RuntimeWarning, match="no kernel image"):
        assert attention.resolve_backend("auto", torch.device("cpu"), torch.bfloat16) == "sdpa"


# --- fused AdamW and compiled blocks ------------------------------------------------------------------------


def test_fused_adamw_passes_its_real_check_here():
    check = optim.check_fused_adamw("cpu")  # torch's fused AdamW also runs on the CPU
    assert check.ok, check.describe()
    assert not optim.use_fused_adamw(torch.device("cpu"))  # the core takes it on CUDA only


def test_a_failing_fused_adamw_falls_back_with_a_warning(monkeypatch):
    failed = BackendCheck("fused_adamw", "cuda:0", "float32", available=True, error="RuntimeError: forced")
    monkeypatch.setattr(optim, "check_fused_adamw", lambda device: failed)
    with pytest.warns(RuntimeWarning, match="fused_adamw .*forced.*for-each AdamW"):
        assert optim.use_fused_adamw(torch.device("cuda:0")) is False


def _wrong_backend(graph, example_inputs):
    """A torch.compile backend that computes something else: every float output off by half."""

    def run(*args):
        return [o * 1.5 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in graph(*args)]

    return run


def test_compiled_blocks_check_passes_and_catches_a_wrong_compiler():
    # torch 2.11 reuses a block's code compiled earlier in the process (tests/test_gpu.py, inductor) for
    # another backend: start from an empty compile cache so the wrong backend is the one that runs
    torch._dynamo.reset()
    assert check_compiled_blocks("cpu", torch.float32, backend="eager").ok
    wrong = check_compiled_blocks("cpu", torch.float32, backend=_wrong_backend)
    assert wrong.checked and not wrong.ok and "disagrees" in wrong.error


def test_compiling_is_explicit_so_a_failed_check_raises():
    torch._dynamo.reset()  # as above: the wrong backend must compile, not reuse an earlier compilation
    model = load_model("tiny")
    with pytest.raises(RuntimeError, match="compiled blocks failed their first-use check"):
        compile_blocks(model, check=True, backend=_wrong_backend)


# --- neobert doctor ---------------------------------------------------------------------------------------


def test_doctor_reports_every_check_and_what_auto_picks(monkeypatch, capsys, fresh_checks):
    monkeypatch.setattr(doctor, "PRECISION_PRESETS", ("tiny",))
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["versions"]["torch"] == torch.__version__
    assert set(report["cpu"]["flags"]) == set(hardware.CPU_FLAGS)
    rows = {(r["name"], r["dtype"]): r for r in report["backends"]}
    assert rows[("fused_adamw", "float32")]["ok"] and rows[("fused_adamw", "float32")]["speedup"] > 0
    assert rows[("attention:flex (forward)", "float32")]["ok"]
    epilogues = rows[("cpu_epilogues", "bfloat16")]
    assert epilogues["ok"] == (epilogues["available"] and epilogues["max_error"] <= epilogues["tolerance"])
    assert [(r["use"], r["preset"], r["precision"]) for r in report["auto"]] == [
        ("inference", "tiny", "fp32"),  # pinned by the suite
        ("training", "tiny", "fp32"),
    ]
    assert all(r["attention"] == "sdpa" for r in report["auto"]) or torch.cuda.is_available()
    assert {"onnx fp32", "openvino fp32"} <= set(report["runtimes"]["candidates"])  # the dev install's


def test_doctor_prints_tables(monkeypatch, capsys, fresh_checks):
    monkeypatch.setattr(doctor, "PRECISION_PRESETS", ("tiny",))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "fused_adamw" in out and "what auto picks here" in out and "avx2" in out
    assert "backend auto: for a `neobert export onnx` directory the fastest of" in out
    assert "for a model directory carrying its export in DIR/onnx, those and PyTorch" in " ".join(out.split())


@pytest.mark.parametrize(("threads", "load", "noted"), [(2, 2.5, True), (1, 2.5, False), (2, 0.3, False)])
def test_oversubscription_note_on_both_sides(monkeypatch, threads, load, noted):
    monkeypatch.setattr(hardware.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(hardware, "load_average", lambda: load)
    monkeypatch.setattr(hardware.torch, "get_num_threads", lambda: threads)
    note = hardware.oversubscription_note()
    assert (note is not None) == noted
    if noted:
        assert "load average 2.5 on 2 cores with 2 threads" in note and "OMP_NUM_THREADS=1" in note


def test_throughput_auto_dtype_follows_the_measurement(monkeypatch, measured):
    from neobert.benchmarks.throughput import BenchConfig, run

    force_timings(monkeypatch, fp32=1.0, bf16=5.0)
    config = BenchConfig(
        models=["neobert-tiny"], lengths=[16], batch_tokens=[32], repeats=1, peak_sizes=(64,), progress=False
    )
    results = run(config)
    assert results["config"]["dtype"] == "fp32" and results["config"]["requested_dtype"] == "auto"


@pytest.mark.parametrize(("fp32", "bf16", "mixed"), [(1.0, 0.5, "bf16"), (1.0, 5.0, "no")])
def test_fine_tuning_auto_is_the_engines_measured_at_the_model_widths(
    monkeypatch, measured, fp32, bf16, mixed
):
    """fit() hands its precision to the trainer with the model's widths (inside DDP / compile wrappers too)."""
    from types import SimpleNamespace

    from neobert.finetuning import classification_task
    from neobert.finetuning.config import ModelSource, TrainSettings

    force_timings(monkeypatch, fp32, bf16)
    model = load_model("tiny", head="sequence-classification")
    widths = (model.config.hidden_size, model.config.intermediate_size)
    assert trainer_module.model_widths(SimpleNamespace(module=SimpleNamespace(_orig_mod=model))) == widths
    given = []

    def trainer(settings):
        given.append(settings)
        raise KeyboardInterrupt  # enough: the trainer's settings are what this test reads

    monkeypatch.setattr(classification_task, "Trainer", trainer)
    with pytest.raises(KeyboardInterrupt):
        classification_task.fit(
            model,
            SimpleNamespace(pad_token_id=0),
            None,
            {},
            None,
            TrainSettings(),
            "unused",
            ModelSource(model="tiny", device="cpu", precision="auto"),
        )
    (settings,) = given
    assert (settings.precision, settings.probe_shape) == ("auto", widths)
    assert trainer_module.make_accelerator(settings).mixed_precision == mixed
