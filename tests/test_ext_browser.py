"""In a real browser: one tab click switches every block on the page, figures load, no console errors."""

from __future__ import annotations

import base64
import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_ext_browser_reader import POLL_S

pytestmark = pytest.mark.browser

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0"}
PREQUANT = base64.b64encode(b"Pre-quantized").decode()
AUTOCAST = base64.b64encode(b"Autocast").decode()


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("headless Chromium and chromedriver are not installed "
                    "(apt-get install chromium chromium-driver)")
    return chromium, driver


@pytest.fixture
def served(app, real_result, make_result, store_result, question) -> Iterator[str]:
    """Build the page and serve the output directory on localhost."""
    cache = Path(app.srcdir) / "_gemm_cache"
    real_result(cache, "h100-te-guide-5b.json")
    real_result(cache, "h100-mixtral-8x7b.json")
    store_result(cache, make_result(question(model="te-guide-5b"), device=H200, speed=1.3))
    app.build()
    handler = functools.partial(_QuietHandler, directory=str(app.outdir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def driver(tmp_path):
    chromium, chromedriver = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(chromedriver), options=options)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


PANEL_STATE = """
return [...document.querySelectorAll('[role=tabpanel].group-tab')].map(p => [
    p.getAttribute('name'), !p.hasAttribute('hidden'), p.closest('.gemm-benchmark') ? 'gemm' : 'prose']);
"""

IMAGES = """
return [...document.querySelectorAll('div.gemm-figure svg, div.gemm-figure-wide svg')].map(
  s => [s.getAttribute('aria-label'), s.querySelectorAll('text').length > 0, s.getBoundingClientRect().width]);
"""


@pytest.mark.sphinx("html", testroot="browser", srcdir="browser-tabs")
def test_tab_click_switches_every_block(served, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(served)
    WebDriverWait(driver, 20, poll_frequency=POLL_S).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    before = driver.execute_script(PANEL_STATE)
    mode_panels = [p for p in before if p[0] in (AUTOCAST, PREQUANT)]
    # Three blocks with mode tabs (two directives, one hand-written); Autocast shown first everywhere.
    assert len(mode_panels) == 6
    assert all(visible == (name == AUTOCAST) for name, visible, _ in mode_panels)
    assert {kind for _, _, kind in mode_panels} == {"gemm", "prose"}

    tab = driver.find_element(By.CSS_SELECTOR, f"#multi button.group-tab[name='{PREQUANT}']")
    tab.click()
    WebDriverWait(driver, 10, poll_frequency=POLL_S).until(
        lambda d: all(v == (n == PREQUANT) for n, v, _ in d.execute_script(PANEL_STATE) if n in (AUTOCAST, PREQUANT)))
    after = [p for p in driver.execute_script(PANEL_STATE) if p[0] in (AUTOCAST, PREQUANT)]
    assert [visible for name, visible, _ in after if name == PREQUANT] == [True, True, True]
    assert not any(visible for name, visible, _ in after if name == AUTOCAST)
    assert driver.find_element(By.CSS_SELECTOR, f"#moe button.group-tab[name='{PREQUANT}']").get_attribute(
        "aria-selected") == "true"

    WebDriverWait(driver, 20, poll_frequency=POLL_S).until(
        lambda d: all(c for _, c, _ in d.execute_script(IMAGES)))
    images = driver.execute_script(IMAGES)
    # multi: 2 devices x 2 modes; moe: 1 device x 2 modes. One SVG per figure follows the theme,
    # with its desktop twin beside it (one of the two shown).
    assert len(images) == 12
    # Every figure has text; those in the shown panels are laid out (hidden panels have no size).
    assert all(has_text for _, has_text, _ in images), images
    assert sum(width > 0 for _, _, width in images) == 2, images  # multi: H100 tab; moe
    # The selected tab's figure is the one shown (a single file for light and dark pages).
    shown = driver.execute_script(
        "return [...document.querySelectorAll('#moe div.gemm-figure, #moe div.gemm-figure-wide')]"
        ".filter(i => i.offsetParent !== null).map(i => i.className)")
    assert shown == ["gemm-figure-wide docutils container"]  # a 1200 px window: the column takes the twin

    # The browser's own favicon probe 404s on a bare http.server: not the page's doing.
    errors = [entry for entry in driver.get_log("browser")
              if entry["level"] == "SEVERE" and "/favicon.ico" not in entry["message"]]
    assert errors == []
