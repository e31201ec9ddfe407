"""A damaged cache file on a built page: reported with its path, never half-used, the page falls back.

Each directive of ``test-reliability-corrupt`` asks a question whose only cache file is damaged one
way (truncated JSON, a schema version from the future, a missing field, one cell of the wrong type,
a question hash that does not match the question, an unreadable file, bytes that are not UTF-8).
The built page must show for each exactly what it shows for a question never measured (the "Not
measured yet" admonition, the ``missing`` warning, roles without a value), plus a ``cache`` warning
at the directive's line naming the damaged file, and no number that the file holds. A ``good``
directive, whose file holds the same numbers undamaged, proves that those numbers would show.

The bench-level checks of each damage (``read_document`` raising CacheError) are in
test_results_cache.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import dumps
from tests.conftest import make_document, write_document
from tests.helpers import warnings_by_line

ROOT = Path(__file__).parent / "roots" / "test-reliability-corrupt"

#: Distinctive times: every number the page could take from a file derives from these.
BF16_MS, FP8_MS = 7.654321, 3.456789
FILE_NUMBERS = ("7.654", "7.65", "3.457", "3.46", "2.21×", "2.21")


def _truncate(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        doc = json.loads(path.read_text(encoding="utf-8"))
        change(doc)
        path.write_text(dumps(doc), encoding="utf-8")
    return apply


def _unreadable(path: Path) -> None:
    # chmod 0 does not stop root (CI containers run as root); a directory under the file's name
    # cannot be read by anyone, and the cache lists it like a file.
    path.unlink()
    path.mkdir()


def _wrong_type(doc: dict[str, Any]) -> None:
    cell = next(c for c in doc["cells"] if c["status"] == "measured" and c["precision"] == "fp8-current")
    cell["ms"] = "fast"  # one bad cell: the other cells of the file are valid, and must not be used either


def _hash_mismatch(doc: dict[str, Any]) -> None:
    doc["question"]["gemms"][0]["n"] += 1  # the file name and question_hash still say the old question


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated": (_truncate, "is not valid JSON"),
    "schema": (_edit(lambda d: d.update(schema_version=99)), "schema_version"),
    "missing-field": (_edit(lambda d: d.pop("provenance")), "provenance"),
    "wrong-type": (_edit(_wrong_type), ".ms"),
    "hash": (_edit(_hash_mismatch), "does not match the question"),
    "unreadable": (_unreadable, "is not a regular file"),
    "not-utf8": (lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()), "UTF-8"),
}


def _directive_lines() -> dict[str, int]:
    lines = ROOT.joinpath("index.rst").read_text(encoding="utf-8").splitlines()
    return {m.group(1): i for i, line in enumerate(lines, start=1) if (m := re.match(r"   :name: c-(\S+)", line))}




def _document(shape: str) -> dict[str, Any]:
    doc = make_document(build_question(shapes=[shape]), precisions=("bf16", "fp8-current"))
    for cell in doc["cells"]:
        if cell["status"] == "measured":
            ms = BF16_MS if cell["precision"] == "bf16" else FP8_MS
            cell.update(ms=ms, stats={"median_ms": ms, "iqr_ms": 0.0})
    return doc


@pytest.mark.sphinx("html", testroot="reliability-corrupt", srcdir="reliability-corrupt")
def test_each_damaged_file_falls_back_as_missing_and_names_its_path(app, warning):
    src = Path(app.srcdir)
    lines = _directive_lines()  # ":name:" lines; the directive is the line before
    shapes = dict(re.findall(r":name: c-(\S+)\n   :shapes: (\S+)", (src / "index.rst").read_text(encoding="utf-8")))
    assert set(shapes) == {"good", *DAMAGE}
    paths = {kind: write_document(src / "_gemm_cache", _document(shape)) for kind, shape in shapes.items()}
    for kind, (damage, _) in DAMAGE.items():
        damage(paths[kind])
    damaged = {kind: path.read_bytes() for kind, path in paths.items() if path.is_file()}
    app.build()

    found = warnings_by_line(warning.getvalue())
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    good = soup.select_one("div.gemm-benchmark#c-good")
    good_text = good.get_text()
    assert good.select("table.gemm-gemms") and all(n in good_text for n in ("7.654", "3.457"))
    assert lines["good"] - 1 not in found
    good_roles = soup.find(id="good").select("abbr.gemm-value")
    assert [r.get_text() for r in good_roles] == ["7.654 ms", "2.21×"]

    for kind, (_, words) in DAMAGE.items():
        line = lines[kind] - 1
        here = found.get(line, [])
        cache_warnings = [w for w in here if w.endswith("[gemm_benchmark.cache]")]
        assert len(cache_warnings) == 1, (kind, here)
        assert str(paths[kind]) in cache_warnings[0] and words in cache_warnings[0], (kind, cache_warnings)
        assert any("no result for question" in w and w.endswith("[gemm_benchmark.missing]") for w in here), here

        block = soup.select_one(f"div.gemm-benchmark#c-{kind}")
        admonition = block.select_one(".admonition.gemm-not-measured")
        assert admonition.select_one(".admonition-title").get_text() == "Not measured yet", kind
        assert not block.select("table") and not block.select("img") and not block.select(".gemm-provenance")
        section = soup.find(id=kind)
        assert not section.select("abbr.gemm-value"), kind
        missing = section.select("abbr.gemm-value-error")
        assert [c.get_text() for c in missing] == ["n/a", "n/a"]
        assert [c["title"].rsplit("(", 1)[1] for c in missing] == [
            f"c-{kind} autocast bf16)", f"c-{kind} prequant fp8-current)"]
        text = section.get_text()
        assert not [n for n in FILE_NUMBERS if n in text], (kind, text)
        # No value, because no valid file answers (not a value from the damaged one). Prose reading
        # "n/a" is a located warning at its role as well (issue 35), saying why, as the hover does.
        assert all(f"c-{kind} has no measured result" in c["title"] for c in missing)
        role_warnings = [w for w in found.get(line + 5, []) if "[gemm_benchmark.role]" in w]
        assert len(role_warnings) == 2 and all(f"c-{kind} has no measured result" in w for w in role_warnings)
    # The damaged files are left for a person to inspect: a cache-mode build writes nothing over them.
    assert {kind: path.read_bytes() for kind, path in paths.items() if path.is_file()} == damaged
    assert paths["unreadable"].is_dir()
