"""Reader pass 3 (round 37): words that said less than the numbers, or something else.

Each test reads a surface a reader sees (an answer sentence, a provenance line, an error, a report)
on synthetic or committed data and fails on the wording the pass found.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemm_bench.report import loss_parity_words
from gemm_bench.results import loss_parity_schema as schema
from tests.test_loss_parity import synthetic_data


def test_answer_loss_parity_gap_has_its_unit_and_the_range_it_is_judged_by() -> None:
    """Finding 3: "...within BF16's seed-to-seed range of validation loss (+0.0181)" had no unit and
    no range: the sentence now gives the gap in nats/byte and BF16's range from the stored seeds."""
    from gemm_benchmark.answer_text import loss_parity_words as answer_words

    data = synthetic_data()
    band = schema.seed_band(data)
    assert isinstance(band, schema.SeedBand)
    for precision in ("fp8-delayed", "fp8-current"):
        val = schema.gaps(data)[precision]["val"]
        assert val is not None
        said = answer_words({"data": data}, precision)
        verdict = loss_parity_words.WITHIN if band.holds(val.delta) else loss_parity_words.BEYOND
        assert f"{val.delta:+.4f} nats/byte" in said, said
        assert f"{verdict} of {band.low:+.4f} to {band.high:+.4f}." in said, said


def test_loss_unit_is_the_one_the_committed_studies_store() -> None:
    """The unit the words print is the study's own (each committed document's method ``loss`` line)."""
    import json
    from pathlib import Path

    unit = {"nats/byte": "nats per byte"}[loss_parity_words.LOSS_UNIT]
    found = sorted((Path(__file__).parents[1] / "docs" / "_gemm_cache" / "studies").glob("loss-parity--*.json"))
    assert found
    for path in found:
        assert unit in json.loads(path.read_text())["provenance"]["method"]["loss"], path


# ------------------------------------------------------------------------------ landing page words
_ROLE = re.compile(r":gemm-[a-z-]+:`([^`]*)`")


def _index_sentences() -> list[str]:
    """The landing page's prose sentences (directive blocks and their options left out), flattened."""
    text = (Path(__file__).parents[1] / "docs" / "index.rst").read_text()
    paragraphs = [p for p in re.split(r"\n\s*\n", text)
                  if not p.lstrip().startswith(("..", ":")) and not p.startswith("   ")]
    return [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", " ".join(p.split()))]


def test_index_sentences_name_the_fp8_recipe_their_numbers_quote() -> None:
    """Finding 5: "the FP8 region takes ... autocast FP8 runs at 0.20x" quoted FP8 current scaling
    only (delayed and block differ) while its words said "FP8": a sentence quoting one FP8 recipe's
    number names that recipe in its words."""
    for sentence in _index_sentences():
        words = _ROLE.sub("", sentence).lower()
        for arg in _ROLE.findall(sentence):
            for recipe in set(re.findall(r"\bfp8-(current|delayed|block)\b", arg)):
                assert recipe in words, f"{arg!r} quoted in a sentence that does not say {recipe!r}: {sentence}"


def test_index_speedups_use_the_sites_terms() -> None:
    """Finding 6: "runs the model's GEMMs 1.63x faster than BF16": the site says "N× the speed of
    BF16" ("× faster" reads as N+1 to some) and the layer's measured GEMMs are its *autocast GEMMs*."""
    text = " ".join((Path(__file__).parents[1] / "docs" / "index.rst").read_text().split())
    assert not re.search(r":gemm-(step-)?speedup:`[^`]*` faster", text)
    assert "model's GEMMs" not in text


def test_rounds_outcome_with_none_reached_says_none_and_all() -> None:
    """Finding 7: "0 of 17 timed groups reached that 1.0%; the other 17 stopped" when none converged."""
    from gemm_bench.report.rounds import groups_outcome
    from gemm_bench.results.typed import TimedGroup

    method = {"target_ci": 0.01, "repetitions": 40}
    capped = TimedGroup(label="capped", run_id="r", rounds=40, members=(), converged=False)
    assert groups_outcome(method, [capped] * 17).startswith(
        "none of the 17 timed groups reached that 1.0%; all stopped at the 40-round cap,")
    reached = TimedGroup(label="reached", run_id="r", rounds=12, members=(), converged=True)
    assert groups_outcome(method, [reached] + [capped] * 16).startswith(
        "1 of 17 timed groups reached that 1.0%; the other 16 stopped at the 40-round cap,")


def test_one_spelling_of_normalization() -> None:
    """Finding 13: "normalisation" in the prose beside "normalization" in every figure legend."""
    root = Path(__file__).parents[1]
    sources = [*(root / "docs").rglob("*.rst"), *(root / "docs").glob("*.md"),
               *(root / "bench" / "gemm_bench").rglob("*.py"), *(root / "sphinxext" / "gemm_benchmark").rglob("*.py")]
    assert [p.name for p in sources if "normalis" in p.read_text().lower()] == []


@pytest.mark.parametrize(("name", "hint"), [("llama3-70b-tp8", "llama3-70b/tp8"),
                                            ("Deepseek-V3-ep64", "deepseek-v3/ep64"),
                                            ("mixtral-8x22b-tp2-ep4", "mixtral-8x22b/tp2/ep4")])
def test_a_slug_named_as_a_model_suggests_its_id(name: str, hint: str) -> None:
    """Finding 11: ``shapes --model llama3-70b-tp8`` (the :name: slug the freshness page shows) said
    only "unknown preset ...; known: ..., llama3-70b, ...": the error now names the id to type, one
    that the id parser accepts and that resolves."""
    from gemm_bench.question import config

    with pytest.raises(config.ConfigError) as caught:
        config.preset(config.parse_model_id(name).preset)
    assert f"did you mean the id {hint!r}?" in str(caught.value)
    assert config.preset(config.parse_model_id(hint).preset)


@pytest.mark.parametrize("name", ["llama3-70bx", "nosuch-tp8", "llama3-70b-ep4-tp2", "llama3-70b-tp0"])
def test_no_id_is_suggested_where_none_would_work(name: str) -> None:
    from gemm_bench.question import config

    with pytest.raises(config.ConfigError) as caught:
        config.preset(name)
    assert "did you mean" not in str(caught.value) and "; known: " in str(caught.value)


# ------------------------------------------------------------------------------ report on the sweep
_CACHE = Path(__file__).parents[1] / "docs" / "_gemm_cache"


def _cli_report(path: Path) -> str:
    from tests.test_cli import call  # main in this process: (exit status, stdout, stderr)

    code, out, err = call(["report", str(path)])
    assert code == 0, err
    return out


def test_report_on_a_sweep_sums_no_sizes_and_says_its_times_are_graph_replays() -> None:
    """Finding 8: ``report`` on the square sweep printed "per layer 14.533 ms | all shapes 14.53 ms
    1.73x vs BF16" (a sum over unrelated sizes, dominated by 16384^3) and per-pass "sum" rows, and
    its roofline header said the prediction "omits host overhead" beside times replayed as CUDA
    graphs, which hold none either."""
    sweeps = [p for p in sorted(_CACHE.glob("*.json")) if '"kind": "sweep"' in p.read_text()]
    assert sweeps
    out = _cli_report(sweeps[0])
    assert "per layer" not in out and "all shapes" not in out and not re.search(r"\dx vs BF16", out)
    assert not any(line.lstrip().startswith("sum ") for line in out.splitlines()), out
    assert "each size is a question of its own" in out
    headers = [line for line in out.splitlines() if line.startswith("roofline-predicted vs measured")]
    assert headers and all("graph replays" in h and "host" not in h for h in headers), headers


def test_report_on_a_model_keeps_its_totals() -> None:
    models = [p for p in sorted(_CACHE.glob("*.json")) if '"kind": "model"' in p.read_text()]
    out = _cli_report(models[0])
    assert "per layer" in out and "vs BF16" in out and "each size is a question" not in out


def test_the_memory_capacity_is_what_the_run_could_allocate_not_the_gpus_size() -> None:
    """Reader pass, session 12: the H100's memory read 78.3 GiB in most sections, 78.2 and 78.1 in
    others, as "the GPU holds": it is what each run's allocator could use (free + reserved), which
    moves between runs. The report and the figure say so."""
    import json
    from pathlib import Path

    from gemm_bench.report import model_step_figure, training_text
    from gemm_bench.report.report import Report

    path = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache" / "45a55c5d892e31af--h100-80gb-hbm3.json"
    report = Report(json.loads(path.read_text(encoding="utf-8")))
    text = training_text.text(report)
    assert "this run could allocate" in text and "the GPU holds" not in text
    summary = report.model_step()
    assert summary is not None
    from gemm_bench.report.figure_layout import Text

    words = " ".join(i.text for i in model_step_figure.scene(summary, "H100").items if isinstance(i, Text))
    assert "could allocate" in " ".join(words.split()) and "holds" not in words
