#!/usr/bin/env bash
# One device call per GPU kind: the whole site refreshed with method v4, timed, and checked.
#
#   bash ../shared/devkit/prepare.sh sphinx sphinx-tabs myst-parser furo torchao    # here, once
#   (the TE wheels in .devkit/wheels, the docs wheels moved to .devkit-docs/: both carried)
#   device run, carry [".devkit", ".devkit-docs"]:
#     bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; bash tools/gpu_session.sh [BUDGET_S]
#
# Steps, each under what is left of BUDGET_S (default 540 s), so the call ends inside its limit
# and brings back what finished:
#   1. the plan with its time estimate (refresh --dry-run), then the refresh itself, timed
#      (SIGINT at the deadline: finished questions stay stored, a later call measures the rest);
#   2. reproducibility: one question again in a second process, compared with the refresh's run;
#   3. the GPU tests (-m gpu), with what they print.
# Everything comes back in $OUT/session.tgz plus the logs. Nothing here types a number.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-session}"
BUDGET_S="${1:-540}"
START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
mkdir -p "$OUT/s/cache" "$OUT/s/repro"
if [ -d .devkit-docs ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .devkit-docs/*.whl >/dev/null 2>&1 || echo "docs wheels: install failed"
fi
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
bench() { python3 -m gemm_bench.cli "$@"; }
quiet() { grep -v "^W[0-9]* \|dynamo\|Warning\|warn(" ; }
pack() { tar czf "$OUT/session.tgz" -C "$OUT" s; }
trap pack EXIT

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/s/gpu.txt"

# 1. The plan, then the whole site's refresh on this GPU, timed.
bench refresh docs/ --gpus all --dry-run 2>&1 | quiet > "$OUT/s/plan.txt"
tail -2 "$OUT/s/plan.txt"
t0=$(date +%s.%N)
timeout -s INT $(( $(left) - ${RESERVE_S:-60} )) python3 -m gemm_bench.cli refresh docs/ --gpus all 2>&1 | quiet \
  | tee "$OUT/s/refresh.txt" | grep -v "^      "
echo "whole-site refresh: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a "$OUT/s/refresh.txt"
grep -l "\"run_id\": \"$(date -u +%Y%m%d)" docs/_gemm_cache/*.json | xargs -r -I{} cp {} "$OUT/s/cache/"
pack

# 2. Reproducibility: the TE guide question in a second process, compared with the refresh's run.
ref=$(ls "$OUT"/s/cache/${REPRO_HASH:-2160d33ec54a347e}--*.json 2>/dev/null | head -1)
if [ -n "$ref" ] && [ "$(left)" -gt 90 ]; then
  timeout $(( $(left) - 20 )) python3 -m gemm_bench.cli run --model te-guide-5b --accuracy \
    --modes autocast,prequant,layer,layer-graphed --profile-phases --out "$OUT/s/repro/b.json" 2>&1 | quiet \
    | tail -22 > "$OUT/s/repro/phases.txt"
  bench compare "$ref" "$OUT/s/repro/b.json" > "$OUT/s/repro/compare.txt" 2>&1
  head -40 "$OUT/s/repro/compare.txt"
fi
pack

# 3. The GPU tests, with what they print, in what time is left.
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) python3 -m pytest -m gpu -s -q -p no:cacheprovider tests 2>&1 | quiet \
    > "$OUT/s/gpu-tests.txt"
  echo "gpu tests rc=$?"; tail -5 "$OUT/s/gpu-tests.txt"
fi
echo "session used $(( $(date +%s) - START )) s of $BUDGET_S"
