"""The loss-parity study: corpus, batch order and schedule (pure, CPU), the schema, the document
round trip, the ``gemm-loss-parity`` directive (Sphinx builds with synthetic documents in a temporary
cache), and a tiny real training run per recipe on a GPU (``gpu``).

Every study document here is synthetic (numbers made up by :func:`synthetic_data`, labelled so in
the document) and lives in a temporary directory, never in ``docs/_gemm_cache``.
"""

from __future__ import annotations

import copy
import hashlib
import io
import itertools
import json
import math
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import loss_parity as lp
from gemm_bench.results import loss_parity_schema as schema
from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DEVICE = {"name": "Test GPU 80GB", "compute_capability": "9.0"}
PROVENANCE = {"torch": "2.11.0", "transformer_engine": "2.20.2", "cuda": "13.0", "driver": "580.1",
              "commit": "0123456", "date": "2026-11-01T00:00:00+00:00"}
METHOD = {"timer": "synthetic test data, not a measurement"}


# ------------------------------------------------------------------------------ synthetic documents
def _curve(steps: int, every: int, start: float, end: float) -> dict[str, list[Any]]:
    xs = list(range(every, steps + 1, every))
    losses = [round(end + (start - end) * math.exp(-4 * x / steps), 6) for x in xs]
    return {"steps": xs, "train_loss": losses, "grad_norm": [round(0.5 + 1 / x, 6) for x in xs]}


def synthetic_band_run(seed: int, final: float, *, steps: int = 40, eval_every: int = 20) -> dict[str, Any]:
    """A measured run of the BF16 seed band, made up: final train loss ``final``, validation ``final + 0.05``."""
    val_steps = [0, *range(eval_every, steps + 1, eval_every)]
    val = [round(5.6 - (5.6 - final - 0.05) * min(1.0, s / steps), 6) for s in val_steps]
    return {"seed": seed, "status": "measured",
            "init_sha256": hashlib.sha256(f"synthetic initial weights, seed {seed}".encode()).hexdigest(),
            "batch_order_sha256": hashlib.sha256(f"synthetic order, seed {seed}".encode()).hexdigest(),
            "validation": {"steps": val_steps, "loss": val}, "wall_s": 12.0,
            "final_train_loss": final, "final_val_loss": val[-1]}


def synthetic_data(*, steps: int = 40, every: int = 4, eval_every: int = 20, band: bool = True) -> dict[str, Any]:
    """A valid data block with made-up numbers: BF16 ends at 1.5 (validation 1.55), FP8 Delayed at
    1.53 (1.58), FP8 Current at 1.515 (1.565), MXFP8/NVFP4 unsupported, FP8 Block diverged; with
    ``band``, BF16 from seeds 2 and 3 ends at validation 1.54 and 1.57: a band of -0.01 to +0.02
    around the main run, which FP8 Current's +0.015 lies within and FP8 Delayed's +0.03 beyond."""
    init = hashlib.sha256(b"synthetic initial weights").hexdigest()
    val_steps = [0, *range(eval_every, steps + 1, eval_every)]

    def measured(precision: str, final: float, tokens: float) -> dict[str, Any]:
        val = [round(5.6 - (5.6 - final - 0.05) * min(1.0, s / steps), 6) for s in val_steps]
        return {"precision": precision, "status": "measured", "recipe": f"synthetic {precision}",
                "curve": _curve(steps, every, 5.5, final), "validation": {"steps": val_steps, "loss": val},
                "final_train_loss": final, "final_val_loss": val[-1], "tokens_per_s": tokens, "wall_s": 12.5,
                "peak_memory_gib": 10.0, "init_sha256": init}

    data = {
        "model": {"layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 256, "seq": 128,
                  "params": 1_700_000, "description": "synthetic test model"},
        "corpus": {"source": "synthetic test corpus", "python": "3.12.3", "files": 10, "bytes": 1000,
                   "sha256": hashlib.sha256(b"synthetic corpus").hexdigest(), "train_bytes": 950,
                   "val_bytes": 50, "split": "synthetic split"},
        "training": {"steps": steps, "batch": 8, "seq": 128, "tokens_per_step": 1024, "seed": 1,
                     "optimizer": {"name": "AdamW", "betas": [0.9, 0.95]},
                     "lr_schedule": {"kind": "warm-up then cosine", "peak_lr": 1e-3, "warmup_steps": 4,
                                     "min_lr": 1e-4},
                     "grad_clip": 1.0, "weights": "FP32 master weights",
                     "batch_order_sha256": hashlib.sha256(b"synthetic order").hexdigest(),
                     "eval_every": eval_every, "eval_sequences": 16, "curve_every": every,
                     "curve": "synthetic curve", "final_window": 4, "timing": "synthetic timing"},
        "recipes": [
            measured("bf16", 1.5, 100_000.0),
            measured("fp8-delayed", 1.53, 130_000.0),
            measured("fp8-current", 1.515, 125_000.0),
            {"precision": "fp8-block", "status": "diverged", "reason": "diverged at step 23: training loss nan",
             "diverged_at_step": 23, "curve": _curve(20, every, 5.5, 2.0),
             "validation": {"steps": [0, 20], "loss": [5.6, 2.1]}, "wall_s": 6.0, "init_sha256": init},
            {"precision": "mxfp8", "status": "unsupported", "reason": "MXFP8 needs Blackwell (synthetic reason)"},
            {"precision": "nvfp4", "status": "unsupported", "reason": "NVFP4 needs Blackwell (synthetic reason)"},
        ],
    }
    if band:
        data["seed_band"] = {"precision": "bf16", "runs": [
            synthetic_band_run(2, 1.49, steps=steps, eval_every=eval_every),
            synthetic_band_run(3, 1.52, steps=steps, eval_every=eval_every)]}
    return data


def synthetic_document(device: dict[str, Any] = DEVICE, data: dict[str, Any] | None = None) -> dict[str, Any]:
    return studies.build_document(schema.STUDY, data or synthetic_data(), METHOD, device, PROVENANCE)


# ------------------------------------------------------------------------------ corpus
def _tree(root: Path) -> Path:
    files = {"b.py": b"print('b')\n", "a/z.py": b"z = 1\n", "a/b.py": b"# ab\n", "c.txt": b"not python",
             "site-packages/x.py": b"third party", "dist-packages/y.py": b"third party",
             "a/__pycache__/q.py": b"cache"}
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    return root


def test_corpus_is_sorted_concatenated_and_hashed(tmp_path: Path) -> None:
    corpus = lp.read_corpus(_tree(tmp_path))
    assert corpus.files == ("a/b.py", "a/z.py", "b.py")
    assert corpus.data == b"# ab\nz = 1\nprint('b')\n"
    assert corpus.starts == (0, 5, 11)
    assert corpus.sha256 == hashlib.sha256(corpus.data).hexdigest()


def test_corpus_without_python_files_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(lp.CorpusError, match=r"no \*\.py files"):
        lp.read_corpus(tmp_path)


def test_stdlib_corpus_is_deterministic() -> None:
    first, second = lp.read_stdlib_corpus(), lp.read_stdlib_corpus()
    assert first.sha256 == second.sha256 and len(first.data) > 1_000_000
    assert list(first.files) == sorted(first.files)
    assert not any(part in lp.EXCLUDED_DIRS for name in first.files for part in name.split("/"))
    block = lp.corpus_block(first, lp.split_offset(first, 0.05), 0.05)
    assert block["bytes"] == len(first.data) and block["sha256"] == first.sha256
    assert block["train_bytes"] + block["val_bytes"] == block["bytes"]


def test_split_is_at_a_file_start_and_keeps_at_least_the_fraction() -> None:
    corpus = lp.Corpus(b"x" * 1000, ("a", "b", "c"), (0, 600, 920), "/nowhere")
    assert lp.split_offset(corpus, 0.05) == 920  # byte 950 is in c
    assert lp.split_offset(corpus, 0.2) == 600  # byte 800 is in b: validation is 40%, not less than 20%
    stdlib = lp.read_stdlib_corpus()
    split = lp.split_offset(stdlib, 0.05)
    assert split in stdlib.starts and len(stdlib.data) - split >= 0.05 * len(stdlib.data)


# ------------------------------------------------------------------------------ batches
def test_batches_are_identical_for_every_recipe_and_cover_each_epoch_once() -> None:
    seq, batch, train = 16, 4, 16 * 10 + 1  # 10 windows
    first = lp.batch_offsets(train, seq, batch, steps=5, seed=7)
    again = lp.batch_offsets(train, seq, batch, steps=5, seed=7)  # what the next recipe reads
    assert first == again and lp.order_sha256(first) == lp.order_sha256(again)
    assert lp.batch_offsets(train, seq, batch, steps=5, seed=8) != first
    flat = [o for row in first for o in row]
    assert len(first) == 5 and all(len(row) == batch for row in first)
    assert sorted(flat[:10]) == [i * seq for i in range(10)]  # the first epoch: every window once
    assert all(o % seq == 0 and o + seq + 1 <= train for o in flat)


def test_batch_order_is_pinned() -> None:
    """random.Random(seed).shuffle is stable across Python versions: this order is the GPU box's too."""
    assert lp.batch_offsets(16 * 8 + 1, 16, 2, steps=3, seed=1234) == [[16, 48], [32, 64], [80, 96]]


def test_too_little_text_is_an_error() -> None:
    with pytest.raises(lp.CorpusError, match="fewer than one batch"):
        lp.batch_offsets(100, 64, 4, steps=1, seed=0)
    with pytest.raises(lp.CorpusError, match="validation split"):
        lp.eval_offsets(900, 1000, 64, 4)


def test_validation_windows_lie_in_the_validation_split() -> None:
    offsets = lp.eval_offsets(1000, 1000 + 64 * 20 + 1, 64, 8)
    assert len(offsets) == len(set(offsets)) == 8
    assert all(1000 <= o and o + 65 <= 1000 + 64 * 20 + 1 and (o - 1000) % 64 == 0 for o in offsets)


# ------------------------------------------------------------------------------ schedule and curves
def test_learning_rate_warms_up_then_decays_to_the_minimum() -> None:
    cfg = lp.TrainingConfig(steps=100, warmup_steps=10, peak_lr=1e-3, min_lr=1e-4)
    lrs = [lp.lr_at(i, cfg) for i in range(cfg.steps)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a < b for a, b in itertools.pairwise(lrs[:10]))
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))
    assert lrs[-1] == pytest.approx(1e-4)


def test_training_config_refuses_impossible_values() -> None:
    with pytest.raises(ValueError, match="warmup_steps"):
        lp.TrainingConfig(steps=10, warmup_steps=10)
    with pytest.raises(ValueError, match="min_lr"):
        lp.TrainingConfig(peak_lr=1e-4, min_lr=1e-3)


def test_curve_is_the_mean_of_each_window() -> None:
    steps, means = lp.downsample([1.0, 2.0, 3.0, 4.0, 5.0], 2)
    assert steps == [2, 4, 5] and means == [1.5, 3.5, 5.0]
    assert lp.final_train_loss([9.0, 1.0, 2.0, 3.0], 3) == 2.0


def test_divergence_is_the_first_nonfinite_loss_or_gradient_norm() -> None:
    assert lp.divergence([3.0, 2.0], [1.0, 1.0]) is None
    assert lp.divergence([3.0, 2.0, float("nan")], [1.0, float("inf"), 1.0]) == (
        2, "diverged at step 2: gradient norm inf")
    assert lp.divergence([3.0, float("nan")], [1.0, 1.0]) == (2, "diverged at step 2: training loss nan")


def test_stopwatch_times_only_the_running_stretches() -> None:
    ticks = iter([10.0, 12.0, 20.0, 23.0])
    watch = lp.Stopwatch(clock=lambda: next(ticks))
    watch.start(25)
    watch.stop(50)
    watch.stop(60)  # not running: nothing added
    watch.start(75)
    watch.stop(100)
    assert (watch.steps, watch.seconds) == (50, 5.0)


def test_the_pure_parts_import_without_torch() -> None:
    code = ("import sys; import gemm_bench.measure.loss_parity, gemm_bench.results.loss_parity_schema; "
            "assert 'torch' not in sys.modules and 'transformer_engine' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------ schema
def test_synthetic_document_is_valid_and_gaps_are_recipe_minus_bf16() -> None:
    doc = synthetic_document()
    assert doc["study"] == "loss-parity" and doc["method_version"] == schema.METHOD_VERSION
    found = schema.gaps(doc["data"])
    assert set(found) == {"fp8-delayed", "fp8-current"}
    train = found["fp8-delayed"]["train"]
    assert train is not None
    assert train.delta == pytest.approx(0.03) and train.percent == pytest.approx(2.0)
    assert [p for p, *_ in schema.curve_series(doc["data"])] == ["bf16", "fp8-delayed", "fp8-current", "fp8-block"]


def _set(path: str, value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return mutate


_DELETE = object()

BAD = [
    (_set("model.params", 0), "$.data.model.params", "at least 1"),
    (_set("model.heads", 5), "$.data.model.heads", "do not divide"),
    (_set("corpus.sha256", "abc"), "$.data.corpus.sha256", "sha256"),
    (_set("corpus.val_bytes", 51), "$.data.corpus.val_bytes", "is not the corpus"),
    (_set("training.seq", 64), "$.data.training.seq", "sequence length"),
    (_set("training.tokens_per_step", 5), "$.data.training.tokens_per_step", "batch x seq"),
    (_set("training.lr_schedule.min_lr", 1.0), "$.data.training.lr_schedule.min_lr", "exceeds"),
    (_set("training.grad_clip", float("nan")), "$.data.training.grad_clip", "finite"),
    (_set("recipes.0.curve.train_loss.3", float("inf")), "$.data.recipes[0].curve.train_loss[3]", "finite"),
    (_set("recipes.0.curve.train_loss.3", True), "$.data.recipes[0].curve.train_loss[3]", "finite"),
    (_set("recipes.1.curve.grad_norm", [1.0]), "$.data.recipes[1].curve.grad_norm", "1 values for 10 steps"),
    (_set("recipes.0.curve.steps.2", 4), "$.data.recipes[0].curve.steps[2]", "out of order"),
    (_set("recipes.0.curve.steps", [4, 8]), "$.data.recipes[0].curve.train_loss", "10 values for 2 steps"),
    (_set("recipes.2.validation.loss", [5.0, 2.0]), "$.data.recipes[2].validation.loss", "2 values for 3 steps"),
    (_set("recipes.1.final_val_loss", 9.0), "$.data.recipes[1].final_val_loss", "last validation loss"),
    (_set("recipes.1.tokens_per_s", 0), "$.data.recipes[1].tokens_per_s", "positive"),
    (_set("recipes.1.init_sha256", "0" * 64), "$.data.recipes[1].init_sha256", "same weights"),
    (_set("recipes.1.status", "great"), "$.data.recipes[1].status", "must be one of"),
    (_set("recipes.1.precision", "bf16"), "$.data.recipes[1].precision", "already recipe [0]"),
    (_set("recipes.1.precision", "fp7"), "$.data.recipes[1].precision", "not a known precision"),
    (_set("recipes.3.reason", ""), "$.data.recipes[3].reason", "non-empty"),
    (_set("recipes.3.diverged_at_step", 41), "$.data.recipes[3].diverged_at_step", "between 1 and 40"),
    (_set("recipes.4.reason", _DELETE), "$.data.recipes[4].reason", "missing"),
    (_set("recipes.0", {"precision": "fp8-delayed", "status": "failed", "reason": "x"}),
     "$.data.recipes[1].precision", "already recipe"),
    (lambda d: d["recipes"].pop(0), "$.data.recipes", "no BF16 run"),
    (_set("recipes", []), "$.data.recipes", "non-empty"),
    (_set("training", []), "$.data.training", "must be an object"),
]


@pytest.mark.parametrize(("mutate", "where", "problem"), BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_validator_rejects_bad_data_with_its_path(mutate: Any, where: str, problem: str) -> None:
    data = synthetic_data()
    mutate(data)
    with pytest.raises(studies.StudyError) as caught:
        schema.validate_data(data)
    assert caught.value.where == where, str(caught.value)
    assert problem in caught.value.problem


def test_measured_curves_must_share_their_steps() -> None:
    data = synthetic_data()
    data["recipes"][2]["curve"] = _curve(40, 5, 5.5, 1.5)
    with pytest.raises(studies.StudyError, match=r"recipes\[2\].curve.steps: differ from bf16's"):
        schema.validate_data(data)


def test_document_round_trip(tmp_path: Path) -> None:
    doc = synthetic_document()
    path = studies.write_study(tmp_path, doc)
    assert path == tmp_path / "studies" / "loss-parity--test-gpu-80gb.json"
    found, errors = studies.read_studies(tmp_path, "loss-parity")
    assert errors == [] and found == [doc]


def test_a_corrupt_study_file_is_an_error_naming_its_path(tmp_path: Path) -> None:
    doc = synthetic_document()
    doc["data"]["recipes"][0]["curve"]["train_loss"][0] = -1.0
    path = tmp_path / "studies" / "loss-parity--test-gpu-80gb.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc), encoding="utf-8")
    found, errors = studies.read_studies(tmp_path, "loss-parity")
    assert found == [] and len(errors) == 1 and isinstance(errors[0], CacheError)
    assert str(errors[0]).startswith(str(path)) and "train_loss[0]" in str(errors[0])


# ------------------------------------------------------------------------------ the directive
PAGE = "Loss parity\n===========\n\nSome prose.\n\n.. gemm-loss-parity::\n"


def _build(tmp_path: Path, make_app: Any, docs: Sequence[dict[str, Any]] = (), raw: dict[str, str] | None = None,
           builder: str = "html") -> tuple[str, str]:
    """Build a one-page site whose cache holds ``docs`` (and ``raw`` files); (the page, warnings)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "loss parity test"\n'
                                 'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    (src / "index.rst").write_text(PAGE, encoding="utf-8")
    cache = src / "_gemm_cache"
    for doc in docs:
        studies.write_study(cache, doc)
    for name, text in (raw or {}).items():
        (cache / "studies").mkdir(parents=True, exist_ok=True)
        (cache / "studies" / name).write_text(text, encoding="utf-8")
    warnings = io.StringIO()
    app = make_app(builder, srcdir=src, status=io.StringIO(), warning=warnings, freshenv=True)
    app.build()
    html = (Path(app.outdir) / ("index.html" if builder == "html" else "index.txt")).read_text(encoding="utf-8")
    app.cleanup()
    return html, ANSI.sub("", warnings.getvalue())


def table_rows(table: Any) -> dict[str, list[str]]:
    """A rendered results table's body rows by recipe name, cell texts with the smart quotes of the
    HTML writer made straight again."""
    def cell(td: Any) -> str:
        return str(td.get_text(" ", strip=True)).replace("\u2019", "'")
    return {cell(tr.select("td")[0]): [cell(td) for td in tr.select("td")[1:]] for tr in table.select("tbody tr")}


def test_directive_without_a_study_says_how_to_measure_it(tmp_path: Path, make_app: Any) -> None:
    html, warnings = _build(tmp_path, make_app)
    assert "WARNING" not in warnings, warnings
    assert "Not measured yet" in html and "gemm-bench study loss-parity" in html


def test_directive_renders_figure_table_gaps_and_provenance(tmp_path: Path, make_app: Any) -> None:
    from bs4 import BeautifulSoup

    html, warnings = _build(tmp_path, make_app, [synthetic_document()])
    assert "WARNING" not in warnings, warnings
    soup = BeautifulSoup(html, "html.parser")
    figure = soup.select_one(".gemm-loss-parity-figure svg")
    assert figure is not None and "BF16" in figure.get_text() and "FP8 Current" in figure.get_text()
    table = soup.select_one("table.gemm-loss-parity-table")
    assert table is not None
    rows = table_rows(table)
    assert rows["BF16"] == ["1.5000", "reference", "1.5500", "reference", "seed range -0.0100 to +0.0200 (3 seeds)",
                            "100,000"]
    # FP8 Delayed: 1.53 vs 1.5 -> +0.0300 (+2.00%); validation 1.58 vs 1.55 -> +0.0300 (+1.94%), beyond
    # BF16's band of -0.01 to +0.02; FP8 Current's +0.015 within it.
    assert rows["FP8 Delayed"] == ["1.5300", "+0.0300 (+2.00%)", "1.5800", "+0.0300 (+1.94%)",
                                   "beyond BF16's seed-to-seed range (3 seeds)", "130,000"]
    assert rows["FP8 Current"][4] == "within BF16's seed-to-seed range (3 seeds)"
    assert rows["FP8 Block"] == ["diverged at step 23: training loss nan"]
    assert "MXFP8" not in rows and "MXFP8: MXFP8 needs Blackwell (synthetic reason)" in soup.get_text()
    provenance_node, setup_node = soup.select_one(".gemm-provenance"), soup.select_one("table.gemm-loss-parity-setup")
    assert provenance_node is not None and setup_node is not None
    provenance = provenance_node.get_text(" ", strip=True)
    assert "Test GPU 80GB" in provenance and "Transformer Engine 2.20.2" in provenance
    assert hashlib.sha256(b"synthetic corpus").hexdigest()[:16] in provenance
    setup = setup_node.get_text(" ", strip=True)
    assert "40 steps of 8 sequences" in setup and "FP32 master weights" in setup


def test_directive_puts_each_gpu_in_a_tab(tmp_path: Path, make_app: Any) -> None:
    other = synthetic_document({"name": "Other GPU 141GB", "compute_capability": "9.0"})
    html, warnings = _build(tmp_path, make_app, [synthetic_document(), other])
    assert "WARNING" not in warnings, warnings
    assert html.count("gemm-loss-parity-table") == 2
    assert "Other GPU 141GB" in html and "Test GPU 80GB" in html
    # two figures per GPU (the loss curves, the differences from BF16), each drawn at a phone's width
    # and as its desktop twin
    assert html.count('class="gemm-figure docutils container"') == 4 and html.count("gemm-figure-wide") == 4
    assert len(re.findall(r'<svg role="img"', html)) == 8


def test_a_corrupt_study_file_is_a_located_warning_and_the_rest_renders(tmp_path: Path, make_app: Any) -> None:
    bad = copy.deepcopy(synthetic_document({"name": "Broken GPU", "compute_capability": "9.0"}))
    bad["data"]["recipes"][0]["final_train_loss"] = "low"
    html, warnings = _build(tmp_path, make_app, [synthetic_document()],
                            raw={"loss-parity--broken-gpu.json": json.dumps(bad)})
    lines = [line for line in warnings.splitlines() if "WARNING" in line]
    assert len(lines) == 1, warnings
    assert re.search(r"index\.rst:6: WARNING: gemm-loss-parity: ignoring unusable study file \S*"
                     r"loss-parity--broken-gpu\.json.*final_train_loss", lines[0]), lines[0]
    assert "[gemm_benchmark.cache]" in lines[0]
    assert html.count("gemm-loss-parity-table") == 1 and "Test GPU 80GB" in html and "Broken GPU" not in html


def test_other_builders_get_the_table_and_a_sentence_instead_of_the_svg(tmp_path: Path, make_app: Any) -> None:
    text, warnings = _build(tmp_path, make_app, [synthetic_document()], builder="text")
    assert "WARNING" not in warnings, warnings
    assert "<svg" not in text and "drawn in the HTML version" in text
    assert "+0.0300 (+2.00%)" in text and "Test GPU 80GB" in text


def test_incremental_builds_reread_the_page_only_when_a_study_file_comes_or_changes(
        tmp_path: Path, make_app: Any) -> None:
    html, _ = _build(tmp_path, make_app)
    assert "Not measured yet" in html
    src = tmp_path / "src"

    def rebuild() -> tuple[str, str]:
        status = io.StringIO()
        app = make_app("html", srcdir=src, status=status, warning=io.StringIO())
        app.build()
        page = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
        app.cleanup()
        return ANSI.sub("", status.getvalue()), page

    status, _ = rebuild()
    assert "0 added, 0 changed, 0 removed" in status, status
    path = studies.write_study(src / "_gemm_cache", synthetic_document())
    status, page = rebuild()
    assert "0 added, 1 changed, 0 removed" in status and "gemm-loss-parity-table" in page
    status, _ = rebuild()
    assert "0 added, 0 changed, 0 removed" in status, status
    doc = synthetic_document()
    doc["data"]["recipes"][1]["tokens_per_s"] = 99_999.0
    studies.write_study(src / "_gemm_cache", doc)
    status, page = rebuild()
    assert "0 added, 1 changed, 0 removed" in status and "99,999" in page
    path.unlink()
    status, page = rebuild()
    assert "0 added, 1 changed, 0 removed" in status and "Not measured yet" in page


def test_a_study_of_another_method_version_is_a_stale_warning(tmp_path: Path, make_app: Any) -> None:
    doc = synthetic_document()
    doc["method_version"] = "0"
    html, warnings = _build(tmp_path, make_app, [doc])
    assert "index.rst:6: WARNING: gemm-loss-parity: study on Test GPU 80GB is stale" in warnings
    assert "stale: measured with study method version" in html


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
def test_tiny_training_runs_give_finite_decreasing_losses() -> None:
    """20 steps of a 2-layer model in BF16 and FP8 current scaling (about 30 s on an H100)."""
    model = lp.ModelConfig(layers=2, hidden=256, heads=4, ffn_hidden=1024, seq=256)
    training = lp.TrainingConfig(steps=20, batch=8, warmup_steps=2, peak_lr=1e-3, min_lr=1e-4, eval_every=10,
                                 eval_sequences=16, curve_every=2, final_window=4, check_every=5,
                                 timing_skip_steps=5)
    data, method = lp.measure(model, training, precisions=("bf16", "fp8-current"), extra_seeds=1)
    schema.validate_data(data)
    assert method["steps"] == 20
    runs = schema.recipes_by_id(data)
    assert [r["status"] for r in runs.values()] == ["measured", "measured"], runs
    assert runs["bf16"]["init_sha256"] == runs["fp8-current"]["init_sha256"]
    for run in runs.values():
        losses = run["curve"]["train_loss"]
        assert len(losses) == 10 and all(math.isfinite(v) for v in losses)
        assert losses[-1] < losses[0] - 0.5, losses  # from ~5.5 (ln 256) well down within 20 steps
        assert run["validation"]["steps"] == [0, 10, 20]
        assert run["validation"]["loss"][-1] < run["validation"]["loss"][0]
        assert run["tokens_per_s"] > 0
    # The same batches and weights: the first step's loss differs only by the recipe's rounding.
    assert abs(runs["bf16"]["curve"]["train_loss"][0] - runs["fp8-current"]["curve"]["train_loss"][0]) < 0.05
    # The seed band: BF16 once more, from another seed: other weights, other batches, a finite final loss.
    [other] = data["seed_band"]["runs"]
    assert other["seed"] == training.seed + 1 and other["status"] == "measured", other
    assert other["init_sha256"] != runs["bf16"]["init_sha256"]
    assert other["batch_order_sha256"] != data["training"]["batch_order_sha256"]
    assert other["validation"]["steps"] == [0, 10, 20] and math.isfinite(other["final_val_loss"])
    assert "curve" not in other and "tokens_per_s" not in other
    doc = studies.build_document(schema.STUDY, data, method, DEVICE, PROVENANCE)
    assert doc["data"] is data


def test_table_without_a_bf16_reference_shows_no_gaps_and_failures_read_as_failed() -> None:
    from gemm_benchmark.study_loss_parity import results_table

    data = synthetic_data()
    bf16 = data["recipes"][0]
    for key in ("final_train_loss", "final_val_loss", "tokens_per_s", "peak_memory_gib"):
        del bf16[key]
    bf16.update(status="diverged", reason="diverged at step 30: gradient norm inf", diverged_at_step=30)
    data["recipes"][2] = {"precision": "fp8-current", "status": "failed", "reason": "RuntimeError: synthetic"}
    schema.validate_data(data)
    assert schema.gaps(data) == {}
    from docutils import nodes

    rows = {row[0].astext(): [entry.astext() for entry in row[1:]]
            for row in results_table(data, "no seed band in this result: synthetic").findall(nodes.row)}
    assert rows["BF16"] == ["diverged at step 30: gradient norm inf"]
    assert rows["FP8 Delayed"] == ["1.5300", "–", "1.5800", "–", "–", "130,000"]
    assert rows["FP8 Current"] == ["failed: RuntimeError: synthetic"]


def test_reasons_joined_into_a_sentence_keep_one_punctuation_mark() -> None:
    """Issue 35 reader pass: Transformer Engine's reasons end with a period, and the page joined them
    with "; " and closed with ".": "... for MXFP8 execution.; NVFP4: ... for NVFP4 execution..". A
    failed seed of the band is joined the same way."""
    from gemm_benchmark.answer_text import loss_parity_words
    from gemm_benchmark.study_loss_parity import seed_band_note, unsupported_note
    from gemm_benchmark.values import reason_clause

    data = synthetic_data()
    for recipe in data["recipes"]:
        if recipe["status"] == "unsupported":
            recipe["reason"] = f"Device compute capability 10.0 or higher required for {recipe['precision']} execution."
    data["seed_band"]["runs"][1] = {"seed": 3, "status": "failed", "reason": "RuntimeError: boom.\n"}
    unsupported, seeds = unsupported_note(data), seed_band_note(data)
    assert unsupported is not None and seeds is not None
    for text in (unsupported.astext(), seeds.astext()):
        assert not re.search(r"\.[.;,]", text.replace("...", "")), text
    assert unsupported.astext().endswith("nvfp4 execution.")
    assert "mxfp8 execution; NVFP4:" in unsupported.astext()
    assert seeds.astext().endswith("seed 3: RuntimeError: boom.")
    assert reason_clause("wait...") == "wait..." and reason_clause(" a  b. ") == "a b"
    # the answer sentence's loss-parity words for a recipe whose run failed
    data["recipes"][2] = {"precision": "fp8-current", "status": "failed", "reason": "RuntimeError: synthetic."}
    said = loss_parity_words({"data": data}, "fp8-current")
    assert said.endswith("failed: RuntimeError: synthetic.") and ".." not in said, said
