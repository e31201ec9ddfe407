"""The loss-parity study's verdict words, shared by its page and the answer sentence.

Pure (no Sphinx): :mod:`gemm_benchmark.study_loss_parity` renders the study, and
:mod:`gemm_benchmark.answer_text` quotes the same verdict in the answer, so both say "within" or
"beyond" BF16's seed-to-seed range by one rule and in one wording.
"""

from __future__ import annotations

from typing import Any

from gemm_bench.results import loss_parity_schema as schema

WITHIN = "within BF16's seed-to-seed range"
BEYOND = "beyond BF16's seed-to-seed range"
#: The study's loss unit: cross-entropy in nats per byte of text (what the measurement stores in its
#: method's ``loss`` line). A gap quoted outside the study's own table says it, or "+0.0181" has none.
LOSS_UNIT = "nats/byte"


def format_delta(value: float, digits: int = 4) -> str:
    return f"{value:+.{digits}f}"


def format_seeds(count: int) -> str:
    return f"{count} seed{'s' if count != 1 else ''}"


def gap_in_band(delta: float, band: schema.SeedBand) -> str:
    """``"+0.0181 nats/byte from BF16's validation loss, within BF16's seed-to-seed range of -0.0051 to
    +0.0347"``: a recipe's validation gap with its unit and the range it is judged against, so a reader
    away from the study's table can see both what the number is and why it is "within"."""
    words = WITHIN if band.holds(delta) else BEYOND
    return (f"{format_delta(delta)} {LOSS_UNIT} from BF16's validation loss, {words} of "
            f"{format_delta(band.low)} to {format_delta(band.high)}")


def no_band_text(doc: dict[str, Any]) -> str:
    """Why this document has no seed band to judge a gap by (it holds no ``seed_band`` block)."""
    if doc["method_version"] in schema.VERSIONS_WITHOUT_SEED_BAND:
        return f"no seed band in this result: measured before method v{schema.SEED_BAND_SINCE}"
    return "no seed band in this result: measured without extra BF16 seeds"


def band_of(doc: dict[str, Any]) -> schema.SeedBand | str:
    """The document's BF16 seed band, or the sentence saying why there is none."""
    found = schema.seed_band(doc["data"])
    if found is None:
        return no_band_text(doc)
    if isinstance(found, str):
        return f"no seed band in this result: {found}"
    return found
