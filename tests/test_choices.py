"""The one list parser behind ``--precisions``/``--modes`` and the directive's list options."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemm_bench.question.choices import ChoiceError, parse_choices, split_list
from gemm_bench.question.precisions import MODES, PRECISION_IDS, PRECISIONS, normalize_mode, normalize_precision
from tests.conftest import fuzz_examples


@pytest.mark.parametrize(
    ("text", "items"),
    [("", []), ("  ", []), (",", []), (" , ,\n", []), ("a", ["a"]), ("a,b", ["a", "b"]), ("a, b c", ["a", "b", "c"]),
     ("a,,b", ["a", "b"]), ("\ta\n,\tb ", ["a", "b"]), ("8192x4096x4096, 8192x4096x14336", ["8192x4096x4096",
                                                                                          "8192x4096x14336"])],
)
def test_split_list_takes_commas_and_or_whitespace(text: str, items: list[str]) -> None:
    assert split_list(text) == items


def test_parse_choices_normalizes_keeps_first_order_and_drops_duplicates() -> None:
    assert parse_choices("FP8_Current, bf16 fp8-current BF16", normalize_precision, PRECISION_IDS) == (
        "fp8-current", "bf16")
    assert parse_choices("Pre-Quantized autocast", normalize_mode, MODES) == ("prequant", "autocast")


def test_unknown_item_names_itself_and_the_choices() -> None:
    with pytest.raises(ChoiceError) as info:
        parse_choices("bf16, fp8", normalize_precision, PRECISION_IDS)
    error = info.value
    assert error.value == "fp8" and error.known == PRECISION_IDS and not error.empty
    assert str(error) == f"unknown value 'fp8'; choose from {', '.join(PRECISION_IDS)}"


@pytest.mark.parametrize("text", ["", " ", ",", " ,\n, "])
def test_an_empty_list_is_an_error_not_the_default(text: str) -> None:
    with pytest.raises(ChoiceError) as info:
        parse_choices(text, normalize_mode, MODES)
    assert info.value.empty and info.value.value is None
    assert str(info.value) == "needs at least one of autocast, prequant"


def spellings_of(pid: str) -> set[str]:
    """Ways to write one precision in a list (display names with a space would split in two)."""
    p = PRECISIONS[pid]
    return {s for s in (p.id, p.id.upper(), p.id.replace("-", "_"), p.display) if " " not in s}


spellings = st.sampled_from(sorted(s for pid in PRECISION_IDS for s in spellings_of(pid)))
separators = st.sampled_from([",", ", ", " ", "\n", " ,\t"])


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(st.lists(st.tuples(spellings, separators), min_size=1, max_size=8))
def test_any_spelling_and_separator_gives_the_ids_in_first_seen_order(items: list[tuple[str, str]]) -> None:
    text = "".join(spelling + sep for spelling, sep in items)
    ids = parse_choices(text, normalize_precision, PRECISION_IDS)
    assert len(set(ids)) == len(ids) and set(ids) <= set(PRECISION_IDS)
    expected: list[str] = []
    for spelling, _ in items:
        pid = next(p for p in PRECISION_IDS if spelling in spellings_of(p))
        if pid not in expected:
            expected.append(pid)
    assert list(ids) == expected
    assert parse_choices(", ".join(ids), normalize_precision, PRECISION_IDS) == ids  # what it prints, it reads
