"""The answers table (``gemm-answers-table``) and the models' pages cannot disagree (issue 44 item 1).

The landing page leads with every model's answer on every GPU, each cell linking to the model's page.
One Sphinx build of the site's own pages (docs/models/*.rst and the table exactly as docs/index.rst
asks for it) over the committed cache: for every model and GPU, the cell's recipe and speedup are
those the model's page states in its answer sentence on that GPU's tab, and the cell links there.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_benchmark import answer_text
from gemm_benchmark.answers_table import answer_cell
from gemm_benchmark.values import Fastest

from .test_correctness import Project

DOCS = Path(__file__).resolve().parent.parent / "docs"
DISPLAY_TO_ID = {p.display: pid for pid, p in PRECISIONS.items()}
#: The answer sentence's decision: "... so train in FP8 Delayed: 1.36× the tokens per second of BF16 ...",
#: or "stay in BF16: ...".
_TRAIN_IN = re.compile(r"train in (?P<recipe>[^:]+): (?P<speedup>\d+\.\d\d)× the tokens per second of BF16")
_STAY = re.compile(r"stay in BF16: .* in the model's step")
_CELL = re.compile(r"(?P<recipe>FP8 \w+|MXFP8|NVFP4) (?P<speedup>\d+\.\d\d)×|stay in BF16")


def _index_directive() -> str:
    """The answers table's block as docs/index.rst writes it (so the test asks what the site asks)."""
    text = (DOCS / "index.rst").read_text(encoding="utf-8")
    found = re.search(r"^\.\. gemm-answers-table::\n(?:   .*\n)+", text, re.MULTILINE)
    assert found, "docs/index.rst has no gemm-answers-table"
    return found.group(0)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, str]:
    project = Project(tmp_path_factory.mktemp("answers"))
    shutil.copytree(DOCS / "_gemm_cache", project.cache)
    pages = sorted(p.stem for p in (DOCS / "models").glob("*.rst"))
    (project.src / "models").mkdir()
    for page in pages:
        shutil.copy(DOCS / "models" / f"{page}.rst", project.src / "models" / f"{page}.rst")
    toctree = "\n".join(f"   models/{p}" for p in pages)
    project.page("index", f"Answers\n=======\n\n{_index_directive()}\n.. toctree::\n\n{toctree}\n")
    warnings, _ = project.build(fresh=True)
    return project, warnings


def _page_answers(soup: BeautifulSoup) -> dict[str, str]:
    """A model page's answer sentence per GPU tab (the tab's name, as the link's ``#gpu=`` says it), from the
    page's first summary that has that tab."""
    out = {}
    for panel in soup.select("div.gemm-summary [role=tabpanel]"):
        tab = soup.select_one(f"[aria-controls='{panel['id']}']")
        sentence = panel.select_one("p.gemm-summary-answer")
        if tab is not None and sentence is not None:
            # the first summary's (the page's lead: gpt-oss-120b's page leads with EP 8, EP 1 follows)
            out.setdefault(tab.get_text(strip=True),
                           " ".join(sentence.get_text(" ", strip=True).replace("\u2019", "'").split()))
    return out


def test_every_cell_states_its_models_answer_and_links_to_it(built: tuple[Project, str]) -> None:
    project, warnings = built
    assert "gemm-answers-table" not in warnings, warnings  # every model has a page; no link left out
    index = project.html("index")
    table = index.select_one("table.gemm-answers-table")
    assert table is not None, "no answers table on the page"
    gpus = [th.get_text(strip=True) for th in table.select("thead th")][1:]
    assert len(gpus) == 2, gpus
    rows = table.select("tbody tr")
    models = sorted((DOCS / "models").glob("*.rst"))
    assert len(rows) == len(models) >= 10
    checked = unmeasured = 0
    for row in rows:
        model, *cells = row.select("td")
        for gpu, cell in zip(gpus, cells, strict=True):
            link = cell.select_one("a")
            assert link is not None, f"{model.get_text()} on {gpu}: no link"
            page, _, fragment = link["href"].partition("#")
            if cell.get_text(strip=True) == "not measured yet":  # to the page's tab that says so
                tab = fragment.removeprefix("gpu=").replace("%20", " ")
                assert tab.isupper() and "is not measured on" in link.get("title", ""), link
                tabs = [t.get_text(strip=True) for t in project.html(page.removesuffix(".html")).select("[role=tab]")]
                assert tab in tabs, f"{page}: no {tab} tab ({tabs})"
                unmeasured += 1
                continue
            assert fragment == "gpu=" + gpu.replace(" ", "%20"), link["href"]
            said = _page_answers(project.html(page.removesuffix(".html")))
            assert gpu in said, f"{page} has no {gpu} tab ({sorted(said)})"
            sentence, shown = said[gpu], cell.get_text(" ", strip=True)
            got = _CELL.fullmatch(shown)
            assert got, shown
            recommended = _TRAIN_IN.search(sentence)
            if got["recipe"]:
                assert recommended, f"{model.get_text()} on {gpu}: cell {shown!r}, page says {sentence[:200]}"
                assert (got["recipe"], got["speedup"]) == (recommended["recipe"].strip(), recommended["speedup"]), (
                    f"{model.get_text()} on {gpu}: cell {shown!r}, page says {sentence[:240]}")
            else:
                assert not recommended and _STAY.search(sentence), (shown, sentence[:240])
            checked += 1
    # every cell is checked; the unmeasured ones are the EP 8 layers the H100 has not measured (session 19)
    assert checked + unmeasured == 2 * len(models) and unmeasured == 2


def test_a_cell_reads_the_sentences_decision_and_never_decides_again() -> None:
    """The cell is the sentence's verdict in a few words; a sentence without one gives "no answer"."""
    verdict = Fastest("fp8-current", 1.234, "fp8-current", 1.234, (), "FP8")
    # The run's speedup with communication in leads, as in the sentence; the rank's compute in the tooltip.
    sentence = answer_text.Sentence("…", verdict=verdict, basis="model", microbatches=8, run_speedup=1.187,
                                    layout="8 GPUs: DP 8, distributed optimizer, G = 8")
    cell = answer_cell(sentence, "H200")
    assert (cell.text, cell.recipe, cell.speedup) == ("FP8 Current 1.19×", "fp8-current", 1.187)
    assert "G = 8" in cell.tooltip and "1.23×" in cell.tooltip and "with communication in, on 8 GPUs" in cell.tooltip
    # Without a composed layout step, the rank's compute, and the cell says so as the sentence does.
    alone = answer_cell(answer_text.Sentence("…", verdict=verdict, basis="model", microbatches=8), "H200")
    assert (alone.text, alone.speedup) == ("FP8 Current 1.23× (one rank's compute)", 1.234)
    # Where communication reverses the pick, the cell says so too.
    turned = answer_cell(dataclasses.replace(sentence, reversed_by="fp8-block"), "H200")
    assert turned.text == "FP8 Current 1.19× (FP8 Block faster with communication)"
    layer = answer_cell(answer_text.Sentence("…", verdict=verdict, basis="step"), "H200")
    assert layer.text == "FP8 Current 1.23× (one layer's training step)"  # never passed off as the model's
    bf16 = answer_cell(answer_text.Sentence("…", verdict=Fastest(BASELINE, 1.0, "fp8-block", 0.98, (), "FP8"),
                                            basis="model", microbatches=8), "H100")
    assert bf16.text == "stay in BF16" and "0.98" in bf16.tooltip
    none = answer_cell(answer_text.Sentence("H100: no recommendation: BF16 failed."), "H100")
    assert none.text == "no answer" and "BF16 failed" in none.tooltip
