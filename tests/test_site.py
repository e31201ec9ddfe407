"""The site's own promises: no hand-typed numbers in prose, a complete authoring reference,
and a README figure that is what the committed cache draws."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*") if p.suffix in (".rst", ".md") and "_build" not in p.parts)

#: What a hand-typed measurement looks like: a speedup (1.23x, 1.9×), a time (3.2 ms) or a rate.
HAND_TYPED = [
    re.compile(r"\b\d+(?:\.\d+)?\s*[x×](?![\w\d])(?!\s*(?:FFN|\d))"),
    re.compile(r"\b\d+(?:\.\d+)?\s*(?:ms|µs|us|TFLOP/s|TFLOPS|GFLOP/s)\b"),
    re.compile(r"\b\d+(?:\.\d+)?\s*%\s*(?:faster|slower|speed)"),
]

#: Method parameters the prose states, as the code defines them (so the words cannot drift from the
#: code): a parameter is not a measurement, and these phrases are generated here, never listed by hand.
def method_phrases() -> list[str]:
    from gemm_bench.measure.telemetry import SAMPLE_INTERVAL_S

    return [f"every {SAMPLE_INTERVAL_S * 1000:g} ms"]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of running text: code blocks, directive bodies/options and tables left out."""
    out, in_block, block_indent = [], False, 0
    fence = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if path.suffix == ".md":
            if stripped.startswith("```"):
                fence = None if fence else stripped
                continue
            if fence or stripped.startswith("|"):
                continue
            out.append((number, line))
            continue
        indent = len(line) - len(line.lstrip())
        if in_block:
            if stripped and indent <= block_indent:
                in_block = False
            else:
                continue
        if stripped.startswith(".. ") or stripped.endswith("::"):
            in_block, block_indent = True, indent
            continue
        out.append((number, line))
    return out


def test_the_pages_exist() -> None:
    names = {p.name for p in PAGES}
    assert {"index.rst", "tutorial.md", "methodology.rst", "authoring.rst", "freshness.rst"} <= names


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_hand_typed_numbers_in_prose(path: Path) -> None:
    found = []
    for number, line in prose_lines(path):
        text = re.sub(r"\{?:?gemm-\w+:?\}?`[^`]*`", "", line)  # role-quoted values are the point
        for phrase in method_phrases():
            text = text.replace(phrase, "")
        for pattern in HAND_TYPED:
            for match in pattern.finditer(text):
                found.append(f"{path.name}:{number}: {match.group(0)!r} in {line.strip()!r}")
    assert not found, "\n".join(found)


def test_the_scanner_catches_what_it_should(tmp_path: Path) -> None:
    sample = tmp_path / "probe.rst"
    sample.write_text("Intro.\n\nFP8 is 1.93x faster, takes 3.2 ms at 700 TFLOP/s.\n\n.. code-block::\n\n   2.00x\n")
    hits = [m.group(0) for _, line in prose_lines(sample) for p in HAND_TYPED for m in p.finditer(line)]
    assert hits == ["1.93x", "3.2 ms", "700 TFLOP/s"]


def test_authoring_reference_renders_every_option_from_the_code() -> None:
    text = (DOCS / "authoring.rst").read_text()
    for directive in ("gemm-benchmark-options", "gemm-benchmark-roles", "gemm-benchmark-config"):
        assert f".. {directive}::" in text


def test_the_flags_pages_quote_keep_their_two_hyphens(docs_site: Any) -> None:
    """Before: docutils' smart dashes printed Megatron-LM's --overlap-grad-reduce (the layouts' notes, the
    published runs) as an en dash and one hyphen, a flag no launcher accepts (session 20)."""
    mangled = re.compile(r"[\u2013\u2014][a-z]+(?:-[a-z0-9]+)+")
    seen = set()
    for page in docs_site.pages():
        text = docs_site.soup(page).get_text(" ")
        found = mangled.findall(text)
        assert not found, (page, sorted(set(found))[:5])
        seen.update(re.findall(r"--overlap-grad-reduce|--softmax-type", text))
    assert seen == {"--overlap-grad-reduce", "--softmax-type"}
