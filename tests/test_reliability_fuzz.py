"""Fuzzed ``gemm-benchmark`` directives: an author's typo never crashes the build, and is located.

Building Sphinx once per option set is too slow for CI, so each hypothesis example is a *batch*
of option sets written as one page with one directive per set, each at a line we know; the page
is built once (cache mode, a cache holding one real H100 result, the text builder: every page is
read and written, but no figure is drawn, which would be most of the time and tests no parsing).
Over all examples at least 500 distinct option sets are built. For every directive:

* invalid (by the directive's own parser, plus independent checks: unknown or duplicated options,
  non-numbers in number options, two question sources) -> at least one warning or error at exactly
  ``index.rst:LINE`` of that directive, and none of subtype ``missing``;
* valid -> no warning but the ``missing`` one, and none at all with ``:missing: note``;
* nothing anywhere else: no unlocated warning, no ``internal error`` (an exception the directive
  caught), no crash.

Config-only sets are also given to the CLI (``gemm-bench shapes``) with the same values: the CLI
exits 0 exactly when the directive accepts, and then both ask the same question (same hash).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sphinx.testing.util import SphinxTestApp

from gemm_bench.cli import main as cli_main
from gemm_bench.cli.commands import build_parser, question_from_args
from gemm_bench.question.config import BOOL_FIELDS, INT_FIELDS, MAX_DIMENSION
from gemm_bench.question.layout import LAYOUT_OPTIONS
from gemm_bench.question.shapes import GemmShape
from gemm_benchmark import directive as directive_module
from gemm_benchmark import records as site_records
from gemm_benchmark.options import OPTIONS, OptionError, known_devices, parse_options, split_list
from tests.conftest import DATA, copy_real_document, fuzz_examples
from tests.test_cli import one_error

INT_OPTIONS = [f.replace("_", "-") for f in INT_FIELDS]
BOOL_OPTIONS = [f.replace("_", "-") for f in sorted(BOOL_FIELDS)]
UNKNOWN_NAMES = ["colour", "hidden_size", "précisions", "модель", "x" * 40, "num-layer", "devices2", "shape"]
#: docutils lowercases option names: these are the real options.
CASE_VARIANTS = ["Hidden-Size", "MODEL", "Precisions", "SWIGLU"]
SOURCES = ("model", "shapes", "sweep", "hf-config")

# Free text that docutils passes through unchanged (no inline markup, list or field syntax):
# letters and digits of any script, spaces, commas. Markup-prone values are in the curated lists.
free_text = st.text(st.characters(categories=("Lu", "Ll", "Lo", "Nd", "No"), include_characters=" ,×"),
                    max_size=12)
ints = st.one_of(
    st.integers(1, 64),
    st.sampled_from([0, -1, 1, 2, 8, 128, 4096, 16384, MAX_DIMENSION, MAX_DIMENSION + 1, 10**30, 2**63]),
).map(str)
int_values = st.one_of(ints, ints, st.sampled_from(["", "4096 ", "1e3", "1_000", "0x10", "+8", "٤", "²", "4 096",
                                                    "x", "12.0", "inf", "-0"]), free_text)
flag_values = st.sampled_from(["", "true", "FALSE", "yes", "off", "1", "maybe", "2"])


def _list(items: st.SearchStrategy[str], max_size: int = 5) -> st.SearchStrategy[str]:
    """Lists as authors write them: commas and/or spaces, empty, duplicated items."""
    joined = st.tuples(st.lists(items, max_size=max_size), st.sampled_from([", ", " ", ",", " , ", ",,"])).map(
        lambda t: t[1].join(t[0]))
    return st.one_of(joined, joined, joined, st.sampled_from([",", ", ,", " ,, "]))  # separators only


dims = st.sampled_from([1, 8, 64, 4096, 14336, MAX_DIMENSION, MAX_DIMENSION + 1, 0]).map(str)
shape_items = st.one_of(
    st.tuples(dims, dims, dims, st.sampled_from(["x", "X", "×"])).map(lambda t: t[3].join(t[:3])),
    st.sampled_from(["12x34", "axbxc", "1x2x3x4", "8x8x8", ""]),
)
VALUES: dict[str, st.SearchStrategy[str]] = {
    "name": st.sampled_from(["r", "te-5b", "Mixed.Case:1", "a b", "-x", "", "x" * 80, "naïve"]),
    "caption": st.one_of(free_text, st.sampled_from(["<script>alert(1)</script>", 'say "hi" & \'bye\'',
                                                     "naïve — ünïcode ✓", "&amp; &lt;", ""])),
    "model": st.sampled_from(["te-guide-5b", "llama3-8b", "  LLAMA3-8B ", "mixtral-8x7b", "llama3-70b", "gpt-17", "",
                              "te guide", "модель"]),
    "hf-config": st.sampled_from(["llama.json", "/llama.json", "../../etc/passwd", "/../x.json", "nope.json", "",
                                  "conf.py", "."]),
    "shapes": _list(shape_items),
    "sweep": _list(st.one_of(ints, st.sampled_from(["²", "x", "", "٤٠٩٦"]))),
    "precisions": _list(st.sampled_from(["bf16", "fp8-delayed", "FP8_current", "fp8-block", "mxfp8", "nvfp4",
                                         "BF16", "fp9", "fp8"])),
    "modes": _list(st.sampled_from(["autocast", "prequant", "pre-quantized", "Autocast", "training"])),
    "devices": _list(st.sampled_from(["h100", "H200", "b200", "nvidia", "hbm3"])),
    "show": _list(st.sampled_from(["figure", "table", "totals", "provenance", "chart", "TABLE"])),
    "missing": st.sampled_from(["note", "warn", "NOTE", "", "loud"]),
}
for _name in INT_OPTIONS:
    VALUES[_name] = int_values
for _name in BOOL_OPTIONS:
    VALUES[_name] = flag_values
for _layout in LAYOUT_OPTIONS:  # the run's layout (issue 41): the same kinds of value, and its words
    VALUES[_layout.name] = {"int": int_values, "bool": flag_values}.get(
        _layout.kind, st.sampled_from([*_layout.choices, "FSDP", "zero3", "", "full "]))
assert set(VALUES) == set(OPTIONS)


def _value_for(name: str) -> st.SearchStrategy[str]:
    return VALUES.get(name.lower(), st.one_of(free_text, int_values))


@st.composite
def option_sets(draw) -> list[tuple[str, str]]:
    """One directive's options, mostly near-valid, sometimes chaotic."""
    opts: list[tuple[str, str]] = []
    shape = draw(st.sampled_from(["model", "model", "fields", "shapes", "sweep", "hf", "chaos", "empty"]))
    if shape == "model":
        opts.append(("model", draw(VALUES["model"])))
        for name in draw(st.lists(st.sampled_from(["num-layers", "micro-batch-size", "seq-length",
                                                   "tensor-model-parallel-size", "swiglu", "num-query-groups"]),
                                  max_size=2, unique=True)):
            opts.append((name, draw(st.sampled_from(["1", "2", "4", "8", "512", "3"])) if name in INT_OPTIONS
                         else draw(flag_values)))
    elif shape == "fields":
        opts += [("hidden-size", draw(st.sampled_from(["64", "4096", "100", "0"]))),
                 ("ffn-hidden-size", draw(st.sampled_from(["256", "16384", "x"]))),
                 ("num-attention-heads", draw(st.sampled_from(["4", "32", "30"])))]
    elif shape == "shapes":
        opts.append(("shapes", draw(VALUES["shapes"])))
    elif shape == "sweep":
        opts.append(("sweep", draw(VALUES["sweep"])))
    elif shape == "hf":
        opts.append(("hf-config", draw(VALUES["hf-config"])))
    if shape == "chaos":
        names = st.sampled_from([*OPTIONS, *UNKNOWN_NAMES, *CASE_VARIANTS])
        for name in draw(st.lists(names, min_size=1, max_size=6)):
            opts.append((name, draw(_value_for(name))))
    else:
        extras = draw(st.lists(st.sampled_from(["precisions", "modes", "devices", "show", "caption", "name",
                                                "missing", *SOURCES, "seq-length", *UNKNOWN_NAMES[:2],
                                                *CASE_VARIANTS[:1]]), max_size=3, unique=True))
        taken = {n.lower() for n, _ in opts}
        opts += [(n, draw(_value_for(n))) for n in extras if n.lower() not in taken]
    if opts and draw(st.integers(0, 9)) == 0:  # a duplicated option
        opts.append(draw(st.sampled_from(opts)))
    return draw(st.permutations(opts)) if opts else opts


@st.composite
def config_sets(draw) -> list[tuple[str, str]]:
    """Config-only options (what ``gemm-bench shapes`` also takes), no duplicates, no hf-config."""
    opts: list[tuple[str, str]] = []
    base = draw(st.sampled_from(["preset", "fields", "shapes", "sweep", "random"]))
    if base == "preset":
        opts.append(("model", draw(st.sampled_from(["te-guide-5b", "llama3-8b", "mixtral-8x7b", " Llama3-70B"]))))
    elif base == "fields":
        heads = draw(st.sampled_from([4, 8, 32]))
        opts += [("hidden-size", str(heads * draw(st.sampled_from([16, 64, 128])))),
                 ("ffn-hidden-size", str(draw(st.integers(1, 64)) * 64)), ("num-attention-heads", str(heads))]
    elif base == "shapes":
        opts.append(("shapes", ", ".join(draw(st.lists(st.sampled_from(["8x8x8", "4096x4096x14336", "1x1x1",
                                                                          "64×128×256"]), min_size=1, max_size=3)))))
    elif base == "sweep":
        opts.append(("sweep", " ".join(draw(st.lists(st.integers(1, 8192).map(str), min_size=1, max_size=4)))))
    else:
        for source in draw(st.lists(st.sampled_from(["model", "shapes", "sweep"]), max_size=2, unique=True)):
            opts.append((source, draw(VALUES[source])))
    taken = {n for n, _ in opts}
    names = draw(st.lists(st.sampled_from([*INT_OPTIONS, *BOOL_OPTIONS]), max_size=3, unique=True))
    for name in (n for n in names if n not in taken):
        if name in BOOL_OPTIONS:
            opts.append((name, draw(st.sampled_from(["", "true", "yes"]))))  # the CLI's flags can only say true
        else:
            opts.append((name, draw(int_values) if draw(st.booleans()) else draw(st.sampled_from(
                ["1", "2", "4", "8", "512", "4096"]))))
    return draw(st.permutations(opts))


def _expected(opts: list[tuple[str, str]], srcdir: Path) -> tuple[bool, str]:
    """(valid, why): the verdict the page must show, with independent sanity checks."""
    names = [n.lower() for n, _ in opts]
    if len(set(names)) != len(names):
        return False, "duplicate option (docutils)"
    values = {n.lower(): v.strip() for n, v in opts}
    try:
        request = parse_options(values, srcdir=srcdir, docdir=srcdir,
                                known_devices=known_devices(srcdir / "_gemm_cache"))
    except OptionError as exc:
        return False, str(exc)
    # Independent of the parser: things that can never be valid.
    assert set(values) <= set(OPTIONS), values
    assert sum(1 for s in SOURCES if s in values) <= 1, values
    kind = {"shapes": "shapes", "sweep": "sweep"}
    for source in SOURCES:  # the source the page names is the one that answers
        if source in values:
            assert request.question.kind == kind.get(source, "model"), values
    for name in INT_OPTIONS:
        if name in values:
            assert re.fullmatch(r"[+-]?\d+(_\d+)*", values[name]) and 1 <= int(values[name]) <= MAX_DIMENSION, values
    return True, request.missing


def _page(batch: list[list[tuple[str, str]]]) -> tuple[str, list[int]]:
    lines = ["Fuzz", "====", ""]
    starts = []
    for opts in batch:
        starts.append(len(lines) + 1)
        lines.append(".. gemm-benchmark::")
        for name, value in opts:
            lines.append(f"   :{name}: {value}".rstrip())
        lines.append("")
    return "\n".join(lines) + "\n", starts


def _with_unique_names(batch: list[list[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
    """Labels must be unique on a page: suffix every non-blank name (which keeps it valid or invalid)."""
    return [[(n, v.rstrip() + f"-n{i}" if n.lower() == "name" and v.strip() else v) for n, v in opts]
            for i, opts in enumerate(batch)]


_WARNING = re.compile(r"^(.*?)index\.rst:(\d+): (WARNING|ERROR|SEVERE|CRITICAL): ", re.MULTILINE)


def _located_warnings(text: str) -> tuple[dict[int, list[str]], list[str]]:
    """Warnings by line of index.rst (multi-line messages kept whole), and any other warning text."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    found: dict[int, list[str]] = {}
    matches = list(_WARNING.finditer(text))
    stray = text[:matches[0].start()] if matches else text
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        body = text[m.end():nxt.start() if nxt else len(text)].strip()
        found.setdefault(int(m.group(2)), []).append(body)
    return found, [line for line in stray.splitlines() if line.strip()]


def _cli_argv(opts: list[tuple[str, str]]) -> list[str]:
    """The same config values as ``gemm-bench shapes`` flags."""
    argv = ["shapes", "--json"]
    for name, value in opts:
        value = value.strip()
        if name == "shapes":
            argv += [f"--shape={item}" for item in split_list(value)] or ["--shape="]
        elif name == "sweep":
            argv.append("--sweep=" + ",".join(split_list(value)))
        elif name in BOOL_OPTIONS:
            argv.append(f"--{name}")
        else:
            argv.append(f"--{name}={value}")
    return argv


def _cli(opts: list[tuple[str, str]]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(_cli_argv(opts))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def fuzz_project(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("fuzz") / "src"
    src.mkdir()
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "fuzz"\n'
                                 'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    shutil.copyfile(DATA / "hf" / "llama3-8b.json", src / "llama.json")
    copy_real_document(src / "_gemm_cache", "h100-te-guide-5b.json")
    return src


def _build(src: Path, builddir: Path, page: str, monkeypatch: pytest.MonkeyPatch):
    (src / "index.rst").write_text(page, encoding="utf-8")
    received: dict[int, dict[str, str]] = {}
    original = directive_module.GemmBenchmarkDirective.run

    def spy(self):
        received[self.lineno] = {k: ("" if v is None else v) for k, v in self.options.items()}
        return original(self)

    monkeypatch.setattr(directive_module.GemmBenchmarkDirective, "run", spy)
    warning = io.StringIO()
    app = SphinxTestApp("text", srcdir=src, builddir=builddir, warning=warning, status=io.StringIO(),
                        freshenv=True)
    try:
        app.build()
        records = {r.lineno: r for r in site_records.all_records(app.env)}
    finally:
        app.cleanup()
    return warning.getvalue(), received, records


@pytest.mark.slow  # started first in a parallel run (conftest.py)
def test_fuzzed_directives_warn_at_their_line_and_agree_with_the_cli(fuzz_project, tmp_path_factory, monkeypatch):
    built: set[tuple[tuple[str, str], ...]] = set()
    compared = {"agree_valid": 0, "agree_invalid": 0}

    @settings(max_examples=fuzz_examples(35), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(st.lists(option_sets(), min_size=30, max_size=34, unique_by=tuple),
           st.lists(config_sets(), min_size=8, max_size=10, unique_by=tuple))
    def check(fuzzed, configs):
        for opts in configs:
            opts.append(("missing", "note"))
        batch = _with_unique_names([*fuzzed, *configs])
        page, starts = _page(batch)
        text, received, records = _build(fuzz_project, tmp_path_factory.mktemp("build"), page, monkeypatch)
        at_line, stray = _located_warnings(text)
        assert not stray, stray
        # A warning is at its directive's line or at one of its options' lines (each bad option at its own).
        spans = {line: range(line, line + len(opts) + 1) for line, opts in zip(starts, batch, strict=True)}
        found: dict[int, list[str]] = {}
        for where, messages in at_line.items():
            owner = next((line for line, span in spans.items() if where in span), None)
            assert owner is not None, f"a warning away from any directive: line {where}"
            found.setdefault(owner, []).extend(messages)
        for line, opts in zip(starts, batch, strict=True):
            valid, why = _expected(opts, fuzz_project)
            here = found.get(line, [])
            assert not any("[gemm_benchmark.error]" in w for w in here), (opts, here)  # an exception caught
            if why != "duplicate option (docutils)":
                # The test's own assumption: the directive received the text as written.
                assert received[line] == {n.lower(): v.strip() for n, v in opts}, (opts, received.get(line))
            if not valid:
                assert here, f"line {line}: invalid ({why}) but no warning: {opts}"
                assert not any(w.endswith("[gemm_benchmark.missing]") for w in here), (opts, here)
            elif why == "note":
                assert here == [], (opts, here)
            else:
                assert all(w.endswith("[gemm_benchmark.missing]") for w in here), (opts, here)
            built.add(tuple(opts))
            compared["valid" if valid else "invalid"] = compared.get("valid" if valid else "invalid", 0) + 1
        # The CLI agrees on the config-only sets, and asks the same question.
        for line, opts in zip(starts[len(fuzzed):], batch[len(fuzzed):], strict=True):
            config_opts = [(n, v) for n, v in opts if n != "missing"]
            code, out, err = _cli(config_opts)
            directive_accepts = not found.get(line)
            assert code in (0, 2), (config_opts, code, err)
            assert (code == 0) == directive_accepts, (config_opts, found.get(line), err)
            if code == 0:
                gemms = [GemmShape.from_dict(g) for g in json.loads(out)]
                asked = question_from_args(build_parser().parse_args(_cli_argv(config_opts)))
                assert [g.to_dict() for g in gemms] == [g.to_dict() for g in asked.gemms], config_opts
                assert asked.hash == records[line].question_hash, config_opts
                compared["agree_valid"] += 1
            else:
                one_error(err)  # one error, wrapped at 100 columns (issue 44)
                compared["agree_invalid"] += 1

    check()
    print(f"{len(built)} distinct option sets built; CLI comparisons: {compared}")
    assert len(built) >= 500, len(built)
    assert compared["agree_valid"] >= 10 and compared["agree_invalid"] >= 10, compared


@pytest.mark.parametrize("options", [
    [("sweep", "²")],
    [("model", ""), ("hidden-size", "64"), ("ffn-hidden-size", "64"), ("num-attention-heads", "4")],
    [("model", "te-guide-5b"), ("shapes", ",")],
    [("model", "te-guide-5b"), ("sweep", ", ,")],
])
def test_regressions_found_by_fuzzing_are_rejected_by_both(tmp_path, options):
    """Each once crashed the CLI or was accepted by one surface and refused by the other."""
    with pytest.raises(OptionError):
        parse_options({n: v for n, v in options}, srcdir=tmp_path, docdir=tmp_path)
    code, _, err = _cli(options)
    assert code == 2 and one_error(err), err
