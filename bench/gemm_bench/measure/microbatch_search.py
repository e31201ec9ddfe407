"""The search for the largest micro-batch that fits: which sizes to try, in what order (issue 41 item 3).

Pure (no torch): ``fits(n)`` is the GPU's answer for micro-batch ``n``
(:func:`gemm_bench.measure.backends.model_parts.largest_microbatch` builds the rank at ``n`` and runs two
steps; an out-of-memory is "no"). Each try costs seconds on the GPU (Llama 3 8B's rank on an H200: about
2.5 s), so the order is what a refresh pays for.

Unseeded, the search starts at 1 and doubles until a size does not fit (or the limit is reached), then
bisects between the last size that fit and the first that did not: Llama 3 8B's rank on an H200 tries
``[1, 2, 4, 8, 6, 5]`` for its answer of 4. Seeded with the answer a stored study found (``seed``), it
tries the seed and its neighbour first: ``[4, 5]`` when the answer is still 4.

Why seeding is lossless: for a ``fits`` that is monotone (every size below one that fits fits too), the
answer is the largest size at most ``limit`` that fits, whatever the order of the tries; the seeded
search ends only where a size fits and the next one was tried and did not (or the limit fits), as the
unseeded one does. A wrong seed costs tries, never the answer: a seed that fits and whose neighbour fits
goes on doubling from the neighbour; a seed that does not fit tries 1, then bisects below the seed.
Either way the answer is *bounded* (``largest + 1`` is among the tries) wherever it is below the limit,
which the tool's step timing and the study's schema rely on
(:func:`gemm_bench.results.layout_search_schema.bounded`).
"""

from __future__ import annotations

from collections.abc import Callable


def search_largest(fits: Callable[[int], bool], limit: int, seed: int | None = None) -> tuple[int, list[int]]:
    """The largest micro-batch from 1 to ``limit`` for which ``fits`` holds (0 when 1 does not fit), and
    the sizes tried, in order, each once. ``seed`` (at least 1; clamped to ``limit``): the size to try
    first, the answer a previous search found; None searches from 1 (which is the seed 1's search).

    From the first size ``s``: if it fits, ``s + 1`` is tried (below the limit); if that does not fit the
    answer is ``s``, else the search doubles from ``s + 1`` until a size does not fit or the limit is
    reached, then bisects. If ``s`` does not fit, 1 is tried (the answer is 0 if it does not fit either),
    then the search bisects between 1 and ``s``."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if seed is not None and seed < 1:
        raise ValueError(f"seed must be at least 1 (or None), got {seed}")
    tried: list[int] = []

    def attempt(size: int) -> bool:
        tried.append(size)
        return fits(size)

    start = min(seed or 1, limit)
    good: int
    bad: int | None
    if attempt(start):
        good, bad = start, None
        if start < limit:  # the seed's neighbour: a seed that is still the answer costs two tries
            good, bad = (start + 1, None) if attempt(start + 1) else (start, start + 1)
    elif start == 1 or not attempt(1):
        return 0, tried
    else:
        good, bad = 1, start
    while bad is None and good < limit:
        step = min(good * 2, limit)
        good, bad = (step, None) if attempt(step) else (good, step)
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if attempt(mid) else (good, mid)
    return good, tried
