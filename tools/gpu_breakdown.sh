#!/usr/bin/env bash
# Issue 33 on one GPU (under 5 minutes): each recipe's step breakdown and kernel names, the precision
# plan's mixed step against all-BF16 and all-FP8, energy per step (tools/gpu_breakdown.py says what).
#   device run, carry [".devkit"]:
#     bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; bash tools/gpu_breakdown.sh
# Results in $OUT: <question>.json (validated results), <question>-plan-<recipe>.json,
# kernel-names/*.json (commit as tests/data/kernel-names/recorded/), breakdown.txt (the summary).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-breakdown}"; mkdir -p "$OUT"; export OUT
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${TIMEOUT_S:-290}" python3 tools/gpu_breakdown.py 2>&1 | grep -v "^W[0-9]* \|Warning\|warn(" | tee "$OUT/breakdown.txt"
echo "exit: ${PIPESTATUS[0]}" | tee -a "$OUT/breakdown.txt"
