"""Reader pass 3, item 10: the freshness page and the build summary listed the models page twice per
result ("models (llama3-8b, summary), models (Llama 3 8B, summary)": the page-wide summary and the
section's); the build summary's columns broke at a long device slug ("b300-sxm6-ac (no result) -")."""

from __future__ import annotations

from gemm_benchmark import records as envdata
from gemm_benchmark.freshness import SUMMARY, log_lines, site_results

H100 = envdata.DeviceRecord(name="NVIDIA H100 80GB HBM3", slug="h100-80gb-hbm3", path="a.json",
                            date="2026-11-25T00:00:00+00:00", method_version="4", status="fresh", reason="",
                            values={})


def record(docname: str, lineno: int, name: str, *, directive: str = SUMMARY, named: bool = False,
           question: str = "q1", devices: tuple[envdata.DeviceRecord, ...] = (H100,),
           unmatched: tuple[str, ...] = ()) -> envdata.DirectiveRecord:
    return envdata.DirectiveRecord(
        docname=docname, lineno=lineno, name=name, kind="model", question_hash=question, describe="hidden 4096",
        modes=("autocast",), precisions=("bf16",), cache_dir="c", cache_files=("a.json",), status="fresh",
        devices=devices, unmatched=unmatched, devices_listed=bool(unmatched), gemm_names={}, directive=directive,
        named=named)


MODELS_PAGE = [
    record("index", 10, "Llama 3 8B"),                                     # the landing page's summary
    record("index", 40, "tut-llama", directive="gemm-benchmark"),          # a named directive there too
    record("models", 12, "Llama 3 8B"),                                    # the page-wide summary
    record("models", 80, "llama3-8b", named=True),                         # the section's summary
    record("tutorial", 5, "", directive="gemm-benchmark"),                 # an unnamed directive
]


def test_each_page_once_per_result_with_the_name_a_role_quotes() -> None:
    (result,) = site_results(MODELS_PAGE)
    assert result.shown == (("index", "tut-llama"), ("models", "llama3-8b, summary"), ("tutorial", "line 5"))
    assert result.shown_text() == "index (tut-llama), models (llama3-8b, summary), tutorial (line 5)"


def test_two_quotable_names_on_one_page_are_both_given_in_one_entry() -> None:
    found = site_results([record("models", 12, "a", named=True), record("models", 80, "b", named=True)])
    assert found[0].shown_text() == "models (a, summary; b, summary)"


def test_the_build_summary_aligns_its_columns_whatever_the_device_slug() -> None:
    rows = [record("maintainers", 9, "te-b", directive="gemm-benchmark", question="q2", devices=(),
                   unmatched=("b200", "b300-sxm6-ac", "rtx-pro-6000-blackwell-server-edition")), *MODELS_PAGE]
    lines = log_lines(rows)
    assert len(lines) == 4
    starts = {line.index(" fresh") if " fresh" in line else line.index(" missing") for line in lines}
    assert len(starts) == 1, lines  # the status starts in one column on every line
    dates = {line.find("2026-11-25") for line in lines if "2026-11-25" in line}
    assert dates == {next(line.index("–") for line in lines if "b200" in line)}
