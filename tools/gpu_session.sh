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
#   3. the GPU tests (-m gpu), with what they print;
#   4. the README's docs command measuring on this box, as written (nox's docs session borrows the
#      image's own venv's torch through a .pth, noxfile.py _see_gpu_stack) with a scratch page
#      (orphan, removed afterwards) asking one question the cache lacks: an author's new question.
# STEPS picks steps (default "refresh,repro,tests"; add "docs" for step 4), REFRESH_ARGS adds
# refresh flags ("--force" re-measures the whole site: the whole-site wall time).
# Everything comes back in $OUT/session.tgz plus the logs. Nothing here types a number.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-session}"
BUDGET_S="${1:-540}"
START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
STEPS="${STEPS:-refresh,repro,tests}"
step() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
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

# torch.compile's and Triton's caches (gemm_bench.measure.compile_cache): a carried
# .compile-cache.tgz (a maintainer's box after one refresh) is unpacked first; SAVE_COMPILE_CACHE=1
# packs them into $OUT/compile-cache.tgz at the end. Without either, the box starts cold.
CC_DIR="${GEMM_BENCH_COMPILE_CACHE:-$HOME/.cache/gemm-bench/torch-compile}"
if [ -f .compile-cache.tgz ]; then
  mkdir -p "$CC_DIR" "$HOME/.triton" && tar xzf .compile-cache.tgz -C "$HOME" \
    && echo "compile cache: unpacked $(du -sh "$CC_DIR" | cut -f1) (warm box)" | tee "$OUT/s/compile-cache.txt"
else
  echo "compile cache: none carried (cold box)" | tee "$OUT/s/compile-cache.txt"
fi
save_compile_cache() {
  if [ "${SAVE_COMPILE_CACHE:-0}" = 1 ] && [ -d "$CC_DIR" ]; then
    tar czf "$OUT/compile-cache.tgz" -C "$HOME" .cache/gemm-bench/torch-compile $( [ -d "$HOME/.triton" ] && echo .triton )
    echo "compile cache: packed $(du -sh "$OUT/compile-cache.tgz" | cut -f1)" | tee -a "$OUT/s/compile-cache.txt"
  fi
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/s/gpu.txt"

# 1. The plan, then the whole site's refresh on this GPU, timed.
if step refresh; then
  # shellcheck disable=SC2086
  bench refresh docs/ --gpus all --dry-run ${REFRESH_ARGS:-} 2>&1 | quiet > "$OUT/s/plan.txt"
  tail -2 "$OUT/s/plan.txt"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout -s INT $(( $(left) - ${RESERVE_S:-60} )) python3 -m gemm_bench.cli refresh docs/ --gpus all ${REFRESH_ARGS:-} \
    2>&1 | quiet | tee "$OUT/s/refresh.txt" | grep -v "^      "
  echo "whole-site refresh: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a "$OUT/s/refresh.txt"
  find docs/_gemm_cache -maxdepth 1 -name '*.json' -newer "$OUT/s/plan.txt" -exec cp {} "$OUT/s/cache/" \;
  [ -d docs/_gemm_cache/studies ] && cp -r docs/_gemm_cache/studies "$OUT/s/cache/"
  pack
fi

# 2. Reproducibility: the TE guide question in a second process, compared with the refresh's run.
# (the refresh's run when this call refreshed, else the committed result of this GPU)
slug=$(python3 -c "import sys; from gemm_bench.question.devices import device_slug; print(device_slug(sys.argv[1]))" \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")
ref=$(ls "$OUT"/s/cache/${REPRO_HASH:-2160d33ec54a347e}--*.json docs/_gemm_cache/${REPRO_HASH:-2160d33ec54a347e}--"$slug".json \
  2>/dev/null | head -1)
if step repro && [ -n "$ref" ] && [ "$(left)" -gt 90 ]; then
  timeout $(( $(left) - 20 )) python3 -m gemm_bench.cli run --model te-guide-5b --accuracy \
    --modes autocast,prequant,layer,layer-graphed --profile-phases --out "$OUT/s/repro/b.json" 2>&1 | quiet \
    | tail -22 > "$OUT/s/repro/phases.txt"
  bench compare "$ref" "$OUT/s/repro/b.json" > "$OUT/s/repro/compare.txt" 2>&1
  head -40 "$OUT/s/repro/compare.txt"
fi
pack

# 4. The README's maintainer command, as written (`python3 -m venv .venv && .venv/bin/pip install -q nox
# && .venv/bin/nox -s docs`), with pip pointed at the carried wheels (environment, not the command:
# PIP_NO_INDEX, PIP_FIND_LINKS), and a scratch page (orphan, removed afterwards) asking one question
# the cache lacks: the build measures what the cache lacks for this GPU, as a maintainer's would.
if step docs && [ "$(left)" -gt 120 ]; then
  scratch=docs/_gpu_scratch.rst
  cat > "$scratch" <<'RST'
:orphan:

A new question (GPU session scratch page)
=========================================

.. gemm-benchmark::
   :model: llama3-8b
   :micro-batch-size: 2
   :seq-length: 2048
   :precisions: bf16, fp8-current
RST
  before=$(ls docs/_gemm_cache | sort)
  t0=$(date +%s.%N)
  ( export PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.devkit/wheels $PWD/.devkit/findlinks" PIP_DISABLE_PIP_VERSION_CHECK=1
    timeout $(( $(left) - 30 )) bash -c 'python3 -m venv .venv && .venv/bin/pip install -q nox && .venv/bin/nox -s docs' ) \
    2>&1 | tee "$OUT/s/nox-docs.txt" | tail -25
  echo "README command (.venv, nox, docs with one new question): $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" \
    | tee -a "$OUT/s/nox-docs.txt"
  comm -13 <(echo "$before") <(ls docs/_gemm_cache | sort) | while read -r f; do
    cp "docs/_gemm_cache/$f" "$OUT/s/cache/scratch--$f"; done
  rm -f "$scratch"
  pack
fi

# 5. An author's one-page project: conf.py with the extension and one page asking a new question
# (no peers), built from nothing; the whole build's wall time is what the author waits.
if step author && [ "$(left)" -gt 90 ]; then
  proj=$(mktemp -d)
  printf 'extensions = ["gemm_benchmark"]\nexclude_patterns = ["_build"]\n' > "$proj/conf.py"
  cat > "$proj/index.rst" <<'RST'
An author's page
================

.. gemm-benchmark::
   :model: qwen2.5-7b
   :seq-length: 2048
   :precisions: bf16, fp8-current
RST
  t0=$(date +%s.%N)
  timeout $(( $(left) - 20 )) python3 -m sphinx -W -b html "$proj" "$proj/_build" 2>&1 | tail -8 | tee "$OUT/s/author.txt"
  echo "author's one-page build: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a "$OUT/s/author.txt"
  cp "$proj"/_gemm_cache/*.json "$OUT/s/cache/" 2>/dev/null
  pack
fi

# 3. The GPU tests, with what they print, in what time is left.
if step tests && [ "$(left)" -gt 60 ]; then
  # shellcheck disable=SC2086
  timeout $(( $(left) - 10 )) python3 -m pytest -m gpu -s -q -p no:cacheprovider ${PYTEST_ARGS:-tests} 2>&1 | quiet \
    > "$OUT/s/gpu-tests.txt"
  echo "gpu tests rc=$?"; tail -5 "$OUT/s/gpu-tests.txt"
fi
save_compile_cache

# What `nox -s perf` reports as the last GPU run (tools/perf_site.py): this call's timings, read from
# the logs above (numbers measured here, never typed), in $OUT/s/timings.json.
python3 - "$OUT/s" <<'PY'
import datetime, json, os, re, sys
from pathlib import Path
s = Path(sys.argv[1])
def seconds(name, pattern, scale=1.0):
    f = s / name
    m = re.search(pattern, f.read_text(errors="replace")) if f.is_file() else None
    return round(float(m.group(1)) * scale, 1) if m else None
phases, questions = {}, 0
for f in sorted((s / "cache").glob("*.json")):
    if f.name.startswith("scratch--"):
        continue
    doc = json.loads(f.read_text())
    questions += 1
    for k, v in (doc.get("provenance", {}).get("phases_s") or {}).items():
        phases[k] = round(phases.get(k, 0.0) + v, 1)
gpu = (s / "gpu.txt").read_text().splitlines()[-1].split(",")[0].strip() if (s / "gpu.txt").is_file() else ""
out = {"device": gpu, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "commit": os.environ.get("GEMM_BENCH_COMMIT", ""),
       "refresh_s": seconds("refresh.txt", r"whole-site refresh: ([0-9.]+) s"),
       # the questions a refresh stored (an author's or the README step's new result is not one)
       "questions": (questions or None) if (s / "refresh.txt").is_file() else None,
       "dry_run_estimate_s": seconds("plan.txt", r"estimated time(?: for the questions)?: (?:at least )?([0-9.]+) min",
                                     60.0),
       "phases_s": dict(sorted(phases.items(), key=lambda kv: -kv[1])),
       "readme_docs_s": seconds("nox-docs.txt", r"README command [^:]*: ([0-9.]+) s"),
       "author_build_s": seconds("author.txt", r"author's one-page build: ([0-9.]+) s")}
(s / "timings.json").write_text(json.dumps(out, indent=1) + "\n")
print("timings:", json.dumps({k: v for k, v in out.items() if k != "phases_s"}))
PY
pack
echo "session used $(( $(date +%s) - START )) s of $BUDGET_S"
