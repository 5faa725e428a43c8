"""Adapters for code problems judged by an assert-style harness: HumanEval, MBPP, LeetCode.

HumanEval keeps its `check(candidate)` test text as the harness with `entry_point` naming the
function it is called on; the prompt (signature + docstring) is also the `code_prefix` run in
front of the completion. MBPP's asserts and LeetCode's `tests.functional` call the solution
themselves, so they carry no entry point.
"""

from __future__ import annotations

from typing import Any

from rlrun.data.adapters.common import (
    first_solution,
    first_text,
    optional_text,
    row_id,
    structured,
    text,
)
from rlrun.data.errors import RowError
from rlrun.records import Problem, Tests


def humaneval(row: dict[str, Any], index: int) -> Problem:
    task_id = text(row, "task_id")
    prompt = text(row, "prompt")
    entry_point = text(row, "entry_point").strip()
    test = text(row, "test")
    if "def check" not in test:
        raise RowError("test", "does not define check(candidate)")
    return Problem(
        id=task_id,
        prompt=prompt,
        kind="code",
        tests=Tests(harness=test, entry_point=entry_point),
        language="python",
        code_prefix=prompt,
        reference=optional_text(row, "canonical_solution"),
        meta={"source": "humaneval", "row": index},
    )


def _string_list(row: dict[str, Any], field: str) -> list[str]:
    value = structured(row, field)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(field, "must be a list of strings")
    return value


def mbpp(row: dict[str, Any], index: int) -> Problem:
    _, statement = first_text(row, ("text", "prompt"))
    asserts = _string_list(row, "test_list")
    if not asserts:
        raise RowError("test_list", "is empty")
    setup = [optional_text(row, "test_setup_code") or ""]
    if row.get("test_imports"):
        setup = _string_list(row, "test_imports") + setup
    harness = "\n".join(part for part in [*setup, *asserts] if part.strip()) + "\n"
    prompt = (
        statement.strip() + "\nYour code should pass these tests:\n\n" + "\n".join(asserts)
    )
    task_id = row_id(row, ("task_id",), "mbpp", index)
    return Problem(
        id=task_id if task_id.startswith("mbpp") else f"mbpp-{task_id}",
        prompt=prompt,
        kind="code",
        tests=Tests(harness=harness),
        language="python",
        reference=optional_text(row, "code"),
        meta={"source": "mbpp", "row": index},
    )


def leetcode(row: dict[str, Any], index: int) -> Problem:
    _, statement = first_text(row, ("problem", "question", "prompt"))
    tests = structured(row, "tests")
    if not isinstance(tests, dict) or not isinstance(tests.get("functional"), str):
        raise RowError("tests", "must be an object with a 'functional' harness text")
    if not tests["functional"].strip():
        raise RowError("tests.functional", "is empty")
    starter = optional_text(row, "starter_code")
    prompt = statement.strip() + (f"\n\n{starter.rstrip()}" if starter else "")
    return Problem(
        id=row_id(row, ("id", "task_id", "question_id"), "leetcode", index),
        prompt=prompt,
        kind="code",
        tests=Tests(harness=tests["functional"]),
        language="python",
        reference=first_solution(row.get("solutions", row.get("solution"))),
        meta={"source": "leetcode", "row": index},
    )
