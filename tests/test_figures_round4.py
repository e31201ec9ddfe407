"""Issue 44 item 3: figures that show what the text discusses, tables that say they scroll.

* The loss-parity study's gaps (a few hundredths of a nat per byte) were a line's width on the loss
  curves' axis (2 to 5.5): each recipe's loss minus BF16's is drawn now, with BF16's seed-to-seed range
  at each evaluation shaded, every number from the study document (:mod:`gemm_bench.report.loss_difference`).
* The setup table's second header cell was empty.
* In an alabaster project (Sphinx's default theme) a model's GEMM table was cut at its box's edge; on
  a phone the tables scrolled sideways with no cue (browser checks, marked ``browser``).
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from docutils import nodes

from gemm_bench.question.precisions import BASELINE
from gemm_bench.report.line_figure import Area, LineFigureError, Series, line_svg, y_range
from gemm_bench.report.loss_difference import loss_differences
from gemm_bench.results import loss_parity_schema as schema
from gemm_benchmark.study_loss_parity import SETUP_COLUMNS, difference_note, difference_svg, setup_table
from tests.test_loss_parity import _build, synthetic_data, synthetic_document

ROOT = Path(__file__).resolve().parent.parent
STUDIES = sorted((ROOT / "docs" / "_gemm_cache" / "studies").glob("loss-parity--*.json"))


def _committed(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    schema.validate_data(doc["data"])
    return doc


# ------------------------------------------------------------------------------ the differences
@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_the_differences_are_each_recipe_minus_bf16_at_the_same_step(path: Path) -> None:
    data = _committed(path)["data"]
    found = loss_differences(data)
    assert found is not None and found.recipes
    recipes = schema.recipes_by_id(data)
    base = recipes[BASELINE]
    base_train = dict(zip(base["curve"]["steps"], base["curve"]["train_loss"], strict=True))
    base_val = dict(zip(base["validation"]["steps"], base["validation"]["loss"], strict=True))
    # The window: from the first evaluation after step 0 to the last step.
    assert found.start == min(s for s in base["validation"]["steps"] if s > 0)
    assert found.last == data["training"]["steps"]
    for drawn in found.recipes:
        recipe = recipes[drawn.precision]
        train = dict(zip(recipe["curve"]["steps"], recipe["curve"]["train_loss"], strict=True))
        assert drawn.train_steps == tuple(s for s in recipe["curve"]["steps"] if s >= found.start)
        assert drawn.train == pytest.approx([train[s] - base_train[s] for s in drawn.train_steps], abs=0)
        val = dict(zip(recipe["validation"]["steps"], recipe["validation"]["loss"], strict=True))
        assert drawn.val == pytest.approx([val[s] - base_val[s] for s in drawn.val_steps], abs=0)
        # The last dot is the table's validation gap.
        assert drawn.val_steps[-1] == found.last
        gap = schema.gaps(data)[drawn.precision]["val"]
        assert gap is not None and drawn.val[-1] == pytest.approx(gap.delta, abs=1e-12)


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_the_shaded_range_ends_at_the_band_the_table_judges_by(path: Path) -> None:
    data = _committed(path)["data"]
    found = loss_differences(data)
    band = schema.seed_band(data)
    assert found is not None and found.seeds is not None and isinstance(band, schema.SeedBand)
    assert found.seeds.runs == band.runs
    assert found.seeds.steps[-1] == found.last
    assert (found.seeds.lows[-1], found.seeds.highs[-1]) == pytest.approx((band.low, band.high), abs=1e-12)
    assert all(low <= 0 <= high for low, high in zip(found.seeds.lows, found.seeds.highs, strict=True))


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_the_gaps_fill_the_difference_figure_not_a_line_width(path: Path) -> None:
    """The issue's complaint, measured: on the loss curves' axis the largest final validation gap is
    under 1% of the height; on the difference figure's, more than a fifth of it."""
    data = _committed(path)["data"]
    found = loss_differences(data)
    assert found is not None
    largest = max(abs(g["val"].delta) for g in schema.gaps(data).values() if g["val"] is not None)
    curves = [Series(p, list(xs), list(ys)) for p, xs, ys in schema.curve_series(data)]
    low, high = y_range(curves)
    assert largest / (high - low) < 0.01
    drawn = [Series(r.precision, list(r.train_steps), list(r.train)) for r in found.recipes]
    drawn += [Series(r.precision + " val", list(r.val_steps), list(r.val)) for r in found.recipes]
    assert found.seeds is not None
    area = Area(list(found.seeds.steps), list(found.seeds.lows), list(found.seeds.highs), "band")
    low, high = y_range(drawn, include_y=(0,), areas=[area])
    assert largest / (high - low) > 0.2
    # ... and the figure as the page draws it holds the window in its title and the range in its legend.
    svg = difference_svg(found, "H200", data["training"]["curve_every"])
    texts = " ".join(re.findall(r">([^<>]+)</text>", svg))
    assert f"steps {found.start} to {found.last}" in texts and "seed-to-seed range (3 seeds)" in texts


def test_a_diverged_recipe_is_named_not_drawn_and_the_early_steps_are_said() -> None:
    data = synthetic_data()
    found = loss_differences(data)
    assert found is not None
    assert [r.precision for r in found.recipes] == ["fp8-delayed", "fp8-current"]
    assert found.diverged == (("fp8-block", 23),)
    assert (found.start, found.last) == (20, 40)
    # The largest training-loss difference before step 20, by size, over the recipes drawn.
    recipes = schema.recipes_by_id(data)
    base = dict(zip(recipes["bf16"]["curve"]["steps"], recipes["bf16"]["curve"]["train_loss"], strict=True))
    early = [(abs(y - base[s]), p, s) for p in ("fp8-delayed", "fp8-current")
             for s, y in zip(recipes[p]["curve"]["steps"], recipes[p]["curve"]["train_loss"], strict=True) if s < 20]
    size, precision, step = max(early)
    assert found.early is not None and (found.early.precision, found.early.step) == (precision, step)
    assert abs(found.early.delta) == pytest.approx(size, abs=0)
    note = difference_note(data, found).astext()
    assert "from step 20 (the first evaluation after step 0) to step 40" in note
    assert f"at step {step})" in note
    assert "FP8 Block is not drawn: it diverged at step 23" in note


def test_without_a_seed_band_or_a_bf16_run_there_is_no_range_or_no_figure() -> None:
    found = loss_differences(synthetic_data(band=False))
    assert found is not None and found.seeds is None and found.recipes
    assert "shaded" not in difference_note(synthetic_data(band=False), found).astext()
    broken = synthetic_data()
    broken["seed_band"]["runs"][1] = {**broken["seed_band"]["runs"][1], "status": "diverged",
                                      "reason": "diverged at step 30: nan", "diverged_at_step": 30}
    found = loss_differences(broken)
    assert found is not None and found.seeds is None  # a seed that did not finish: no range to shade
    no_base = synthetic_data()
    no_base["recipes"][0] = {**no_base["recipes"][0], "status": "failed", "reason": "out of memory"}
    assert loss_differences(no_base) is None


def test_the_page_draws_the_differences_under_the_curves_and_names_the_setup_columns(
        tmp_path: Path, make_app: Any) -> None:
    html, warnings = _build(tmp_path, make_app, [synthetic_document()])
    assert "WARNING" not in warnings, warnings
    soup = BeautifulSoup(html, "html.parser")
    labels = [str(svg["aria-label"]) for svg in soup.select(".gemm-figure svg")]
    assert len(labels) == 2 and labels[0].startswith("Training loss") and labels[1].startswith("Loss minus BF16's")
    boxes = soup.select(".gemm-loss-parity-figure, .gemm-loss-difference-figure, p.gemm-loss-difference-note")
    kinds = ["curves" if "gemm-loss-parity-figure" in b["class"] else
             "differences" if "gemm-loss-difference-figure" in b["class"] else "note" for b in boxes]
    assert kinds == ["curves", "differences", "note"]  # in the page's order
    heads = [th.get_text(strip=True) for th in soup.select("table.gemm-loss-parity-setup thead th")]
    assert heads == list(SETUP_COLUMNS) and all(heads)


def test_no_setup_header_cell_is_empty() -> None:
    table = setup_table(synthetic_data())
    head = next(iter(table.findall(nodes.thead)))
    assert all(entry.astext().strip() for entry in head.findall(nodes.entry))


# ------------------------------------------------------------------------------ line figure pieces
def test_an_area_is_one_shaded_outline_and_widens_the_axis() -> None:
    line = [Series("a", [0, 10], [0.0, 0.01])]
    area = Area([0, 5, 10], [-0.02, -0.01, 0.0], [0.0, 0.01, 0.05], "seed range", color="#999999")
    svg = line_svg(line, x_label="step", y_label="d", areas=[area])
    shapes = re.findall(r'<path fill="#999999" fill-opacity="[0-9.]+" d="([^"]+)"/>', svg)
    assert len(shapes) == 1 and shapes[0].endswith("Z") and shapes[0].count("L") == 5
    low, high = y_range(line, areas=[area])
    assert low < -0.02 and high > 0.05
    assert "seed range" in svg


def test_a_dots_only_series_draws_no_line() -> None:
    dots = Series("val", [0, 10, 20], [0.0, 0.01, 0.02], color="#123456", line=False)
    svg = line_svg([dots], x_label="step", y_label="d")
    assert not re.search(r'stroke="#123456"', svg)  # no line, in the plot or in the legend
    assert svg.count("<circle") == 4  # three dots and the legend's
    with pytest.raises(LineFigureError, match="neither a line nor markers"):
        line_svg([Series("x", [0, 1], [0, 1], line=False, markers=False)], x_label="x", y_label="y")
    with pytest.raises(LineFigureError, match="area 'r'"):
        line_svg([dots], x_label="x", y_label="y", areas=[Area([0, 1], [0.1, 0.0], [0.0, 0.0], "r")])


def test_a_shaded_outline_paints_in_every_back_end() -> None:
    """The PDF and PNG back end (builders without SVG) paints a Polygon where the SVG one does."""
    pytest.importorskip("matplotlib")
    from gemm_bench.report import figure_mpl
    from gemm_bench.report.figure_layout import Polygon, Scene

    scene = Scene(100.0, 50.0, (Polygon(((10.0, 10.0), (90.0, 10.0), (90.0, 40.0)), "#000000", alpha=0.5),))
    fig = figure_mpl.figure(scene)
    painted = [a for a in fig.artists if a.get_alpha() == 0.5]
    assert len(painted) == 1 and len(painted[0].get_paths()) == 1  # type: ignore[attr-defined]
    assert figure_mpl.render(scene, "png").startswith(b"\x89PNG")


# ------------------------------------------------------------------------------ browser: alabaster
def _browser(tmp_path: Path) -> Any:
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("headless Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                 "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


#: The landing page's first block, as docs/index.rst asks it: six precisions on two GPUs, the widest
#: GEMM table of the site (661 px in alabaster's 596 px box before issue 44).
ALABASTER_PAGE = """Alabaster
=========

.. gemm-benchmark::
   :name: te-5b
   :model: te-guide-5b
   :precisions: bf16, fp8-delayed, fp8-current, fp8-block, mxfp8, nvfp4
   :devices: h100, h200
"""


@pytest.fixture
def alabaster_page(tmp_path: Path, make_app: Any) -> Iterator[str]:
    """A plain alabaster project (Sphinx's default theme; sphinx.testing builds with ``basic`` unless
    the theme is overridden) over the committed cache, served."""
    import io
    import shutil

    src = tmp_path / "src"
    shutil.copytree(ROOT / "docs" / "_gemm_cache", src / "_gemm_cache", ignore=shutil.ignore_patterns("studies"))
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "alabaster"\n'
                                 'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    (src / "index.rst").write_text(ALABASTER_PAGE, encoding="utf-8")
    warnings = io.StringIO()
    app = make_app("html", srcdir=src, status=io.StringIO(), warning=warnings, freshenv=True,
                   confoverrides={"html_theme": "alabaster"})
    app.build()
    assert "alabaster.css" in (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    assert "WARNING" not in warnings.getvalue(), warnings.getvalue()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(app.outdir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        app.cleanup()


#: Every shown scrolling box: how wide its table is against the box, and whether it says it scrolls.
SCROLL_BOXES = """
for (const p of document.querySelectorAll('[role=tabpanel]')) p.hidden = false;  // every tab's tables
await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
return [...document.querySelectorAll('.gemm-scroll, .gemm-scroll > .table-wrapper')]
  .filter(b => b.clientWidth > 0 && b.querySelector('table'))
  .map(b => ({table: b.querySelector('table').className, scroll: b.scrollWidth, width: b.clientWidth,
              hint: getComputedStyle(b, '::before').content, classes: b.className}));
"""


def _show(driver: Any, url: str, size: tuple[int, int]) -> list[dict[str, Any]]:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 600})
    driver.get(url)
    WebDriverWait(driver, 20, poll_frequency=0.02).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    boxes: list[dict[str, Any]] = driver.execute_async_script(
        "const done = arguments[arguments.length - 1]; (async () => {" + SCROLL_BOXES + "})().then(done);")
    return boxes


@pytest.mark.browser
def test_in_alabaster_a_gemm_table_fits_and_a_phone_is_told_to_scroll(alabaster_page: str, tmp_path: Path) -> None:
    """Issue 44: in a plain alabaster project a model's GEMM table (661 px in a 596 px box) was cut at
    its last column with nothing to say more lay beyond. At 1400x900 every GEMM table fits its box; at
    390x844, where they cannot, each box that scrolls says so and fades at its right edge."""
    driver = _browser(tmp_path)
    try:
        desktop = _show(driver, alabaster_page, (1400, 900))
        gemms = [b for b in desktop if "gemm-gemms" in b["table"]]
        assert gemms, "the page has no GEMM table"
        assert all(b["scroll"] <= b["width"] + 1 for b in gemms), gemms
        assert all(b["hint"] == "none" for b in desktop if b["scroll"] <= b["width"] + 1), desktop
        phone = _show(driver, alabaster_page, (390, 844))
        over = [b for b in phone if b["scroll"] > b["width"] + 1]
        assert over, "nothing scrolls on a phone: the check checks nothing"
        for box in over:
            assert "Scroll sideways" in box["hint"] and "gemm-more-right" in box["classes"], box
    finally:
        driver.quit()
