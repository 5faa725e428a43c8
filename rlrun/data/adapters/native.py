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
    except (TypeError, ValueError, AttributeError) as err:
        raise RowError("row", f"does not match the Problem record: {err}") from None
    _check_types(problem)
    if problem.kind == "math" and not problem.answer:
        raise RowError("answer", "is missing (a math problem needs its gold answer)")
    if problem.kind == "code" and (problem.tests is None or problem.tests.count() == 0):
        raise RowError("tests", "has no test cases")
    return problem


def _text_field(value: Any, name: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise RowError(name, f"must be text, got {got} (write it in quotes)")


def _check_types(problem: Problem) -> None:
    """The fields the reward and the judge read have the types they read them as, so a bad row
    is reported here, with its field, instead of failing in the sandbox during training."""
    if not isinstance(problem.prompt, str | list):
        raise RowError("prompt", "must be text or a list of chat messages")
    _text_field(problem.answer, "answer", optional=True)
    tests = problem.tests
    if tests is None:
        return
    for i, case in enumerate(tests.stdio):
        _text_field(case.input, f"tests.stdio[{i}].input")
        _text_field(case.output, f"tests.stdio[{i}].output")
    for i, call in enumerate(tests.calls):
        if not isinstance(call.args, list):
            raise RowError(f"tests.calls[{i}].args", "must be a list of arguments")
    if tests.calls:
        _text_field(tests.fn_name, "tests.fn_name")
    _text_field(tests.harness, "tests.harness", optional=True)
    _text_field(tests.entry_point, "tests.entry_point", optional=True)
    tolerance = tests.float_tolerance
    if tolerance is not None and (isinstance(tolerance, bool) or
                                  not isinstance(tolerance, int | float) or tolerance < 0):
        raise RowError("tests.float_tolerance", "must be a number >= 0, or null")
    if not isinstance(tests.case_insensitive, bool):
        raise RowError("tests.case_insensitive", "must be true or false")
