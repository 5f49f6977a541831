#!/usr/bin/env bash
# One H200 call: full-shape kernel correctness (pytest, RADIANCE_FULL_SHAPES=1) + the kernel benches + the bar rows
# of what it measured ($OUT/bars.json).
# Runs from source on the bare GPU image (torch + Triton, no vLLM, no network). Test tools and GemLite
# travel in the git-ignored .whl/ folder, made here with tools/device/fetch_wheels.sh.
#   usage (GPU machine, repo root): OUT=dir [PYTEST_K=expr] [SECTIONS="decode ..."] [BENCH_ARGS="--decode-m 8 --configs a b"] bash tools/device/h200_run.sh [pytest|bench|all]
set -uo pipefail
what=${1:-all}
OUT=${OUT:-results/h200/local}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/wheels/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:packages/radiance-kernels/src:packages/radiance-bench/src:.whl/gemlite_src
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
rc=0
if [[ $what == pytest || $what == all ]]; then
  # each test bounded (--timeout), the whole suite bounded (timeout), names streamed (-v) so a cut run
  # still says what passed
  RADIANCE_FULL_SHAPES=1 timeout "${PYTEST_BUDGET:-300}" python3 -m pytest packages/radiance-kernels/tests -v \
    -p no:cacheprovider --timeout "${TEST_TIMEOUT:-90}" --durations 20 -rf ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 \
    | tee "$OUT/pytest.log" | grep -E "FAILED|ERROR|passed|failed|Timeout|slowest|^[0-9.]+s " | tail -60
  rc=${PIPESTATUS[0]}
fi
if [[ $what == bench || $what == all ]]; then
  # one process per section, each under its own time budget: a slow section cannot starve the others
  for section in ${SECTIONS:-decode prefill producer stack skinny}; do
    timeout "${SECTION_BUDGET:-120}" python3 -m radiance_bench.kernelbench.run --out "$OUT" \
      --sections "$section" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log" | grep -v '^{' | tail -60
  done
  # issue 6's bar rows from whatever this run measured (decode, prefill*, producer_variants, stack, skinny)
  python3 -m radiance_bench.kernelbench.bars "$OUT/bars.json" "$OUT"/kb-*.json 2>&1 | tail -8
fi
exit $rc
