"""``:gemm-moe-cached:``: how a mixture of experts' cached micro-batch compares with its first, counted
over every mixture-of-experts result the site shows, with the claim the prose makes checked (issue 43
item 5).

``:gemm-moe-cached:`GROUP VERDICT [CLAIM]``` -> ``15 of 24``: of the MoE results' recipes in GROUP
(``fp8`` for every FP8 recipe, ``bf16``, or one precision id), how many have a cached layer VERDICT
(``faster``, ``slower``, ``within``) than their first, by the site's one spread rule
(:class:`gemm_bench.report.cached_layer.CachedLayer`). CLAIM, where given, is what the sentence says of
that count: ``all``, ``most`` (more than half), ``some`` (at least one) or ``none``; a count that no
longer supports it is a ``claim`` warning at the role, so ``-W`` fails the build when the data turns
(the pages once said "slower in every recipe" where FP8's cached layer was faster in most cases).

Each directive and named summary records, per device, one value per recipe of a mixture of experts'
model step (:func:`cached_layer_values`, called by :func:`.values.device_values`); after every page is
read, :class:`ResolveMoeCounts` counts them, each result (question and GPU) once however many
directives show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxRole

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.cached_layer import VERDICTS, moe_cached_layers
from gemm_bench.report.report import Report
from gemm_benchmark import records
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.nodes import builder_format
from gemm_benchmark.records import Value, value_key

ROLE = "gemm-moe-cached"
#: The value kind each device records per recipe (mode word ``layer-graphed``: the parts are graph replays).
KIND = "gemm-cached-layer"
MODE = "layer-graphed"
#: The claims a role may make of its count, and the test each puts to ``(count, total)``.
CLAIMS = {"all": lambda n, total: n == total, "most": lambda n, total: 2 * n > total,
          "some": lambda n, total: n > 0, "none": lambda n, total: n == 0}
#: The group of every FP8 recipe.
FP8 = "fp8"

#: The role's specification, as keyword arguments of ``roles.RoleSpec`` (this module sits below
#: ``roles``, which lists it in ``ROLES`` for the authoring reference; it registers its own role).
MOE_CACHED_ROLE: dict[str, str] = {
    "name": ROLE, "syntax": "fp8|bf16|PRECISION faster|slower|within [all|most|some|none]", "gemm": "none",
    "description": "Counted over every mixture-of-experts result the site shows (each question and GPU once): of "
                   "the recipes in the group (``fp8``: every FP8 recipe), how many have a layer on a cached "
                   "micro-batch (quantized weights reused, weight gradients added into the FP32 main gradients) "
                   "faster, slower or within the quartile ranges of the same layer on a step's first micro-batch, "
                   "from the model step's measured parts: \"15 of 24\". The claim word, where given, is checked: "
                   "a count that no longer supports it (``all``, ``most``: more than half, ``some``, ``none``) "
                   "is a claim warning.",
    "example": "fp8 faster most",
}


def cached_layer_values(report: Report, where: str) -> dict[str, Value]:
    """One value per recipe of a mixture of experts' model-step parts: its cached layer's verdict against
    its first (the text ``faster``, ``slower`` or ``within``), what it rests on in the tooltip; {} for a
    dense model or a result without the parts."""
    return {value_key(KIND, MODE, p): Value(layer.verdict, f"{layer.words}: {where}")
            for p, layer in moe_cached_layers(report).items()}


class moe_count(nodes.Inline, nodes.TextElement):
    """A ``:gemm-moe-cached:`` count waiting for every page to be read."""


def _group(word: str) -> tuple[str, ...] | None:
    if word == FP8:
        return tuple(p for p in PRECISIONS if p.startswith("fp8"))
    return (word,) if word in PRECISIONS else None


class MoeCachedRole(SphinxRole):
    """Parse ``GROUP VERDICT [CLAIM]`` into a :class:`moe_count` resolved after reading."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        words = self.text.lower().split()
        problem = ""
        if len(words) not in (2, 3):
            problem = f"expects `{MOE_CACHED_ROLE['syntax']}`, got {self.text!r}"
        elif _group(words[0]) is None:
            problem = f"unknown group {words[0]!r}; choose from fp8, {', '.join(PRECISIONS)}"
        elif words[1] not in VERDICTS:
            problem = f"unknown verdict {words[1]!r}; choose from {', '.join(VERDICTS)}"
        elif len(words) == 3 and words[2] not in CLAIMS:
            problem = f"unknown claim {words[2]!r}; choose from {', '.join(CLAIMS)}"
        node = moe_count(self.rawtext, self.text, group=words[0] if words else "",
                         verdict=words[1] if len(words) > 1 else "", claim=words[2] if len(words) == 3 else "",
                         problem=problem)
        self.set_source_info(node)
        return [node], []


def count(found: Sequence[records.DirectiveRecord], group: Sequence[str], verdict: str) -> tuple[int, int, list[str]]:
    """(how many recipes of ``group`` have ``verdict``, how many have any, the tooltips of the first):
    each result (question hash and GPU) once, whichever directives show it."""
    seen: set[tuple[str, str]] = set()
    hits, total, said = 0, 0, []
    for record in found:
        for device in record.devices:
            if (record.question_hash, device.slug) in seen:
                continue
            values = [device.values.get(value_key(KIND, MODE, p)) for p in group]
            if not any(values):
                continue
            seen.add((record.question_hash, device.slug))
            for value in values:
                if value is None:
                    continue
                total += 1
                if value.text == verdict:
                    hits += 1
                    said.append(value.tooltip)
    return hits, total, said


class ResolveMoeCounts(SphinxPostTransform):
    """Replace each :class:`moe_count` with its count over every record of the site, and check its claim."""

    default_priority = 500

    def run(self, **kwargs: Any) -> None:
        html = builder_format(self.env) == "html"
        for node in list(self.document.findall(moe_count)):
            where = f":{ROLE}:`{node.astext()}`"
            if node["problem"]:
                warn(Subtype.ROLE, f"{where}: {node['problem']}", location=node)
                node.replace_self(nodes.literal(node.astext(), node.astext()))
                continue
            group = _group(node["group"]) or ()
            hits, total, said = count(records.all_records(self.env), group, node["verdict"])
            if total == 0:
                warn(Subtype.ROLE, f"{where}: no mixture-of-experts result on this site has the model step's "
                     "layer parts (layer-first, layer-cached) for these recipes", location=node)
                node.replace_self(nodes.inline("n/a", "n/a", classes=["gemm-value-error"]))
                continue
            claim = node["claim"]
            if claim and not CLAIMS[claim](hits, total):
                warn(Subtype.CLAIM, f"{where} says {claim!r}, but the data gives {hits} of {total}: the "
                     "sentence no longer holds; rewrite it from the count", location=node)
            text = f"{hits} of {total}"
            whose = "BF16" if node["group"] == BASELINE else node["group"].upper() if node["group"] == FP8 \
                else PRECISIONS[node["group"]].display
            title = (f"{whose}: the cached layer is {node['verdict']} than the first in {hits} of {total} "
                     f"mixture-of-experts cases (recipe, model and GPU)" + (": " + "; ".join(said) if said else ""))
            shown = (nodes.abbreviation(text, text, explanation=title, classes=["gemm-value"]) if html
                     else nodes.inline(text, text, classes=["gemm-value"]))
            node.replace_self(shown)


def setup_moe_words(app: Sphinx) -> None:
    """Register the role over the generic value role ``roles`` registers for every entry of its
    ``ROLES`` (where this one is listed, for the reference), and its resolving post-transform."""
    app.add_node(moe_count)
    app.add_role(ROLE, MoeCachedRole(), override=True)
    app.add_post_transform(ResolveMoeCounts)
