"""The authoring reference documents everything the extension registers, with an example of each.

What "registered" means comes from the application (:func:`gemm_benchmark.reference.registrations`,
recorded while the extension's ``setup`` ran), never from the lists the tables are generated from:
a directive, role or ``conf.py`` value added anywhere in the extension must appear in the built
``docs/authoring.rst``, and one the reference cannot document fails a ``-W`` build at the table.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from docutils.parsers.rst import directives as docutils_directives
from sphinx.testing.util import SphinxTestApp

import gemm_benchmark
from gemm_benchmark import reference
from gemm_benchmark.options import OPTIONS

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

CONF = """\
extensions = ["gemm_benchmark"]
project = "reference test"
gemm_benchmark_execution_mode = "cache"
"""


def _build(srcdir: Path, **confoverrides: Any) -> tuple[SphinxTestApp, str, reference.Registrations]:
    """Build ``srcdir`` (html); (the finished app, its warnings, what the extension registered in it).

    The registrations are read while the app lives: SphinxTestApp registers directives in a docutils
    namespace of its own and restores the global one at cleanup."""
    warnings = io.StringIO()
    app = SphinxTestApp("html", srcdir=srcdir, status=io.StringIO(), warning=warnings, freshenv=True,
                        confoverrides=confoverrides)
    try:
        found = reference.registrations(app)
        ours = {name for name, cls in docutils_directives._directives.items()  # type: ignore[attr-defined]
                if getattr(cls, "__module__", "").startswith("gemm_benchmark")}
        assert ours <= {name for name, _ in found.directives}, "a directive of the extension was not recorded"
        app.build()
    finally:
        app.cleanup()
    return app, ANSI.sub("", warnings.getvalue()), found


def _first_column(soup: BeautifulSoup, table_class: str) -> list[str]:
    table = soup.select_one(f"table.{table_class}")
    assert table is not None, f"no table.{table_class}"
    return [tr.select("td")[0].get_text(strip=True) for tr in table.select("tbody tr")]


def test_the_authoring_reference_lists_everything_the_extension_registers(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    shutil.copy(DOCS / "authoring.rst", src / "index.rst")
    # authoring.rst links to other pages of the site (the freshness page, a methodology label).
    app, warnings, found = _build(src, suppress_warnings=["ref.ref", "ref.doc"])
    assert not [line for line in warnings.splitlines() if "WARNING" in line or "ERROR" in line], warnings
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")

    assert {"gemm-benchmark", "gemm-benchmark-summary", "gemm-benchmark-freshness",
            "gemm-benchmark-directives"} <= {name for name, _ in found.directives}
    assert not {"tab", "tabs", "group-tab", "code-tab"} & {name for name, _ in found.directives}, \
        "sphinx_tabs' directives are not the extension's"
    table = soup.select_one("table.gemm-directives-reference")
    assert table is not None
    rows = {tr.select("td")[0].get_text(strip=True): tr.select("td") for tr in table.select("tbody tr")}
    for name, cls in found.directives:
        assert name in rows, f"directive {name} is missing from the authoring reference"
        _, purpose, _, example = rows[name]
        assert reference.purpose(cls), name
        # Compared as words: the table's literal markup and smart quotes aside.
        assert re.findall(r"\w+", purpose.get_text()) == re.findall(r"\w+", reference.purpose(cls)), name
        assert example.select_one("pre") is not None and name in example.get_text(), f"{name} has no example"
    options_link = rows["gemm-benchmark"][2].select_one("a")
    assert options_link is not None and options_link["href"] == f"#{reference.OPTIONS_LABEL}"
    assert soup.find(id=reference.OPTIONS_LABEL) is not None
    assert ":gains-less:" in rows["gemm-benchmark-summary"][2].get_text()

    roles = _first_column(soup, "gemm-roles-reference")
    assert found.roles and all(f":{name}:" in roles for name in found.roles), (found.roles, roles)
    config = _first_column(soup, "gemm-config-reference")
    assert found.config_values and all(name in config for name in found.config_values), (found.config_values, config)
    options = _first_column(soup, "gemm-options-reference")
    assert all(f":{name}:" in options for name in OPTIONS)


def test_each_directive_example_builds(tmp_path: Path) -> None:
    """Every registered directive's ``reference_example``, copied into a page as it stands, builds from
    the committed cache with at most the one ``missing`` warning a copied example may expect."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    shutil.copytree(DOCS / "_gemm_cache", src / "_gemm_cache")
    shutil.copytree(DOCS / "_data", src / "_data")  # the published runs the gemm-published-runs example names
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "conf.py").write_text(CONF, encoding="utf-8")
    (probe / "index.rst").write_text("Probe\n=====\n", encoding="utf-8")
    _, _, found = _build(probe)
    pages = []
    for number, (name, cls) in enumerate(found.directives):
        page = f"example{number}"
        pages.append(page)
        title = f"Example of {name}"
        (src / f"{page}.rst").write_text(f"{title}\n{'=' * len(title)}\n\n{reference.example_of(cls)}\n",
                                         encoding="utf-8")
    toctree = "".join(f"   {page}\n" for page in pages)
    (src / "index.rst").write_text(f"Examples\n========\n\n.. toctree::\n\n{toctree}", encoding="utf-8")
    app, warnings, _ = _build(src)
    lines = [line for line in warnings.splitlines() if "WARNING" in line or "ERROR" in line]
    other = [line for line in lines if not line.rstrip().endswith("[gemm_benchmark.missing]")]
    assert not other, "\n".join(lines)
    for page in pages:
        assert sum(f"{page}.rst" in line for line in lines) <= 1, "\n".join(lines)
        soup = BeautifulSoup((Path(app.outdir) / f"{page}.html").read_text(encoding="utf-8"), "html.parser")
        for code in soup.select("code, pre"):  # literal text (the reference tables quote role syntax)
            code.decompose()
        text = soup.get_text(" ")
        assert not re.search(r"[:{]gemm-[a-z-]+[:}]`", text), f"{page}: a role is shown as raw text"


CONF_UNDOCUMENTED = '''\
import gemm_benchmark
from sphinx.util.docutils import SphinxDirective

extensions = ["gemm_benchmark"]
project = "undocumented directive"
gemm_benchmark_execution_mode = "cache"


class Undocumented(SphinxDirective):
    def run(self):
        return []


_register = gemm_benchmark._register


def _with_one_more(app):
    found = _register(app)
    app.add_directive("gemm-undocumented", Undocumented)
    return found


gemm_benchmark._register = _with_one_more
'''


def test_a_directive_without_docstring_or_example_fails_the_w_build_at_the_table(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF_UNDOCUMENTED, encoding="utf-8")
    (src / "index.rst").write_text("Reference\n=========\n\n.. gemm-benchmark-directives::\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-b", "html", "-q", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(REPO / "sphinxext"), str(REPO / "bench"), os.environ.get("PYTHONPATH", "")])})
    stderr = ANSI.sub("", done.stderr)
    assert done.returncode != 0, stderr
    assert re.search(r"index\.rst:4: WARNING: gemm-benchmark-directives: directive 'gemm-undocumented' "
                     r"\(\S*Undocumented\) has no docstring and no reference_example: .*"
                     r"\[gemm_benchmark\.reference\]", stderr), stderr


def test_a_role_or_conf_value_missing_from_the_tables_warns_at_the_table(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    register = gemm_benchmark._register

    def with_more(app: Any) -> dict[str, Any]:
        found = register(app)
        app.add_role("gemm-unlisted", lambda *args, **kwargs: ([], []))
        app.add_config_value("gemm_benchmark_unlisted", 1, "env")
        return found

    monkeypatch.setattr(gemm_benchmark, "_register", with_more)
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    (src / "index.rst").write_text(textwrap.dedent("""\
        Reference
        =========

        .. gemm-benchmark-roles::

        .. gemm-benchmark-config::
        """), encoding="utf-8")
    app, warnings, found = _build(src)
    assert "gemm-unlisted" in found.roles and "gemm_benchmark_unlisted" in found.config_values
    assert re.search(r"index\.rst:4: WARNING: gemm-benchmark-roles: role 'gemm-unlisted' is registered but not "
                     r"described .*\[gemm_benchmark\.reference\]", warnings), warnings
    assert re.search(r"index\.rst:6: WARNING: gemm-benchmark-config: conf\.py value 'gemm_benchmark_unlisted' is "
                     r"registered but not described .*\[gemm_benchmark\.reference\]", warnings), warnings
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert ":gemm-unlisted:" in _first_column(soup, "gemm-roles-reference")  # listed all the same


def test_a_reference_page_is_read_again_when_the_code_it_documents_changes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    (src / "index.rst").write_text("Reference\n=========\n\n.. gemm-benchmark-directives::\n\n"
                                   ".. gemm-benchmark-options::\n", encoding="utf-8")
    warnings = io.StringIO()
    app = SphinxTestApp("html", srcdir=src, status=io.StringIO(), warning=warnings, freshenv=True)
    try:
        app.build()
        depends = {Path(src, dep).resolve() for dep in app.env.dependencies["index"]}
    finally:
        app.cleanup()
    package = Path(gemm_benchmark.__file__).resolve().parent
    assert {package / "__init__.py", package / "directive.py", package / "summary.py",
            package / "options.py"} <= depends
