"""Sentences on the built site that claim a reason, an order or a mark must match what is rendered.

The landed site once said that the Hopper results list Transformer Engine's reason for MXFP8 and
NVFP4 (the Hopper blocks asked for neither) and that the tutorial's figure shows the whole model
last (it is first). Prose is typed by hand, the content beside it is computed, so they drift
apart. Here each such sentence is a row of :data:`CLAIMS` (page, the words that make the claim,
a check of the rendered content), run against one cache-mode build of ``docs/``; and any sentence
on a page that shows measurements which *looks* like such a claim (it names an order, a reason or a
mark) must be in :data:`CLAIMS` or in :data:`REVIEWED` with the reason it needs no check, so a new
claim cannot slip in unchecked. A claim whose sentence is gone fails too: update the table.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from bs4 import BeautifulSoup, Tag

from tests.site_build import BuiltSite, shared_docs_build


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    return shared_docs_build(tmp_path_factory)


# ------------------------------------------------------------------------------ reading a page


def _text(tag: Tag) -> str:
    """Visible text, whitespace collapsed and typographic quotes made plain (smartquotes)."""
    text = tag.get_text(" ", strip=True).replace("\u2019", "'").replace("\u2018", "'")
    text = text.replace("\u201c", '"').replace("\u201d", '"')
    return re.sub(r"\s+", " ", text)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'*])")
#: Rendered measurements, code and tables: not prose (a table's caption is read on its own).
_NOT_PROSE = "div.gemm-benchmark, div.gemm-summary, div.highlight, pre, table, nav, div.toctree-wrapper"


@dataclasses.dataclass(frozen=True)
class Sentence:
    page: str
    text: str
    #: The paragraph, list item or caption the sentence is in (checks read its roles).
    element: Tag


def sentences(soup: BeautifulSoup, page: str) -> Iterator[Sentence]:
    """The page's prose sentences and its tables' captions (where the summary explains its marks)."""
    article = soup.select_one("article[role=main]") or soup.find("article") or soup
    not_prose = {id(tag) for tag in article.select(_NOT_PROSE)}
    for element in article.find_all(["p", "li", "dd", "caption"]):
        if element.name != "caption" and any(id(parent) in not_prose for parent in element.parents):
            continue
        if element.name in ("li", "dd") and element.find(["p", "li"]):
            continue  # its paragraphs are read themselves
        for text in _SENTENCE_END.split(_text(element)):
            if text:
                yield Sentence(page, text, element)


# ------------------------------------------------------------------------------ roles in a sentence


@dataclasses.dataclass(frozen=True)
class RoleValue:
    """A number a role rendered, read from its tooltip (which carries more digits and the source)."""

    value: float
    precision: str
    mode: str
    device: str
    name: str
    shape: str


_ROLE_TITLE = re.compile(r"^(?P<value>\d+(?:\.\d+)?)× BF16[^:]*: (?P<rest>.*) \((?P<name>[^()]+)\)$")


def role_values(element: Tag) -> list[RoleValue]:
    """Every speedup role (``abbr.gemm-value`` whose tooltip starts ``N× BF16``) in ``element``."""
    out = []
    for abbr in element.select("abbr.gemm-value"):
        match = _ROLE_TITLE.match(abbr.get("title", ""))
        if not match:
            continue
        parts = match["rest"].split(", ")
        if len(parts) < 3:
            continue
        out.append(RoleValue(float(match["value"]), parts[-3], parts[-2], parts[-1],
                             match["name"], parts[0] if len(parts) > 3 else ""))
    return out


def one_role(roles: list[RoleValue], **match: str) -> RoleValue:
    """The role with these fields (the same value quoted twice counts once)."""
    found = {r for r in roles if all(getattr(r, k) == v for k, v in match.items())}
    if len(found) != 1:
        raise LookupError(f"expected one role with {match}, found {sorted(found, key=repr) or 'none'}")
    return found.pop()


# ------------------------------------------------------------------------------ the checks
#: A check gets the built site, the page's soup and the sentence; it returns what is wrong (empty: holds).
Check = Callable[[BuiltSite, BeautifulSoup, Sentence], list[str]]


def _section(soup: BeautifulSoup, heading_prefix: str) -> Tag | None:
    for heading in soup.find_all(["h1", "h2", "h3"]):
        if _text(heading).startswith(heading_prefix):
            return heading.find_parent("section")
    return None


def _tick_labels(svg: Tag) -> list[tuple[float, str, bool]]:
    """(y, label, bold) of the category-axis labels of a figure, top first (matplotlib's ytick groups).

    A label wrapped over several lines is one label: its lines joined in order, at its first line's y.
    """
    out = []
    for group in svg.select("g[id*=ytick]"):
        lines = sorted(((float(t.get("y", "0")), _text(t), t) for t in group.find_all("text") if _text(t)),
                       key=lambda line: line[0])
        if lines:
            first = lines[0][2]
            style = (first.get("style") or "") + " " + (first.get("font-weight") or "")
            bold = bool(re.search(r"font-weight:\s*(bold|[6-9]00)|^\s*(bold|[6-9]00)\s*$", style))
            out.append((lines[0][0], " ".join(line for _, line, _ in lines), bold))
    return sorted(out)


def figures_start_with(label: str, *, bold: bool) -> Check:
    """Every figure on the page draws ``label`` as its first (top) bar, in bold if ``bold``."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        # The speedup figures (the optional latency, TFLOP/s and roofline figures have no total row).
        svgs = [svg for svg in soup.select("div.gemm-figure svg")
                if "speedup vs BF16 per GEMM and in total" in svg.get("aria-label", "")]
        if not svgs:
            return [f"{sentence.page} has no inline figure to show the order it describes"]
        problems = []
        for svg in svgs:
            labels = _tick_labels(svg)
            name = svg.get("aria-label", "a figure")
            if not labels:
                problems.append(f"{name}: no bar labels")
            elif labels[0][1] != label:
                where = [i for i, (_, text, _) in enumerate(labels) if text == label]
                problems.append(f"{name}: first bar is {labels[0][1]!r}; {label!r} is "
                                + (f"bar {where[0] + 1} of {len(labels)}" if where else "not drawn"))
            elif bold and not labels[0][2]:
                problems.append(f"{name}: {label!r} is not bold")
        return problems

    return check


def extra_figures_follow(name: str) -> Check:
    """In every tab of block ``name``: after the speedup figure, the TFLOP/s and roofline figures,
    then the speed-against-accuracy figure or a note saying why it cannot be drawn."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        block = soup.select_one(f"div.gemm-benchmark#{name}")
        if block is None:
            return [f"{sentence.page} has no block {name}"]
        problems = []
        for panel in block.select("div[role=tabpanel]"):
            labels = [svg.get("aria-label", "") for svg in panel.select("div.gemm-figure svg")]
            kinds = [("speedup" if "speedup vs BF16" in a else "tflops" if "TFLOP/s" in a else
                      "roofline" if "roofline-predicted" in a else "accuracy" if "accuracy" in a else a)
                     for a in labels]
            notes = [p.get_text(" ", strip=True) for p in panel.select("p.gemm-note")]
            if kinds[:3] != ["speedup", "tflops", "roofline"]:
                problems.append(f"{name}: figures in order {kinds}, not speedup, TFLOP/s, roofline")
            if "accuracy" not in kinds and not any("against accuracy" in n for n in notes):
                problems.append(f"{name}: neither a speed-against-accuracy figure nor a note saying why")
        return problems

    return check


_SPREAD = re.compile(r"spread (\d+(?:\.\d+)?)–(\d+(?:\.\d+)?)×")
_LEADING = re.compile(r"^(\d+(?:\.\d+)?)×")


@dataclasses.dataclass(frozen=True)
class SummaryCell:
    value: float
    low: float | None
    high: float | None
    fastest: bool
    tie: bool


_CAPTION = re.compile(r"Speedup vs BF16, (?P<model>.+) on the (?P<gpu>.+?)(?: \((?:stale|missing)[^)]*\))?: ★")
_ROW_MODES = {"Autocast GEMMs": "autocast", "Pre-quantized GEMMs": "pre-quantized"}



#: Issue 44: one page per model. The per-model tables a check reads once on the models page are on
#: these pages now; :func:`models_soup` reads them as one page again.
MODEL_PAGES = sorted(f"models/{path.stem}.html"
                     for path in (Path(__file__).resolve().parent.parent / "docs" / "models").glob("*.rst"))


def models_soup(site: BuiltSite) -> BeautifulSoup:
    """The models page with every model's page appended to its article (a fake site of one page: itself)."""
    soup = site.soup("models.html")
    if not hasattr(site, "html"):
        return soup
    soup = copy.copy(soup)  # the site's soups are parsed once and shared: never moved from or into
    article = soup.select_one("article") or soup
    for page in MODEL_PAGES:
        theirs = site.soup(page).select_one("article")
        if theirs is not None:
            article.append(copy.copy(theirs))
    return soup


def summary_table(soup: BeautifulSoup) -> Iterator[tuple[str, dict[str, SummaryCell | None]]]:
    """("model · GPU · what is timed[ · fastest: BF16]", {precision column: its number, None where n/a})
    of every per-model summary table on the page (model and GPU from its caption).

    Numbers come from the tooltips (three digits and the spread), marks from the shown text.
    """
    for table in soup.select("table.gemm-summary-table"):
        caption = _CAPTION.match(_text(table.caption)) if table.caption else None
        if caption is None:
            continue  # the SQNR-per-pass table: no speedups
        columns = [_text(th) for th in table.select("thead th")][1:]
        for row in table.select("tbody tr"):
            first = row.find("td")
            what, _, flag = (_text(first) if first else "").partition(" · ")
            label = " · ".join([caption["model"], caption["gpu"], _ROW_MODES.get(what, what),
                                *([flag] if flag else [])])
            values: dict[str, SummaryCell | None] = {}
            for column, td in zip(columns, row.select("td.gemm-num"), strict=False):
                abbr = td.find("abbr")
                title = abbr.get("title", "") if abbr else ""
                leading = _LEADING.match(title)
                spread = _SPREAD.search(title)
                text = _text(td)
                values[column] = None if not leading else SummaryCell(
                    float(leading[1]), float(spread[1]) if spread else None, float(spread[2]) if spread else None,
                    "★" in text, "≈" in text)
            yield label, values


def collapsed_reasons(precisions: tuple[str, ...]) -> Check:
    """The summary names each of ``precisions`` under its table with "unsupported" and TE's reason
    (as every result file of the summary records it), and shows no column for it."""
    from gemm_bench.question.precisions import PRECISIONS

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        summary = soup.select_one("div.gemm-summary")
        if summary is None:
            return ["no summary on the page"]
        notes = [_text(p).replace("\u2019", "'") for p in summary.select("p.gemm-summary-collapsed")]
        headers = {_text(th) for th in summary.select("table.gemm-summary-table th")}
        problems = []
        for p in precisions:
            display = PRECISIONS[p].display
            if display in headers:
                problems.append(f"{display} has a column in the summary")
            if not any(display in n and "unsupported: " in n for n in notes):
                problems.append(f"{display}'s reason is not under the summary: {notes}")
        return problems

    return check


def summary_rows(soup: BeautifulSoup) -> Iterator[tuple[str, list[SummaryCell]]]:
    """(row label, its numeric cells) of every summary table on the page."""
    for label, values in summary_table(soup):
        yield label, [cell for cell in values.values() if cell is not None]


def fastest_starred(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """Each summary row with numbers has one ★, on its largest speedup or on the tie-break's pick among
    the speedups within the largest's spread (the largest then marked ≈), and it is faster than BF16;
    a row where nothing is (beyond the spread) says "fastest: BF16" instead and stars nothing."""
    problems, rows = [], 0
    for label, cells in summary_rows(soup):
        if not cells:
            continue
        rows += 1
        starred = [c for c in cells if c.fastest]
        best = max(c.value for c in cells)
        if "fastest: BF16" in label:
            clearly = [c.value for c in cells if c.value > 1 and (c.low is None or c.low > 1)]
            if starred or clearly:
                problems.append(f"{label}: says BF16 is fastest, but {len(starred)} cells are marked ★ and "
                                f"{clearly} are faster than BF16 beyond their spread")
        elif len(starred) != 1:
            problems.append(f"{label}: {len(starred)} cells marked ★")
        elif starred[0].value != best and not any(c.tie and c.value == best for c in cells):
            # issue 43 item 4: where the largest lies within the ★'s spread (≈), the tie-break picked the ★
            problems.append(f"{label}: ★ on {starred[0].value}, the largest is {best}")
        elif starred[0].value <= 1:
            problems.append(f"{label}: ★ on {starred[0].value}, not faster than BF16")
    return problems or ([] if rows else ["no summary row with a number"])


def ties_marked(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """≈ marks exactly the cells whose spread overlaps the ★ cell's (decidable at the shown digits)."""
    problems = []
    for label, cells in summary_rows(soup):
        fastest = next((c for c in cells if c.fastest), None)
        if fastest is None or fastest.low is None or fastest.high is None:
            continue
        for cell in cells:
            if cell is fastest or cell.low is None or cell.high is None:
                continue
            gap = max(cell.low - fastest.high, fastest.low - cell.high)
            if abs(gap) < 0.01:
                continue  # the tooltips' two decimals cannot decide
            if (gap < 0) != cell.tie:
                problems.append(f"{label}: {cell.value} with spread {cell.low}–{cell.high} against the fastest's "
                                f"{fastest.low}–{fastest.high} is {'not ' if not cell.tie else ''}marked ≈")
    return problems


def _autocast_cells(soup: BeautifulSoup) -> dict[str, dict[tuple[str, str], SummaryCell]]:
    """model label -> (GPU, precision) -> its autocast cell, from every per-model summary table."""
    by_label: dict[str, dict[tuple[str, str], SummaryCell]] = {}
    for label, values in summary_table(soup):
        parts = label.split(" · ")
        if len(parts) != 3 or parts[2] != "autocast":
            continue
        for column, cell in values.items():
            if cell is not None:
                by_label.setdefault(parts[0], {})[(parts[1], column)] = cell
    return by_label


def _apart(a: SummaryCell, b: SummaryCell) -> bool:
    """``a`` below ``b`` beyond both spreads (bare values where a spread is unknown)."""
    if a.high is None or b.low is None:
        return a.value < b.value
    return a.high < b.low


def split_models_gain_less(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """Every "A less than B" the sentence names (A, B: the summary's model labels; A may carry a
    parenthesis): A's autocast speedup is below B's, beyond both measured spreads, on every GPU and
    precision where both have one, and each pair is compared at least once. (Pre-quantized kernels
    keep most of their speedup: the sentence is about training.)"""
    by_label = _autocast_cells(soup)
    names = "|".join(re.escape(n) for n in sorted(by_label, key=len, reverse=True))
    pairs = re.findall(rf"({names})(?: \([^)]*\))? less than ({names})", sentence.text) if names else []
    if not pairs:
        return ["the sentence names no pair of summary models (\"A less than B\")"]
    problems = []
    for small, big in pairs:
        shared = sorted(set(by_label[small]) & set(by_label[big]))
        if not shared:
            problems.append(f"{small} and {big}: no GPU and precision has both")
        for device, precision in shared:
            a, b = by_label[small][(device, precision)], by_label[big][(device, precision)]
            if not _apart(a, b):
                problems.append(f"{device}, {precision}, autocast: {small} gains {a.value} [{a.low}-{a.high}], "
                                f"{big} {b.value} [{b.low}-{b.high}]")
    return problems


def split_models_not_told_apart(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """"A and B are not told apart everywhere": on some GPU and precision their autocast spreads overlap."""
    by_label = _autocast_cells(soup)
    names = "|".join(re.escape(n) for n in sorted(by_label, key=len, reverse=True))
    pair = re.search(rf"({names})(?: \([^)]*\))? and ({names})", sentence.text) if names else None
    if pair is None:
        return ["the sentence names no pair of summary models (\"A and B\")"]
    a_cells, b_cells = by_label[pair[1]], by_label[pair[2]]
    shared = sorted(set(a_cells) & set(b_cells))
    if shared and all(_apart(a_cells[k], b_cells[k]) or _apart(b_cells[k], a_cells[k]) for k in shared):
        return [f"{pair[1]} and {pair[2]} are apart on every GPU and precision"]
    return [] if shared else [f"{pair[1]} and {pair[2]}: no GPU and precision has both"]


def roles_ordered(name: str, relation: Callable[[Callable[..., float]], bool], says: str) -> Check:
    """The speedup roles in the sentence's paragraph satisfy ``relation`` (``get(**fields)`` -> value)."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        roles = [r for r in role_values(sentence.element) if r.name == name]

        def get(**fields: str) -> float:
            return one_role(roles, **fields).value

        try:
            holds = relation(get)
        except LookupError as exc:
            return [f"the paragraph's roles cannot show it: {exc}"]
        return [] if holds else [f"the rendered values do not show that {says}: {sorted(set(roles), key=repr)}"]

    return check


_MODEL_STEP_CAPTION = re.compile(r"The model's step, (?P<model>.+?) on the (?P<gpu>.+?): ")


def _preset_of(label: str) -> str:
    """The preset a summary's model label names ("Llama 3 70B (TP 8)" -> llama3-70b)."""
    from gemm_bench.question.config import PRESETS
    from gemm_benchmark.summary_answer import model_label

    name = label.split(" (")[0]
    found = [p for p in PRESETS if model_label(p, None) == name]
    if len(found) != 1:
        raise LookupError(f"no one preset is named {name!r}: {found}")
    return found[0]


def every_model_has_a_layer_step(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """Only manual shapes and sweeps lack a layer step: every model on the models page, mixtures of
    experts and tensor-parallel ranks included, has a training-step row with a number on some GPU."""
    models: set[str] = set()
    stepped: set[str] = set()
    for label, values in summary_table(models_soup(site)):
        model, _, what = label.split(" · ")[:3]
        models.add(model)
        if what == "One layer's step" and any(v is not None for v in values.values()):
            stepped.add(model)
    if not models:
        return ["models.html has no per-model summary table"]
    return [f"{m} has no training step with a number on the models page" for m in sorted(models - stepped)]


def model_step_for_every_model(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """The model's training step (its own table) is shown for every model on the models page, a
    mixture of experts and multi-latent attention included, on some GPU."""
    shown = {m["model"] for table in models_soup(site).select("table.gemm-model-step-table")
             if table.caption and (m := _MODEL_STEP_CAPTION.match(_text(table.caption)))}
    if not shown:
        return ["models.html shows no model's training step at all"]
    from gemm_bench.question.config import preset

    models = {label.split(" · ")[0] for label, _ in summary_table(models_soup(site))}
    problems = [f"{m} has no model's step on the models page" for m in sorted(models - shown)]
    moe = [m for m in shown if preset(_preset_of(m)).is_moe or preset(_preset_of(m)).is_mla]
    if not moe:
        problems.append("no mixture of experts or multi-latent attention shows its model's training step")
    return problems


# ------------------------------------------------------------------------------ comparisons across passes, units, GPUs
# Issue 35, "words that match the method": comparative words beside numbers ("least", "higher",
# "several times", "largest", a roofline ratio above 100%) that no check read.

_ANY_ROLE_TITLE = re.compile(r"^(?P<value>\d+(?:\.\d+)?)(?P<unit>× BF16|% of the dense peak| TFLOP/s| ms| dB SQNR)"
                             r"[^:]*: (?P<rest>.*) \((?P<name>[^()]+)\)$")


@dataclasses.dataclass(frozen=True)
class QuotedValue:
    """A number any per-GEMM or whole-model role rendered (:class:`RoleValue` reads speedups only)."""

    value: float
    unit: str
    gemm: str
    precision: str
    mode: str
    device: str
    name: str


def quoted_values(element: Tag) -> list[QuotedValue]:
    """Every role of ``element`` whose tooltip starts with a number and its unit, in reading order."""
    out = []
    for abbr in element.select("abbr.gemm-value"):
        match = _ANY_ROLE_TITLE.match(str(abbr.get("title", "")))
        parts = match["rest"].split(", ") if match else []
        if match and len(parts) >= 3:
            out.append(QuotedValue(float(match["value"]), match["unit"].strip(), parts[0] if len(parts) > 3 else "",
                                   parts[-3], parts[-2], parts[-1], match["name"]))
    return out


def _tab_path(tag: Tag) -> str:
    """The labels of the tabs ``tag`` sits in, outermost first ("Autocast · H100 80GB HBM3")."""
    root = tag.find_parent("html") or tag
    labels = []
    for panel in tag.find_parents(attrs={"role": "tabpanel"}):
        tab = root.find(id=str(panel.get("aria-labelledby")))
        labels.append(_text(tab) if tab is not None else str(panel.get("id")))
    return " · ".join(reversed(labels))


def ms_column(table: Tag, precision: str) -> int | None:
    """The index of ``precision``'s "ms" column in a per-GEMM table (its name spans its columns)."""
    header, units = table.select("thead tr")[:2]
    at = 0
    for th in header.find_all("th"):
        if _text(th) == precision:
            if _text(units.find_all("th")[at]) != "ms":
                raise LookupError(f"{precision}'s first column is not its time: {_text(units)}")
            return at
        at += int(str(th.get("colspan", "1")))
    return None


def pass_speedups(table: Tag, precision: str) -> dict[str, float]:
    """pass -> BF16's summed time over ``precision``'s, from a per-GEMM table's bold "sum" rows (the
    times have three decimals; the rounded "× BF16" cell would tie passes that differ)."""
    bf16, mine = ms_column(table, "BF16"), ms_column(table, precision)
    if bf16 is None or mine is None:
        return {}
    out = {}
    for row in table.select("tbody tr"):
        cells = [_text(td) for td in row.find_all("td")]
        if len(cells) > max(bf16, mine) and cells[1] == "sum":
            out[cells[0]] = float(cells[bf16]) / float(cells[mine])
    return out


def gains_least_in(name: str, precision: str, least: str, mode: str = "") -> Check:
    """In every tab of block ``name`` (each mode, or only ``mode``'s tabs, e.g. "Pre-quantized"; each
    GPU), ``precision``'s summed GEMM time gains less over BF16's in pass ``least`` than in every
    other pass; and the TFLOP/s roles of ``precision`` the sentence quotes, first ``least`` then
    another pass, come in rising order."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        block = soup.select_one(f"div.gemm-benchmark#{name}")
        if block is None:
            return [f"{sentence.page} has no block {name}"]
        problems, tables = [], 0
        for table in block.select("div.gemm-gemms table"):
            if mode and not _tab_path(table).startswith(mode):
                continue
            speedups = pass_speedups(table, precision)
            if least not in speedups:
                continue
            tables += 1
            others = {p: s for p, s in speedups.items() if p != least}
            if not others or any(speedups[least] >= s for s in others.values()):
                problems.append(f"{_tab_path(table)}: {precision} gains {speedups[least]:.3f}× in {least}, "
                                + ", ".join(f"{s:.3f}× in {p}" for p, s in others.items()))
        if not tables:
            problems.append(f"block {name} has no per-GEMM table with {precision}'s {least} sum")
        tflops = [v for v in quoted_values(sentence.element) if v.unit == "TFLOP/s" and v.precision == precision]
        if len(tflops) != 2 or tflops[0].value >= tflops[1].value:
            problems.append(f"the quoted {least} TFLOP/s is not below the other pass's: {tflops}")
        return problems

    return check


def above_the_achievable_share(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """Every % of peak the paragraph quotes lies above the compute share the roofline assumes
    (:data:`gemm_bench.report.roofline.DEFAULT_ACHIEVABLE`): then its roofline ratio passes 100%,
    since the prediction is at least FLOPs / (peak x that share)."""
    from gemm_bench.report.roofline import DEFAULT_ACHIEVABLE

    share = DEFAULT_ACHIEVABLE.compute * 100
    peaks = [v for v in quoted_values(sentence.element) if v.unit == "% of the dense peak"]
    if not peaks:
        return ["the paragraph quotes no % of peak"]
    return [f"{v.gemm} ({v.precision}, {v.mode}) reaches {v.value}% of its peak, not above the roofline's "
            f"{share:.0f}%: its predicted time is not below its measured one" for v in peaks if v.value <= share]


def slower_beyond_spread(slow: str, fast: str) -> Check:
    """On every GPU of the page's summary, ``slow``'s autocast GEMMs gain less than ``fast``'s,
    beyond both measured spreads (the site's rule for "slower")."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        problems, pairs = [], 0
        for model, cells in _autocast_cells(soup).items():
            for (gpu, column), cell in sorted(cells.items()):
                other = cells.get((gpu, fast))
                if column != slow or other is None:
                    continue
                pairs += 1
                if not _apart(cell, other):
                    problems.append(f"{model} on the {gpu}: {slow} {cell.value} [{cell.low}-{cell.high}], "
                                    f"{fast} {other.value} [{other.low}-{other.high}]")
        return problems or ([] if pairs else [f"no summary row has both {slow} and {fast}"])

    return check


_LEAST_SQNR = re.compile(r"^(?P<value>\d+(?:\.\d+)?) dB, the layer's least accurate GEMM: (?P<precision>[^,]+), "
                         r"(?P<gpu>.+)$")


def least_sqnr_highest(precision: str) -> Check:
    """On every GPU of the page's summary, ``precision``'s least SQNR is above every other recipe's."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        by_gpu: dict[str, dict[str, float]] = {}
        for abbr in soup.select("div.gemm-summary table.gemm-summary-table abbr"):
            if match := _LEAST_SQNR.match(str(abbr.get("title", ""))):
                by_gpu.setdefault(match["gpu"], {})[match["precision"]] = float(match["value"])
        if not any(precision in values for values in by_gpu.values()):
            return [f"the summary shows no least SQNR of {precision}"]
        return [f"{gpu}: {precision} {values[precision]} dB, " + ", ".join(f"{p} {v} dB" for p, v in values.items())
                for gpu, values in sorted(by_gpu.items())
                if precision in values and any(v >= values[precision] for p, v in values.items() if p != precision)]

    return check


def gradient_format_not_scales(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
    """The paragraph's SQNRs: where both recipes quantize to E4M3 (Fprop) FP8 Current and FP8 Block
    agree to within a tenth of the gap they show where Current's dY is E5M2 (Dgrad), and there
    Current is the lower: the per-tensor recipes' lower minimum is the gradient format's."""
    # The paragraph names the passes in order (Fprop, then Dgrad): the two GEMMs may share a shape.
    quoted = [v for v in quoted_values(sentence.element) if v.unit == "dB SQNR"]
    if len(quoted) != 4 or [v.precision for v in quoted] != ["FP8 Current", "FP8 Block"] * 2:
        return [f"expected Fprop then Dgrad, each FP8 Current then FP8 Block: {quoted}"]
    fprop_gap = abs(quoted[0].value - quoted[1].value)
    dgrad_gap = quoted[3].value - quoted[2].value
    if dgrad_gap <= 0 or fprop_gap > dgrad_gap / 10:
        return [f"Fprop: {quoted[0].value} against {quoted[1].value} dB; Dgrad: {quoted[2].value} against "
                f"{quoted[3].value} dB: the gradient format does not explain the gap"]
    return []


def several_times_the_gemm(name: str, shape: str, *, times: float = 3.0) -> Check:
    """At ``shape``, the work around the FP8 GEMM in autocast takes at least ``times`` the GEMM's
    own time. From the paragraph's two speedups: BF16 autocast runs the GEMM alone, so the FP8 GEMM
    takes BF16's time / the pre-quantized speedup, the FP8 region BF16's time / the autocast
    speedup, and the rest over the GEMM is pre-quantized / autocast speedup - 1."""

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        roles = [r for r in role_values(sentence.element) if r.name == name and r.shape == shape
                 and r.precision == "FP8 Current"]
        try:
            prequant, autocast = one_role(roles, mode="Pre-quantized").value, one_role(roles, mode="Autocast").value
        except LookupError as exc:
            return [f"the paragraph's roles cannot show it: {exc}"]
        around = prequant / autocast - 1
        return [] if around >= times else [f"at {shape} the work around the FP8 GEMM takes {around:.2f}× the GEMM's "
                                           f"time (from {prequant}× pre-quantized, {autocast}× autocast), "
                                           f"not {times:g}× or more"]

    return check


def largest_gemm_and_widths(name: str, largest: str, widths: dict[str, int]) -> Check:
    """In block ``name``'s per-GEMM table, op ``largest`` has the most FLOPs (M x K x N) of the
    layer's projections, and each op's Fprop has the N the sentence types (``widths``)."""
    labels = {"qkv": "QKV projection", "attn_out": "Attention output", "mlp_up": "MLP up", "mlp_down": "MLP down"}

    def check(site: BuiltSite, soup: BeautifulSoup, sentence: Sentence) -> list[str]:
        table = soup.select_one(f"div.gemm-benchmark#{name} div.gemm-gemms table")
        if table is None:
            return [f"{sentence.page} has no per-GEMM table of {name}"]
        fprop: dict[str, tuple[int, int, int]] = {}
        for row in table.select("tbody tr"):
            cells = [_text(td) for td in row.find_all("td")]
            if len(cells) > 2 and cells[0] == "Fprop" and re.fullmatch(r"\d+x\d+x\d+", cells[2]):
                m, k, n = (int(x) for x in cells[2].split("x"))
                fprop[cells[1]] = (m, k, n)
        problems = []
        flops = {op: m * k * n for op, (m, k, n) in fprop.items()}
        if labels[largest] not in flops or any(f >= flops[labels[largest]] for op, f in flops.items()
                                               if op != labels[largest]):
            problems.append(f"{labels[largest]} is not the largest GEMM: {fprop}")
        for op, width in widths.items():
            shown = fprop.get(labels[op], (0, 0, 0))[2]
            if shown != width:
                problems.append(f"{labels[op]}'s N is {shown} in the table, {width} in the sentence")
            if not re.search(rf"\b{width}\b", sentence.text):
                problems.append(f"the sentence no longer types {labels[op]}'s N, {width}: update the claim")
        return problems

    return check


# ------------------------------------------------------------------------------ the claims


@dataclasses.dataclass(frozen=True)
class Claim:
    page: str
    #: A regular expression found in exactly the sentence(s) that make the claim.
    says: str
    check: Check

    @property
    def id(self) -> str:
        return f"{self.page}:{self.says[:40]}"


H100 = "H100 80GB HBM3"

CLAIMS: list[Claim] = [
    # Regression: the Hopper blocks asked for neither MXFP8 nor NVFP4, yet the page said they list the reason.
    Claim("index.html", r"so the summary above names them with its reason", collapsed_reasons(("mxfp8", "nvfp4"))),
    # Regression: the figure draws the whole model first (top, bold); the tutorial once said last.
    Claim("tutorial.html", r"figure shows the same speedups as bars, the whole model's total first",
          figures_start_with("All GEMMs", bold=True)),
    Claim("tutorial.html", r"Below the speedups, three more figures of the same run",
          extra_figures_follow("tut-te-5b")),
    Claim("index.html", r"★ fastest", fastest_starred),
    Claim("index.html", r"≈ within the fastest's measured spread", ties_marked),
    Claim("index.html", r"A recipe marked ≈ in the table is within the measured spread", ties_marked),
    Claim("models.html", r"★ marks the fastest recipe of a row", fastest_starred),
    Claim("models.html", r"≈ one within the fastest's measured spread", ties_marked),
    *(Claim(page, says, check) for page in MODEL_PAGES
      for says, check in ((r"★ fastest", fastest_starred), (r"≈ within the fastest's measured spread", ties_marked))),
    Claim("models.html", r"two split models gain less with every FP8 recipe", split_models_gain_less),
    Claim("models.html", r"are not told apart everywhere", split_models_not_told_apart),
    Claim("index.html", r"Delayed scaling saves the extra pass",
          roles_ordered("te-5b", lambda get: get(precision="FP8 Delayed", mode="Autocast", device=H100)
                        > get(precision="FP8 Current", mode="Autocast", device=H100),
                        "delayed scaling is faster than current scaling in autocast")),
    Claim("index.html", r"the gap between the two is the cost of quantization",
          roles_ordered("te-5b", lambda get: get(precision="FP8 Current", mode="Pre-quantized", device=H100)
                        > get(precision="FP8 Current", mode="Autocast", device=H100),
                        "the kernels alone are faster than autocast")),
    Claim("index.html", r"small GEMMs are bound by the GPU work around the kernel",
          roles_ordered("square-sweep", lambda get: get(mode="Autocast", shape="256x256x256")
                        < get(mode="Autocast", shape="16384x16384x16384"),
                        "autocast gains more at 16384³ than at 256³")),
    Claim("tutorial.html", r"per-expert quantization of small matrices costs most or all of it",
          roles_ordered("tut-mixtral", lambda get: all(
              get(precision=p, mode="Autocast") - 1 <= (get(precision="FP8 Current", mode="Pre-quantized") - 1) / 2
              for p in ("FP8 Current", "FP8 Delayed")),
              "autocast keeps at most half of the kernels' gain")),
    # Regression: the methodology said MoE and tensor-parallel configs have no step; the models page
    # shows one layer's step for both, and (session 12) the whole rank's step for every model.
    Claim("methodology.html", r"Manual shapes and sweeps have no layer step", every_model_has_a_layer_step),
    Claim("methodology.html", r"mixtures of experts and multi-latent attention included", model_step_for_every_model),
    Claim("tutorial.html", r"but the autocast gain shrinks to",
          roles_ordered("tut-llama3-70b-tp8", lambda get: get(mode="Autocast") < get(mode="Pre-quantized"),
                        "autocast gains less than the kernels alone")),
    # Issue 35: comparisons beside numbers that nothing checked.
    # the kernels alone (session 16's H200 refresh: in autocast on the H200, FP8 Block's least gain is Fprop's)
    Claim("index.html", r"Block scaling \(.*\) gains least in Wgrad",
          gains_least_in("te-5b", "FP8 Block", "Wgrad", mode="Pre-quantized")),
    Claim("tutorial.html", r"Here the BF16 attention-output Wgrad does", above_the_achievable_share),
    Claim("index.html", r"Block scaling buys finer scales .* for some speed",
          slower_beyond_spread("FP8 Block", "FP8 Current")),
    Claim("index.html", r"Its higher SQNR in the table comes from its gradients", least_sqnr_highest("FP8 Block")),
    Claim("methodology.html", r"lower minimum in the accuracy cells is their gradient format's",
          gradient_format_not_scales),
    Claim("index.html", r"take several times as long as the GEMM",
          several_times_the_gemm("square-sweep", "256x256x256")),
    Claim("tutorial.html", r"SwiGLU makes MLP up the largest GEMM of the layer",
          largest_gemm_and_widths("tut-llama3-8b", "mlp_up", {"qkv": 6144, "mlp_up": 28672})),
]

#: Sentences that look like claims about rendered content but are not, each with the reason.
REVIEWED: dict[tuple[str, str], str] = {
    ("models.html", r"The answer is the sentence at the top of each tab"): "says where a model page's parts are",
    **{(page, r"What the rows, marks and notes above mean"): "links to the models page's shared explanations"
       for page in MODEL_PAGES},
    ("tutorial.html", r"The summary has one table per pass"): "describes gemm-bench run's terminal output",
    ("tutorial.html", r"A precision the GPU cannot run is listed with Transformer Engine's reason"):
        "describes gemm-bench run's terminal output",
    ("index.html", r"The step gains less than its autocast GEMMs because"):
        "explains Amdahl's law; the build checks every step against its GEMMs (Report.step_contradictions)",
    ("maintainers.html", r"Each result stores its measurement's wall time"): "describes what the tools store",
    ("maintainers.html", r"Ctrl-C, or a worker that dies, stops the dispatch"):
        "describes the refresh's behaviour (tests/test_interrupt.py and test_reliability_interrupt.py)",
    ("maintainers.html", r"compare takes two results of one question"): "describes gemm-bench compare's output",
    ("maintainers.html", r"Each decision is printed with its reason"): "describes gemm-bench merge's output",
    ("models.html", r"The first figure is what every answer rests on: the model's step"):
        "the build draws the model's step's figure first (tests/test_models_compared.py)",
    ("models.html", r"Within a panel, models are ranked by the speedup of the recipe their answer picks"):
        "the figure's order and ★ are the answers' picks on every GPU (tests/test_models_compared.py)",
    ("models.html", r"the read makes BF16's cached layer slower than its first in"):
        "quotes :gemm-moe-cached: counts whose claim words (all, most) the build checks (tests/test_moe_words.py)",
}

#: What makes a sentence look like a claim about the content beside it.
LOOKS_LIKE_A_CLAIM = [
    re.compile(r"\b(first|last|top|bottom|above|below|left|right)\b.*\b(figure|table|bars?|rows?|columns?|"
               r"results?|shown|shows|lists?|listed|tabs?)\b|\b(figure|table|bars?|rows?|columns?|results?|shown|"
               r"shows|lists?|listed|tabs?)\b.*\b(first|last|top|bottom|above|below|left|right)\b", re.I),
    re.compile(r"\b(reasons?|because)\b", re.I),
    re.compile(r"[★≈]"),
]


def _claim_sentences(site: BuiltSite, claim: Claim) -> list[Sentence]:
    pattern = re.compile(claim.says)
    return [s for s in sentences(site.soup(claim.page), claim.page) if pattern.search(s.text)]


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_matches_what_is_rendered(site: BuiltSite, claim: Claim) -> None:
    found = _claim_sentences(site, claim)
    assert found, (f"{claim.page} no longer says {claim.says!r}: update CLAIMS in {Path(__file__).name} "
                   "(drop the row, or point it at the new wording)")
    soup = models_soup(site) if claim.page == "models.html" else site.soup(claim.page)
    problems = [f"{s.text!r}: {p}" for s in found for p in claim.check(site, soup, s)]
    assert not problems, "\n".join(problems)


def _measuring_pages(site: BuiltSite) -> list[str]:
    """Pages that render measurements: where a sentence can disagree with a table or figure beside it."""
    return [page for page in site.pages()
            if site.soup(page).select_one("div.gemm-benchmark, div.gemm-summary")]


def test_every_claim_looking_sentence_is_checked_or_reviewed(site: BuiltSite) -> None:
    pages = _measuring_pages(site)
    assert {"index.html", "tutorial.html", "models.html"} <= set(pages)
    unchecked = []
    for page in pages:
        for sentence in sentences(site.soup(page), page):
            if not any(p.search(sentence.text) for p in LOOKS_LIKE_A_CLAIM):
                continue
            covered = any(c.page == page and re.search(c.says, sentence.text) for c in CLAIMS) or any(
                p == page and re.search(says, sentence.text) for p, says in REVIEWED)
            if not covered:
                unchecked.append(f"{page}: {sentence.text!r}")
    assert not unchecked, ("sentences that claim an order, a reason or a mark with no check: add a row to "
                           "CLAIMS (or to REVIEWED, saying why none is needed)\n" + "\n".join(unchecked))


def test_reviewed_sentences_still_exist(site: BuiltSite) -> None:
    stale = [f"{page}: {says!r}" for page, says in REVIEWED
             if not any(re.search(says, s.text) for s in sentences(site.soup(page), page))]
    assert not stale, "REVIEWED rows whose sentence is gone (remove them):\n" + "\n".join(stale)


# ------------------------------------------------------------------------------ the checks can fail


def _sentence(soup: BeautifulSoup, page: str, says: str) -> Sentence:
    return next(s for s in sentences(soup, page) if re.search(says, s.text))


def _claim(page: str, says: str) -> Claim:
    return next(c for c in CLAIMS if c.page == page and c.says == says)


def test_the_hopper_check_catches_a_summary_without_the_reasons(site: BuiltSite) -> None:
    claim = _claim("index.html", r"so the summary above names them with its reason")
    soup = copy.copy(site.soup("index.html"))
    for note in soup.select("div.gemm-summary p.gemm-summary-collapsed"):
        note.decompose()  # a summary that dropped the columns without saying why
    problems = claim.check(site, soup, _sentence(soup, claim.page, claim.says))
    assert any("MXFP8's reason" in p for p in problems) and any("NVFP4's reason" in p for p in problems), problems


def test_the_figure_order_check_catches_the_whole_model_last(site: BuiltSite) -> None:
    claim = _claim("tutorial.html", r"figure shows the same speedups as bars, the whole model's total first")
    soup = copy.copy(site.soup("tutorial.html"))
    svg = soup.select_one("div.gemm-figure svg")
    assert svg is not None
    texts = [t for g in svg.select("g[id*=ytick]") for t in g.find_all("text") if _text(t)]
    top = min(texts, key=lambda t: float(t["y"]))
    bottom = max(texts, key=lambda t: float(t["y"]))
    top["y"], bottom["y"] = bottom["y"], top["y"]
    problems = claim.check(site, soup, _sentence(soup, claim.page, claim.says))
    assert len(problems) == 1 and "is bar" in problems[0], problems


def test_the_star_check_catches_a_star_on_a_slower_precision(site: BuiltSite) -> None:
    soup = copy.copy(site.soup("index.html"))
    row = next(r for r in soup.select("table.gemm-summary-table tbody tr") if r.select("td.gemm-fastest"))
    star = row.select_one("td.gemm-fastest")
    other = next(td for td in row.select("td.gemm-num") if td is not star and _LEADING.match(
        (td.find("abbr") or {}).get("title", "")))
    star.find("abbr").find(string=re.compile("★")).replace_with("9.99×")
    other.find("abbr").append(" ★")
    assert fastest_starred(site, soup, _sentence(soup, "index.html", r"★ fastest"))


def test_the_role_order_check_catches_a_reversed_order(site: BuiltSite) -> None:
    claim = _claim("index.html", r"Delayed scaling saves the extra pass")
    soup = copy.copy(site.soup("index.html"))
    sentence = _sentence(soup, claim.page, claim.says)
    for abbr in sentence.element.select("abbr.gemm-value"):
        if "FP8 Delayed, Autocast" in abbr.get("title", ""):
            abbr["title"] = re.sub(r"^\d+(?:\.\d+)?×", "0.500×", abbr["title"])
    assert claim.check(site, soup, sentence)


def test_the_split_models_check_catches_a_reversed_pair(site: BuiltSite) -> None:
    soup = models_soup(site)
    sentence = _sentence(soup, "models.html", r"two split models gain less with every FP8 recipe")
    reversed_ = dataclasses.replace(sentence, text="Llama 3 8B less than Mixtral 8x7B.")
    problems = split_models_gain_less(site, soup, reversed_)
    assert problems and all("Llama 3 8B gains" in p for p in problems), problems
    # the committed page's old claim: less by the medians, but on the H200 within the spreads
    overlapping = dataclasses.replace(sentence, text="Llama 3 70B (TP 8) less than Llama 3 8B.")
    assert any("H200" in p for p in split_models_gain_less(site, soup, overlapping))
    assert split_models_gain_less(site, soup, dataclasses.replace(sentence, text="Nothing here.")) == [
        'the sentence names no pair of summary models ("A less than B")']


def test_sentence_splitting_and_detection() -> None:
    soup = BeautifulSoup("<article role='main'><p>The figure shows it first. Then a table.</p>"
                         "<div class='gemm-benchmark'><p>Hidden: the figure shows it last.</p></div>"
                         "<table><caption>Speedup (★ fastest)</caption></table></article>", "html.parser")
    found = [s.text for s in sentences(soup, "x.html")]
    assert found == ["The figure shows it first.", "Then a table.", "Speedup (★ fastest)"]
    assert [bool(any(p.search(t) for p in LOOKS_LIKE_A_CLAIM)) for t in found] == [True, False, True]


# ------------------------------------------------------------------------------ what readers never see


#: Build-machine details: they belong in the build log and the freshness page, not among results.
BUILD_MACHINE = re.compile(r"PyTorch is not installed|no CUDA GPU is visible|tests run without a GPU|"
                           r"Transformer Engine is not installed", re.I)


def test_reader_pages_show_no_build_machine_details(site: BuiltSite) -> None:
    leaks = []
    for page in _measuring_pages(site):
        if page == "freshness.html":
            continue
        article = site.soup(page).select_one("article[role=main]") or site.soup(page)
        for match in BUILD_MACHINE.finditer(_text(article)):
            leaks.append(f"{page}: {match[0]!r}")
    assert not leaks, "\n".join(leaks)


def test_the_site_builds_without_warnings(site: BuiltSite) -> None:
    assert site.warnings.strip() == ""


class _Pages:
    """A stand-in for a built site: the pages a check reads, as given."""

    def __init__(self, pages: dict[str, BeautifulSoup]) -> None:
        self._pages = pages

    def soup(self, page: str) -> BeautifulSoup:
        return self._pages[page]


def test_the_step_scope_checks_catch_a_missing_model_step_and_a_model_without_a_layer_step(site: BuiltSite) -> None:
    models = copy.copy(models_soup(site))
    sentence = Sentence("methodology.html", "", models)
    fake = cast(BuiltSite, _Pages({"models.html": models}))
    assert model_step_for_every_model(fake, models, sentence) == []
    for table in models.select("table.gemm-model-step-table"):
        if table.caption is not None and "Mixtral 8x7B" in _text(table.caption):
            table.decompose()
    assert any("Mixtral 8x7B has no model's step" in p
               for p in model_step_for_every_model(fake, models, sentence))
    for row in models.select("table.gemm-summary-table tbody tr"):
        first = row.find("td")
        if first is not None and _text(first).startswith("One layer's step"):
            row.decompose()
    assert any("has no training step" in p for p in every_model_has_a_layer_step(fake, models, sentence))


def test_no_tab_holds_only_a_provenance_line(site: BuiltSite) -> None:
    """Issue 35 reader pass: the models page's "What G changes" drew an Autocast tab and a tab per GPU
    that held one provenance line each (a directive there only to name numbers for the prose). A
    tab panel shows something besides where it was measured; the section's roles quote the summary."""
    empty = []
    for page in site.pages():
        for panel in site.soup(page).select("article [role=tabpanel]"):
            if panel.select("[role=tabpanel]"):
                continue  # a panel of panels: its inner panels are judged
            shown = [child for child in panel.find_all(recursive=False)
                     if _text(child) and "gemm-provenance" not in (child.get("class") or [])]
            if not shown:
                empty.append(f"{page}#{panel.get('id')}: {_text(panel)[:60]!r}")
    assert not empty, "tab panels with nothing but a provenance line:\n" + "\n".join(empty)
    section = _section(site.soup("models.html"), "What G changes")
    assert section is not None and section.select_one("div.gemm-benchmark") is None
    assert len(section.select("abbr.gemm-value")) >= 8


def test_the_freshness_page_says_which_results_lack_what_the_next_refresh_measures(site: BuiltSite) -> None:
    """A reader pass found every H200 row "fresh" while none has the model's training step or the step
    energy and `gemm-bench refresh` (results.stack.lacking_blocks) plans them: each such row says so."""
    import json

    from gemm_bench.question.question import Question
    from gemm_bench.results.stack import lacking_blocks

    cache = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
    lacking = {p.name for p in cache.glob("*.json")
               if lacking_blocks(json.loads(p.read_text()), Question.from_dict(json.loads(p.read_text())["question"]))}
    # Session 13 re-measured the H200: no committed result lacks them now, and no row may say so.
    rows = [_text(tr) for tr in site.soup("freshness.html").select("tr")]
    said = [r for r in rows if "the next refresh measures them" in r]
    assert len(said) == len(lacking), (len(said), sorted(lacking))


# ------------------------------------------------------------------------------ issue 35's comparisons can fail


def _doctored(site: BuiltSite, page: str, says: str) -> tuple[Claim, BeautifulSoup]:
    """The claim and a copy of its page, to make the words false in."""
    claim = _claim(page, says)
    return claim, copy.copy(site.soup(page))


def _retitle(scope: Tag, contains: str, number: str) -> int:
    """Give every role or cell tooltip in ``scope`` that contains ``contains`` the leading number
    ``number``; how many changed (a test that changes nothing proves nothing)."""
    changed = 0
    for abbr in scope.select("abbr"):
        title = str(abbr.get("title", ""))
        if contains in title:
            abbr["title"] = re.sub(r"^\d+(?:\.\d+)?", number, title)
            changed += 1
    return changed


def _fails(claim: Claim, soup: BeautifulSoup, site: BuiltSite) -> list[str]:
    return claim.check(site, soup, _sentence(soup, claim.page, claim.says))


def test_the_wgrad_check_catches_block_scaling_gaining_most_in_wgrad(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "index.html", r"Block scaling \(.*\) gains least in Wgrad")
    assert _fails(claim, soup, site) == []
    # the claim is about the kernels alone: doctor the first pre-quantized table
    table = next((t for t in soup.select("div.gemm-benchmark#te-5b div.gemm-gemms table")
                  if _tab_path(t).startswith("Pre-quantized")), None)
    assert table is not None
    column = ms_column(table, "FP8 Block")
    assert column is not None
    wgrad = next(row for row in table.select("tbody tr")
                 if [_text(td) for td in row.find_all("td")][:2] == ["Wgrad", "sum"])
    wgrad.find_all("td")[column].string = "1.000"  # FP8 Block's Wgrad summed GEMMs made fast
    problems = _fails(claim, soup, site)
    assert len(problems) == 1 and "Pre-quantized · H100 80GB HBM3: FP8 Block gains" in problems[0], problems
    # the TFLOP/s pair reversed: the Wgrad quoted faster than the Fprop
    claim, soup = _doctored(site, "index.html", r"Block scaling \(.*\) gains least in Wgrad")
    sentence = _sentence(soup, claim.page, claim.says)
    assert _retitle(sentence.element, "16384x15872x4096, FP8 Block, Pre-quantized", "2000.0") == 1
    assert any("TFLOP/s is not below" in p for p in claim.check(site, soup, sentence))


def test_the_roofline_check_catches_a_gemm_below_the_achievable_share(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "tutorial.html", r"Here the BF16 attention-output Wgrad does")
    assert _fails(claim, soup, site) == []
    assert _retitle(soup.select_one("article") or soup, "% of the dense peak: 4096x15872x4096, BF16", "77.0") == 1
    problems = _fails(claim, soup, site)
    assert len(problems) == 1 and "77.0% of its peak, not above the roofline's 78%" in problems[0], problems


def test_the_block_speed_check_catches_block_scaling_as_fast_as_current(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "index.html", r"Block scaling buys finer scales .* for some speed")
    assert _fails(claim, soup, site) == []
    summary = soup.select_one("div.gemm-summary")
    assert summary is not None
    for abbr in summary.select("abbr"):
        title = str(abbr.get("title", ""))
        if "FP8 Block, Autocast, H200" in title:
            abbr["title"] = re.sub(r"spread [\d.]+–[\d.]+×", "spread 1.60–1.80×", title)
    problems = _fails(claim, soup, site)
    assert len(problems) == 1, problems
    assert problems[0].startswith("Transformer Engine guide's example layer on the H200: FP8 Block"), problems


def test_the_sqnr_check_catches_a_per_tensor_recipe_as_accurate_as_block(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "index.html", r"Its higher SQNR in the table comes from its gradients")
    assert _fails(claim, soup, site) == []
    assert _retitle(soup.select_one("div.gemm-summary") or soup, "least accurate GEMM: FP8 Current, H100", "28.47") == 1
    problems = _fails(claim, soup, site)
    assert len(problems) == 1 and problems[0].startswith("H100 80GB HBM3: FP8 Block 28.47 dB"), problems


def test_the_gradient_format_check_catches_scales_that_explain_the_gap(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "methodology.html", r"lower minimum in the accuracy cells is their gradient format's")
    assert _fails(claim, soup, site) == []
    sentence = _sentence(soup, claim.page, claim.says)
    # Fprop, where both recipes use E4M3, as far apart as Dgrad: the format would not be the reason
    first_current = next(a for a in sentence.element.select("abbr.gemm-value")
                         if "FP8 Current" in str(a.get("title", "")))
    first_current["title"] = re.sub(r"^\d+(?:\.\d+)?", "24.60", str(first_current["title"]))
    problems = claim.check(site, soup, sentence)
    assert len(problems) == 1 and "does not explain the gap" in problems[0], problems


def test_the_several_times_check_catches_a_small_overhead(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "index.html", r"take several times as long as the GEMM")
    assert _fails(claim, soup, site) == []
    sentence = _sentence(soup, claim.page, claim.says)
    assert _retitle(sentence.element, "× BF16: 256x256x256, FP8 Current, Autocast", "0.500") == 1
    problems = claim.check(site, soup, sentence)
    assert len(problems) == 1 and "not 3× or more" in problems[0], problems


def test_the_largest_gemm_check_catches_a_wrong_width_and_a_larger_gemm(site: BuiltSite) -> None:
    claim, soup = _doctored(site, "tutorial.html", r"SwiGLU makes MLP up the largest GEMM of the layer")
    sentence = _sentence(soup, claim.page, claim.says)
    assert claim.check(site, soup, sentence) == []
    typo = dataclasses.replace(sentence, text=sentence.text.replace("28672", "28762"))
    assert claim.check(site, soup, typo) == ["the sentence no longer types MLP up's N, 28672: update the claim"]
    table = soup.select_one("div.gemm-benchmark#tut-llama3-8b div.gemm-gemms table")
    assert table is not None
    qkv = next(r for r in table.select("tbody tr")
               if [_text(td) for td in r.find_all("td")][:2] == ["Fprop", "QKV projection"])
    qkv.find_all("td")[2].string = "8192x4096x65536"
    problems = claim.check(site, soup, sentence)
    assert any("MLP up is not the largest GEMM" in p for p in problems), problems
    assert any("QKV projection's N is 65536 in the table, 6144 in the sentence" in p for p in problems), problems
