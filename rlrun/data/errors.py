"""Errors and bad-row records of the data layer.

An adapter raises `RowError` for one row it cannot use; the loader turns it into a `BadRow`
(skipped and counted) or a `DataError` (the run stops), as `data.on_bad_row` says. A
`DataError` is also what a missing file, an unknown format or an unreachable dataset raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlrun.errors import InputError


class DataError(InputError):
    """A dataset (or one of its rows) that a run cannot use."""


class RowError(ValueError):
    """One row lacks a field its format needs, or has it in an unusable shape."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r} {problem}")
        self.field = field


@dataclass
class BadRow:
    """An unusable row: `index` is its 0-based position in the source, `reason` says why."""

    index: int
    reason: str
