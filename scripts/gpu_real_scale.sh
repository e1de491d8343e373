#!/usr/bin/env bash
# Issue 22's GPU run: the real shapes on one H200, in at most 9 minutes, results under $OUT.
#   1. the tests that matter on CUDA (the triton kernels compiled for real, not interpreted;
#      the equivalence, block-family and real-shape tests), at most TEST_S seconds;
#   2. scripts/gpu_real_scale.py: Dream-Coder-7B shape (latency, 1/4/8 concurrent canvases,
#      compile off and on) and DiffusionGemma-26B-A4B shape (tokens/s of our block loop vs
#      transformers' generate vs the memory-bandwidth bound; then at int4: weights held, peak
#      memory, tokens/s), within what is left.
#
# Before the device call (here, in the checkout the device tool sends): the working tree that
# travels must stay under 64 MiB and the bundled models alone are 57 MB, so move them out and
# bring pytest's wheels, the one thing the device's python3 lacks (torch 2.11, transformers
# 5.17 and triton 3.6 are there; it reaches no package index):
#   bash scripts/gpu_real_scale.sh --prepare     # wheels into .gpu_wheels/ (git-ignored here)
#   mv engine/bundled /tmp/dg-bundled
#   device run: OUT=$OUT bash scripts/gpu_real_scale.sh   carry [".gpu_wheels"], timeout 600
#   mv /tmp/dg-bundled engine/bundled
#
#   REHEARSE=1 OUT=/tmp/rehearse bash scripts/gpu_real_scale.sh   # truncated shapes, CPU
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ "${1:-}" = --prepare ]; then
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qx '/.gpu_wheels/' "$exclude" 2>/dev/null || echo '/.gpu_wheels/' >> "$exclude"
  rm -rf .gpu_wheels && mkdir -p .gpu_wheels
  # Pure-Python wheels: they install on whatever Python the device has.
  "$PY" -m pip download -q --only-binary=:all: --no-deps -d .gpu_wheels \
    pytest pluggy iniconfig packaging pygments
  ls .gpu_wheels
  exit 0
fi

OUT=${OUT:?set OUT to the folder whose files come back}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET_S=${BUDGET_S:-530}   # the whole run; the device allows 600 s a command
TEST_S=${TEST_S:-120}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1

{
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
  "$PY" -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
  [ -d engine/bundled ] && echo "note: engine/bundled travelled (it should have been moved out)"
} 2>&1 | tee "$OUT/env.txt"

if ! "$PY" -c "import pytest" 2>/dev/null && [ -d .gpu_wheels ]; then
  "$PY" -m pip install -q --no-index --find-links .gpu_wheels pytest 2>&1 | tail -n 2
fi

if [ "${REHEARSE:-0}" = 1 ]; then
  TESTS=(tests/unit/test_plan.py)
  ARGS=(--rehearse)
else
  TESTS=(tests/unit/test_kernels.py tests/unit/test_equivalence.py tests/unit/test_block.py
         tests/integration/test_real_shapes.py)
  ARGS=()
fi

if "$PY" -c "import pytest" 2>/dev/null; then
  timeout "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" > "$OUT/pytest.txt" 2>&1
  echo "tests: exit $? after $(( $(date +%s) - START )) s"; tail -n 3 "$OUT/pytest.txt"
else
  echo "tests: skipped, no pytest (run --prepare here and carry .gpu_wheels)" | tee "$OUT/pytest.txt"
fi

LEFT=$(( BUDGET_S - ($(date +%s) - START) ))
"$PY" scripts/gpu_real_scale.py --out "$OUT" --budget-s "$LEFT" "${ARGS[@]}" 2>&1 | tee "$OUT/run.txt"
status=${PIPESTATUS[0]}
echo "done in $(( $(date +%s) - START )) s, exit $status"
exit "$status"
