#!/usr/bin/env bash
# The GPU run of the "measure the new quantities" issue, as one device call per GPU (H100, H200):
#
#   bash ../shared/devkit/prepare.sh sphinx sphinx-tabs myst-parser furo torchao     # here, once
#   device run, carry [".devkit"]:
#     bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; bash tools/gpu_session.sh [BUDGET_S]
#
# The GPU image has no nox and no network: the packages run from the source tree. The steps run
# in order of what the site needs, each under what is left of BUDGET_S (default 500 s), so the
# call ends inside its limit and brings back what finished:
#   0. the check that telemetry does not slow small GEMMs (else nothing is measured);
#   1. the whole site's cache refreshed on this GPU (every question, layer step, SQNR, peers,
#      clock/power telemetry and the events-vs-profiler cross-check per group), timed;
#   2. reproducibility: the TE guide config once more in a separate process (with the phase
#      profile), compared with the refresh's result of the same question;
#   3. the GPU tests (-m gpu), with what they print.
# Everything comes back in $OUT/session.tgz (the device returns at most 8 files) plus the logs.
# Nothing here types a number: the numbers are the tools' own output.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-session}"
BUDGET_S="${1:-500}"
START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
mkdir -p "$OUT/s/cache" "$OUT/s/repro"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
bench() { python3 -m gemm_bench.cli "$@"; }
pack() { tar czf "$OUT/session.tgz" -C "$OUT" s; }
trap pack EXIT

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/s/gpu.txt"

# 0. Method v3 must not slow what it times (v2 did: see measurements/2026-11-23-h100-method2-unpublished):
#    the small-GEMM perturbation test first; if it fails, measure nothing.
#    PERTURBATION_CHECKED=1 skips it: for a later call on the same kind of GPU after one that passed it.
if [ "${PERTURBATION_CHECKED:-0}" = 1 ]; then
  echo "perturbation check skipped: passed in an earlier call on this kind of GPU" | tee "$OUT/s/perturbation.txt"
else
timeout 240 python3 -m pytest -q -s -p no:cacheprovider "tests/test_gpu.py::test_telemetry_does_not_slow_small_gemms" \
  2>&1 | grep -v "^W[0-9]* \|dynamo" | tee "$OUT/s/perturbation.txt"
if ! grep -q "1 passed" "$OUT/s/perturbation.txt"; then
  echo "telemetry perturbs the timing (or the test did not run): nothing measured"; exit 1
fi
fi

# 1. The whole site's cache on this GPU, timed. SIGINT at the deadline: finished questions stay stored,
#    and the next call (with the returned files committed) measures only what is still stale or missing:
#    on an H100 the twelve questions took about 15 minutes with method 2, more than one call.
t0=$(date +%s.%N)
timeout -s INT $(( $(left) - 90 )) python3 -m gemm_bench.cli refresh docs/ --gpus all 2>&1 \
  | grep -v "^W[0-9]* \|dynamo" | tee "$OUT/s/refresh.txt"
echo "whole-site refresh: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a "$OUT/s/refresh.txt"
grep -l "\"run_id\": \"$(date -u +%Y%m%d)" docs/_gemm_cache/*.json | xargs -r -I{} cp {} "$OUT/s/cache/"
pack

# 2. Reproducibility: the TE guide config in a second process, compared with the refresh's run.
slug=$(ls "$OUT"/s/cache/6395c3eace1d229f--*.json 2>/dev/null | head -1)
if [ -n "$slug" ] && [ "$(left)" -gt 70 ]; then
  timeout $(( $(left) - 20 )) python3 -m gemm_bench.cli run --model te-guide-5b --no-peers --profile-phases \
    --out "$OUT/s/repro/b.json" 2>&1 | grep -v "^W[0-9]* \|dynamo" | tail -30 | tee "$OUT/s/repro/phases.txt"
  bench compare "$slug" "$OUT/s/repro/b.json" > "$OUT/s/repro/compare.txt" 2>&1
  head -60 "$OUT/s/repro/compare.txt"
fi
pack

# 3. The GPU tests, with what they print, in what time is left.
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) python3 -m pytest -m gpu -s -q -p no:cacheprovider tests 2>&1 \
    | grep -v "^W[0-9]* \|dynamo" > "$OUT/s/gpu-tests.txt"
  echo "gpu tests rc=$?"; tail -5 "$OUT/s/gpu-tests.txt"
fi
echo "session used $(( $(date +%s) - START )) s of $BUDGET_S"
