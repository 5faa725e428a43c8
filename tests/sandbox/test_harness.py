"""Assert rewriting: literals stay with the judge, every check reports a value."""

import ast

import pytest

from rlrun.sandbox.harness import HarnessError, prepare_harness, with_prompt_definitions

HUMANEVAL_STYLE = """
METADATA = {}

def check(candidate):
    assert candidate(3.5) == 0.5, "first"
    assert abs(candidate(1.33) - 0.33) < 1e-6
    for x in range(3):
        assert candidate(x) == x * 0
    if True:
        assert candidate(0) == 0
"""


def test_literal_expected_values_are_removed_from_the_child_code() -> None:
    prepared = prepare_harness(HUMANEVAL_STYLE, "truncate")
    assert "assert" not in prepared.source
    assert "0.5" not in prepared.source and "first" not in prepared.source
    kinds = [(s.kind, s.expected, s.required) for s in prepared.sites]
    assert kinds == [("eq_literal", 0.5, True), ("truthy", None, True),
                     ("eq_pair", None, True), ("eq_literal", 0, False)]
    assert prepared.call_check
    ast.parse(prepared.source)


def test_operands_of_truthy_checks_are_copied_to_plain_data() -> None:
    prepared = prepare_harness(HUMANEVAL_STYLE, "truncate")
    line = next(ln for ln in prepared.source.splitlines() if "1.33" in ln)
    assert line.count("__rlrun_plain(") >= 3


def test_harness_that_calls_check_itself_is_not_called_again() -> None:
    leetcode = "def check(candidate):\n    assert candidate(1) == 2\ncheck(Solution().f)\n"
    assert not prepare_harness(leetcode, "f").call_check
    mbpp = "assert f(1) == 2\nassert f(2) == 3\n"
    prepared = prepare_harness(mbpp, None)
    assert not prepared.call_check
    assert [s.required for s in prepared.sites] == [True, True]


def test_asserts_in_helpers_are_not_required() -> None:
    src = "def helper(x):\n    assert x\n\ndef check(candidate):\n    assert candidate(1) == 1\n"
    prepared = prepare_harness(src, "f")
    assert [s.required for s in prepared.sites] == [False, True]


def test_unparsable_harness_names_the_problem() -> None:
    with pytest.raises(HarnessError, match="does not parse"):
        prepare_harness("def check(:\n", "f")


def test_names_the_harness_takes_from_the_program() -> None:
    src = ("import math\nMETA = 1\n\ndef check(candidate):\n    assert candidate(1) == helper(2)\n"
           "    assert math.isclose(f(1), META)\n    assert abs(candidate(2)) == len([1])\n"
           "    if __name__:\n        pass\n")
    assert prepare_harness(src, "g").names == ["f", "helper"]
    leetcode = "def check(candidate):\n    assert candidate(1) == 2\ncheck(Solution().f)\n"
    assert prepare_harness(leetcode, None).names == ["Solution"]


PROMPT = '''from typing import List
import math


def encode(s: str) -> str:
    return s[::-1]


def decode(s: str) -> str:
    """Undo encode."""
'''


def test_prompt_definitions_follow_the_harness_so_its_lines_stay() -> None:
    harness = "def check(candidate):\n    assert candidate(encode('ab')) == 'ab'\n"
    combined = with_prompt_definitions(harness, PROMPT, "decode")
    assert combined.startswith(harness)
    tree = ast.parse(combined)
    assert [type(s).__name__ for s in tree.body] == ["FunctionDef", "ImportFrom", "Import",
                                                     "FunctionDef"]
    assert [s.name for s in tree.body if isinstance(s, ast.FunctionDef)] == ["check", "encode"]
    prepared = prepare_harness(combined, "decode")
    assert prepared.names == [] and prepared.sites[0].line == 2


def test_prompt_definitions_are_left_out_where_they_cannot_follow() -> None:
    calls_check = "def check(candidate):\n    assert candidate(1) == 1\ncheck(f)\n"
    assert with_prompt_definitions(calls_check, PROMPT, "decode") == calls_check
    mbpp = "assert f(1) == 1\n"
    assert with_prompt_definitions(mbpp, PROMPT, "f") == mbpp
    starter = "class Solution:\n    def f(self, x: int) -> int:\n"
    humaneval = "def check(candidate):\n    assert candidate(1) == 1\n"
    assert with_prompt_definitions(humaneval, starter, "f") == humaneval
