"""Reader pass 3, item 15: on a phone (390 px) a wide table scrolls in its box, and a model's GEMM table
lost its row names as it did: "Pass" stayed (sticky), "GEMM" ("QKV projection") scrolled away. Every
scrolling table of the site keeps its row labels in view after its box is scrolled to the end."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_ext_browser_reader import PHONE, base_url, browser, show, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

#: Per scrolling table on the page: its label cells' rectangles against the box's, once scrolled to the end.
LABELS_AFTER_SCROLL = """
const out = [];
for (const table of document.querySelectorAll('article table')) {
  if (table.getBoundingClientRect().height === 0) continue;  // in a tab not shown
  let box = table.parentElement;
  while (box && box.tagName !== 'ARTICLE'
         && !(box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== 'visible')) {
    box = box.parentElement;
  }
  if (!box || box.tagName === 'ARTICLE') continue;  // fits: nothing scrolls
  // A row is named by the columns before its first number: Pass and GEMM in a model's GEMM table
  // (its header reads Pass, GEMM, Shape), else the first column.
  const heads = [...table.querySelectorAll('thead tr:last-child th')].map(th => th.innerText.trim());
  const labels = heads[0] === 'Pass' && heads[1] === 'GEMM' ? 2 : 1;
  box.scrollLeft = box.scrollWidth;
  for (const row of [...table.querySelectorAll('tbody tr')].slice(0, 3)) {
    row.scrollIntoView({block: 'center', behavior: 'instant'});
    const b = box.getBoundingClientRect();
    for (const cell of [...row.children].slice(0, labels)) {
      const r = cell.getBoundingClientRect();
      const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
      out.push({table: table.className, text: cell.innerText.trim(), left: r.left - b.left, right: b.right - r.right,
                shown: !!hit && cell.contains(hit), scrolled: box.scrollLeft});
    }
  }
  box.scrollLeft = 0;
}
return out;
"""


@pytest.mark.parametrize("page", ["index.html", "tutorial.html", "methodology.html"])
def test_row_labels_stay_in_view_when_a_table_scrolls_on_a_phone(browser: Any, base_url: str,  # noqa: F811
                                                                  page: str) -> None:
    show(browser, base_url + page, PHONE)
    found = browser.execute_script(LABELS_AFTER_SCROLL)
    assert found, f"no table scrolls on {page} at 390 px: the test would check nothing"
    assert all(f["scrolled"] > 0 for f in found)
    lost = [f for f in found if f["left"] < -1 or f["right"] < -1 or not f["shown"]]
    assert not lost, lost
    if page != "methodology.html":  # a model's GEMM table is among them: both its label columns checked
        assert {"QKV projection", "Fprop"} <= {f["text"] for f in found}
