"""The README's words about the results, written from the cache: which GPUs the picture shows.

``gemm-bench readme-figure --readme README.md`` (``nox -s readme_figure``) rewrites the caption
between :data:`BEGIN` and :data:`END` from the same list of results the figure is drawn from
(:func:`gemm_bench.report.figures.readme_documents`), and a test holds the committed README to
it: a caption can no longer say a GPU's result "awaits re-measurement" when it is current.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gemm_bench.question.devices import ALIASES, device_label, device_slug
from gemm_bench.results.typed import Result

BEGIN = "<!-- gemm-bench readme-figure: caption -->"
END = "<!-- /gemm-bench readme-figure -->"


class ReadmeError(ValueError):
    """A README whose caption cannot be written (no markers); the message names the file."""


def short_name(device_name: str) -> str:
    """``H100`` for ``NVIDIA H100 80GB HBM3``: the device's first alias, else its label."""
    slug = device_slug(device_name)
    return next((alias.upper() for alias, target in ALIASES.items() if target == slug), device_label(device_name))


def _listed(names: list[str]) -> str:
    names = [f"the {n}" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def caption(results: Sequence[Result], skipped: list[tuple[str, str]]) -> str:
    """The caption of the README figure for the results it draws (typed) and skips."""
    shown = _listed([short_name(r.device.name) for r in results])
    text = (f"*Speedup vs BF16 of the 12 GEMMs of the Transformer Engine guide's example layer, measured on {shown}: "
            "every GPU whose result in the committed cache is current")
    if skipped:
        waiting = _listed(sorted({short_name(name) for name, _ in skipped}))
        text += f" ({waiting}: awaiting re-measurement with the current method)"
    return (text + "; whiskers show the spread given by the repetitions' interquartile ranges (figure and caption "
            "written from the cache by `nox -s readme_figure`).*")


def with_caption(readme: str, text: str, path: Path) -> str:
    """``readme`` with the block between the markers replaced by ``text``."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ReadmeError(f"{path}: has no {BEGIN} ... {END} block for the figure's caption")
    return readme[: start + len(BEGIN)] + "\n" + text + "\n" + readme[end:]
