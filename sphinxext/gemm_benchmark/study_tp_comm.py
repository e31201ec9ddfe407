"""``.. gemm-tp-comm::``: what tensor parallelism's collectives cost, measured on a box of several GPUs.

Reads the "tp-comm" study (:mod:`gemm_bench.results.tp_comm_schema`; one file per GPU kind, measured
by ``gemm-bench study tp-comm`` on a box of 2 or more GPUs) and renders, per GPU kind, a table: per
model shape, TP size and recipe, the real sequence-parallel layer step (first micro-batch and cached),
the same rank's compute with its collectives stood in, the communication's share of the real step
(1 - compute / real), and the composition (compute + the collectives at their measured cost, no
overlap) over the real step. Every number is the study file's; a GPU without a file is a visible note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results import tp_comm_schema as schema
from gemm_bench.results.cache import CacheError
from gemm_benchmark import records
from gemm_benchmark.config import settings
from gemm_benchmark.render_block import refused_study_admonition, scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.tabs import tab_set

HEADER = ("Model", "TP", "Recipe", "Real step (first / cached)", "Compute alone", "Communication share",
          "Composed / real", "Composed / real, no overlap")


def _share(region: dict[str, Any]) -> float:
    return 1 - region["compute_ms"] / region["real_ms"]


def rows(data: dict[str, Any]) -> list[list[Entry]]:
    """One row per measured cell (a failed cell says why), in the study's order."""
    out: list[list[Entry]] = []
    for cell in data["cells"]:
        name = PRECISIONS[cell["precision"]].display
        head = [Entry(cell["model"]), Entry(str(cell["tp"])), Entry(name, strong=cell["precision"] == "bf16")]
        if cell["status"] != "measured":
            out.append([*head, Entry(f"failed: {cell['reason']}", morecols=4)])
            continue
        first, cached = cell["regions"]["first"], cell["regions"]["cached"]
        out.append([*head,
                    Entry(f"{first['real_ms']:.2f} / {cached['real_ms']:.2f} ms",
                          tooltip=f"slowest rank's median; quartiles {first['real_q1_ms']:.2f}-"
                                  f"{first['real_q3_ms']:.2f} ms (first), method {first['method']}"),
                    Entry(f"{first['compute_ms']:.2f} / {cached['compute_ms']:.2f} ms"),
                    Entry(f"{_share(first):.0%} / {_share(cached):.0%}",
                          tooltip=f"collectives at their measured cost: {first['comm_ms']:.2f} ms, of which "
                                  f"{first['overlappable_ms']:.2f} ms may run beside a GEMM in TE"),
                    Entry(f"{first['composed_over_real']:.3f} / {cached['composed_over_real']:.3f}"),
                    _serial_entry(first, cached)])
    return out


def _serial_entry(first: dict[str, Any], cached: dict[str, Any]) -> Entry:
    """The composition against the same real layer with its collectives run synchronously (the proof's
    like-with-like ratio: no overlap on either side), and what TE's asynchronous collectives hid;
    "not run" for a file measured before the serialized step existed."""
    if "real_serial_ms" not in first or "real_serial_ms" not in cached:
        return Entry("not run", tooltip="this run predates the serialized step (session 15)")
    return Entry(f"{first['composed_over_serial']:.3f} / {cached['composed_over_serial']:.3f}",
                 tooltip=f"serialized step {first['real_serial_ms']:.2f} / {cached['real_serial_ms']:.2f} ms; "
                         f"TE's asynchronous collectives hid {first['overlap_hidden_ms']:.2f} / "
                         f"{cached['overlap_hidden_ms']:.2f} ms of it")


class GemmTpCommDirective(SphinxDirective):
    """The tp-comm study's table per GPU kind."""

    reference_example = ".. gemm-tp-comm::\n"
    reference_options: dict[str, str] = {}  # noqa: RUF012  (read from the class by the authoring reference)
    has_content = False

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        if config.questions_only:
            return []
        docs, errors = records.page_studies(self.env, schema.NAME, location=(self.env.docname, self.lineno))
        container = nodes.container(classes=["gemm-study", "gemm-tp-comm"])
        if not docs:
            container += _not_measured(config.cache_dir, errors)
            return [container]
        panels: list[tuple[str, list[nodes.Node]]] = []
        for doc in docs:
            data, prov = doc["data"], doc["provenance"]
            table = build_table([[Entry(h, strong=True) for h in HEADER]], rows(data), [12, 4, 12, 16, 14, 14, 12, 14],
                                classes=["gemm-tp-comm-table"])
            said = (f"{data['gpus']} x {device_label(doc['device']['name'])} of one box, NVLink, NCCL {data['nccl']}, "
                    f"{data['seq']} tokens, one layer; Transformer Engine {prov['transformer_engine']}, PyTorch "
                    f"{prov['torch']}, measured {str(prov['date'])[:10]} (commit {prov.get('commit', '?')}).")
            panels.append((device_label(doc["device"]["name"]),
                           [scrolling(table), nodes.paragraph(said, said, classes=["gemm-provenance"])]))
        if len(panels) == 1:
            container.extend(panels[0][1])
        else:
            container += tab_set(panels, classes=["gemm-device-tabs"])
        return [container]


def _not_measured(cache_dir: Path, refused: list[CacheError]) -> nodes.Element:
    if refused:
        return refused_study_admonition(schema.NAME, "", cache_dir, refused)
    admonition = nodes.admonition(classes=["gemm-not-measured", "note"])
    admonition += nodes.title("Not measured yet", "Not measured yet")
    text = (f"No tp-comm study yet: run gemm-bench study {schema.NAME} on a box of 2 or more GPUs and commit the "
            "file it writes.")
    admonition += nodes.paragraph(text, text)
    return admonition


def setup_tp_comm(app: Any) -> None:
    app.add_directive("gemm-tp-comm", GemmTpCommDirective)
