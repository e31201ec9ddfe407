"""Reader pass 3, item 12: a directive rejected for bad options was not registered, so its duplicate
``:name:`` surfaced only on the build after the author fixed the options. Now the clash is reported
at once, at both directives (file and line), on one page and across pages, in rST and MyST."""

from __future__ import annotations

import re

import pytest

from .conftest import copy_real_document
from .test_correctness import Project

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
def warnings(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], list[str]]:
    project = Project(tmp_path_factory.mktemp("names"))
    (project.src / "conf.py").write_text('extensions = ["myst_parser", "gemm_benchmark"]\nproject = "n"\n'
                                         'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    copy_real_document(project.cache, "h100-te-guide-5b.json")
    project.page("index", INDEX)
    project.page("other", OTHER)
    (project.src / "mdpage.md").write_text(MYST, encoding="utf-8")
    text, _ = project.build()
    out: dict[tuple[str, int], list[str]] = {}
    for match in re.finditer(r"(\w+\.(?:rst|md)):(\d+): WARNING: (.*)", text):
        out.setdefault((match.group(1), int(match.group(2))), []).append(match.group(3))
    return out


def clashes(found: dict[tuple[str, int], list[str]], place: tuple[str, int]) -> list[str]:
    return [w for w in found.get(place, []) if "is also the name of" in w]


def test_a_rejected_directive_s_name_clash_is_reported_at_both_places(warnings):
    first, rejected = clashes(warnings, ("index.rst", 9)), clashes(warnings, ("index.rst", 13))
    assert len(first) == 1 and "'clash' is also the name of the directive at index.rst:13" in first[0]
    assert "roles quote the first, index.rst:9" in first[0]
    assert len(rejected) == 1 and "'clash' is also the name of the directive at index.rst:9" in rejected[0]
    assert "options are bad" in rejected[0] and rejected[0].endswith("[gemm_benchmark.option]")
    assert any("fp8-currnet" in w for w in warnings[("index.rst", 16)])  # its bad option is still reported


def test_across_pages_and_formats_with_the_rejected_one_first(warnings):
    """The rejected directive comes first in page order: roles quote the valid one, and the message says so."""
    md, rst = clashes(warnings, ("mdpage.md", 3)), clashes(warnings, ("other.rst", 4))
    assert len(md) == 1 and "directive at other.rst:4" in md[0] and "options are bad" in md[0]
    assert "roles quote the first, other.rst:4" in md[0]  # never the rejected one, first in page order
    assert len(rst) == 1 and "directive at mdpage.md:3" in rst[0] and "roles quote the first, other.rst:4" in rst[0]


def test_a_rejected_name_without_a_twin_is_no_clash(warnings):
    assert not any("'lonely' is also" in w for lines in warnings.values() for w in lines)
