#!/usr/bin/env bash
# A short GPU call: the new layer steps (GPU tests + full-size presets) and the studies, bounded.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-smoke}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -s -m gpu tests/test_gpu_beyond.py -k rank_layer -p no:cacheprovider 2>&1 | grep -v "^W[0-9]* \|Warning\|warn(" | tail -40 | tee "$OUT/rank-tests.txt"
for m in "gpt-oss-120b" "deepseek-v3 --expert-model-parallel-size 64" "mixtral-8x22b"; do
  # shellcheck disable=SC2086
  timeout 120 python3 -m gemm_bench.cli run --model $m --modes layer,layer-graphed --no-peers --warmup 0.5 \
    --repetitions 10 --out "$OUT/$(echo $m | cut -d' ' -f1).json" 2>&1 | grep -v "^W[0-9]* \|Warning\|warn(" | tail -3
  python3 -m gemm_bench.cli report "$OUT/$(echo $m | cut -d' ' -f1).json" 2>&1 | grep -A12 "Layer step" | head -16
done 2>&1 | tee "$OUT/presets.txt"
for s in dynamic-range loss-parity; do
  timeout "${STUDY_S:-150}" python3 -m gemm_bench.cli study "$s" --cache-dir "$OUT/cache" 2>&1 | grep -v "^W[0-9]* \|Warning\|warn(" | tail -15
done 2>&1 | tee "$OUT/studies.txt"
