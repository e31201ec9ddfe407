#!/usr/bin/env bash
# Issue 32 on the GPU: the model's step (parts, memory, composition at G = 1 and the default G, the
# real multi-layer proof, the largest micro-batch) for two models, then its GPU test.
#   device run: bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; bash tools/gpu_model_step.sh
# MODELS, BUDGET_S (default 330) and TEST_S (default 120) override; results and logs land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-model-step}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
quiet() { grep -v "^W[0-9]* \|dynamo\|Warning\|warn(" ; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
START=$(date +%s)
timeout "${BUDGET_S:-330}" python3 tools/gpu_model_step.py --out "$OUT" --models "${MODELS:-llama3-8b,qwen2.5-7b}" \
  2>&1 | quiet | tee "$OUT/model-step.txt"
echo "tool: $(( $(date +%s) - START )) s"
timeout "${TEST_S:-120}" python3 -m pytest -q -s -m gpu tests/test_gpu_model_step.py -p no:cacheprovider 2>&1 \
  | quiet | tail -30 | tee "$OUT/gpu-test.txt"
echo "total: $(( $(date +%s) - START )) s"
