"""Reader pass 3, item 12: a directive rejected for bad options was not registered, so its duplicate
``:name:`` surfaced only on the build after the author fixed the options. Now the clash is reported
at once, on one page and across pages, in rST and MyST. Since round 4 (issue 44) a name belongs to its
first definition in the site's order, which gets no warning (nothing is re-targeted); the later
definition is told at its own line, naming the first."""

from __future__ import annotations

import pytest

from .test_ext_author_mistakes import located_warnings

INDEX = """\
Names
=====

.. toctree::

   other
   mdpage

.. gemm-benchmark::
   :name: clash
   :model: te-guide-5b

.. gemm-benchmark::
   :name: clash
   :model: te-guide-5b
   :precisions: bf16, fp8-currnet

.. gemm-benchmark::
   :name: lonely
   :model: te-guide-5b
   :hidden-size: forty
"""

OTHER = """\
Other
=====

.. gemm-benchmark::
   :name: across
   :model: te-guide-5b

.. gemm-benchmark::
   :name: summed
   :model: te-guide-5b

.. gemm-benchmark-summary::
   :name: summed
   :models: te-guide-5b
   :show: tabel
"""

MYST = """\
# MyST

```{gemm-benchmark}
:name: across
:model: te-guide-5b
:devices: h10
```
"""


@pytest.fixture(scope="module")
def warnings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, list[str]]]:
    return located_warnings(tmp_path_factory.mktemp("names"), INDEX, OTHER, MYST)


def clashes(found: dict[str, dict[int, list[str]]], page: str, line: int) -> list[str]:
    return [w for w in found.get(page, {}).get(line, []) if "is also the name of" in w]


def test_a_rejected_directive_s_name_clash_is_reported_at_both_places(warnings):
    first, rejected = clashes(warnings, "index", 9), clashes(warnings, "index", 13)
    assert first == []
    assert len(rejected) == 1 and "'clash' is also the name of the directive at index.rst:9" in rejected[0]
    assert "options are bad" in rejected[0] and rejected[0].endswith("[gemm_benchmark.option]")
    assert any("fp8-currnet" in w for w in warnings["index"][16])  # its bad option is still reported


def test_across_pages_and_formats_with_the_rejected_one_first(warnings):
    """The rejected directive comes first in page order: roles quote the valid one, and the message says so."""
    md, rst = clashes(warnings, "mdpage", 3), clashes(warnings, "other", 4)
    assert len(md) == 1 and "directive at other.rst:4" in md[0] and "options are bad" in md[0]
    assert rst == []  # the first in the site's order (the toctree) keeps its name and gets no warning


def test_a_rejected_name_without_a_twin_is_no_clash(warnings):
    assert not any("'lonely' is also" in w for page in warnings.values() for lines in page.values() for w in lines)


def test_a_rejected_summary_s_name_clash_is_reported_too(warnings):
    """gemm-benchmark-summary's bad options kept its :name: out of the clash check as gemm-benchmark's did."""
    first, rejected = clashes(warnings, "other", 8), clashes(warnings, "other", 12)
    assert first == []
    assert len(rejected) == 1 and "'summed' is also the name of the directive at other.rst:8" in rejected[0]
    assert "options are bad" in rejected[0]
