"""Roles' mistakes, each named where it is made and in words an author can act on (issue 35, round 3).

A role's warning is reported at the line the role is on, not at its paragraph's first line, in
reStructuredText and MyST alike; a role without ``@DEVICE`` on a directive shown on several GPUs
warns with the spellings to use (and still shows the first device's number); a role asking for a
GPU the cache has no result for says so, which GPUs it has, and how a GPU build measures it. One
Sphinx build (an rST and a MyST page) serves every check.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question

from .conftest import H100, H200, make_document
from .test_correctness import GH200, Project

PRECISIONS = ("bf16", "fp8-delayed", "fp8-current")

INDEX = """\
Roles
=====

.. toctree::

   mdpage

.. gemm-benchmark::
   :name: l8
   :model: llama3-8b
   :precisions: bf16, fp8-delayed, fp8-current
   :modes: autocast
   :devices: h100, h200

.. gemm-benchmark::
   :name: solo
   :model: llama3-8b
   :precisions: bf16, fp8-delayed, fp8-current
   :modes: autocast
   :devices: h200

.. gemm-benchmark::
   :name: bw
   :model: llama3-8b
   :precisions: bf16, fp8-delayed, fp8-current
   :modes: autocast
   :devices: h100, b200
   :missing: note

.. gemm-benchmark::
   :name: bwonly
   :model: llama3-8b
   :precisions: bf16
   :modes: autocast
   :devices: b200
   :missing: note

.. gemm-benchmark::
   :name: every
   :model: llama3-8b
   :precisions: bf16, fp8-delayed, fp8-current
   :modes: autocast

A paragraph's first line, then on its second
:gemm-speedup:`l8@h100 autocast fp8-current` (a good one) and on its
third a bad precision :gemm-speedup:`l8@h100 autocast fp8-curent`, then
on the fourth a name no directive has :gemm-speedup:`nosuch autocast bf16`, and
on the fifth the same role again :gemm-speedup:`nosuch autocast bf16`.

- A list item whose role is on its
  second line: :gemm-speedup:`l8@h100 autocast fp8-curent`.

Ambiguous: :gemm-time:`l8 autocast fp8-delayed`.

Explicit: :gemm-time:`l8@h100 autocast fp8-delayed` and :gemm-time:`l8@h200 autocast fp8-delayed`.

Alone: :gemm-speedup:`solo autocast fp8-delayed`.

Unlisted: :gemm-time:`every autocast bf16`.

Blackwell listed: :gemm-speedup:`bw@b200 autocast fp8-delayed`.

Blackwell only: :gemm-time:`bwonly autocast bf16`.

Blackwell not listed: :gemm-speedup:`l8@b200 autocast fp8-delayed`.

Cached but not listed: :gemm-speedup:`l8@gh200 autocast fp8-delayed`.

Typo: :gemm-speedup:`l8@h10 autocast fp8-delayed`.

+------------+------------------------------------------------+
| A cell     | :gemm-speedup:`l8@h100 autocast fp8-curant`    |
|            | on the first of its two lines                  |
+------------+------------------------------------------------+

A title with a role :gemm-speedup:`l8@h100 autocast fp8-curnet`
---------------------------------------------------------------

Text.
"""

MYST = """\
# MyST

```{gemm-benchmark}
:name: l8md
:model: llama3-8b
:precisions: bf16, fp8-delayed, fp8-current
:modes: autocast
:devices: h100, h200
```

A paragraph's first line,
its second, then on the third {gemm-speedup}`l8md@h100 autocast fp8-curent`
and on the fourth {gemm-speedup}`l8md autocast fp8-delayed`.
"""


def _line_of(page: str, needle: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th ``needle`` in ``page``."""
    at = -1
    for _ in range(occurrence):
        at = page.index(needle, at + 1)
    return page[:at].count("\n") + 1


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[int, list[str]]], BeautifulSoup, str]:
    """(warnings per page and line, the rST page's HTML, the whole warning text) of one build."""
    project = Project(tmp_path_factory.mktemp("roles3"))
    (project.src / "conf.py").write_text('extensions = ["myst_parser", "gemm_benchmark"]\nproject = "r"\n'
                                         'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    q = build_question(model="llama3-8b")
    project.store(make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",)))
    project.store(make_document(q, device=H200, precisions=PRECISIONS, modes=("autocast",), speed=1.2))
    project.store(make_document(q, device=GH200, precisions=PRECISIONS, modes=("autocast",), speed=1.1))
    project.page("index", INDEX)
    (project.src / "mdpage.md").write_text(MYST, encoding="utf-8")
    warnings, _ = project.build()
    out: dict[str, dict[int, list[str]]] = {}
    for match in re.finditer(r"(\w+)\.(?:rst|md):(\d+): WARNING: (.*)", warnings):
        out.setdefault(match.group(1), {}).setdefault(int(match.group(2)), []).append(match.group(3))
    return out, project.html(), warnings


def _shown(soup: BeautifulSoup, label: str) -> list[str]:
    """The values (abbr or code) of the paragraph starting with ``label``."""
    para = next(p for p in soup.select("p") if p.get_text().startswith(label))
    return [n.get_text() for n in para.select("abbr, code")]


# ------------------------------------------------------------------ 1. the role's own line
def test_a_roles_warning_is_at_the_roles_own_line_in_rst(built):
    """Before: every warning of the paragraph at its first line (docutils gives roles that line)."""
    index = built[0]["index"]
    bad = _line_of(INDEX, "fp8-curent`")
    assert any("unknown precision 'fp8-curent'" in w for w in index.get(bad, [])), index
    first = _line_of(INDEX, "A paragraph's first line")
    assert first not in index, index[first]
    one, two = _line_of(INDEX, "`nosuch"), _line_of(INDEX, "`nosuch", 2)
    assert two == one + 1
    assert any("no gemm-benchmark directive is named 'nosuch'" in w for w in index.get(one, [])), index
    assert any("no gemm-benchmark directive is named 'nosuch'" in w for w in index.get(two, [])), index


def test_a_roles_warning_in_a_list_item_is_at_its_own_line(built):
    index = built[0]["index"]
    line = _line_of(INDEX, "fp8-curent`", 2)
    assert any("unknown precision 'fp8-curent'" in w for w in index.get(line, [])), index


@pytest.mark.parametrize("typo", ["fp8-curant", "fp8-curnet"])
def test_a_roles_warning_in_a_table_cell_or_a_title_is_at_its_own_line(built, typo):
    """A cell's role on the cell's first line (docutils gave it the cell's last); a title's role on
    the title's line (docutils gives the title node its underline's line: the role's own is right)."""
    index = built[0]["index"]
    line = _line_of(INDEX, typo)
    assert any(f"unknown precision '{typo}'" in w for w in index.get(line, [])), index


def test_a_roles_warning_is_at_the_roles_own_line_in_myst(built):
    md = built[0]["mdpage"]
    bad, ambiguous = _line_of(MYST, "fp8-curent`"), _line_of(MYST, "`l8md autocast")
    assert any("unknown precision 'fp8-curent'" in w for w in md.get(bad, [])), md
    assert any("l8md is shown on" in w for w in md.get(ambiguous, [])), md
    assert _line_of(MYST, "A paragraph's first line") not in md, md


# ------------------------------------------------------------------ 2. which GPU, when several
def test_a_role_without_device_on_several_devices_names_the_spellings(built):
    """Before: ``l8 autocast fp8-delayed`` on a directive showing h100 and h200 quoted the H100's
    number without a word; the reader could not tell which GPU it was."""
    index = built[0]["index"]
    line = _line_of(INDEX, "`l8 autocast fp8-delayed`")
    found = [w for w in index.get(line, []) if "is shown on" in w]
    assert found, index
    assert "l8 is shown on h100 and h200: write l8@h100 or l8@h200" in found[0], found
    assert found[0].endswith("[gemm_benchmark.role]"), found


def test_the_ambiguous_role_still_shows_the_first_devices_number(built):
    soup = built[1]
    ambiguous, = _shown(soup, "Ambiguous")
    h100, h200 = _shown(soup, "Explicit")
    assert ambiguous == h100 != h200


def test_one_device_needs_no_device_and_no_listing_warns_too(built):
    index = built[0]["index"]
    alone = _line_of(INDEX, "`solo autocast")
    assert alone not in index, index[alone]
    assert _shown(built[1], "Alone") and _shown(built[1], "Alone")[0] != "n/a"
    unlisted = _line_of(INDEX, "`every autocast")
    found = [w for w in index.get(unlisted, []) if "every is shown on" in w]
    assert found and "write every@" in found[0], index.get(unlisted)
    assert _shown(built[1], "Unlisted")[0] != "n/a"  # the first device's number, as for a listed one


# ------------------------------------------------------------------ 3. a GPU with no result
def test_a_device_with_no_result_says_the_cache_has_none_and_how_to_measure(built):
    """Before: "bw shows no device 'b200' (it shows h100-80gb-hbm3; ...)", which does not say that
    nobody has measured it, nor how to."""
    index = built[0]["index"]
    line = _line_of(INDEX, "`bw@b200")
    message = " ".join(index.get(line, []))
    assert "no result for b200 is in the cache" in message, index
    assert "h100" in message and "h200" in message  # the GPUs that are
    assert "build the docs on a b200 GPU in execution mode auto" in message and "gemm-bench refresh" in message
    assert "shows no device" not in message


def test_a_directive_whose_devices_have_no_result_says_which_and_how_to_measure(built):
    message = " ".join(built[0]["index"].get(_line_of(INDEX, "`bwonly autocast"), []))
    assert "bwonly has no measured result on any device: no result for b200 is in the cache" in message, message
    assert "build the docs on such a GPU in execution mode auto" in message


def test_a_device_neither_listed_nor_measured_says_both(built):
    message = " ".join(built[0]["index"].get(_line_of(INDEX, "`l8@b200"), []))
    assert "no result for b200 is in the cache" in message and ":devices:" in message, message


def test_a_device_measured_but_not_listed_says_to_list_it(built):
    message = " ".join(built[0]["index"].get(_line_of(INDEX, "`l8@gh200"), []))
    assert "does not show gh200" in message and ":devices:" in message, message
    assert "no result" not in message


def test_a_typo_in_a_roles_device_is_named_unknown_with_the_known_names(built):
    message = " ".join(built[0]["index"].get(_line_of(INDEX, "`l8@h10 "), []))
    assert "'h10' is no known device" in message and "known names: " in message, message
    assert "no result" not in message and message.endswith("[gemm_benchmark.devices]"), message


def test_the_role_and_the_panel_share_one_wording() -> None:
    """The directive's "Not measured yet" panel and the role say how to measure in the same words."""
    from gemm_benchmark.execution import how_to_measure
    from gemm_benchmark.render_block import not_measured_admonition

    request = SimpleNamespace(precisions=("bf16",), devices=("b200",), question=build_question(model="llama3-8b"))
    text = not_measured_admonition(request, "", Path("docs/_gemm_cache")).astext()  # type: ignore[arg-type]
    assert f"To add one, {how_to_measure('such a GPU', Path('docs/_gemm_cache'))}." in text
