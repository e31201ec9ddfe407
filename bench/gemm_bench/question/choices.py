"""List-valued inputs (``--precisions``, ``:modes:``, ``:show:`` ...), parsed one way everywhere.

The CLI and the Sphinx directive accept the same lists: separated by commas and/or whitespace,
each item normalized (``FP8_Current`` -> ``fp8-current``), duplicates dropped, order kept. Both
call this module, so a list that one accepts the other cannot reject. The error carries the bad
value and the choices, and each caller words it with its own spelling of the option (``--modes``
on the command line, ``:modes:`` in a page).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence

_SEPARATORS = re.compile(r"[,\s]+")


class ChoiceError(ValueError):
    """A list item that is not one of the choices, or a list with no item at all.

    ``value`` is the offending item as written, or None when the list is empty; ``known`` lists
    the accepted ids. ``str(error)`` is the message without the option's name, for the caller to
    prefix (``--modes: unknown value 'training'; choose from autocast, prequant``).
    """

    def __init__(self, value: str | None, known: Sequence[str]) -> None:
        self.value = value
        self.known = tuple(known)
        choices = ", ".join(self.known)
        if value is None:
            message = f"needs at least one of {choices}"
        else:
            message = f"unknown value {value!r}; choose from {choices}"
        super().__init__(message)

    @property
    def empty(self) -> bool:
        """True when the list had no item (as opposed to an unknown one)."""
        return self.value is None


def split_list(text: str) -> list[str]:
    """``"a, b c"`` -> ``["a", "b", "c"]`` (commas and/or whitespace; empty items dropped)."""
    return [item for item in _SEPARATORS.split(text.strip()) if item]


def parse_choices(text: str, normalize: Callable[[str], str], known: Sequence[str]) -> tuple[str, ...]:
    """The normalized ids a list names, first occurrence order, duplicates dropped.

    ``normalize`` maps one item to its id and raises ``KeyError`` for an unknown item (as
    :func:`gemm_bench.question.precisions.normalize_precision` does); that becomes a :class:`ChoiceError`
    naming the item as written. An empty list is a :class:`ChoiceError` with ``value`` None:
    asking for nothing is always a mistake, never "use the default".
    """
    items = split_list(text)
    if not items:
        raise ChoiceError(None, known)
    ids: list[str] = []
    for item in items:
        try:
            ids.append(normalize(item))
        except KeyError:
            raise ChoiceError(item, known) from None
    return tuple(dict.fromkeys(ids))


def closest(word: str, known: Sequence[str], *, cutoff: float = 0.6) -> tuple[str, ...]:
    """The ones of ``known`` a typo most likely meant (``hiden-size`` -> ``hidden-size``): those as
    close as the closest (``modle`` is as close to ``model`` as to ``modes``), at most three; none
    when nothing is close.

    :func:`difflib.get_close_matches` on the lower-cased word: a suggestion beats a list of every
    choice, which grew past what an author reads (36 directive options on one 900-character line).
    """
    by_lower = {name.lower(): name for name in known}
    key = word.strip().lower()
    found = difflib.get_close_matches(key, list(by_lower), n=3, cutoff=cutoff)
    if not found:
        return ()
    best = difflib.SequenceMatcher(None, key, found[0]).ratio()
    return tuple(by_lower[name] for name in found if difflib.SequenceMatcher(None, key, name).ratio() == best)


def either(items: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``: suggestions as a sentence says them."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
