"""Automatic format detection from the columns (and, where columns are shared, the values) of
the first rows of a dataset. `data.format` overrides it.
"""

from __future__ import annotations

from typing import Any

from rlrun.data.adapters import COLUMNS
from rlrun.data.errors import DataError


def _has_functional(value: Any) -> bool:
    if isinstance(value, dict):
        return "functional" in value
    return isinstance(value, str) and ("'functional'" in value or '"functional"' in value)


def detect_format(sample: list[Any], source: str) -> str:
    """The format name of rows like `sample`; `DataError` listing the formats if none fits."""
    rows = [r for r in sample if isinstance(r, dict)]
    if not rows:
        raise DataError(f"{source}: no JSON-object rows found to detect the format from")
    cols: set[str] = set().union(*(r.keys() for r in rows))
    if {"id", "prompt", "kind"} <= cols:
        return "rlrun"
    if {"task_id", "prompt", "entry_point", "test"} <= cols:
        return "humaneval"
    if "test_list" in cols and cols & {"text", "prompt"}:
        return "mbpp"
    if cols & {"public_tests", "private_tests"}:
        return "code_contests"
    if "input_output" in cols:
        return "apps"
    if {"prompt", "test_cases"} <= cols:
        return "plain"
    if "tests" in cols:
        return "leetcode" if any(_has_functional(r.get("tests")) for r in rows) else "codeforces"
    for statement, solution in (("question", "answer"), ("problem", "solution")):
        if {statement, solution} <= cols:
            texts = [r.get(solution) for r in rows]
            if any(isinstance(t, str) and "####" in t for t in texts):
                return "gsm8k"
    if cols & {"problem", "question"} and cols & {"answer", "solution"}:
        return "math"
    if {"query", "response"} <= cols:
        return "math"
    known = "; ".join(f"{name}: {cols_}" for name, cols_ in COLUMNS.items())
    raise DataError(
        f"{source}: cannot tell the dataset format from its columns {sorted(cols)}. "
        f"Set data.format (or --format) to one of these: {known}"
    )
