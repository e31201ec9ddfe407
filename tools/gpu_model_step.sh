#!/usr/bin/env bash
# Issue 32 on the GPU: the model's step (parts, memory, composition at G = 1 and the default G, the
# real multi-layer proof, the largest micro-batch) for two models, its GPU test, and one
# `gemm-bench run` of the layer step (the runner's path: the result's model_step block and its report).
#   device run: bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; bash tools/gpu_model_step.sh
# MODELS, TOOL_S (default 240), TEST_S (default 110) and BUDGET_S (default 350: the run step is skipped when
# less than 60 s of it is left) override; results and logs land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-model-step}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PYTHONPATH="$PWD/bench:$PWD/sphinxext:$PWD:${PYTHONPATH:-}"
quiet() { grep -v "^W[0-9]* \|dynamo\|Warning\|warn(" ; }
START=$(date +%s)
left() { echo $(( ${BUDGET_S:-350} - ($(date +%s) - START) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
timeout "${TOOL_S:-240}" python3 tools/gpu_model_step.py --out "$OUT" --models "${MODELS:-llama3-8b,qwen2.5-7b}" \
  2>&1 | quiet | tee "$OUT/model-step.txt"
echo "tool: $(( $(date +%s) - START )) s"
timeout "${TEST_S:-110}" python3 -m pytest -q -s -m gpu tests/test_gpu_model_step.py -p no:cacheprovider 2>&1 \
  | quiet | tail -30 | tee "$OUT/gpu-test.txt"
echo "test: $(( $(date +%s) - START )) s"
if [ "$(left)" -gt 60 ]; then
  timeout "$(( $(left) - 5 ))" python3 -m gemm_bench.cli run --model llama3-8b --modes layer-graphed --no-peers \
    --warmup 0.2 --repetitions 10 --out "$OUT/run-llama3-8b.json" 2>&1 | quiet | tail -3
  python3 - "$OUT/run-llama3-8b.json" <<'PY' 2>&1 | tee "$OUT/run-report.txt"
import json, sys
from gemm_bench.report.report import Report
from gemm_bench.results.schema import validate
doc = validate(json.load(open(sys.argv[1])))
step = Report(doc).model_step()
print("model_step block:", "model_step" in doc, "summary:", step is not None)
if step is not None:
    for g, rows in step.rows.items():
        print(f"G={g}", "; ".join(f"{r.precision} {r.ms_per_microbatch:.1f} ms {r.tokens_per_s:.0f} tok/s "
                                  f"MFU {(r.mfu or 0):.1%} x{r.speedup or 0:.3f}" for r in rows))
    print([step.sentence(p) for p in ("fp8-delayed", "fp8-current", "fp8-block")])
PY
else
  echo "run step skipped: $(left) s left"
fi
echo "total: $(( $(date +%s) - START )) s"
