"""The words the site defines, checked against the quantity a role quotes beside them.

The site defines *the training step* (a whole layer's forward and backward, quoted by
``:gemm-step-speedup:``) apart from *the autocast GEMMs* (the layer's linear projections under
``te.autocast``, quoted by ``:gemm-speedup:`` and ``:gemm-time:``). A sentence that introduces a
GEMM quantity with "training" or "step" ("training sees 1.62×", where 1.62× is the autocast GEMMs
and the step is 1.47×) states a number the site does not have: the build warns at the role.

The model's training step (issue 32: the whole rank's step over G micro-batches, in tokens per
second, quoted by ``:gemm-model-speedup:``, ``:gemm-tokens:``, ``:gemm-mfu:``) is a third quantity:
a layer step's speedup introduced as the model's tokens per second, or a model step's introduced as
one layer's, is the same kind of wrong number, and warns the same way.
"""

from __future__ import annotations

import re

#: Roles whose value is a GEMM quantity (per GEMM or summed over the model's GEMMs), never a step.
GEMM_QUANTITY_ROLES = ("gemm-speedup", "gemm-time", "gemm-tflops", "gemm-peak", "gemm-eager-time")
#: Roles whose value is one layer's step (never the model's whole step).
LAYER_STEP_ROLES = ("gemm-step-speedup", "gemm-share")
#: Roles whose value is the model's whole training step (never one layer's).
MODEL_STEP_ROLES = ("gemm-model-speedup", "gemm-tokens", "gemm-mfu", "gemm-model-tflops")
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


def noun_problem(text_before: str, role: str, role_text: str) -> str:
    """Why the words just before a role name another quantity than the role's, or "".

    ``text_before`` is the paragraph's text up to the role. Only the phrase that introduces the
    value is read: the current sentence, its parenthetical asides left out, from its last comma,
    at most :data:`WINDOW` characters. A GEMM quantity introduced by "training" or "step" with no
    word for GEMMs there ("and training sees 1.62×") is a step claim the number does not support.
    """
    if role not in (*GEMM_QUANTITY_ROLES, *LAYER_STEP_ROLES, *MODEL_STEP_ROLES):
        return ""
    ends = list(_CLAUSE_END.finditer(text_before))
    clause = text_before[ends[-1].end():] if ends else text_before
    while _ASIDE.search(clause):  # "(the GEMMs as training runs them)" says what the noun is, not it
        clause = _ASIDE.sub(" ", clause)
    phrase = _PHRASE_END.split(clause)[-1][-WINDOW:]
    near = " ".join(phrase.split())
    if role in LAYER_STEP_ROLES:
        model = _MODEL_WORDS.search(phrase)
        if model is None or _LAYER_WORDS.search(phrase):
            return ""
        return (f":{role}:`{role_text}` quotes one layer's step, but its words say {model.group(0)!r} "
                f"(\"...{near}\"): the model's training step is quoted by :gemm-model-speedup: and :gemm-tokens:; "
                "name the layer (\"one layer's step\") for this number")
    if role in MODEL_STEP_ROLES:
        layer = _LAYER_WORDS.search(phrase)
        if layer is None or _MODEL_WORDS.search(phrase):
            return ""
        return (f":{role}:`{role_text}` quotes the model's whole training step, but its words say "
                f"{layer.group(0)!r} (\"...{near}\"): one layer's step is quoted by :gemm-step-speedup:")
    step = _STEP_WORDS.search(phrase)
    if step is None or _GEMM_WORDS.search(phrase):
        return ""
    return (f":{role}:`{role_text}` quotes GEMM time, but its words say {step.group(0)!r} "
            f"(\"...{near}\"): the training step is quoted by :gemm-step-speedup:; "
            "name the GEMMs (\"the autocast GEMMs\") for this number")
