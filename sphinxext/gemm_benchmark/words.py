"""The words the site defines, checked against the quantity a role quotes beside them.

The site defines *the training step* (a whole layer's forward and backward, quoted by
``:gemm-step-speedup:``) apart from *the autocast GEMMs* (the layer's linear projections under
``te.autocast``, quoted by ``:gemm-speedup:`` and ``:gemm-time:``). A sentence that introduces a
GEMM quantity with "training" or "step" ("training sees 1.62×", where 1.62× is the autocast GEMMs
and the step is 1.47×) states a number the site does not have: the build warns at the role.

The model's step (issue 32: the whole rank's step over G micro-batches, in tokens per
second, quoted by ``:gemm-model-speedup:``, ``:gemm-tokens:``, ``:gemm-mfu:``) is a third quantity:
a layer step's speedup introduced as the model's tokens per second, or a model step's introduced as
one layer's, is the same kind of wrong number, and warns the same way.
"""

from __future__ import annotations

import dataclasses
import re

#: Roles whose value is a GEMM quantity (per GEMM or summed over the model's GEMMs), never a step.
GEMM_QUANTITY_ROLES = ("gemm-speedup", "gemm-time", "gemm-tflops", "gemm-peak", "gemm-eager-time")
#: Roles whose value is one layer's step (never the model's whole step).
LAYER_STEP_ROLES = ("gemm-step-speedup", "gemm-share")
#: Roles whose value is the model's whole training step (never one layer's).
MODEL_STEP_ROLES = ("gemm-model-speedup", "gemm-tokens", "gemm-mfu", "gemm-model-tflops")
#: Words that name the model's whole step, and one layer's.
_MODEL_WORDS = re.compile(r"\b(tokens?|MFU|model['’]s (?:training )?step|model step|whole model)\b", re.IGNORECASE)
_LAYER_WORDS = re.compile(r"\b(layers?|layer['’]s)\b", re.IGNORECASE)
#: How far before a role its noun is looked for: the clause that introduces it.
WINDOW = 60
_STEP_WORDS = re.compile(r"\b(training|step)\b", re.IGNORECASE)
_GEMM_WORDS = re.compile(r"\b(GEMMs?|kernels?|projections?|matmuls?|Linears?)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.;:!?]\s|\n\n")
#: A complete parenthetical aside (innermost first).
_ASIDE = re.compile(r"\([^()]*\)")
#: Where the phrase that introduces a value starts: after the clause's last comma or dash.
_PHRASE_END = re.compile(r",|\s[–—]\s")


@dataclasses.dataclass(frozen=True)
class _Rule:
    """Roles of one quantity: words that name another quantity (``wrong``) unless words for their own
    (``right``) are there too, what the roles quote, and the fix the warning suggests."""

    roles: tuple[str, ...]
    wrong: re.Pattern[str]
    right: re.Pattern[str]
    quotes: str
    fix: str


_RULES = (
    _Rule(GEMM_QUANTITY_ROLES, _STEP_WORDS, _GEMM_WORDS, "GEMM time",
          "the training step is quoted by :gemm-step-speedup:; name the GEMMs (\"the autocast GEMMs\") for "
          "this number"),
    _Rule(LAYER_STEP_ROLES, _MODEL_WORDS, _LAYER_WORDS, "one layer's step",
          "the model's step is quoted by :gemm-model-speedup: and :gemm-tokens:; name the layer "
          "(\"one layer's step\") for this number"),
    _Rule(MODEL_STEP_ROLES, _LAYER_WORDS, _MODEL_WORDS, "the model's whole training step",
          "one layer's step is quoted by :gemm-step-speedup:"),
)


def noun_problem(text_before: str, role: str, role_text: str) -> str:
    """Why the words just before a role name another quantity than the role's, or "".

    ``text_before`` is the paragraph's text up to the role. Only the phrase that introduces the
    value is read: the current sentence, its parenthetical asides left out, from its last comma,
    at most :data:`WINDOW` characters. A GEMM quantity introduced by "training" or "step" with no
    word for GEMMs there ("and training sees 1.62×") is a step claim the number does not support.
    """
    rule = next((r for r in _RULES if role in r.roles), None)
    if rule is None:
        return ""
    ends = list(_CLAUSE_END.finditer(text_before))
    clause = text_before[ends[-1].end():] if ends else text_before
    while _ASIDE.search(clause):  # "(the GEMMs as training runs them)" says what the noun is, not it
        clause = _ASIDE.sub(" ", clause)
    phrase = _PHRASE_END.split(clause)[-1][-WINDOW:]
    wrong = rule.wrong.search(phrase)
    if wrong is None or rule.right.search(phrase):
        return ""
    near = " ".join(phrase.split())
    return (f":{role}:`{role_text}` quotes {rule.quotes}, but its words say {wrong.group(0)!r} "
            f"(\"...{near}\"): {rule.fix}")
