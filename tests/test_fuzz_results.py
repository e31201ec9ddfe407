"""Hypothesis fuzz over hostile result files: valid JSON (mostly), hostile values.

Starts from real committed results (a model and a sweep, schema 1), a schema-2 document and one
with issue 11's blocks (layer step, SQNRs, a Linear peer: tests/fake_beyond.py), then
sets, deletes or adds values anywhere in them: subnormals, 1e308, -0.0, huge integers, wrong types,
lone surrogates, deep nesting, NaN/Infinity literals, invalid UTF-8, symlinks. Whatever comes out:

* ``read_document`` returns a document or raises ``CacheError``, nothing else;
* for every accepted document, ``Report`` (as the file says, and as a page asks) renders text and
  JSON and totals without raising, and every speedup and TFLOP/s figure is finite and positive;
* ``gemm-bench report FILE`` (and ``--json``) returns 0 for an accepted file, 2 for a refused one,
  and never raises.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemm_bench.cli import commands as cli
from gemm_bench.question.precisions import ALL_MODES, PRECISION_IDS
from gemm_bench.question.shapes import PASSES
from gemm_bench.report.report import Report
from gemm_bench.results.accuracy_schema import DISTRIBUTIONS
from gemm_bench.results.cache import CacheError, file_name, read_document
from tests.conftest import fuzz_examples
from tests.fake_beyond import beyond_document
from tests.helpers import synthetic_document

ROOT = Path(__file__).resolve().parent.parent
DOCS_CACHE = ROOT / "docs" / "_gemm_cache"
PathKey = tuple[str | int, ...]


def _v2_document() -> dict[str, Any]:
    doc = synthetic_document(unsupported={"mxfp8": "needs compute capability 10.0"})
    doc["run_id"] = "fuzz-run"
    doc["support"] = {"mxfp8": {"available": False, "reason": "needs compute capability 10.0"}}
    doc["peers"] = [{"backend": "torch._scaled_mm", "op": g["op"], "pass": g["pass"], "m": g["m"], "k": g["k"],
                     "n": g["n"], "groups": g["groups"], "status": "failed", "reason": "no FP8 here",
                     "run_id": "fuzz-run"} for g in doc["question"]["gemms"][:2]]
    return doc


def _beyond_document() -> dict[str, Any]:
    """Issue 11's blocks (layer step, SQNRs, a Linear peer) on a trimmed fake-runner document."""
    doc = beyond_document()
    doc["cells"] = [c for c in doc["cells"] if c["op"] in ("qkv", "mlp_down")]
    doc["peers"] = doc["peers"][:2]
    fprop = next(g for g in doc["question"]["gemms"] if g["pass"] == "fprop")
    doc["peers"].append({"backend": "linear peer", "precision": "FP8 rowwise", "kind": "linear", "op": fprop["op"],
                         "pass": "backward", "m": fprop["m"], "k": fprop["k"], "n": fprop["n"], "groups": 1,
                         "status": "measured", "ms": 9.0, "stats": {"median_ms": 9.0, "iqr_ms": 0.1}})
    doc["layer"] = [c for c in doc["layer"] if c["precision"] in ("bf16", "fp8-current", "mxfp8")]
    doc["accuracy"] = [c for c in doc["accuracy"] if c["op"] == "qkv" and c["precision"] in ("bf16", "fp8-block")]
    return doc


BASES: list[dict[str, Any]] = [
    json.loads((DOCS_CACHE / "2160d33ec54a347e--h100-80gb-hbm3.json").read_text(encoding="utf-8")),
    json.loads((DOCS_CACHE / "4803128f66703ed6--h200.json").read_text(encoding="utf-8")),
    _v2_document(),
    _beyond_document(),
]


def _paths(doc: Any) -> list[PathKey]:
    """Every node's path, but only the first two samples of each samples_ms (they are alike)."""
    out: list[PathKey] = []
    stack: list[tuple[Any, PathKey]] = [(doc, ())]
    while stack:
        value, path = stack.pop()
        if path:
            out.append(path)
        if isinstance(value, dict):
            stack.extend((v, (*path, k)) for k, v in value.items())
        elif isinstance(value, list):
            limit = 2 if path and path[-1] == "samples_ms" else len(value)
            stack.extend((v, (*path, i)) for i, v in enumerate(value[:limit]))
    return sorted(out, key=repr)


PATHS = [_paths(doc) for doc in BASES]

DEEP: Any = []
for _ in range(60):
    DEEP = [DEEP]

HOSTILE = st.one_of(
    st.sampled_from([
        5e-324, 1e308, -0.0, 0, -1, 1e-5, 1e-4, 2e7, 10**30, 2**63, -(2**63) - 1, 10**400, True, False, None,
        "", " ", "\ud800", "x\udcff", "x" * 300, "$\\frac{", "9.0", "9", "NaN", [], {}, [1], {"a": None}, DEEP,
        math.nan, math.inf, -math.inf, 1.5, 3, "fprop", "wgrad", "qkv", "measured", "failed", "unsupported",
        "bf16", "mxfp8", "autocast", "prequant", "model", "shapes", "sweep", "v1:x", "run-b",
        "layer", "layer-graphed", "linear", "gemm", "backward", "gaussian", "outliers", 1e-3, 400.0, -200.0,
        {"available": False, "reason": "no"}, {"median_ms": 1.0, "iqr_ms": 0.0},
    ]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=6),
)
KEYS = st.sampled_from(["run_id", "support", "ms", "stats", "reason", "accuracy", "extra", "flops", "status",
                        "n", "samples_ms", "p10_ms", "min_ms", "layer", "accuracy_method", "kind", "sqnr_db",
                        "distribution", "precision", "mode"])


@st.composite
def hostile_documents(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    base = draw(st.integers(0, len(BASES) - 1))
    doc = copy.deepcopy(BASES[base])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS[base]))
        action = draw(st.sampled_from(["set", "set", "set", "delete", "add", "copy"]))
        with contextlib.suppress(KeyError, IndexError, TypeError):  # an earlier edit removed the path
            parent: Any = doc
            for key in path[:-1]:
                parent = parent[key]
            last = path[-1]
            target = parent[last]
            if action == "set":
                parent[last] = draw(HOSTILE)
            elif action == "delete":
                del parent[last]
            elif action == "add" and isinstance(target, dict):
                target[draw(KEYS)] = draw(HOSTILE)
            elif action == "copy" and isinstance(target, list) and target:
                target.append(copy.deepcopy(target[0]))
    return doc, base


def _name_max(directory: Path) -> int:
    """The longest file name, in bytes, the file system of ``directory`` takes (255 on ext4, tmpfs, APFS)."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no such variable
        return 255


def _file_name(directory: Path, doc: dict[str, Any], base: int) -> str:
    """The name the cache would look for ``doc`` under, where the file system takes it: a hostile
    hash or device name can make one longer than it allows ("x" * 300), and writing it raised
    OSError inside the test, before the code under test ran (and Hypothesis's database replayed the
    draw on every later run). Such a document is written under its base's name: its hostile values
    are still read, which is what the test is about."""
    name_hash, device = doc.get("question_hash"), doc.get("device", {})
    device_name = device.get("name") if isinstance(device, dict) else None
    if isinstance(name_hash, str) and isinstance(device_name, str) and name_hash.isalnum():
        name = file_name(name_hash, device_name).encode("utf-8", "replace").decode("utf-8")
        if len(os.fsencode(name)) <= _name_max(directory):
            return name
    return file_name(BASES[base]["question_hash"], BASES[base]["device"]["name"])


def _write(directory: Path, doc: dict[str, Any], base: int, how: str) -> Path:
    """Write ``doc`` where the cache would look for it: as JSON, raw bytes, or behind a symlink."""
    path = directory / _file_name(directory, doc, base)
    text = json.dumps(doc, indent=1, ensure_ascii=how != "raw")  # NaN/Infinity as Python writes them
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate becomes invalid UTF-8
    if how == "symlink":
        outside = directory / "outside.json"
        outside.write_bytes(data)
        path.symlink_to(outside)
    else:
        path.write_bytes(data)
    return path


def test_a_name_longer_than_the_file_system_takes_is_written_under_its_bases(tmp_path: Path) -> None:
    """The draw that failed the fuzzer on its own: a device name of 300 characters (OSError "File name
    too long" in _write, before read_document ran)."""
    doc = copy.deepcopy(BASES[0])
    doc["device"]["name"] = "x" * 300
    path = _write(tmp_path, doc, 0, "json")
    assert path.name == file_name(BASES[0]["question_hash"], BASES[0]["device"]["name"]) and path.is_file()
    short = copy.deepcopy(BASES[0])
    short["device"]["name"] = "NVIDIA B200"
    assert _write(tmp_path, short, 0, "json").name == file_name(short["question_hash"], "NVIDIA B200")


def _check_report(report: Report) -> None:
    text = report.to_text()
    text.encode("utf-8")
    json.dumps(report.to_json(), allow_nan=False)
    for total in report.totals():
        for value in (total.speedup_vs_bf16, total.per_layer_ms, total.model_ms):
            assert value is None or (math.isfinite(value) and value > 0), total
        assert (total.speedup_vs_bf16 is None) == bool(total.speedup_reason) or total.precision == "bf16", total
    for mode in report.modes:
        for precision in report.precisions:
            for gemm in report.gemms:
                speedup = report.gemm_speedup(mode, precision, gemm)
                assert speedup is None or (math.isfinite(speedup) and speedup > 0)
                tflops = report.cell(mode, precision, gemm).tflops
                assert tflops is None or (math.isfinite(tflops) and tflops > 0)
            for pass_ in PASSES:
                speedup = report.pass_speedup(mode, precision, pass_)
                assert speedup is None or (math.isfinite(speedup) and speedup > 0)
            for gemm in report.gemms:
                for value, reason in ((report.pct_of_peak(mode, precision, gemm),
                                       report.pct_of_peak_reason(mode, precision, gemm)),
                                      (report.roofline_ms(mode, precision, gemm),
                                       report.roofline_reason(mode, precision, gemm))):
                    assert (value is None) == bool(reason)
                    assert value is None or (math.isfinite(value) and value > 0)
                pct = report.pct_of_peak(mode, precision, gemm)
                assert pct is None or pct <= 100  # validation refuses a cell above its peak
            for distribution in DISTRIBUTIONS:
                sqnr = report.sqnr(mode, precision, distribution=distribution)
                assert (sqnr is None) == bool(report.sqnr_reason(mode, precision, distribution=distribution))
                assert sqnr is None or math.isfinite(sqnr)
    for graphed in (False, True):
        for precision in report.precisions:
            step = report.step(precision, graphed=graphed)
            for value in (step.step_ms, step.speedup_vs_bf16, step.gemm_share, step.gemm_speedup, step.amdahl_speedup):
                assert value is None or (math.isfinite(value) and value > 0), step
            assert (step.speedup_vs_bf16 is None) == bool(step.speedup_reason), step
            assert step.step_ms is not None or step.reason, step
    for peer in report.peers():
        assert peer.tflops is None or (math.isfinite(peer.tflops) and peer.tflops > 0)


def _cli(*argv: str) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        return cli.main(list(argv))


@pytest.mark.slow  # started first in a parallel run (conftest.py)
@settings(max_examples=fuzz_examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_documents(), st.sampled_from(["json", "json", "json", "raw", "symlink"]))
def test_hostile_result_files_never_crash_the_core_or_the_cli(case: tuple[dict[str, Any], int], how: str) -> None:
    doc, base = case
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), doc, base, how)
        try:
            loaded = read_document(path)
        except CacheError as exc:
            assert exc.path == path
            loaded = None
        if how == "symlink":
            assert loaded is None
        if loaded is not None:
            _check_report(Report(loaded))
            gemms = list(reversed(Report(loaded).result.gemms))
            _check_report(Report(loaded, gemms=gemms, num_layers=7, kind="model", modes=list(ALL_MODES),
                                 precisions=list(PRECISION_IDS)))
        expected = 0 if loaded is not None else 2
        assert _cli("report", str(path)) == expected
        assert _cli("report", "--json", str(path)) == expected
