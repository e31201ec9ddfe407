"""The extension's warning vocabulary: one type, an enum of subtypes, one way to emit them.

Every problem is a Sphinx warning of type ``gemm_benchmark`` with a subtype from
:class:`Subtype`, at the page and line it concerns, so ``-W`` fails the build with ``file:line``
and a project can silence one kind with ``suppress_warnings = ["gemm_benchmark.missing"]``.
The authoring reference renders :data:`DESCRIPTIONS` (``.. gemm-benchmark-warnings::``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sphinx.util import logging

from gemm_bench.results import untrusted_text
from gemm_bench.results.cache import CacheError

logger = logging.getLogger("gemm_benchmark")

WARNING_TYPE = "gemm_benchmark"


class TextEnum(str, enum.Enum):
    """An enum whose members are their text (``str(Subtype.ROLE) == "role"``), on Python 3.10 too."""

    def __str__(self) -> str:
        return str(self.value)


class Subtype(TextEnum):
    OPTION = "option"
    CONFIG = "config"
    PATH = "path"
    PRECISIONS = "precisions"
    MODES = "modes"
    DEVICES = "devices"
    CACHE = "cache"
    MISSING = "missing"
    STALE = "stale"
    MEASURE = "measure"
    ROLE = "role"
    CLAIM = "claim"
    REFERENCE = "reference"


DESCRIPTIONS: dict[Subtype, str] = {
    Subtype.OPTION: "An unknown option, or an option value of the wrong form.",
    Subtype.CONFIG: "A model configuration that cannot be (a rule of the config is broken), or a bad "
    "``conf.py`` value of this extension.",
    Subtype.PATH: "``:hf-config:`` names a file that is missing or outside the source directory.",
    Subtype.PRECISIONS: "An unknown precision in ``:precisions:`` or in a role.",
    Subtype.MODES: "An unknown mode in ``:modes:`` or in a role.",
    Subtype.DEVICES: "A ``:devices:`` entry or a role's ``@DEVICE`` that is no known device slug or alias.",
    Subtype.CACHE: "A cache file that cannot be used (unreadable, not JSON, not the schema, a symlink); "
    "it is named, ignored whole, and the other devices still render.",
    Subtype.MISSING: "No result for a requested device, or requested cells never measured.",
    Subtype.STALE: "A result measured with another method version, or older than the configured age.",
    Subtype.MEASURE: "Measuring on this machine's GPU failed; the cache is left as it was.",
    Subtype.ROLE: "A role whose directive, device, GEMM or value does not exist, or a role without ``@DEVICE`` "
    "on a directive shown on several devices (a reader could not tell which GPU its number is).",
    Subtype.CLAIM: "A result whose numbers contradict each other where the page shows them (a layer step "
    "gaining more than its own GEMMs, beyond the spread): a measurement problem, never published silently.",
    Subtype.REFERENCE: "Something the extension registers that the authoring reference cannot document: a "
    "directive class without a docstring or a ``reference_example``, a role or ``conf.py`` value missing from "
    "the lists its table is generated from.",
}


def warn(subtype: Subtype, message: str, *, location: Any) -> None:
    """Log one located warning of the extension's type. The message may quote a result file's
    strings (a device name, a reason): control characters are shown escaped, never sent to the
    terminal (an OSC sequence in a device name would retitle it), and the message stays one line."""
    logger.warning(untrusted_text.field(message), location=location, type=WARNING_TYPE, subtype=subtype.value)


def refused_files_text(cache_dir: Path, refused: Sequence[CacheError]) -> str:
    """What a page says of result files that exist but were refused (the schema's reason, each
    path from the cache folder on, as a ````literal````): "" when none was. A "not measured yet" panel that said only
    "does not exist" sent the author to measure again what was there, refused for one field."""
    if not refused:
        return ""
    said = []
    for error in refused:
        try:
            where = f"{cache_dir.name}/{error.path.relative_to(cache_dir).as_posix()}"
        except ValueError:
            where = error.path.name
        said.append(f"``{where}`` exists but was refused: {error.problem}")
    return ("; ".join(said) + ". Fix or re-measure " + ("it" if len(refused) == 1 else "them")
            + " (the build's warning names the same reason).")
