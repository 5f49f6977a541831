#!/usr/bin/env bash
# One GPU call that re-tables decode configs: re-time CONFIGS at the decode M's DECODE_M (GEMMs alone and with the
# producer that reads them; weights of BITS bits, 4 unless set), rebuild the tuned table from its committed sources
# plus these runs, run the tuned tests on it, then the stack of the same weights on the committed table and on the
# rebuilt one, interleaved PASSES times (tools/device/ab_table.sh).
# Commit the table rebuilt here from the committed copies of $OUT/v*/ (kernelbench.tune), not $OUT/table.json.
#   usage (GPU machine, repo root):
#     OUT=dir DECODE_M="1 16" CONFIGS="a b ..." [BITS="4 5"] [PASSES=2] bash tools/device/retune.sh
set -uo pipefail
: "${OUT:?}" "${DECODE_M:?}" "${CONFIGS:?}"
mkdir -p "$OUT"
for s in decode_variants decode_pairs; do
  SECTIONS=$s SECTION_BUDGET=${SECTION_BUDGET:-200} OUT=$OUT/v-$s \
    BENCH_ARGS="--decode-m $DECODE_M --configs $CONFIGS --bits ${BITS:-4}" bash tools/device/h200_run.sh bench
done
export PYTHONPATH=/tmp/site:packages/radiance-kernels/src:packages/radiance-bench/src
table=$(python3 -m radiance_kernels.ops.w4a8_gemm.tuned) || exit 1
cp "$table" "$OUT/table-committed.json" || exit 1  # this GPU's committed table: a first one comes from kernelbench.tune
read -ra sources < <(python3 -c "import json, sys; print(' '.join(json.load(open(sys.argv[1]))['source']))" "$table")
python3 -m radiance_bench.kernelbench.tune "$OUT/table.json" "${sources[@]}" "$OUT"/v-*/kb-*.json || exit 1
python3 - "$OUT/table-committed.json" "$OUT/table.json" <<'EOF'
import json, sys
old, new = (json.load(open(p))["w4a8_gemm"] for p in sys.argv[1:])
key = lambda e: (e["N"], e["K"], e["act"], e["bits"], e["M_max"], e.get("defer", False))
was = {band: {key(e): e["config"] for e in es} for band, es in old.items()}
for band, es in new.items():
    for e in es:
        if was[band].get(key(e)) != e["config"]:
            print("moved", band, key(e), was[band].get(key(e)), "->", e["config"])
EOF
STACK_BITS=${BITS:-4} CANDIDATE=$OUT/table.json bash tools/device/ab_table.sh
