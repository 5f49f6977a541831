#!/usr/bin/env bash
# One GPU call's table A/B: install CANDIDATE as this GPU's tuned table, run the tuned tests on it, then the stack
# (weights of STACK_BITS bits, 4 unless set) on the committed table (or none, where this GPU has none committed) and
# on CANDIDATE, interleaved PASSES times; the committed state is restored at the end.
#   usage (GPU machine, repo root):
#     OUT=dir CANDIDATE=table.json [STACK_BITS="4 5"] [PASSES=2] bash tools/device/ab_table.sh
set -uo pipefail
: "${OUT:?}" "${CANDIDATE:?}"
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:packages/radiance-kernels/src:packages/radiance-bench/src
table=$(python3 -m radiance_kernels.ops.w4a8_gemm.tuned) || exit 1
if [[ -f $table ]]; then cp "$table" "$OUT/table-committed.json"; fi
install() { if [[ $1 == committed ]]; then
              if [[ -f $OUT/table-committed.json ]]; then cp "$OUT/table-committed.json" "$table"; else rm -f "$table"; fi
            else cp "$CANDIDATE" "$table"; fi; }
install candidate
PYTEST_K=${PYTEST_K:-tuned or served_decode} PYTEST_BUDGET=${PYTEST_BUDGET:-150} OUT=$OUT/t \
  bash tools/device/h200_run.sh pytest
for pass in $(seq "${PASSES:-2}"); do
  for which in committed candidate; do
    install $which
    SECTIONS=stack SECTION_BUDGET=${STACK_BUDGET:-120} BENCH_ARGS="--bits ${STACK_BITS:-4}" OUT=$OUT/s$pass-$which \
      bash tools/device/h200_run.sh bench
  done
done
install committed
