"""The site's one word for each thing it times, for every page, table, figure, role and the CLI.

Why one module: a reader once met "Training step" rows that meant one layer's step, a "Model step"
row, the CLI's "one layer" and a "Whole model" bar that was a sum of GEMMs, side by side, while the
answer rested on a fourth thing (issue 44 item 2). Three quantities, three names, written here once:

* **the model's step** (:data:`MODEL_STEP`): what the answer uses: one rank's embedding, every layer
  over G micro-batches, the output layer and loss, and the optimizer (amortized over G); quoted by
  ``:gemm-model-speedup:`` and ``:gemm-tokens:``.
* **one layer's step** (:data:`LAYER_STEP`): one transformer layer's forward and backward, replayed as
  a CUDA graph (``layer-graphed``; ``layer`` is the same step eager, host work included); quoted by
  ``:gemm-step-speedup:``.
* **the GEMMs** (:data:`GEMMS`): the layer's linear projections alone, summed over the model for a
  total (:data:`ALL_GEMMS`); quoted by ``:gemm-speedup:``.

It sits in the bottom layer (:mod:`gemm_bench.question`) so the report, the CLI and the Sphinx
extension all import the same strings. Mode names (``MODE_NAMES``: "Layer step", "Autocast") stay
where a *mode* is named (tabs, ``--modes``); these words are for the *quantity* a number is.
"""

from __future__ import annotations

#: The model's step, in running prose ("the model's step at G = 8").
MODEL_STEP = "the model's step"
#: One layer's step (CUDA-graphed), in running prose.
LAYER_STEP = "one layer's step"
#: The same step, eager (host work included), in running prose.
LAYER_STEP_EAGER = "one layer's eager step"
#: The linear projections' matrix multiplications, in running prose.
GEMMS = "GEMMs"
#: What a cell of a recipe without the model's step says (its status gives the reason where it has one).
NO_MODEL_STEP = f"{MODEL_STEP} has no number for this recipe"
#: The label of a sum over a model's GEMMs (a figure's total bar, a table's total row).
ALL_GEMMS = "All GEMMs"


def title(words: str) -> str:
    """``words`` as a row head, a section title or the start of a sentence: "One layer's step"."""
    return words[:1].upper() + words[1:]


def model_step_at(microbatches: int) -> str:
    """"the model's step at G = 8": the model's step at ``microbatches`` micro-batches per optimizer step."""
    return f"{MODEL_STEP} at G = {microbatches}"


def model_step_row(microbatches: int) -> str:
    """A table row of the model's step at ``microbatches``: "The model's step, G = 8"."""
    return f"{title(MODEL_STEP)}, G = {microbatches}"


def layer_step(graphed: bool = True) -> str:
    """One layer's step in prose: CUDA-graphed (the site's layer step) or eager."""
    return LAYER_STEP if graphed else LAYER_STEP_EAGER


#: The row head and CLI title of one layer's step per layer mode (CUDA-graphed first, eager beside it).
LAYER_STEP_TITLES = {"layer-graphed": title(LAYER_STEP), "layer": f"{title(LAYER_STEP)}, eager"}
