"""The `rlrun` format: rows written by `rlrun data convert` (`Problem.to_dict` as JSON lines)."""

from __future__ import annotations

from typing import Any

from rlrun.data.errors import RowError
from rlrun.records import Problem

_KINDS = ("math", "code")
_LANGUAGES = ("python", "cpp")


def rlrun(row: dict[str, Any], index: int) -> Problem:
    for field in ("id", "prompt", "kind"):
        if row.get(field) in (None, ""):
            raise RowError(field, "is missing")
    if row["kind"] not in _KINDS:
        raise RowError("kind", f"is {row['kind']!r}; use math or code")
    if row.get("language", "python") not in _LANGUAGES:
        raise RowError("language", f"is {row['language']!r}; use python or cpp")
    try:
        problem = Problem.from_dict(row)
    except TypeError as err:
        raise RowError("row", f"does not match the Problem record: {err}") from None
    if problem.kind == "math" and not problem.answer:
        raise RowError("answer", "is missing (a math problem needs its gold answer)")
    if problem.kind == "code" and (problem.tests is None or problem.tests.count() == 0):
        raise RowError("tests", "has no test cases")
    return problem
