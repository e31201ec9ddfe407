"""Roles that quote measured values in prose, so text and tables cannot disagree.

``:gemm-speedup:`NAME MODE PRECISION [GEMM]``` -> ``1.93×`` (whole-model GEMM time, BF16 / PRECISION;
with GEMM, that GEMM's speedup)
``:gemm-time:`NAME MODE PRECISION [GEMM]```    -> ``657.3 ms`` (whole-model GEMM time; with GEMM, that GEMM's)
``:gemm-tflops:`NAME MODE PRECISION GEMM``` -> ``612 TFLOP/s`` (one GEMM: ``op/pass`` or ``MxKxN``)

``NAME@DEVICE`` picks one device of a multi-device directive (default: its first device). NAME is
a directive's ``:name:`` on any page: a role becomes a :class:`~.nodes.gemm_value` node while
reading, and :class:`ResolveGemmValues` fills it in after every page is read (under ``-j`` too).
The values are :class:`gemm_bench.report.Report`'s, as ``gemm-bench report --json`` prints them; the
HTML shows the full-precision value and its source as a tooltip.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

from gemm_bench.cache import CacheError, read_document
from gemm_bench.precisions import MODE_NAMES, PRECISIONS, normalize_mode, normalize_precision
from gemm_bench.report import Report
from gemm_benchmark import envdata
from gemm_benchmark.execution import matches
from gemm_benchmark.nodes import gemm_value
from gemm_benchmark.render_block import app_of
from gemm_benchmark.render_table import format_ms, format_speedup, format_tflops

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RoleSpec:
    name: str
    syntax: str
    description: str
    example: str
    #: "required", "optional" (whole model without it) or "none".
    gemm: str = "optional"


ROLES: dict[str, RoleSpec] = {
    spec.name: spec
    for spec in (
        RoleSpec("gemm-speedup", "NAME[@DEVICE] MODE PRECISION [GEMM]",
                 "Speedup of PRECISION vs BF16: the whole model's GEMM time (Report total ``speedup_vs_bf16``), "
                 "or with GEMM that GEMM's (``gemm_speedup``).",
                 "te-5b-h100 autocast fp8-current"),
        RoleSpec("gemm-time", "NAME[@DEVICE] MODE PRECISION [GEMM]",
                 "GEMM time in milliseconds: the whole model's (Report total ``model_ms``: per layer x layers), "
                 "or with GEMM that GEMM's.",
                 "te-5b-h100 prequant bf16"),
        RoleSpec("gemm-tflops", "NAME[@DEVICE] MODE PRECISION GEMM",
                 "Throughput of one GEMM, named ``op/pass`` (``mlp_up/fprop``) or by its ``MxKxN`` shape.",
                 "te-5b-h100 prequant fp8-block mlp_up/fprop", gemm="required"),
    )
}


class GemmValueRole(SphinxRole):
    """Parse ``NAME[@DEVICE] MODE PRECISION [GEMM]`` into a node resolved after reading."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        spec = ROLES[self.name]
        words = self.text.split()
        if len(words) < (4 if spec.gemm == "required" else 3) or (spec.gemm == "none" and len(words) > 3):
            return self._fail(f"expects `{spec.syntax}`, got {self.text!r}")
        target, mode_text, precision_text = words[:3]
        name, _, device = target.partition("@")
        try:
            mode = normalize_mode(mode_text)
        except KeyError:
            return self._fail(f"unknown mode {mode_text!r}; choose from {', '.join(MODE_NAMES)}", "modes")
        try:
            precision = normalize_precision(precision_text)
        except KeyError:
            return self._fail(f"unknown precision {precision_text!r}; choose from {', '.join(PRECISIONS)}",
                              "precisions")
        node = gemm_value(self.rawtext, kind=self.name, gemm_name=name, device=device, mode=mode,
                          precision=precision, gemm=" ".join(words[3:]), text=self.text)
        self.set_source_info(node)
        envdata.note_role_use(self.env, self.env.docname, name)
        return [node], []

    def _fail(self, message: str, subtype: str = "role") -> tuple[list[nodes.Node], list[nodes.system_message]]:
        logger.warning(":%s: %s", self.name, message, location=self.get_location(), type="gemm_benchmark",
                       subtype=subtype)
        return [nodes.literal(self.rawtext, self.text, classes=["gemm-value-error"])], []


@functools.lru_cache(maxsize=64)
def _load(path: str, mtime_ns: int) -> dict[str, Any]:
    return read_document(Path(path))


def load_document(path: str) -> dict[str, Any]:
    """A validated result file, read once per process while unchanged."""
    return _load(path, Path(path).stat().st_mtime_ns)


class Unavailable(Exception):
    """Why a role has no value (a warning at the role, not an error)."""


def compute(record: dict[str, Any], node: gemm_value) -> tuple[str, str]:
    """(displayed text, tooltip) of a role, or raise Unavailable saying why it has no value."""
    devices = record["devices"]
    if not devices:
        raise Unavailable(f"{record['name']} has no measured result on any device")
    if node["device"]:
        chosen = [d for d in devices if matches(node["device"], d["name"])]
        if not chosen:
            raise Unavailable(f"{record['name']} shows no device matching {node['device']!r} "
                              f"(it shows {', '.join(d['name'] for d in devices)})")
        device = chosen[0]
    else:
        device = devices[0]
    try:
        doc = load_document(device["path"])
    except (OSError, CacheError) as exc:
        raise Unavailable(f"cannot read {device['path']}: {exc}") from None
    mode, precision = node["mode"], node["precision"]
    report = Report(doc)
    where = f"{PRECISIONS[precision].display}, {MODE_NAMES[mode]}, {device['name']} ({record['name']})"
    if node["gemm"]:
        try:
            gemm = report.find_gemm(node["gemm"])
        except KeyError:
            known = ", ".join(f"{g.op}/{g.pass_}" for g in report.gemms)
            raise Unavailable(f"{record['name']} has no GEMM {node['gemm']!r} (known: {known})") from None
        cell = report.cell(mode, precision, gemm)
        where = f"{gemm.label}, {where}"
        if cell.status != "measured":
            raise Unavailable(f"{where}: {cell.status}" + (f" ({cell.reason})" if cell.reason else ""))
        if node["kind"] == "gemm-tflops":
            return f"{format_tflops(cell.tflops)} TFLOP/s", f"{cell.tflops!r} TFLOP/s: {where}"
        if node["kind"] == "gemm-time":
            return f"{format_ms(cell.ms)} ms", f"{cell.ms!r} ms: {where}"
        speedup = report.gemm_speedup(mode, precision, gemm)
        if speedup is None:
            raise Unavailable(f"{where}: no BF16 time to compare with")
        return format_speedup(speedup), f"{speedup!r} x BF16: {where}"
    total = report.total(mode, precision)
    if total.status != "measured":
        raise Unavailable(f"{where}: {total.status}" + (f" ({total.reason})" if total.reason else ""))
    if node["kind"] == "gemm-time":
        return f"{format_ms(total.model_ms)} ms", f"{total.model_ms!r} ms for {report.num_layers} layers: {where}"
    if total.speedup_vs_bf16 is None:
        raise Unavailable(f"{where}: BF16 is not measured, so there is no speedup")
    return format_speedup(total.speedup_vs_bf16), f"{total.speedup_vs_bf16!r} x BF16: {where}"


class ResolveGemmValues(SphinxPostTransform):
    """Replace every role node with its value, now that every page's directives are known."""

    default_priority = 500

    def run(self, **kwargs: Any) -> None:
        html = app_of(self.env).builder.format == "html"
        for node in list(self.document.findall(gemm_value)):
            record = envdata.find(self.env, node["gemm_name"])
            try:
                if record is None:
                    raise Unavailable(f"no gemm-benchmark directive is named {node['gemm_name']!r}")
                text, tooltip = compute(record, node)
            except Unavailable as exc:
                logger.warning(":%s:`%s`: %s", node["kind"], node["text"], exc, location=node,
                               type="gemm_benchmark", subtype="role")
                node.replace_self(nodes.literal(node["text"], node["text"], classes=["gemm-value-error"]))
                continue
            if html:
                new: nodes.Element = nodes.abbreviation(text, text, explanation=tooltip, classes=["gemm-value"])
            else:
                new = nodes.inline(text, text, classes=["gemm-value"])
            node.replace_self(new)
