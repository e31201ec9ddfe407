"""The words the site defines, checked against the quantity a role quotes beside them.

The site defines *the training step* (a whole layer's forward and backward, quoted by
``:gemm-step-speedup:``) apart from *the autocast GEMMs* (the layer's linear projections under
``te.autocast``, quoted by ``:gemm-speedup:`` and ``:gemm-time:``). A sentence that introduces a
GEMM quantity with "training" or "step" ("training sees 1.62×", where 1.62× is the autocast GEMMs
and the step is 1.47×) states a number the site does not have: the build warns at the role.
"""

from __future__ import annotations

import re

#: Roles whose value is a GEMM quantity (per GEMM or summed over the model's GEMMs), never a step.
GEMM_QUANTITY_ROLES = ("gemm-speedup", "gemm-time", "gemm-tflops", "gemm-peak", "gemm-eager-time")
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
    if role not in GEMM_QUANTITY_ROLES:
        return ""
    ends = list(_CLAUSE_END.finditer(text_before))
    clause = text_before[ends[-1].end():] if ends else text_before
    while _ASIDE.search(clause):  # "(the GEMMs as training runs them)" says what the noun is, not it
        clause = _ASIDE.sub(" ", clause)
    phrase = _PHRASE_END.split(clause)[-1][-WINDOW:]
    step = _STEP_WORDS.search(phrase)
    if step is None or _GEMM_WORDS.search(phrase):
        return ""
    near = " ".join(phrase.split())
    return (f":{role}:`{role_text}` quotes GEMM time, but its words say {step.group(0)!r} "
            f"(\"...{near}\"): the training step is quoted by :gemm-step-speedup:; "
            "name the GEMMs (\"the autocast GEMMs\") for this number")
