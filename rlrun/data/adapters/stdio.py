"""Adapters for programming problems with test cases: APPS/TACO, CodeContests, Codeforces
(rllm layout) and the plain `problem_id` / `prompt` / `test_cases` format.

APPS/TACO rows with an `fn_name` become call-based tests (arguments and expected return value);
every other case is a stdin/stdout pair. Limits stated by the dataset (a column, or "Time Limit:"
in a Codeforces statement) are kept on the problem; the sandbox caps them by its own config.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from rlrun.data.adapters.common import (
    case_text,
    extra_meta,
    first_solution,
    first_text,
    limits_in_text,
    memory_limit_mb,
    optional_text,
    paired,
    row_id,
    stdio_pairs,
    structured,
    text,
    time_limit_s,
)
from rlrun.data.errors import RowError
from rlrun.records import CallTest, Problem, StdioTest, Tests

_LANGUAGES = {"python": "python", "python3": "python", "py": "python", "cpp": "cpp", "c++": "cpp"}


def _need_tests(tests: Tests, field: str) -> Tests:
    if tests.count() == 0:
        raise RowError(field, "has no test cases")
    return tests


def apps(row: dict[str, Any], index: int) -> Problem:
    _, statement = first_text(row, ("question", "problem", "prompt"))
    io = structured(row, "input_output")
    if not isinstance(io, dict) or "inputs" not in io or "outputs" not in io:
        raise RowError("input_output", "must be an object with 'inputs' and 'outputs'")
    fn_name = io.get("fn_name")
    if fn_name:
        if not isinstance(fn_name, str):
            raise RowError("input_output.fn_name", "must be a function name")
        calls = [
            CallTest(args=args if isinstance(args, list) else [args], expected=expected)
            for args, expected in paired(io["inputs"], io["outputs"], "input_output")
        ]
        tests = Tests(fn_name=fn_name, calls=calls)
    else:
        tests = Tests(stdio=stdio_pairs(io["inputs"], io["outputs"], "input_output"))
    starter = optional_text(row, "starter_code")
    prompt = statement.strip()
    if starter:
        prompt += "\n\nUse this starter code:\n" + starter.rstrip()
    solutions = row.get("solutions")
    if isinstance(solutions, str):
        with contextlib.suppress(json.JSONDecodeError):  # else one solution given as plain code
            solutions = json.loads(solutions)
    meta = {"source": "apps", "row": index}
    meta |= extra_meta(row, ("difficulty", "url", "source", "name"))
    if starter:
        meta["starter_code"] = starter
    return Problem(
        id=row_id(row, ("problem_id", "id", "name"), "apps", index),
        prompt=prompt,
        kind="code",
        tests=_need_tests(tests, "input_output"),
        language="python",
        time_limit_s=time_limit_s(row.get("time_limit")),
        memory_limit_mb=memory_limit_mb(row.get("memory_limit")),
        reference=first_solution(solutions),
        meta=meta,
    )


# CodeContests' `solutions.language` codes (contest_problem.proto): 3 is PYTHON3, 2 is CPP.
_CC_PYTHON3 = 3
_CC_TESTS = ("public_tests", "private_tests", "generated_tests")


def _cc_tests(row: dict[str, Any], field: str) -> list[StdioTest]:
    if row.get(field) is None:
        return []
    value = structured(row, field)
    if not isinstance(value, dict) or "input" not in value or "output" not in value:
        raise RowError(field, "must be an object with 'input' and 'output' lists")
    return stdio_pairs(value["input"], value["output"], field)


def code_contests(row: dict[str, Any], index: int) -> Problem:
    _, statement = first_text(row, ("description", "problem"))
    if all(row.get(field) is None for field in _CC_TESTS):
        raise RowError("public_tests", "is missing (and so are 'private_tests' and "
                       "'generated_tests')")
    public, private, generated = (_cc_tests(row, field) for field in _CC_TESTS)
    stdio = public + private + generated
    reference = None
    solutions = row.get("solutions")
    if isinstance(solutions, dict):
        pairs = zip(solutions.get("language") or [], solutions.get("solution") or [], strict=False)
        reference = next((code for lang, code in pairs if lang == _CC_PYTHON3), None)
    # The public tests come first: a multi-turn environment shows only those (`env.name`); the
    # private and the generated tests (AlphaCode's mutated inputs, their outputs agreed on by
    # correct solutions) stay hidden.
    meta = {"source": "code_contests", "row": index, "visible_tests": len(public)}
    return Problem(
        id=row_id(row, ("name", "id"), "code_contests", index),
        prompt=statement.strip(),
        kind="code",
        tests=_need_tests(Tests(stdio=stdio), "/".join(_CC_TESTS)),
        language="python",
        time_limit_s=time_limit_s(row.get("time_limit")),
        memory_limit_mb=memory_limit_mb(row.get("memory_limit_bytes"), unit_if_bare="b"),
        reference=reference,
        meta=meta | extra_meta(row, ("difficulty", "cf_rating", "source")),
    )


def _case_list(cases: Any, field: str) -> list[StdioTest]:
    """Tests as `[{input, output}]`, `{inputs, outputs}` or `{input: [], output: []}`."""
    if isinstance(cases, dict):
        for ins, outs in (("inputs", "outputs"), ("input", "output")):
            if ins in cases and outs in cases:
                return stdio_pairs(cases[ins], cases[outs], field)
    if not isinstance(cases, list):
        raise RowError(field, "must be a list of {input, output} or an {inputs, outputs} object")
    tests = []
    for n, case in enumerate(cases):
        if isinstance(case, dict) and "input" in case and "output" in case:
            tests.append(StdioTest(case_text(case["input"], f"{field}[{n}].input"),
                                   case_text(case["output"], f"{field}[{n}].output")))
        elif isinstance(case, list | tuple) and len(case) == 2:
            tests.append(StdioTest(case_text(case[0], f"{field}[{n}][0]"),
                                   case_text(case[1], f"{field}[{n}][1]")))
        else:
            raise RowError(f"{field}[{n}]", "must be {input, output} or an [input, output] pair")
    return tests


def codeforces(row: dict[str, Any], index: int) -> Problem:
    _, statement = first_text(row, ("problem", "question", "description"))
    tests = Tests(stdio=_case_list(structured(row, "tests"), "tests"))
    time_s, memory_mb = limits_in_text(statement)
    return Problem(
        id=row_id(row, ("id", "problem_id", "name"), "codeforces", index),
        prompt=statement.strip(),
        kind="code",
        tests=_need_tests(tests, "tests"),
        language="python",
        time_limit_s=time_limit_s(row.get("time_limit")) or time_s,
        memory_limit_mb=memory_limit_mb(row.get("memory_limit")) or memory_mb,
        reference=first_solution(row.get("solutions", row.get("solution"))),
        meta={"source": "codeforces", "row": index},
    )


def plain(row: dict[str, Any], index: int) -> Problem:
    problem_id = row.get("problem_id")
    if problem_id is None or not str(problem_id).strip():
        raise RowError("problem_id", "is missing")
    prompt = text(row, "prompt")
    tests = Tests(stdio=_case_list(structured(row, "test_cases"), "test_cases"))
    language = str(row.get("language") or "python").lower()
    if language not in _LANGUAGES:
        raise RowError("language", f"is {language!r}; use one of python, cpp")
    return Problem(
        id=str(problem_id),
        prompt=prompt.strip(),
        kind="code",
        tests=_need_tests(tests, "test_cases"),
        language=_LANGUAGES[language],  # type: ignore[arg-type]
        time_limit_s=time_limit_s(row.get("time_limit")),
        memory_limit_mb=memory_limit_mb(row.get("memory_limit")),
        reference=first_solution(row.get("reference", row.get("solution"))),
        meta={"source": "plain", "row": index},
    )
