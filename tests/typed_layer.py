"""Typed layer-step cells for tests of readers that take :class:`~gemm_bench.results.typed.Result` (the
breakdown figure, the page's step details): raw cells as a run stores them, read through the door."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.results.typed import LayerCell, Result, parse
from tests.helpers import synthetic_document


def layer_result(cells: Iterable[Mapping[str, Any]]) -> Result:
    """A synthetic result (:func:`tests.helpers.synthetic_document`) holding ``cells`` as its layer step,
    parsed (and so checked by the invariants) as every reader gets a result."""
    doc = synthetic_document()
    doc["layer"] = [copy.deepcopy(dict(c)) for c in cells]
    return parse(doc)


def typed_cells(cells: Iterable[Mapping[str, Any]]) -> tuple[LayerCell, ...]:
    """``cells`` as :attr:`Result.layer` holds them."""
    return layer_result(cells).layer
