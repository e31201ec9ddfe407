"""An author's mistakes, each named where it is made (issue 35 item 4).

Every bad option of a directive is reported, each at its own line; a typo'd device is named as
unknown, with the names there are; a ``:name:`` given twice is reported at both directives; a role
that shows "n/a" in prose is a warning, whatever the directive's ``:missing:``. One Sphinx build
(rST and MyST pages) serves the located checks; the parser's own tests need none.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemm_benchmark.options import OptionError, parse_options

from .conftest import copy_real_document
from .test_correctness import Project

BAD_RST = """\
Mistakes
========

.. toctree::

   other
   mdpage

.. gemm-benchmark::
   :name: bad
   :model: te-guide-5b
   :hidden-size: forty
   :precisions: bf16, fp8-currnet
   :devices: h10

.. gemm-benchmark::
   :name: twice
   :model: te-guide-5b

.. gemm-benchmark::
   :name: twice
   :model: te-guide-5b
   :precisions: bf16, fp8-current

.. gemm-benchmark::
   :name: acrosspages
   :model: te-guide-5b

.. gemm-benchmark::
   :name: blackwell
   :model: te-guide-5b
   :devices: b200
   :missing: note

It makes it :gemm-speedup:`blackwell autocast fp8-current` faster.

Every GEMM here is large, so the kernels run well, and training sees :gemm-speedup:`twice autocast fp8-current`.
"""

OTHER_RST = """\
Other
=====

.. gemm-benchmark::
   :name: acrosspages
   :model: te-guide-5b

.. gemm-benchmark-summary::
   :models: te-guide-5b, llama3-8b/tp0
   :devices: h100, h10
   :show: table
"""

MYST = """\
# MyST

```{gemm-benchmark}
:name: bad-md
:model: te-guide-5b
:hidden-size: forty
:devices: h100, h10, b2000
```
"""


def located_warnings(root: Path, index: str, other: str, myst: str) -> dict[str, dict[int, list[str]]]:
    """Warnings of one cache-mode build of three pages (``index.rst``, ``other.rst``, ``mdpage.md``)
    with the H100's Transformer Engine guide layer cached, per page and line."""
    project = Project(root)
    (project.src / "conf.py").write_text('extensions = ["myst_parser", "gemm_benchmark"]\nproject = "m"\n'
                                         'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    copy_real_document(project.cache, "h100-te-guide-5b.json")
    project.page("index", index)
    project.page("other", other)
    (project.src / "mdpage.md").write_text(myst, encoding="utf-8")
    warnings, _ = project.build()
    out: dict[str, dict[int, list[str]]] = {}
    for match in re.finditer(r"(\w+)\.(?:rst|md):(\d+): WARNING: (.*)", warnings):
        out.setdefault(match.group(1), {}).setdefault(int(match.group(2)), []).append(match.group(3))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, list[str]]]:
    """Warnings of one build of the three pages, per page and line."""
    return located_warnings(tmp_path_factory.mktemp("mistakes"), BAD_RST, OTHER_RST, MYST)


def test_every_bad_option_is_reported_at_its_own_line(built):
    """Before: one message per directive (the first bad option), at the directive's line."""
    index = built["index"]
    assert "'forty' is not a whole number" in index[12][0] and index[12][0].endswith("[gemm_benchmark.option]")
    assert "unknown value 'fp8-currnet'" in index[13][0] and index[13][0].endswith("[gemm_benchmark.precisions]")
    assert "'h10' is no known device" in index[14][0] and index[14][0].endswith("[gemm_benchmark.devices]")
    assert 9 not in index  # nothing at the directive's own line
    md = built["mdpage"]  # MyST: the lines of the options inside the fence
    assert "'forty' is not a whole number" in md[6][0]
    assert "'h10', 'b2000' are no known devices" in md[7][0]


def test_an_unknown_device_is_named_with_the_known_names(built):
    """Before: ":devices: h10" read "no cached result for device(s) h10" and the page told the reader
    to measure on such a GPU."""
    message = built["index"][14][0]
    assert "no cached result" not in message
    known = message.split("known names: ", 1)[1]
    assert "h100" in known and "h200" in known and "h100-80gb-hbm3" in known


def test_a_name_given_twice_is_an_error_at_the_later_directive(built):
    """Before: docutils' "Duplicate explicit target name" at neither directive's line on one page,
    Sphinx's untyped "duplicate label" at one of them across pages. Issue 44: the first definition in
    the site's order keeps the name, warned about nowhere; the later one is the error (both were
    warned about, the "first" then being the first page by name)."""
    index, other = built["index"], built["other"]
    assert not any("'twice'" in w for w in index.get(16, []))
    assert any("'twice' is already the name of the directive at index.rst:16" in w for w in index[20])
    assert not any("Duplicate explicit target" in w for lines in index.values() for w in lines)
    assert not any("'acrosspages'" in w for w in index.get(25, []))  # index is first: the toctree's root
    assert any("'acrosspages' is already the name of the directive at index.rst:25" in w
               and w.endswith("[gemm_benchmark.option]") for w in other[4])


def test_a_role_showing_n_a_is_a_warning_even_with_missing_note(built):
    """Before: with ``:missing: note`` the prose read "makes it n/a faster" and -W passed (an info line)."""
    index = built["index"]
    assert 29 not in index  # the directive's own :missing: note: its panel, no warning
    assert any(":gemm-speedup:`blackwell autocast fp8-current`" in w and w.endswith("[gemm_benchmark.role]")
               for w in index[35])


def test_parse_options_collects_every_bad_option(tmp_path):
    with pytest.raises(OptionError) as info:
        parse_options({"model": "te-guide-5b", "colour": "blue", "hidden-size": "forty",
                       "precisions": "fp8-currnet", "show": "chart", "missing": "maybe"},
                      srcdir=tmp_path, docdir=tmp_path)
    assert [e.option for e in info.value.errors] == ["colour", "hidden-size", "precisions", "show", "missing"]
    assert info.value.errors[0] is info.value  # the first, raised, for callers that show one


def test_a_bad_field_does_not_add_an_invented_config_error(tmp_path):
    """A question is built only from good inputs: 'forty' must not become "hidden-size is required"."""
    with pytest.raises(OptionError) as info:
        parse_options({"hidden-size": "forty", "ffn-hidden-size": "256", "num-attention-heads": "4"},
                      srcdir=tmp_path, docdir=tmp_path)
    assert [e.option for e in info.value.errors] == ["hidden-size"]


def test_known_devices_are_aliases_their_slugs_cached_slugs_and_this_gpu(tmp_path):
    from gemm_benchmark.options import known_devices

    (tmp_path / "0123456789abcdef--a100-sxm4-80gb.json").write_text("{}", encoding="utf-8")
    names = known_devices(tmp_path, local="NVIDIA L40S")
    assert {"h100", "h100-80gb-hbm3", "a100-sxm4-80gb", "l40s"} <= names
    parse_options({"model": "te-guide-5b", "devices": "a100-sxm4-80gb, H100"}, srcdir=tmp_path, docdir=tmp_path,
                  known_devices=names)
    # Without the list (gemm-bench refresh collecting questions) any slug is accepted.
    parse_options({"model": "te-guide-5b", "devices": "h10"}, srcdir=tmp_path, docdir=tmp_path)


def test_option_line_finds_rst_and_myst_options():
    from gemm_benchmark.options import option_line

    assert option_line(".. gemm-benchmark::\n   :name: x\n   :devices: h10\n", 9, "devices") == 11
    assert option_line("```{gemm-benchmark}\n---\ndevices: h10\n---\n```\n", 3, "devices") == 5
    assert option_line(".. gemm-benchmark::\n   :name: x\n", 9, "devices") == 9


def test_a_gemm_quantity_called_training_is_a_located_warning(built):
    """Issue 35 item 1: "training sees 1.62×" where 1.62× is the autocast GEMMs (the step is 1.47×)."""
    assert any(":gemm-speedup:`twice autocast fp8-current` quotes GEMM time, but its words say 'training'" in w
               and w.endswith("[gemm_benchmark.claim]") for w in built["index"][37])


@pytest.mark.parametrize(("before", "role", "problem"), [
    # the tutorial's sentence before and after its fix
    ("Every GEMM here is large (M = 15872 tokens), so the kernels alone run FP8 current scaling at 1.94× the "
     "speed of BF16, and training sees ", "gemm-speedup", True),
    ("Every GEMM here is large (M = 15872 tokens), so the kernels alone run FP8 current scaling at 1.94× the "
     "speed of BF16, and the autocast GEMMs (the GEMMs as training runs them, their quantization included) at ",
     "gemm-speedup", False),
    ("The training step runs at ", "gemm-speedup", True),
    ("The training step runs at ", "gemm-step-speedup", False),
    ("The step's GEMMs run at ", "gemm-time", False),
    ("Training is slow. The GEMMs run at ", "gemm-speedup", False),
])
def test_noun_problem(before, role, problem):
    from gemm_benchmark.words import noun_problem

    assert bool(noun_problem(before, role, "x")) is problem


def test_every_bad_option_of_a_summary_is_reported_at_its_own_line(tmp_path) -> None:
    """Issue 35: the summary directive reported only its first bad option (the directive had been
    fixed, the summary not)."""
    project = Project(tmp_path)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :show: tabel\n   :accuracy: rows\n   :missing: nope\n")
    warnings, _ = project.build()
    found = {int(m.group(1)): m.group(2) for m in re.finditer(r"index\.rst:(\d+): WARNING: (.*)", warnings)}
    assert "unknown value 'tabel'" in found[6] and "unknown value 'rows'" in found[7], found
    assert "unknown value 'nope'" in found[8] and 4 not in found, found


def test_a_summary_names_an_unknown_device_and_every_other_bad_option(built):
    """Before: a summary's ``:devices: h10`` passed unchecked (the page said "not measured on h10 yet"
    and told the reader to measure it), and a bad model entry hid every other bad option."""
    other = built["other"]
    assert any("sizes start at 1" in w for w in other[9]), other
    devices = [w for w in other[10] if "'h10' is no known device" in w]
    assert devices and devices[0].endswith("[gemm_benchmark.devices]"), other
    assert "h100-80gb-hbm3" in devices[0].split("known names: ", 1)[1]
    assert len(devices) == 1 and 8 not in other, other  # once per summary, not once per model


def test_a_summary_model_id_whose_size_does_not_divide_blames_the_models_option(tmp_path) -> None:
    """A reader pass: `:models: llama3-70b/tp9` was blamed on `:tensor-model-parallel-size: 9`, an option
    the author never wrote; the warning now sits at `:models:`, naming the id and what it set."""
    project = Project(tmp_path)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: llama3-70b/tp9\n"
                 "   :precisions: bf16, fp8-current\n")
    warnings, _ = project.build()
    found = {int(m.group(1)): m.group(2) for m in re.finditer(r"index\.rst:(\d+): WARNING: (.*)", warnings)}
    assert 5 in found and ":models: 'llama3-70b/tp9' sets :tensor-model-parallel-size: to 9: 9 does not divide" \
        in found[5], found
