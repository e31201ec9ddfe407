"""Every example in the authoring reference builds: a reader who copies one gets what it shows.

The examples are the ``code-block`` snippets of ``docs/authoring.rst`` in reStructuredText or MyST
Markdown that use a ``gemm-benchmark`` directive or role. Each is pasted, as it stands, into a
fresh project that has the committed result cache and ``gemm_benchmark_execution_mode = "cache"``,
and built. The only diagnostic allowed is the one a copied example can expect where the cache has
no answer for its question: one ``missing`` warning per directive (the issue: "one warning per
directive, not two"). Roles must render a value, or a visible ``n/a`` with the reason on hover;
never raw role text.
"""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCES = [DOCS / "authoring.rst"]

#: Languages of code blocks that are pages in this site's two source formats.
LANGUAGES = {"rst": ".rst", "restructuredtext": ".rst", "md": ".md", "markdown": ".md", "myst": ".md"}
_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. (?:code-block|code|sourcecode)::[ \t]*(?P<lang>\S+)[ \t]*$")
_USES_EXTENSION = re.compile(r"gemm-benchmark|[:{]gemm-[a-z-]+[:}]`")
_DIRECTIVE = re.compile(r"^\s*(?:\.\. |```\{|:::\{)gemm-benchmark(?:-summary)?(?:::|\})", re.M)
_RAW_ROLE = re.compile(r"[:{]gemm-[a-z-]+[:}]`")


@dataclasses.dataclass(frozen=True)
class Example:
    source: Path
    #: The line of the ``code-block`` directive (1-based), for the test id and messages.
    line: int
    suffix: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.source.name}:{self.line}{self.suffix}"

    @property
    def directives(self) -> int:
        return len(_DIRECTIVE.findall(self.text))


def extract_examples(path: Path) -> list[Example]:
    """The code blocks of ``path`` in rST or MyST that use the extension, dedented as a reader copies them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    index = 0
    while index < len(lines):
        match = _CODE_BLOCK.match(lines[index])
        index += 1
        if not match or match["lang"].lower() not in LANGUAGES:
            continue
        start, indent = index, len(match["indent"].expandtabs())
        while index < len(lines) and lines[index].lstrip().startswith(":") and lines[index].strip():
            index += 1  # the code block's own options (:caption:, :linenos:)
        body = []
        while index < len(lines) and (not lines[index].strip()
                                      or len(lines[index].expandtabs()) - len(lines[index].expandtabs().lstrip())
                                      > indent):
            body.append(lines[index])
            index += 1
        text = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
        if _USES_EXTENSION.search(text):
            out.append(Example(path, start, LANGUAGES[match["lang"].lower()], text))
    return out


EXAMPLES = [example for source in SOURCES for example in extract_examples(source)]


def test_the_reference_has_examples_in_both_formats() -> None:
    assert {e.suffix for e in EXAMPLES} == {".rst", ".md"}, [e.id for e in EXAMPLES]
    assert all(e.directives >= 1 for e in EXAMPLES), [e.id for e in EXAMPLES if not e.directives]


def test_the_extractor_reads_blocks_as_a_reader_copies_them(tmp_path: Path) -> None:
    page = tmp_path / "page.rst"
    page.write_text(textwrap.dedent("""\
        Intro.

        .. code-block:: rst
           :caption: an example

           .. gemm-benchmark::
              :model: llama3-8b

           Text with :gemm-speedup:`x autocast fp8-current`.

        .. code-block:: console

           $ gemm-benchmark is not a page

        .. code-block:: md

           ```{gemm-benchmark}
           :model: llama3-8b
           ```
        After.
        """), encoding="utf-8")
    found = extract_examples(page)
    assert [(e.line, e.suffix, e.directives) for e in found] == [(3, ".rst", 1), (15, ".md", 1)]
    assert found[0].text == (".. gemm-benchmark::\n   :model: llama3-8b\n\n"
                             "Text with :gemm-speedup:`x autocast fp8-current`.\n")
    assert found[1].text == "```{gemm-benchmark}\n:model: llama3-8b\n```\n"


CONF = """\
extensions = ["myst_parser", "gemm_benchmark"]
project = "authoring example"
gemm_benchmark_cache_dir = "_gemm_cache"
gemm_benchmark_execution_mode = "cache"
"""


def _build(example: Example, srcdir: Path) -> tuple[str, str]:
    """Build ``example`` as the only page of a project with the committed cache: (warnings, index.html)."""
    from sphinx.testing.util import SphinxTestApp

    shutil.copytree(DOCS / "_gemm_cache", srcdir / "_gemm_cache")
    (srcdir / "conf.py").write_text(CONF, encoding="utf-8")
    title = "Example\n=======\n\n" if example.suffix == ".rst" else "# Example\n\n"
    (srcdir / f"index{example.suffix}").write_text(title + example.text, encoding="utf-8")
    warnings = io.StringIO()
    # SphinxTestApp, not Sphinx: it registers directives and roles in a docutils namespace of its own,
    # so one example's build leaves nothing registered for the next.
    app = SphinxTestApp("html", srcdir=srcdir, status=io.StringIO(), warning=warnings, freshenv=True)
    try:
        app.build()
    finally:
        app.cleanup()
    html = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    return re.sub(r"\x1b\[[0-9;]*m", "", warnings.getvalue()), html


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_example_builds_with_only_an_expected_missing_note(example: Example, tmp_path: Path) -> None:
    warnings, html = _build(example, tmp_path / "project")
    lines = [line for line in warnings.splitlines() if "WARNING" in line or "ERROR" in line]
    missing = [line for line in lines if line.rstrip().endswith("[gemm_benchmark.missing]")]
    other = [line for line in lines if line not in missing]
    assert not other, f"{example.id}: a copied example warns:\n" + "\n".join(lines)
    assert len(missing) <= example.directives, f"{example.id}: more than one warning per directive:\n" + "\n".join(
        missing)

    soup = BeautifulSoup(html, "html.parser")
    body = soup.select_one("div.body, article[role=main], body") or soup
    assert not _RAW_ROLE.search(body.get_text(" ")), f"{example.id}: a role is shown as raw text"
    assert len(soup.select("div.gemm-benchmark, div.gemm-summary")) == example.directives
    for abbr in soup.select("abbr.gemm-value"):
        shown = abbr.get_text(strip=True)
        if shown == "n/a":
            assert abbr.get("title"), f"{example.id}: an n/a role without its reason"
        else:
            assert re.search(r"\d", shown), f"{example.id}: a role shows {shown!r}"
    if not missing:
        # Answered from the cache: the directive shows measurements, not a stand-in.
        assert soup.select("div.gemm-benchmark table.gemm-table, div.gemm-summary table"), example.id
