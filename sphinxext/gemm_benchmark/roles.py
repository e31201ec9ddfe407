"""Roles that quote measured values in prose, so text and tables cannot disagree.

``:gemm-speedup:`NAME MODE PRECISION [GEMM]``` -> ``1.93×`` (whole-model GEMM time, BF16 / PRECISION;
with GEMM, that GEMM's speedup)
``:gemm-time:`NAME MODE PRECISION [GEMM]```    -> ``657.3 ms`` (whole-model GEMM time; with GEMM, that GEMM's)
``:gemm-eager-time:`NAME MODE PRECISION GEMM``` -> that GEMM called eagerly, host work included, in ms
``:gemm-tflops:`NAME MODE PRECISION GEMM``` -> ``612 TFLOP/s`` (one GEMM: ``op/pass`` or ``MxKxN``)

``NAME@DEVICE`` picks one device of a directive by its exact slug or alias
(:mod:`gemm_bench.question.devices`). Without it the role quotes the directive's only device; on a
directive shown on several devices it warns, naming the spellings to use (``te-5b is shown on h100 and
h200: write te-5b@h100 or te-5b@h200``), and shows the first device's number (the first of
``:devices:``), so that a prose number always says which GPU it is and a build without ``-W`` still
shows one. A ``@DEVICE`` the directive cannot show is told apart: a name no GPU has (a typo, with the
known names), a GPU measured but not in the directive's ``:devices:``, and a GPU the cache has no
result for (with the GPUs it has, and how a GPU build measures it: :func:`.execution.how_to_measure`,
the directive's own words).

NAME is a directive's ``:name:`` on any page. A role becomes a :class:`~.nodes.gemm_value` node
while reading; after reading, :class:`ResolveGemmValues` replaces it by the value the directive
recorded (:mod:`.values`), under ``-j`` too. Copies of the node that Sphinx keeps for titles (the
toctree, navigation links) are rendered by the node's own visitors from the same records, so a role
in a section title shows its value everywhere.

Every warning of a role is at the role's own line: docutils and MyST give a role its paragraph's
first line, so :class:`LocateRoles` moves each role node to its paragraph's line plus the lines
before the role's text in the paragraph's source (an author of a long paragraph is sent to the
role, not to the paragraph).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

from gemm_bench.question.choices import closest, either
from gemm_bench.question.devices import ALIASES, normalize_selector, selects
from gemm_bench.question.precisions import LAYER_MODES, MODE_NAMES, PRECISIONS, normalize_mode, normalize_precision
from gemm_benchmark import claims, records
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.execution import how_to_measure
from gemm_benchmark.model_step_values import (
    G_KINDS,
    MODEL_STEP_KINDS,
    MODEL_STEP_ROLES,
    QUESTION_G,
    model_step_g_key,
)
from gemm_benchmark.moe_words import MOE_CACHED_ROLE
from gemm_benchmark.nodes import builder_format, gemm_value
from gemm_benchmark.options import known_devices, unknown_devices_text
from gemm_benchmark.render_table import FLAG_MARK
from gemm_benchmark.values import (
    BREAKDOWN_ITEMS,
    ENERGY_ITEMS,
    PLAN_ITEMS,
    SAME,
    STEP_PROBLEM,
    GemmNameError,
    resolve_gemm,
    unavailable_text,
)
from gemm_benchmark.words import noun_problem

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RoleSpec:
    name: str
    syntax: str
    description: str
    example: str
    #: "required", "optional" (whole model without it) or "none".
    gemm: str = "optional"
    #: Whether the role names a precision (``gemm-fastest`` finds one instead).
    precision: bool = True
    #: The words its last argument may be in place of a GEMM (the first is the default); only
    #: ``layer-graphed`` is measured for these.
    items: tuple[str, ...] = ()


ROLES: dict[str, RoleSpec] = {
    spec.name: spec
    for spec in (
        RoleSpec("gemm-speedup", "NAME[@DEVICE] MODE PRECISION [GEMM]",
                 "Speedup of PRECISION vs BF16 (cells of one run): the whole model's GEMM time (Report total "
                 "``speedup_vs_bf16``), or with GEMM that GEMM's (``gemm_speedup``).",
                 "te-5b autocast fp8-current"),
        RoleSpec("gemm-time", "NAME[@DEVICE] MODE PRECISION [GEMM]",
                 "GEMM time in milliseconds: the whole model's (Report total ``model_ms``: per layer x the "
                 "page's layers), or with GEMM that GEMM's.",
                 "te-5b prequant bf16"),
        RoleSpec("gemm-eager-time", "NAME[@DEVICE] MODE PRECISION GEMM",
                 "One GEMM's eager time in milliseconds: the same region called eagerly, the host's work included "
                 "wherever the GPU waits for it (method v4 stores it beside each GPU time; Report cell "
                 "``eager_ms``). Far above ``gemm-time``, the GEMM is host-bound when run eagerly.",
                 "te-5b autocast fp8-current attn_out/dgrad", gemm="required"),
        RoleSpec("gemm-tflops", "NAME[@DEVICE] MODE PRECISION GEMM",
                 "Throughput of one GEMM, named ``op/pass`` (``mlp_up/fprop``) or by its ``MxKxN`` shape.",
                 "te-5b prequant fp8-block mlp_up/fprop", gemm="required"),
        RoleSpec("gemm-sqnr", "NAME[@DEVICE] MODE PRECISION [GEMM]",
                 "Accuracy: SQNR in dB against an FP32 reference (Gaussian inputs); without GEMM the layer's least "
                 "accurate GEMM (Report ``sqnr``).",
                 "te-5b autocast fp8-block"),
        RoleSpec("gemm-peak", "NAME[@DEVICE] MODE PRECISION GEMM",
                 "One GEMM's throughput as a % of the device's dense peak for its format (Report ``pct_of_peak``).",
                 "te-5b prequant fp8-current mlp_up/fprop", gemm="required"),
        RoleSpec("gemm-step-speedup", "NAME[@DEVICE] layer|layer-graphed PRECISION",
                 "Speedup vs BF16 of the whole training step of one transformer layer (forward and backward, eager "
                 "or CUDA-graphed), both from one run (Report ``step``).",
                 "te-5b layer fp8-current", gemm="none"),
        RoleSpec("gemm-share", "NAME[@DEVICE] layer|layer-graphed PRECISION",
                 "The share of the BF16 step that is its GEMMs (the 12 GEMM times of the same run / the step time): "
                 "Amdahl's law bounds the step's gain by it.",
                 "te-5b layer bf16", gemm="none"),
        RoleSpec("gemm-fastest", "NAME[@DEVICE] MODE",
                 "The fastest precision's name: the fastest of the precisions the directive shows whose whole-model "
                 "speedup vs BF16 is clearly above 1.0 (its measured spread above 1.0), so a noisy recipe never hides "
                 "a clearly faster one; \"BF16\" when none is (why, on hover), a name a sentence holds. One rule, "
                 "shared with the summary's ★ and answer sentence. ``:gemm-speedup:`NAME MODE fastest``` quotes its "
                 "speedup (1.00× for BF16). With MODE "
                 "``layer-graphed`` (or ``layer``) it answers for one layer's training step, as the summary's "
                 "answer sentence does for a result without a model step; ``:gemm-step-speedup:`NAME "
                 "layer-graphed fastest``` quotes that speedup. Where the result has the model's step, "
                 "the sentence answers for it: ``:gemm-model-speedup:`NAME layer-graphed fastest``` quotes that "
                 "answer's speedup, its title names the precision.",
                 "te-5b@h100 autocast", gemm="none", precision=False),
        RoleSpec("gemm-breakdown", "NAME[@DEVICE] layer-graphed PRECISION [change|more|less|PART]",
                 "Where the CUDA-graphed layer step's time goes: with PART (``gemm``, ``quantization``, "
                 "``attention``, ``elementwise``, ``optimizer``, ``other``, ``idle``) that part's milliseconds; "
                 "with ``change`` (the default) the sentence naming the largest change against BF16's step, the "
                 "sentence the summary prints beside the bars; with ``more`` / ``less`` the part that grew / "
                 "shrank most, as a phrase a sentence continues with \"than BF16\" (\"2.10 ms more in "
                 "quantization, casts, amax and transposes\").",
                 "te-5b@h100 layer-graphed fp8-current quantization", items=BREAKDOWN_ITEMS),
        RoleSpec("gemm-model-breakdown", "NAME[@DEVICE] layer-graphed PRECISION [change|more|less|PART]",
                 "Where the model's step goes, per micro-batch at the question's G (embedding, every "
                 "layer, output layer and loss, optimizer, composed from their measured parts as the step is): "
                 "the same words as ``gemm-breakdown``, which says them for one layer's step.",
                 "llama3-8b@h100 layer-graphed fp8-delayed less", items=BREAKDOWN_ITEMS),
        RoleSpec("gemm-plan", "NAME[@DEVICE] layer-graphed PRECISION [kept|vs-bf16|vs-fp8]",
                 "The precision plan of PRECISION (the recipe the refresh planned: the fastest FP8 step): "
                 "``kept``, the projections it keeps in BF16 (\"MLP up and MLP down\", \"no projection\"); "
                 "``vs-bf16``/``vs-fp8``, its measured step's speedup against all-BF16 and all-FP8 in one group.",
                 "te-5b@h100 layer-graphed fp8-delayed vs-bf16", items=PLAN_ITEMS),
        RoleSpec("gemm-energy", "NAME[@DEVICE] layer-graphed PRECISION [joules|tokens-per-joule|vs-bf16]",
                 "Energy of one CUDA-graphed layer step of PRECISION, measured with that recipe's step alone: "
                 "joules per step, or tokens per joule; ``vs-bf16``, the comparison with BF16's energy as a "
                 "phrase (\"7.91 J less per step, beyond the sampling spread\", \"within the sampling spread\", "
                 "or, for a result that did not store the power samples' quartiles, that no difference is claimed).",
                 "te-5b@h100 layer-graphed bf16 tokens-per-joule", items=ENERGY_ITEMS),
    )
}


#: The model's step (issue 32): tokens/s, MFU, model TFLOP/s, speedup, memory, largest
#: micro-batch; MODE ``layer-graphed``, the optional last word G (:mod:`.model_step_values`).
ROLES.update({spec["name"]: RoleSpec(spec["name"], spec["syntax"], spec["description"], spec["example"],
                                      gemm=spec["gemm"]) for spec in MODEL_STEP_ROLES})

#: A mixture of experts' cached micro-batch against its first, counted over the site (issue 43 item 5):
#: listed here for the reference; :mod:`.moe_words` registers its own role over the generic one.
ROLES[MOE_CACHED_ROLE["name"]] = RoleSpec(MOE_CACHED_ROLE["name"], MOE_CACHED_ROLE["syntax"],
                                          MOE_CACHED_ROLE["description"], MOE_CACHED_ROLE["example"],
                                          gemm="none", precision=False)

#: Roles about the layer step: their MODE is ``layer`` or ``layer-graphed``, whatever the directive shows.
STEP_ROLES = ("gemm-step-speedup", "gemm-share")


class GemmValueRole(SphinxRole):
    """Parse ``NAME[@DEVICE] MODE PRECISION [GEMM]`` into a node resolved after reading."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        spec = ROLES[self.name]
        words = self.text.split()
        fixed = 3 if spec.precision else 2
        if len(words) < fixed + (spec.gemm == "required") or (spec.gemm == "none" and len(words) > fixed):
            return self._fail(f"expects `{spec.syntax}`, got {self.text!r}")
        if not spec.precision:
            words.insert(2, "")
        if spec.items:
            if len(words) > 4:
                return self._fail(f"expects `{spec.syntax}`, got {self.text!r}")
            words = [*words[:3], words[3].lower() if len(words) == 4 else spec.items[0]]
            if words[3] not in spec.items:
                return self._fail(f"unknown {words[3]!r}; choose from {', '.join(spec.items)}")
        target, mode_text, precision_text = words[:3]
        name, _, device = target.partition("@")
        try:
            mode = normalize_mode(mode_text)
        except KeyError:
            return self._fail(f"unknown mode {mode_text!r}; choose from {', '.join(MODE_NAMES)}", Subtype.MODES)
        if (spec.items or self.name in MODEL_STEP_KINDS) and mode != "layer-graphed":
            what = ("quotes the model's step, composed of GPU times: its mode word is layer-graphed"
                    if self.name in MODEL_STEP_KINDS or self.name == "gemm-model-breakdown"
                    else "is measured for the CUDA-graphed step only: use layer-graphed")
            return self._fail(f"{what}, not {mode_text!r}", Subtype.MODES)
        if self.name in MODEL_STEP_KINDS and len(words) > 3:
            try:
                model_step_g_key(" ".join(words[3:]))
            except ValueError as exc:
                return self._fail(f"{exc}; expects `{spec.syntax}`")
        try:
            precision = ("" if not spec.precision else "fastest" if precision_text.lower() == "fastest"
                         else normalize_precision(precision_text))
        except KeyError:
            return self._fail(f"unknown precision {precision_text!r}; choose from {', '.join(PRECISIONS)} "
                              "or fastest", Subtype.PRECISIONS)
        # The role's text is the node's text: what a title copy shows if it cannot be resolved.
        node = gemm_value(self.rawtext, self.text, kind=self.name, gemm_name=name, device=device, mode=mode,
                          precision=precision, gemm=" ".join(words[3:]))
        node["text"] = self.text
        self.set_source_info(node)
        records.note_role_use(self.env, self.env.docname, name)
        return [node], []

    def _fail(self, message: str,
              subtype: Subtype = Subtype.ROLE) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        """The role's text as code, its warning left to :class:`LocateRoles`, which knows its line."""
        node = nodes.literal(self.rawtext, self.text, classes=["gemm-value-error"])
        node[_ROLE] = self.name
        node[_PROBLEM] = (subtype.value, f":{self.name}: {message}")
        self.set_source_info(node)
        return [node], []


#: Attributes of a refused role's ``literal`` node: its role name, and (subtype, message) of its
#: warning until :class:`LocateRoles` emits it.
_ROLE, _PROBLEM = "gemm_role", "gemm_role_problem"


class LocateRoles(SphinxTransform):
    """Put each role node at its own line, and emit the warnings of roles refused while reading there.

    docutils (and MyST) give a role the first line of its paragraph; in a paragraph of ten lines
    an author looking for the bad role at that line cannot find it. A role's own line is its
    paragraph's line plus the newlines before the role's text in the paragraph's source. The
    roles of a paragraph are found in its source in their order, so a role written twice is placed
    at each of its lines; a role not found there (a substitution, say) keeps the paragraph's line.
    """

    default_priority = 200

    def apply(self, **kwargs: Any) -> None:
        cursors: dict[int, int] = {}
        for node in list(self.document.findall(nodes.Element)):
            name = node.get("kind") if isinstance(node, gemm_value) else node.get(_ROLE)
            if name is None or not node.rawsource:
                continue
            block = _source_block(node)
            if block is not None and block.line:
                start = cursors.get(id(block), 0)
                at = _find_role(block.rawsource, node.rawsource, name, start)
                if at >= 0:
                    node.source = block.source or node.source
                    node.line = block.line + block.rawsource.count("\n", 0, at)
                    cursors[id(block)] = at + 1
            problem = node.attributes.pop(_PROBLEM, None)
            node.attributes.pop(_ROLE, None)
            if problem is not None:
                warn(Subtype(problem[0]), problem[1], location=node)


def _source_block(node: nodes.Element) -> nodes.TextElement | None:
    """The innermost text block around a role that carries its source text and first line; None in
    a title, one line whose role already has it (docutils gives a section title its underline's line)."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, nodes.title):
            return None
        if isinstance(parent, nodes.TextElement) and parent.rawsource and parent.line:
            return parent
        parent = parent.parent
    return None


def _find_role(source: str, rawtext: str, name: str, start: int) -> int:
    """Where a role is written in its paragraph's ``source`` at or after ``start``, or -1: as
    reStructuredText spells it (its ``rawtext``) or as MyST does (``{name}`text```)."""
    raw = rawtext.replace("\x00", "\\")
    ticked = re.search(r"`.*`", raw, re.DOTALL)
    spellings = [raw, *([f"{{{name}}}{ticked.group(0)}"] if ticked else [])]
    found = [at for at in (source.find(spelling, start) for spelling in spellings) if at >= 0]
    return min(found, default=-1)


class Unavailable(Exception):
    """Why a role has no value (a warning at the role, not an error); ``value`` the absent value
    recorded, when the directive recorded one (its status says failed or unsupported); ``subtype``
    the warning's (a ``@DEVICE`` no GPU has is a ``devices`` mistake)."""

    def __init__(self, message: str, value: records.Value | None = None, subtype: Subtype = Subtype.ROLE) -> None:
        super().__init__(message)
        self.value = value
        self.subtype = subtype

    @property
    def shown(self) -> str:
        """What the reader sees instead of a number: "failed: <reason>", "unsupported: <reason>",
        "same as FP8 Current", or n/a."""
        if self.value is not None and self.value.status in ("failed", "unsupported", SAME):
            return unavailable_text(self.value.status, self.value.reason)
        return NOT_AVAILABLE


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What a role resolved to: the directive's record, the device, the GEMM id ("" for the whole
    model) and the value. Two roles that resolve to the same record question, device, mode and GEMM
    quote the same quantity, however they spell the name or the device."""

    record: records.DirectiveRecord
    device: records.DeviceRecord
    gemm: str
    value: records.Value
    #: Why the device is the first of several (the role named none): the warning, "" when it named
    #: one or the directive shows one.
    ambiguity: str = ""


def lookup(env: BuildEnvironment, node: gemm_value) -> records.Value:
    """The recorded value a role node quotes, or raise :class:`Unavailable` saying why."""
    return _lookup(env, node).value


def _lookup(env: BuildEnvironment, node: gemm_value) -> Resolved:
    """What the role quotes, or :class:`Unavailable`."""
    record = records.find(env, node["gemm_name"])
    if record is None:
        raise Unavailable(_no_such_name(env, node["gemm_name"]))
    device, ambiguity = _device(record, node["gemm_name"], node["device"])
    mode, precision = node["mode"], node["precision"]
    if mode not in record.modes and node["kind"] not in STEP_ROLES and mode not in LAYER_MODES:
        raise Unavailable(f"{record.name} does not show mode {mode!r} (it shows {', '.join(record.modes)})")
    if precision not in ("", "fastest") and precision not in record.precisions:
        raise Unavailable(f"{record.name} does not show precision {precision!r} "
                          f"(it shows {', '.join(record.precisions)})")
    gemm = ""
    if node["kind"] in MODEL_STEP_KINDS:
        gemm = model_step_g_key(node["gemm"])  # the role checked its G word: "G=1", "G=8" or the question's
    elif ROLES[node["kind"]].items:
        gemm = node["gemm"]  # a part or item the role checked, not a GEMM
    elif node["gemm"]:
        try:
            gemm = resolve_gemm(record.gemm_names, node["gemm"])
        except GemmNameError as exc:
            raise Unavailable(f"{record.name}: {exc}") from None
    value = device.values.get(records.value_key(node["kind"], mode, precision, gemm))
    if value is None and node["kind"] in G_KINDS:
        question_g = device.values.get(records.value_key(QUESTION_G, mode, ""))
        if question_g is not None:
            raise Unavailable(f"{record.name}: the model step is composed for G=1 and the question's "
                              f"G={question_g.text} only, not {gemm} (set :num-microbatches: to ask for another)")
    if value is None:
        raise Unavailable(f"{record.name} recorded no {node['kind']} value for {mode}/{precision} {gemm}".rstrip())
    if not value.available:
        raise Unavailable(value.tooltip, value)
    return Resolved(record, device, gemm, value, ambiguity)


#: Up to how many names a role naming none is shown all of (beyond, the closest only).
LISTED_NAMES = 12


def _no_such_name(env: BuildEnvironment, name: str) -> str:
    """Why a role's NAME quotes nothing, with the fix: the closest names a directive has (a typo),
    else every name where they are few; never a bare "no such name"."""
    known = records.quotable_names(env)
    said = f"no gemm-benchmark directive is named {name!r}"
    if not known:
        return f"{said}; no directive on the site has a :name: yet (give the one to quote a :name:)"
    near = closest(name, known)
    if near:
        return f"{said}; did you mean {either([repr(n) for n in near])}?"
    if len(known) <= LISTED_NAMES:
        return f"{said}; the names there are: {', '.join(known)}"
    return f"{said}, nor a name close to it ({len(known)} directives have a :name:)"


def _device(record: records.DirectiveRecord, name: str, wanted: str) -> tuple[records.DeviceRecord, str]:
    """The device a role quotes, and the warning when it named none of several; or
    :class:`Unavailable` saying why the directive has no such device (``name`` as the role spells it)."""
    if wanted:
        device = next((d for d in record.devices if selects(wanted, d.name)), None)
        if device is None:
            raise _no_such_device(record, wanted)
        return device, ""
    if not record.devices:
        listed = (f": no result for {_series(record.unmatched, 'or')} is in the cache; a GPU build measures it: "
                  f"{how_to_measure('such a GPU', Path(record.cache_dir))}" if record.unmatched else "")
        raise Unavailable(f"{record.name} has no measured result on any device{listed}")
    if len(record.devices) == 1:
        return record.devices[0], ""
    spellings = [_spelling(d.slug) for d in record.devices]
    first = "the first of its :devices:" if record.devices_listed else "the first by name"
    return record.devices[0], (f"{record.name} is shown on {_series(spellings, 'and')}: write "
                               f"{_series([f'{name}@{s}' for s in spellings], 'or')}, so that a reader knows "
                               f"which GPU the number is (this build quotes {spellings[0]}, {first})")


def _no_such_device(record: records.DirectiveRecord, wanted: str) -> Unavailable:
    """Why a role's ``@DEVICE`` names no device the directive shows, in the words an author acts on:
    a name no GPU has (a typo), a GPU measured but missing from ``:devices:``, a GPU nobody measured."""
    slug = normalize_selector(wanted)
    cache_dir = Path(record.cache_dir)
    prefix = f"{record.question_hash}--"
    cached = [f.removeprefix(prefix).removesuffix(".json") for f in record.cache_files]
    listed = {normalize_selector(u) for u in record.unmatched} | {d.slug for d in record.devices}
    known = known_devices(cache_dir) | listed
    if slug not in known:
        return Unavailable(f"{record.name}: {unknown_devices_text([wanted], known)}", subtype=Subtype.DEVICES)
    shown = _series([_spelling(d.slug) for d in record.devices], "and") or "none"
    unlisted = record.devices_listed and slug not in listed
    if slug in cached:
        if unlisted:
            return Unavailable(f"{record.name} does not show {wanted} (it shows {shown}): add {wanted} to its "
                               ":devices: to quote it")
        return Unavailable(f"{record.name} has a result for {wanted} that it cannot show (see the warning at "
                           "the directive)")
    have = _series([_spelling(s) for s in cached], "and") or "no GPU"
    also = f", and {wanted} is not in its :devices: (it shows {shown})" if unlisted else ""
    return Unavailable(f"no result for {wanted} is in the cache for {record.name} (the cache has its question, "
                       f"{record.question_hash}, on {have}){also}; a GPU build measures it: "
                       f"{how_to_measure(f'a {wanted} GPU', cache_dir)}")


def _spelling(slug: str) -> str:
    """How an author writes a device: its alias (``h100`` for ``h100-80gb-hbm3``), else its slug."""
    return next((alias for alias, target in ALIASES.items() if target == slug), slug)


def _series(items: Sequence[str], word: str) -> str:
    """"a", "a and b", "a, b and c" (``word`` "and" or "or"); "" for none."""
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} {word} {items[-1]}"


def displayed(value: records.Value) -> tuple[str, str, list[str]]:
    """(text, title, classes) of a quoted value: a value resting on a time the profiler cross-check
    flags carries :data:`~.render_table.FLAG_MARK` after its number and the flag (with its ratio)
    in its title, as the tables and figures mark it (issue 31)."""
    if not value.flag:
        return value.text, value.tooltip, ["gemm-value"]
    return (f"{value.text} {FLAG_MARK}", f"{value.tooltip}; {FLAG_MARK} {value.flag}",
            ["gemm-value", "gemm-flagged"])


def _rendered(value: records.Value, html: bool) -> nodes.Element:
    text, title, classes = displayed(value)
    if html:
        return nodes.abbreviation(text, text, explanation=title, classes=classes)
    return nodes.inline(text, text, classes=classes)


#: What a reader sees where a role has no value: visibly no number, with the reason on hover.
NOT_AVAILABLE = "n/a"


def _not_available(role_text: str, why: Unavailable, html: bool) -> nodes.Element:
    tooltip = f"{why} ({role_text})"
    shown = why.shown
    classes = ["gemm-value-error", *([f"gemm-{why.value.status}"] if why.value and shown != NOT_AVAILABLE else [])]
    if html:
        return nodes.abbreviation(shown, shown, explanation=tooltip, classes=classes)
    return nodes.inline(shown, shown, classes=classes)


class ResolveGemmValues(SphinxPostTransform):
    """Replace every role node with its recorded value, now that every page's directives are known."""

    default_priority = 500

    def run(self, **kwargs: Any) -> None:
        html = builder_format(self.env) == "html"
        quoted: dict[int, tuple[nodes.Element, list[claims.Quoted]]] = {}
        for node in list(self.document.findall(gemm_value)):
            try:
                found = _lookup(self.env, node)
            except Unavailable as exc:
                # Always a warning, at the role: ":missing: note" makes the directive's own panel a
                # note, but prose reading "makes it n/a faster" is never what an author meant. Not
                # where the page's own directive of that name is a rejected duplicate: the error
                # there says it all, and the role's would only repeat it in other words.
                if not records.rejected_duplicate(self.env, self.env.docname, node["gemm_name"]):
                    warn(exc.subtype, f":{node['kind']}:`{node['text']}`: {exc}", location=node)
                node.replace_self(_not_available(node["text"], exc, html))
                continue
            if found.ambiguity:
                warn(Subtype.ROLE, f":{node['kind']}:`{node['text']}`: {found.ambiguity}", location=node)
            for problem in quoted_step_problems(node, found):
                warn(Subtype.CLAIM, f":{node['kind']}:`{node['text']}` quotes a training step that contradicts "
                     f"its GEMMs: {problem}", location=node)
            paragraph = node.parent
            before = "".join(n.astext() for n in paragraph.children[:paragraph.index(node)])
            noun = noun_problem(before, node["kind"], node["text"])  # "training sees" + a GEMM speedup
            if noun:
                warn(Subtype.CLAIM, noun, location=node)
            where = claims.passage(node)
            if node["kind"] in SPEEDUP_ROLES and node["precision"] not in ("", "fastest") and where is not None:
                key = (node["kind"], found.record.question_hash, found.device.slug, node["mode"], found.gemm)
                quoted.setdefault(id(where), (where, []))[1].append(
                    claims.Quoted(key, node["precision"], node["text"], found.value))
            node.replace_self(_rendered(found.value, html))
        for where, values in quoted.values():
            problem = claims.significance_problem(where.astext(), values)
            if problem:
                warn(Subtype.CLAIM, problem, location=where)


#: Roles quoting a speedup with a spread: two of them in one passage are a comparison.
SPEEDUP_ROLES = ("gemm-speedup", "gemm-step-speedup", "gemm-model-speedup")


def quoted_step_problems(node: gemm_value, found: Resolved) -> list[str]:
    """The training steps a role rests on that contradict their GEMMs (:func:`.values.step_contradictions`,
    recorded by the directive): the step a step role quotes, or, for the answer of a step mode
    (``:gemm-fastest:`` and ``fastest``), every step the answer was chosen from."""
    mode = node["mode"]
    if mode not in LAYER_MODES or node["kind"] not in (*STEP_ROLES, "gemm-fastest"):
        return []
    precisions = (found.record.precisions if node["kind"] == "gemm-fastest" or node["precision"] == "fastest"
                  else (node["precision"],))
    out = []
    for precision in precisions:
        problem = found.device.values.get(records.value_key(STEP_PROBLEM, mode, precision))
        if problem is not None:
            out.append(problem.text)
    return out


# ---------------------------------------------------------------- copies outside the page body
def _visit_html(self: Any, node: gemm_value) -> None:
    try:
        value = lookup(self.builder.env, node)
    except Unavailable as exc:
        self.body.append(self.starttag(node, "abbr", "", title=f"{exc} ({node['text']})", CLASS="gemm-value-error"))
        self.body.append(self.encode(exc.shown) + "</abbr>")
    else:
        text, title, classes = displayed(value)
        self.body.append(self.starttag(node, "abbr", "", title=title, CLASS=" ".join(classes)))
        self.body.append(self.encode(text) + "</abbr>")
    raise nodes.SkipNode


def _visit_text_like(self: Any, node: gemm_value) -> None:
    """LaTeX, text, man, texinfo: the value's text through the writer's own escaping."""
    try:
        text = displayed(lookup(self.builder.env, node))[0]
    except Unavailable as exc:
        text = exc.shown
    node.children = [nodes.Text(text)]  # a copy outside the body: let the writer write it


def _depart_nothing(self: Any, node: gemm_value) -> None:
    """The writer wrote the node's text itself."""


def setup_roles(app: Sphinx) -> None:
    copies: dict[str, Any] = {w: (_visit_text_like, _depart_nothing) for w in ("latex", "text", "man", "texinfo")}
    app.add_node(gemm_value, html=(_visit_html, None), **copies)
    for name in ROLES:
        app.add_role(name, GemmValueRole())
    app.add_transform(LocateRoles)
    app.add_post_transform(ResolveGemmValues)
