"""The layer step's schema error, in a module of its own so that the step schema and the breakdown
(:mod:`.breakdown`, whose validator the schema calls) both build on it without importing each other."""

from __future__ import annotations


class StepError(ValueError):
    """A layer cell that breaks the schema; ``where`` is its JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")
