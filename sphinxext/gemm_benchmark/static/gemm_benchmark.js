/* gemm-benchmark: every hover meaning is reachable without a mouse. Each number's source (an
   <abbr title>) takes keyboard focus, and a focus or a tap shows it as text beside the number,
   in one tooltip element (role=tooltip) the number is described by; Escape or moving on hides it.
   And a reference, freshness or gemm-cards table's cells are labelled with their columns, for its
   cards on a phone. */
(function () {
  "use strict";
  function setUp() {
    var tip = document.createElement("div");
    tip.id = "gemm-tip";
    tip.className = "gemm-tip";
    tip.setAttribute("role", "tooltip");
    tip.hidden = true;
    document.body.appendChild(tip);
    var shown = null;
    function hide() {
      tip.hidden = true;
      if (shown) { shown.removeAttribute("aria-describedby"); }
      shown = null;
    }
    function show(el) {
      shown = el;
      tip.textContent = el.getAttribute("data-gemm-tip");
      tip.hidden = false;
      el.setAttribute("aria-describedby", "gemm-tip");
      var box = el.getBoundingClientRect();
      var width = Math.min(tip.offsetWidth, document.documentElement.clientWidth - 16);
      var left = Math.max(8, Math.min(box.left, document.documentElement.clientWidth - width - 8));
      tip.style.left = (left + window.scrollX) + "px";
      tip.style.top = (box.bottom + window.scrollY + 4) + "px";
    }
    var marks = document.querySelectorAll("article abbr[title], .gemm-summary abbr[title], .gemm-benchmark abbr[title]");
    Array.prototype.forEach.call(marks, function (el) {
      el.setAttribute("data-gemm-tip", el.getAttribute("title"));
      el.setAttribute("tabindex", "0");
      el.addEventListener("focus", function () { show(el); });
      el.addEventListener("blur", hide);
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && shown) { shown.blur(); hide(); }
    });
  }
  /* A reference, freshness or gemm-cards table (the loss-parity results) is one card per row on a phone
     (gemm_benchmark.css): each cell carries its column's heading, which the card shows as its label. */
  function labelReferenceCells() {
    var each = Array.prototype.forEach;
    var tables = "table.gemm-reference, table.gemm-freshness, table.gemm-cards";
    each.call(document.querySelectorAll(tables), function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      each.call(table.querySelectorAll("tbody > tr"), function (row) {
        var column = 0;
        each.call(row.children, function (cell) {
          // A cell across several columns (a failed run's reason) belongs to none of them.
          if (cell.colSpan === 1 && heads[column]) { cell.setAttribute("data-label", heads[column]); }
          column += cell.colSpan;
        });
      });
    });
  }
  /* A model's GEMM table names its rows with two columns (Pass, GEMM) before the shape: on a phone,
     where the numbers scroll, both stay (gemm_benchmark.css: the first column sticks at the box's left
     edge, the second at the first's width, measured here and again whenever the table changes size,
     as when its tab is shown). A table named by one column (shapes, a sweep) needs only the CSS. */
  function stickRowLabels() {
    var each = Array.prototype.forEach;
    each.call(document.querySelectorAll(".gemm-scroll table.gemm-gemms"), function (table) {
      var top = table.querySelector("thead > tr");
      var lead = 0;
      while (top && lead < top.children.length && !top.children[lead].classList.contains("gemm-precision")) {
        lead += 1;
      }
      if (lead < 3) { return; }  // one label column and the shape
      table.classList.add("gemm-two-labels");
      function place() {
        var first = table.querySelector("tbody > tr > td:first-child");
        if (first && first.offsetWidth) { table.style.setProperty("--gemm-label-left", first.offsetWidth + "px"); }
      }
      place();
      if (window.ResizeObserver) { new ResizeObserver(place).observe(table); }
    });
  }
  /* A table that scrolls sideways says so (gemm_benchmark.css): the box that scrolls is marked while
     the table is wider than it (gemm-overflows), while columns lie beyond its right edge
     (gemm-more-right) and once some have scrolled under the sticky labels (gemm-more-left). The box
     is the extension's .gemm-scroll, or the theme's own scrolling wrapper inside it (Furo's
     .table-wrapper). Measured again on every scroll and resize, as when a hidden tab panel is shown
     (its boxes measure 0 until then). */
  function cueScrolling() {
    var boxes = document.querySelectorAll(".gemm-scroll, .gemm-scroll > .table-wrapper");
    Array.prototype.forEach.call(boxes, function (box) {
      function mark() {
        var over = box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1;
        box.classList.toggle("gemm-overflows", over);
        box.classList.toggle("gemm-more-right", over && box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
        box.classList.toggle("gemm-more-left", over && box.scrollLeft > 1);
      }
      mark();
      box.addEventListener("scroll", mark, { passive: true });
      if (window.ResizeObserver) {
        var watch = new ResizeObserver(mark);
        watch.observe(box);
        var table = box.querySelector("table");
        if (table) { watch.observe(table); }
      }
    });
  }
  /* A link from the answers table (gemm-answers-table) ends in #gpu=NAME: open that GPU's tab on the
     model's page. sphinx-tabs restores the group tab it keeps in sessionStorage when the page loads
     (this deferred script runs before that), and selectNamedTabs switches it if it already ran. */
  var GPU_HASH = "#gpu=";
  function gpuTabFromHash() {
    if (window.location.hash.indexOf(GPU_HASH) !== 0) { return null; }
    var name;
    try {
      name = window.btoa(decodeURIComponent(window.location.hash.slice(GPU_HASH.length)));
    } catch (e) {
      return null;  /* not a GPU name a tab can have */
    }
    try { window.sessionStorage.setItem("sphinx-tabs-last-selected", name); } catch (e) { /* no storage */ }
    return name;
  }
  var gpuTab = gpuTabFromHash();
  function start() {
    if (gpuTab && typeof window.selectNamedTabs === "function" &&
        document.querySelector('.sphinx-tabs-tab[name="' + gpuTab + '"]')) {
      window.selectNamedTabs(gpuTab);
    }
    setUp();
    labelReferenceCells();
    stickRowLabels();
    cueScrolling();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
