"""The suite's own order (tests/conftest.py): ``slow`` tests at the head of each xdist worker's share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import slow_first


@dataclass(frozen=True)
class Item:
    name: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> Any:
        return (name == "slow" and self.slow) or None


def worksteal_shares(items: list[Any], workers: int) -> list[list[Any]]:
    """What pytest-xdist's worksteal sends each worker first (WorkStealingScheduling.check_schedule)."""
    pending, shares = list(items), []
    for k in range(workers):
        size = len(pending) // (workers - k)
        shares.append(pending[:size])
        pending = pending[size:]
    return shares


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("slow_at", [(), (0,), (5, 6, 7), (20, 31, 32, 33, 34, 35, 39), tuple(range(40))])
def test_each_worker_starts_on_its_share_of_the_slow_tests(workers: int, slow_at: tuple[int, ...]) -> None:
    items = [Item(f"t{i}", i in slow_at) for i in range(40)]
    ordered = slow_first(items, workers)
    assert sorted(ordered, key=items.index) == items  # every test once
    shares = worksteal_shares(ordered, workers)
    slow = [item for item in items if item.slow]
    if all(len(slow[k::workers]) <= len(share) for k, share in enumerate(shares)):  # else: nearly all slow
        for k, share in enumerate(shares):
            assert share[:len(slow[k::workers])] == slow[k::workers], k
    # The fast tests keep their order (fixture scopes stay grouped as pytest ordered them).
    assert [i for i in ordered if not i.slow] == [i for i in items if not i.slow]
