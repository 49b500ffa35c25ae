#!/usr/bin/env bash
# One lent GPU session's checks in one call (15 minutes of device time, a fresh machine each time):
# install the package into the GPU image's Python, then, in this order,
#   1. `neobert doctor` (every kernel's first-use check and what `auto` picks), quiet;
#   2. tests/test_gpu.py + tests/test_hardware.py (varlen kernels and compiled blocks vs the reference),
#      beside the whole suite on the other cores (stopped with SIGINT at SUITE_SECONDS, so pytest still
#      prints the failures it has);
#   3. the compiled throughput run (NeoBERT against ModernBERT-base above 1,024 tokens), on a quiet machine.
# Usage: bash docs/benchmarks/gpu_session.sh OUT_DIR   (wheels the image lacks in .whl/, see docs/benchmarks.md)
set -u
out=${1:?output directory}
mkdir -p "$out"
: >"$out/env.txt"  # at most 8 files come back: env.txt takes the install, versions, timings and bench log
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
SUITE_SECONDS=${SUITE_SECONDS:-240}
BENCH_SECONDS=${BENCH_SECONDS:-120}

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >>"$out/env.txt" 2>&1 \
  || export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
neobert() { python3 -m neobert.cli.main "$@"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  python3 -m pip list 2>/dev/null | grep -i -E "^(pyarrow|datasets|fastapi|pydantic|sentence-transformers|peft|onnxruntime) "
} >>"$out/env.txt" 2>&1

start=$(date +%s)
neobert doctor >"$out/doctor.txt" 2>&1
echo "doctor: $(($(date +%s) - start)) s" >>"$out/env.txt"

timeout -s INT "$SUITE_SECONDS" python3 -m pytest -q -n 13 -p no:cacheprovider --ignore=tests/test_gpu.py \
  --durations=30 >"$out/suite.log" 2>&1 &
suite=$!
python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_hardware.py >"$out/gpu_tests.log" 2>&1
wait $suite
echo "suite + gpu tests: $(($(date +%s) - start)) s" >>"$out/env.txt"

neobert bench throughput --device cuda --dtype bf16 --compile --no-progress \
  --models neobert,modernbert-base --lengths 1024,2048,4096,512 --batch-tokens 65536 \
  --peak-sizes 8192 --time-budget "$BENCH_SECONDS" --output "$out/gpu_compiled" >>"$out/env.txt" 2>&1
echo "all: $(($(date +%s) - start)) s" >>"$out/env.txt"
