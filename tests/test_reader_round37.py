"""Reader pass 3 (round 37): words that said less than the numbers, or something else.

Each test reads a surface a reader sees (an answer sentence, a provenance line, an error, a report)
on synthetic or committed data and fails on the wording the pass found.
"""

from __future__ import annotations

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
