#!/usr/bin/env bash
# The GPU run of the "measure the new quantities" issue, as one device call (H100 or H200):
#
#   bash ../shared/devkit/prepare.sh sphinx sphinx-tabs myst-parser furo     # here, once
#   device run, carry [".devkit"]:
#     bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; bash tools/gpu_session.sh
#
# The GPU image has no nox and no network: the packages run from the source tree. Everything that
# must come back is written under $OUT: the GPU tests' output, the refreshed cache files, the
# phase profile, the reproducibility comparison. Nothing here types a number: the numbers are the
# tools' own output.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-session}"
mkdir -p "$OUT/cache" "$OUT/repro"
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
bench() { python3 -m gemm_bench.cli "$@"; }

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"

# 1. Every GPU test, with what they print.
python3 -m pytest -m gpu -s -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu-tests.txt"

# 2. The whole site's cache on this GPU, timed, with the phase profile of one question.
start=$(date +%s.%N)
bench refresh docs/ --gpus all --force 2>&1 | tee "$OUT/refresh.txt"
echo "whole-site refresh: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" | tee -a "$OUT/refresh.txt"
git status --porcelain docs/_gemm_cache | awk '{print $2}' | xargs -r -I{} cp {} "$OUT/cache/"
bench run --model te-guide-5b --profile-phases --out "$OUT/repro/profiled.json" 2>&1 | tail -40 \
  | tee "$OUT/phases.txt"

# 3. Reproducibility: the TE guide config twice, in separate processes, then compared.
bench run --model te-guide-5b --out "$OUT/repro/a.json" > /dev/null 2>&1
bench run --model te-guide-5b --out "$OUT/repro/b.json" > /dev/null 2>&1
bench compare "$OUT/repro/a.json" "$OUT/repro/b.json" --json > "$OUT/repro/compare.json" 2>&1
bench compare "$OUT/repro/a.json" "$OUT/repro/b.json" 2>&1 | tee "$OUT/repro/compare.txt" | head -60

# 4. The site builds with -W from the refreshed cache (cache mode: nothing more is measured).
GEMM_BENCH_EXECUTION_MODE=cache python3 -m sphinx -W --keep-going -b html docs /tmp/html 2>&1 | tail -15 \
  | tee "$OUT/docs-build.txt"
