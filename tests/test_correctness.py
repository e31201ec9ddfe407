"""Correct by construction (issue 10): the page decides every number, identities are exact, one
answer path feeds tables and roles, builds are builder-neutral. Each test is a regression test of
a defect class found in the landed version; each builds a real Sphinx project.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from sphinx.testing.util import SphinxTestApp

from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from gemm_bench.results.cache import dumps, file_name
from gemm_bench.results.schema import METHOD_VERSION
from gemm_benchmark import execution

from .conftest import H100, H200, make_document

GH200 = {"name": "NVIDIA GH200 480GB", "compute_capability": "9.0", "sm_count": 132}
CONF = 'extensions = ["gemm_benchmark"]\nproject = "correctness"\ngemm_benchmark_execution_mode = "cache"\n'


class Project:
    """A throw-away Sphinx project: pages, a cache, builds with any builder on one doctree dir."""

    def __init__(self, root: Path) -> None:
        self.src = root / "src"
        self.cache = self.src / "_gemm_cache"
        self.build_dir = root / "build"
        self.src.mkdir(parents=True)
        (self.src / "conf.py").write_text(CONF, encoding="utf-8")

    def page(self, name: str, text: str) -> None:
        (self.src / f"{name}.rst").write_text(text, encoding="utf-8")

    def store(self, doc: dict[str, Any]) -> Path:
        self.cache.mkdir(parents=True, exist_ok=True)
        path = self.cache / file_name(doc["question_hash"], doc["device"]["name"])
        path.write_text(dumps(doc), encoding="utf-8")
        return path

    def build(self, builder: str = "html", *, fresh: bool = False) -> tuple[str, Path]:
        warning = io.StringIO()
        app = SphinxTestApp(builder, srcdir=self.src, builddir=self.build_dir, warning=warning,
                            status=io.StringIO(), freshenv=fresh)
        try:
            app.build()
        finally:
            app.cleanup()
        return re.sub(r"\x1b\[[0-9;]*m", "", warning.getvalue()), Path(app.outdir)

    def html(self, page: str = "index") -> BeautifulSoup:
        text = (self.build_dir / "html" / f"{page}.html").read_text(encoding="utf-8")
        return BeautifulSoup(text, "html.parser")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _role_titles(soup: BeautifulSoup) -> list[str]:
    return [a["title"] for a in soup.select("abbr.gemm-value")]


# ---------------------------------------------------------------- the page decides every number
def test_num_layers_of_the_page_decide_totals_and_roles(project: Project) -> None:
    q24 = build_question(model="te-guide-5b")
    q48 = build_question(model="te-guide-5b", fields={"num_layers": 48})
    assert q24.hash == q48.hash  # one cached file answers both: layers change no GEMM
    project.store(make_document(q24, device=H100))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: l48\n   :model: te-guide-5b\n"
                 "   :num-layers: 48\n   :precisions: bf16\n   :modes: autocast\n\n"
                 ":gemm-time:`l48 autocast bf16`\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    header = " ".join(th.get_text() for th in soup.select("table.gemm-totals th"))
    assert "Model (48 layers)" in header and "24 layers" not in header
    per_layer = Report(make_document(q24, device=H100)).total("autocast", "bf16").per_layer_ms
    assert per_layer is not None
    title = _role_titles(soup)[0]
    assert "48 layers" in title
    assert float(title.split()[0]) == pytest.approx(per_layer * 48, rel=1e-4)


def test_shapes_equal_to_a_cached_sweep_render_as_shapes(project: Project) -> None:
    sweep = build_question(sweep=["1024", "2048"])
    shapes = build_question(shapes=["1024x1024x1024", "2048x2048x2048"])
    assert sweep.hash == shapes.hash
    project.store(make_document(sweep, device=H100, precisions=("bf16", "fp8-current")))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: s\n   :shapes: 1024x1024x1024, 2048x2048x2048\n"
                 "   :precisions: bf16, fp8-current\n   :modes: prequant\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    rows = [tr.td.get_text() for tr in project.html().select("table.gemm-gemms tbody tr")]
    assert rows == ["1024x1024x1024", "2048x2048x2048"]  # a sweep would say "S = 1024"
    assert project.html().select("table.gemm-totals")  # shapes have totals; a sweep has none


# ---------------------------------------------------------------- exact device identity
def test_h200_never_selects_gh200(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H200, speed=1.0))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h200\n\n"
                 ":gemm-speedup:`te@h200 autocast fp8-current` :gemm-time:`te autocast bf16`\n")
    project.build()
    before = _role_titles(project.html())
    # The documented "add a device" flow: a GH200 result appears in the cache.
    project.store(make_document(q, device=GH200, speed=1.3))
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    assert "GH200" not in soup.get_text()
    assert _role_titles(soup) == before


def test_role_without_device_is_refused_when_ambiguous(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100))
    project.store(make_document(q, device=H200, speed=1.2))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n\n:gemm-time:`te autocast bf16`\n")
    warnings, _ = project.build()
    assert "write te@h100 or te@h200" in warnings and "[gemm_benchmark.role]" in warnings


# ---------------------------------------------------------------- one run per speedup
def test_table_and_role_agree_and_speedups_never_mix_runs(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-current"))
    # Hand-merged file: the FP8 cells come from another run than BF16's.
    for cell in doc["cells"]:
        cell["run_id"] = "run-a" if cell["precision"] == "bf16" else "run-b"
    doc["schema_version"] = 2
    for peer in doc["peers"]:
        peer["run_id"] = "run-a"
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :modes: autocast\n\n"
                 ":gemm-speedup:`te autocast fp8-current`\n")
    warnings, _ = project.build()
    soup = project.html()
    totals = [td.get_text() for td in soup.select("table.gemm-totals td")]
    assert not any(t.endswith("×") and t != "1.00×" for t in totals), totals
    assert "[gemm_benchmark.role]" in warnings  # the role has no value either: same computed values


def test_a_partial_remeasure_measures_the_mode_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    q = build_question(model="te-guide-5b")
    cached = make_document(q, device=H100, precisions=("bf16", "fp8-current"), modes=("autocast",))
    todo = execution.to_measure(cached, q, ("bf16", "fp8-block"), ("autocast",), force=False, max_age_days=None)
    assert todo is not None and (todo.precisions, todo.modes) == (["bf16", "fp8-block", "fp8-current"], ["autocast"])
    assert not todo.peers  # the page shows no peers: the run times none


# ---------------------------------------------------------------- corrupt and hostile files
@pytest.mark.parametrize("text", [
    '{"schema_version": 1, "x": ' + "9" * 5000 + "}",         # ValueError: too many digits
    "[" * 100000 + "]" * 100000,                                 # RecursionError
    '{"schema_version": 1, "s": "\\ud800"}',                     # a lone surrogate
    '{"schema_version": 1e999}',                                  # Infinity
])
def test_corrupt_file_names_its_path_and_the_other_device_still_renders(project: Project, text: str) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H200))
    bad = project.cache / file_name(q.hash, H100["name"])
    bad.write_text(text, encoding="utf-8", errors="surrogatepass")
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h200\n")
    warnings, _ = project.build()
    assert f"{bad}" in warnings and "[gemm_benchmark.cache]" in warnings
    assert "internal error" not in warnings
    assert "H200" in project.html().get_text()
    # Fixed: the page depends on the file, so the next incremental build re-reads it, cleanly.
    project.store(make_document(q, device=H100))
    warnings, _ = project.build()
    assert "[gemm_benchmark.cache]" not in warnings, warnings


def test_tiny_ms_is_refused_not_a_crash(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-current"))
    measured = next(c for c in doc["cells"] if c["status"] == "measured")
    measured["ms"] = 5e-324
    measured["stats"]["median_ms"] = 5e-324
    path = project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n\n:gemm-speedup:`te autocast fp8-current`\n")
    warnings, _ = project.build()
    assert str(path) in warnings and "[gemm_benchmark.cache]" in warnings


def test_symlinked_cache_file_is_never_read_or_copied(project: Project, tmp_path: Path) -> None:
    q = build_question(model="te-guide-5b")
    outside = tmp_path / "outside.json"
    outside.write_text(dumps(make_document(q, device=H100)), encoding="utf-8")
    project.cache.mkdir(parents=True)
    link = project.cache / file_name(q.hash, H100["name"])
    os.symlink(outside, link)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :missing: note\n")
    warnings, out = project.build()
    assert "[gemm_benchmark.cache]" in warnings and "symbolic link" in warnings
    assert not list(out.rglob("*.json"))


def test_unsupported_precision_on_hopper_shows_te_reason(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-current"))
    reason = "Device compute capability 10.0 or higher required for MXFP8 execution."
    doc["support"] = {"bf16": {"available": True, "reason": ""}, "fp8-current": {"available": True, "reason": ""},
                      "mxfp8": {"available": False, "reason": reason}}
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current, mxfp8\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    assert reason in project.html().select_one("ul.gemm-unavailable").get_text()


# ---------------------------------------------------------------- incremental builds and titles
def test_renaming_a_directive_rewrites_the_page_that_quotes_the_new_name(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100))
    directive = ("T\n=\n\n.. toctree::\n\n   quotes\n\n.. gemm-benchmark::\n   :name: {name}\n"
                 "   :model: te-guide-5b\n   :precisions: bf16, fp8-current\n")
    project.page("index", directive.format(name="old"))
    project.page("quotes", "Q\n=\n\n:gemm-speedup:`new autocast fp8-current`\n")
    warnings, _ = project.build()
    assert "no gemm-benchmark directive is named 'new'" in warnings
    project.page("index", directive.format(name="new"))
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    assert project.html("quotes").select("abbr.gemm-value")


def test_role_in_a_section_title_shows_its_value_in_toc_and_navigation(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100))
    project.page("index", "Home\n====\n\n.. toctree::\n\n   result\n")
    project.page("result", "FP8 is :gemm-speedup:`te autocast fp8-current` faster\n"
                 "=====================================================\n\n"
                 ".. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n   :precisions: bf16, fp8-current\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    value = project.html("result").select_one("h1 abbr.gemm-value").get_text()
    assert re.fullmatch(r"\d\.\d\d×", value)
    index = project.html("index")
    toc_entry = index.select_one(".toctree-wrapper a").get_text()
    assert value in toc_entry and "gemm-speedup" not in toc_entry
    assert value in project.html("result").select_one("title").get_text()


# ---------------------------------------------------------------- one answer, read once
def test_each_file_is_parsed_once_and_each_report_built_once(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100))
    project.store(make_document(q, device=H200, speed=1.2))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h100, h200\n\n"
                 + " ".join(f":gemm-speedup:`te@{d} {m} fp8-current`" for d in ("h100", "h200")
                            for m in ("autocast", "prequant")) + "\n")
    import gemm_benchmark.execution as ex

    built: list[int] = []
    original: Callable[..., Any] = ex.Report.__init__

    def counting(self: Report, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ex.Report, "__init__", counting)
    warnings, _ = project.build(fresh=True)
    assert "WARNING" not in warnings, warnings
    assert execution.READS.parses == 2  # two files, each parsed once
    assert len(built) == 2 * 2  # one report per device and mode, none for the roles


def test_each_device_s_result_is_typed_once_however_many_modes_and_directives(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: a result is parsed once, into typed objects, and read only as such. One device, two modes,
    two directives of one question: its file becomes one :class:`~gemm_bench.results.typed.Result`
    (:meth:`.execution.ResultReads.result`), which every mode's Report and the page's checks share. (Before:
    one parse per mode's ``Report(doc)``, one more for the other-vocabulary check, per directive: 6.)"""
    from gemm_bench.results import typed

    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100))
    directive = ("\n.. gemm-benchmark::\n   :name: {}\n   :model: te-guide-5b\n   :precisions: bf16, fp8-current\n"
                 "   :modes: autocast, prequant\n")
    project.page("index", "T\n=\n" + directive.format("a") + directive.format("b")
                 + "\n:gemm-speedup:`a autocast fp8-current` :gemm-speedup:`b prequant fp8-current`\n")
    built: list[int] = []
    original: Callable[..., Any] = typed.Result.__init__

    def counting(self: typed.Result, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(typed.Result, "__init__", counting)
    warnings, _ = project.build(fresh=True)
    assert "WARNING" not in warnings, warnings
    assert execution.READS.parses == 1 and len(built) == 1


# ---------------------------------------------------------------- builder-neutral doctrees
def test_html_latex_text_on_one_doctree_dir(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n")
    for builder in ("html", "latex", "text"):
        warnings, _ = project.build(builder)
        assert "WARNING" not in warnings, (builder, warnings)
    html = (project.build_dir / "html" / "index.html").read_text(encoding="utf-8")
    assert "<svg" in html and "sphinx-tabs-tab" in html  # the figure inlined, the tabs built for HTML
    tex = next((project.build_dir / "latex").glob("*.tex")).read_text(encoding="utf-8")
    assert re.search(r"\\sphinxincludegraphics[^{]*\{\{?gemm-[0-9a-f]+\}?\.pdf\}", tex), tex[-3000:]
    assert list((project.build_dir / "latex").glob("gemm-*.pdf"))
    text = (project.build_dir / "text" / "index.txt").read_text(encoding="utf-8")
    assert "Autocast" in text and "Pre-quantized" in text and ".svg" not in text


def test_committed_cache_files_render_with_the_site_question(project: Project) -> None:
    """The committed H100 te-guide-5b result answers its page question (a real-file smoke test)."""
    question = build_question(model="te-guide-5b")
    source = Path(__file__).parent.parent / "docs" / "_gemm_cache" / f"{question.hash}--h100-80gb-hbm3.json"
    doc = json.loads(source.read_text(encoding="utf-8"))
    project.store(copy.deepcopy(doc))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current, mxfp8\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    shutil.rmtree(project.build_dir)


# ---------------------------------------------------------------- staleness follows the software
def test_a_te_upgrade_on_the_gpu_box_re_measures_exactly_that_gpus_results(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    q = build_question(model="te-guide-5b")
    old = make_document(q, device=H100, precisions=("bf16", "fp8-current"))
    other = make_document(q, device=H200, precisions=("bf16", "fp8-current"))
    project.store(old)
    project.store(other)
    measured: list[tuple[str, ...]] = []

    def measure(question: Any, precisions: Any, modes: Any, *, peers: bool = False, peers_only: bool = False,
                ) -> dict[str, Any]:
        measured.append(tuple(precisions))
        doc = make_document(question, device=H100, precisions=tuple(precisions), modes=tuple(modes), speed=1.1)
        doc["provenance"]["transformer_engine"] = "99.0"
        return doc

    monkeypatch.setattr(execution, "gpu_detector", lambda: (execution.LocalGpu(H100["name"], measure), ""))
    stack = {key: old["provenance"][key] for key in ("torch", "cuda", "driver")}
    monkeypatch.setattr(execution, "local_stack",
                        lambda: {**stack, "transformer_engine": "99.0", "method": METHOD_VERSION})
    (project.src / "conf.py").write_text(CONF.replace('"cache"', '"auto"'), encoding="utf-8")
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h100, h200\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    assert len(measured) == 1  # the H100 result (old TE) once; the H200 result is another box's
    docs = {p.name: json.loads(p.read_text()) for p in project.cache.glob("*.json")}
    assert docs[file_name(q.hash, H100["name"])]["provenance"]["transformer_engine"] == "99.0"
    assert docs[file_name(q.hash, H200["name"])] == json.loads(dumps(other))
    warnings, _ = project.build()  # now fresh: nothing more to measure
    assert len(measured) == 1


def test_device_slugs_are_idempotent_and_unchanged_for_cached_devices() -> None:
    from gemm_bench.question.devices import ALIASES, device_slug, selects

    for name, slug in (("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"), ("NVIDIA H200", "h200"),
                       ("NVIDIA GH200 480GB", "gh200-480gb"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb")):
        assert device_slug(name) == slug and device_slug(slug) == slug
        assert selects(slug, name) and selects(slug, slug)
    assert not selects("h200", "NVIDIA GH200 480GB")
    for alias, slug in ALIASES.items():
        assert device_slug(slug) == slug, alias


# ---------------------------------------------------------------- validated once per content
def test_a_prose_edit_reads_results_without_validating_them_again(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    path = project.store(make_document(q, device=H100))
    body = ".. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n   :precisions: bf16, fp8-current\n"
    toc = ".. toctree::\n\n   other\n\n"
    project.page("index", "T\n=\n\nFirst words.\n\n" + toc + body)
    project.page("other", "O\n=\n\n.. gemm-benchmark::\n   :name: te2\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings and execution.READS.validations == 1
    project.page("index", "T\n=\n\nOther words.\n\n" + toc + body)  # prose only: the page is read again
    warnings, _ = project.build()
    assert "WARNING" not in warnings and execution.READS.parses == 1 and execution.READS.validations == 0
    # a changed content is validated (and refused, named) however often its old content passed
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["cells"][0]["ms"] = -1.0
    path.write_text(dumps(doc), encoding="utf-8")
    warnings, _ = project.build()
    assert execution.READS.validations == 1 and "does not match the result schema" in warnings
    assert path.name in warnings


def test_trust_is_keyed_by_content_and_by_the_validators_code(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from gemm_bench.results import cache as cache_module

    q = build_question(model="te-guide-5b")
    good = tmp_path / file_name(q.hash, H100["name"])
    good.write_text(dumps(make_document(q, device=H100)), encoding="utf-8")
    trusted: set[str] = set()
    cache_module.read_document(good, trusted=trusted)
    assert trusted == {cache_module.content_key(good.read_bytes())}
    calls: list[int] = []
    real = cache_module.validate
    monkeypatch.setattr(cache_module, "validate", lambda doc: (calls.append(1), real(doc))[1])
    cache_module.read_document(good, trusted=trusted)
    assert calls == []  # same bytes, same code: trusted
    monkeypatch.setattr(cache_module, "validator_fingerprint", lambda: "another version of the code")
    cache_module.read_document(good, trusted=trusted)
    assert calls == [1]  # the validator changed: validated again
