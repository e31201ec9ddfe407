"""The perf tool's stripped twin: directives gone with everything they own, roles left as text,
every other byte as it was (literal examples of the directive included)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def perf() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("perf_site", REPO / "tools" / "perf_site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["perf_site"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("perf_site", None)


RST = """\
Title
=====

Intro with :gemm-speedup:`te-5b autocast fp8-current` and a ``:gemm-speedup:`literal``` example.

.. gemm-benchmark::
   :name: te-5b
   :model: te-guide-5b

   Indented content the directive owns.

After the directive; a role split over
lines :gemm-tflops:`te-5b prequant
fp8-block mlp_up/wgrad` stays a sentence, :ref:`other roles <x>` stay.

.. note::

   Inside a note:

   .. gemm-benchmark-freshness::

   Still in the note.

.. code-block:: rst

   .. gemm-benchmark::
      :name: example

   An example :gemm-speedup:`x autocast bf16`.

A literal paragraph::

   .. gemm-benchmark::
      :name: literal

.. a comment mentioning :gemm-speedup:`not a role`

.. gemm-benchmark-options::
Last line.
"""

RST_STRIPPED = """\
Title
=====

Intro with te-5b autocast fp8-current and a ``:gemm-speedup:`literal``` example.


After the directive; a role split over
lines te-5b prequant
fp8-block mlp_up/wgrad stays a sentence, :ref:`other roles <x>` stay.

.. note::

   Inside a note:


   Still in the note.

.. code-block:: rst

   .. gemm-benchmark::
      :name: example

   An example :gemm-speedup:`x autocast bf16`.

A literal paragraph::

   .. gemm-benchmark::
      :name: literal

.. a comment mentioning :gemm-speedup:`not a role`

Last line.
"""

MYST = """\
# Title

Prose quoting {gemm-speedup}`tut-te-5b prequant fp8-current` and `{gemm-speedup}` as code.

```{gemm-benchmark}
:name: tut-te-5b
:model: te-guide-5b
```

:::{gemm-benchmark}
:name: colon
:::

````{note}
A note with a directive inside:
```{gemm-benchmark}
:name: inner
```
and {gemm-tflops}`inner prequant bf16
mlp_up/fprop` split over lines.
````

````md
```{gemm-benchmark}
:name: example
```
{gemm-speedup}`example autocast bf16`
````

```
{gemm-speedup}`in a bare code fence`
```

```{eval-rst}
.. gemm-benchmark::
   :name: rst-in-md

Text :gemm-speedup:`rst-in-md autocast bf16`.
```

~~~~{gemm-benchmark-options}
~~~~
End with {gemm-speedup}``double ticks``.
"""

MYST_STRIPPED = """\
# Title

Prose quoting tut-te-5b prequant fp8-current and `{gemm-speedup}` as code.



````{note}
A note with a directive inside:
and inner prequant bf16
mlp_up/fprop split over lines.
````

````md
```{gemm-benchmark}
:name: example
```
{gemm-speedup}`example autocast bf16`
````

```
{gemm-speedup}`in a bare code fence`
```

```{eval-rst}

Text rst-in-md autocast bf16.
```

End with double ticks.
"""


def test_rst_directives_removed_roles_as_text_rest_untouched(perf: ModuleType) -> None:
    assert perf.strip_rst(RST) == RST_STRIPPED


def test_myst_directives_removed_roles_as_text_rest_untouched(perf: ModuleType) -> None:
    assert perf.strip_myst(MYST) == MYST_STRIPPED


def test_text_without_extension_markup_is_unchanged(perf: ModuleType) -> None:
    plain_rst = "Title\n=====\n\n.. note::\n\n   A :ref:`x` and ``code``.\n\nEnd::\n\n   literal\n"
    plain_md = "# T\n\n```python\nx = 1\n```\n\n:::{note}\n`code` and {ref}`x`\n:::\n"
    assert perf.strip_rst(plain_rst) == plain_rst
    assert perf.strip_myst(plain_md) == plain_md


def test_strip_source_dispatches_by_suffix(perf: ModuleType) -> None:
    role_rst, role_md = ":gemm-speedup:`a b c`", "{gemm-speedup}`a b c`"
    assert perf.strip_source(Path("x.rst"), role_rst) == "a b c"
    assert perf.strip_source(Path("x.md"), role_md) == "a b c"
    assert perf.strip_source(Path("x.py"), role_rst) == role_rst


def test_site_twin_keeps_every_page_and_loses_every_directive(perf: ModuleType, tmp_path: Path) -> None:
    """The real docs: no extension directive or role left outside literal examples, prose kept."""
    twin = tmp_path / "twin" / "docs"
    twin.parent.mkdir()
    perf.copy_docs(REPO / "docs", twin, stripped=True)
    sources = sorted(p.relative_to(twin) for p in twin.rglob("*") if p.suffix in (".rst", ".md"))
    originals = sorted(p.relative_to(REPO / "docs") for p in (REPO / "docs").rglob("*")
                       if p.suffix in (".rst", ".md") and "_build" not in p.parts)
    assert sources == originals
    assert (twin / "conf.py").read_bytes() == (REPO / "docs" / "conf.py").read_bytes()
    index = (twin / "index.rst").read_text(encoding="utf-8")
    assert ".. gemm-benchmark::" not in index and ":gemm-speedup:" not in index
    assert "te-5b autocast fp8-current" in index  # the role's text, so the sentence stays
    tutorial = (twin / "tutorial.md").read_text(encoding="utf-8")
    assert "{gemm-benchmark}" not in tutorial and "{gemm-" not in tutorial
    assert perf.EDIT_FROM in tutorial  # the sentence the incremental build edits survives
    authoring = (twin / "authoring.rst").read_text(encoding="utf-8")
    assert "   .. gemm-benchmark::\n      :name: my-llama" in authoring  # the literal example stays
    assert ".. gemm-benchmark-options::" not in authoring
    assert (twin.parent / "bench").resolve() == (REPO / "bench").resolve()


def test_toggle_edit_changes_the_sentence_back_and_forth(perf: ModuleType, tmp_path: Path) -> None:
    (tmp_path / perf.EDIT_FILE).write_text(f"Intro.\n\nThe table {perf.EDIT_FROM}.\n", encoding="utf-8")
    perf.toggle_edit(tmp_path)
    assert perf.EDIT_TO in (tmp_path / perf.EDIT_FILE).read_text(encoding="utf-8")
    perf.toggle_edit(tmp_path)
    assert (tmp_path / perf.EDIT_FILE).read_text(encoding="utf-8") == f"Intro.\n\nThe table {perf.EDIT_FROM}.\n"
    (tmp_path / perf.EDIT_FILE).write_text("No anchor here.\n", encoding="utf-8")
    with pytest.raises(perf.PerfError, match=perf.EDIT_FILE):
        perf.toggle_edit(tmp_path)


def test_ratios_are_paired_per_run(perf: ModuleType) -> None:
    ratio = perf._ratio(perf.Series([2.0, 9.0, 4.0]), perf.Series([1.0, 3.0, 4.0]))
    assert ratio.values == [2.0, 3.0, 1.0]
    assert ratio.summary() == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


def test_bad_runs_and_bad_rev_are_clear_errors(perf: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert perf.main(["--runs", "0"]) == 1
    assert "--runs must be at least 1" in capsys.readouterr().err
    assert perf.main(["--runs", "1", "--rev", "no-such-commit-xyz"]) == 1
    assert "--rev no-such-commit-xyz" in capsys.readouterr().err


def test_extension_costs_keep_the_extension_and_the_phases(perf: ModuleType, tmp_path: Path) -> None:
    import cProfile
    import importlib

    package = tmp_path / "gemm_bench"
    package.mkdir()
    (package / "fake_figures.py").write_text(
        "import json\n\ndef draw(n):\n    return [json.dumps({'i': i}) for i in range(n)]\n", encoding="utf-8")
    sys.path.insert(0, str(package))
    try:
        module = importlib.import_module("fake_figures")
        profiler = cProfile.Profile()
        profiler.runcall(module.draw, 2000)
    finally:
        sys.path.remove(str(package))
        sys.modules.pop("fake_figures", None)
    profiler.dump_stats(tmp_path / "build.prof")
    phases, mine = perf.extension_costs(tmp_path / "build.prof")
    assert phases == []  # no Sphinx build was profiled
    assert mine[0].where == "gemm_bench/fake_figures.py:3(draw)" and mine[0].calls == 1
    assert all(c.where.startswith("gemm_bench/fake_figures.py:") for c in mine)  # json.dumps is not ours
    assert all(c.cumulative >= c.own >= 0 for c in mine)
    assert [c.cumulative for c in mine] == sorted((c.cumulative for c in mine), reverse=True)
    text = perf.costs_text("clean", phases, mine)
    assert text.splitlines()[0] == "clean" and "gemm_bench/fake_figures.py:3(draw)" in text


def test_a_file_that_is_not_a_profile_is_a_clear_error(perf: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "clean.prof"
    bad.write_text("not marshal data", encoding="utf-8")
    with pytest.raises(perf.PerfError, match=r"clean\.prof: not a cProfile"):
        perf.extension_costs(bad)
    with pytest.raises(perf.PerfError, match=r"missing\.prof"):
        perf.extension_costs(tmp_path / "missing.prof")
