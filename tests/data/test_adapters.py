"""Each adapter on its fixture file: the fields it fills and the rows it rejects (and why)."""

import gzip
import json

import pytest

from rlrun.data import load_problems
from rlrun.data.adapters import ADAPTERS
from rlrun.data.adapters.math import final_answer, last_boxed
from rlrun.data.errors import RowError
from rlrun.records import CallTest, StdioTest


def by_id(result):
    return {p.id: p for p in result.problems}


def reasons(result):
    return [b.reason for b in result.bad_rows]


def test_gsm8k_answer_after_marker_and_full_reference(fixtures):
    result = load_problems(str(fixtures / "gsm8k.jsonl"))
    assert result.format == "gsm8k" and len(result.problems) == 5
    first = result.problems[0]
    assert first.kind == "math" and first.answer == "18" and first.id == "gsm8k-0"
    assert first.prompt.startswith("Janet")
    assert first.reference.endswith("#### 18")
    # "2,125" is the same number as the model's likely "2125".
    assert result.problems[4].answer == "2125"


def test_gsm8k_bad_rows_name_index_and_field(fixtures):
    result = load_problems(str(fixtures / "gsm8k_bad.jsonl"))
    assert [p.answer for p in result.problems] == ["5"]
    assert result.total_rows == 7
    assert [b.index for b in result.bad_rows] == [1, 2, 3, 4, 5, 6]
    assert reasons(result) == [
        "row 1: field 'answer or solution' is missing",
        "row 2: field 'answer' does not end in '#### <answer>'",
        "row 3: gsm8k_bad.jsonl line 4 is not valid JSON (Expecting value)",
        "row 4: is a list, not an object with fields",
        "row 5: field 'answer' has nothing after '####'",
        "row 6: field 'question' must be text, got int",
    ]


def test_math_boxed_and_answer_columns(fixtures):
    result = load_problems(str(fixtures / "math.jsonl"))
    assert result.format == "math"
    got = {p.id: p.answer for p in result.problems}
    assert got == {
        "test/prealgebra/1.json": "\\frac{3}{4}",
        "math-1": "1024",
        "math-2": "2",
        "math-3": "6",
    }
    assert by_id(result)["test/prealgebra/1.json"].meta["level"] == "Level 1"
    assert reasons(result) == [
        "row 4: field 'solution' states no final answer ('#### n', \\boxed{...} or 'The answer "
        "is: n') and there is no 'answer'",
        "row 5: field 'problem' is empty",
    ]


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("so $\\boxed{\\frac{a}{b}}$", "\\frac{a}{b}"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{unclosed", None),
        ("no box", None),
        ("\\fbox{7}", "7"),
    ],
)
def test_last_boxed(solution, expected):
    assert last_boxed(solution) == expected


def test_gsm8k_republished_as_problem_solution_loads_every_row(fixtures):
    result = load_problems(str(fixtures / "gsm8k_problem_solution.jsonl"))
    assert result.format == "gsm8k" and not result.bad_rows
    assert [p.answer for p in result.problems] == ["18", "3", "70000"]
    assert result.problems[0].prompt.startswith("Janet")
    forced = load_problems(str(fixtures / "gsm8k_problem_solution.jsonl"), fmt="math")
    assert [p.answer for p in forced.problems] == ["18", "3", "70000"]


def test_metamath_query_response_loads_every_row(fixtures):
    result = load_problems(str(fixtures / "metamath.jsonl"))
    assert result.format == "math" and not result.bad_rows
    assert [p.answer for p in result.problems] == ["18", "3", "\\frac{1}{2}"]
    assert result.problems[0].reference.endswith("The answer is: 18")


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("16 - 3 - 4 = 9\n#### 18", "18"),
        ("so it costs\n#### 1,250", "1250"),
        ("so $x = \\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("She makes 9 * 2 = 18.\nThe answer is: 18", "18"),
        ("The answer is: 1,024.", "1024"),
        ("The answer is 18, or so I think.", None),
        ("no answer at all", None),
    ],
)
def test_final_answer_from_the_solution(solution, expected):
    assert final_answer(solution) == expected


def test_question_answer_without_marker_is_math(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    result = load_problems(str(path))
    assert result.format == "math" and result.problems[0].answer == "2"


def test_humaneval_harness_entry_point_prefix_reference(fixtures):
    result = load_problems(str(fixtures / "humaneval.jsonl.gz"))
    assert result.format == "humaneval" and len(result.problems) == 3
    with gzip.open(fixtures / "humaneval.jsonl.gz", "rt") as f:
        raw = json.loads(f.readline())
    p = result.problems[0]
    assert p.id == "HumanEval/0" and p.kind == "code" and p.language == "python"
    assert p.tests.harness == raw["test"] and "def check(candidate)" in p.tests.harness
    assert p.tests.entry_point == "has_close_elements"
    assert p.code_prefix == raw["prompt"] == p.prompt
    assert p.reference == raw["canonical_solution"]
    assert p.tests.count() == 1


def test_humaneval_without_check_is_bad():
    row = {"task_id": "x", "prompt": "def f():\n", "entry_point": "f", "test": "assert True"}
    with pytest.raises(RowError, match="'test' does not define check"):
        ADAPTERS["humaneval"](row, 0)


def test_mbpp_harness_from_setup_and_asserts(fixtures):
    result = load_problems(str(fixtures / "mbpp.jsonl"))
    assert result.format == "mbpp"
    problems = by_id(result)
    assert set(problems) == {"mbpp-2", "mbpp-3", "mbpp-4"}
    p3 = problems["mbpp-3"]
    assert p3.tests.harness == (
        "import math\nassert is_not_prime(2) == False\nassert is_not_prime(10) == True\n"
    )
    assert p3.tests.entry_point is None
    assert "assert is_not_prime(10) == True" in p3.prompt
    assert p3.reference.startswith("import math")
    # Sanitized MBPP: `prompt`, `test_imports`, and test_list given as a JSON string.
    assert problems["mbpp-4"].tests.harness == "import math\nassert square(3) == 9\n"
    assert reasons(result) == ["row 3: field 'test_list' is empty"]


def test_apps_stdio_call_based_and_taco_limits(fixtures):
    result = load_problems(str(fixtures / "apps.jsonl"))
    assert result.format == "apps"
    problems = by_id(result)
    stdio = problems["10"]
    assert stdio.tests.stdio == [StdioTest("1 2\n", "3\n"), StdioTest("5 7\n", "12\n")]
    assert stdio.tests.fn_name is None
    assert stdio.reference.startswith("a, b = map(int")
    assert stdio.meta["difficulty"] == "introductory"
    call = problems["11"]
    assert call.tests.fn_name == "add" and not call.tests.stdio
    assert call.tests.calls == [CallTest([1, 2], 3), CallTest([3, 4], 7)]
    assert "Use this starter code:\ndef add(a, b):" in call.prompt
    taco = problems["REVLINE"]
    assert taco.tests.stdio[0] == StdioTest("abc", "cba")
    assert (taco.time_limit_s, taco.memory_limit_mb) == (1.0, 256)
    assert taco.reference == "print(input()[::-1])"
    assert problems["15"].tests.calls == [CallTest([4], 8)]
    assert reasons(result) == [
        "row 3: field 'input_output' is empty",
        "row 4: field 'input_output' has 2 inputs but 1 outputs",
    ]


def test_code_contests_public_private_and_generated_tests(fixtures):
    result = load_problems(str(fixtures / "code_contests.jsonl"))
    assert result.format == "code_contests"
    p = by_id(result)["1548_A. Two Sums"]
    # Public first (the ones a multi-turn environment shows), then the hidden ones.
    assert [t.input for t in p.tests.stdio] == ["1 2\n", "10 20\n", "0 0\n", "5 5\n"]
    assert p.meta["visible_tests"] == 1
    assert p.time_limit_s == 2.5 and p.memory_limit_mb == 256
    assert p.reference == "a, b = map(int, input().split())\nprint(a + b)"
    assert p.meta["cf_rating"] == 800
    only_private = by_id(result)["only_private"]
    assert only_private.tests.stdio == [StdioTest("hi\n", "hi\n")]
    assert only_private.time_limit_s is None and only_private.memory_limit_mb is None
    assert reasons(result) == [
        "row 2: field 'public_tests/private_tests/generated_tests' has no test cases",
        "row 3: field 'public_tests' must hold lists of inputs and outputs",
    ]


def test_codeforces_real_rows_and_limits_from_statement(fixtures):
    result = load_problems(str(fixtures / "codeforces.json"))
    assert result.format == "codeforces" and len(result.problems) == 2
    first, second = result.problems
    assert first.tests.stdio[0].output.startswith("1 9\n4 8")
    assert (first.time_limit_s, first.memory_limit_mb) == (1.0, 256)
    assert len(second.tests.stdio) == 3


def test_codeforces_literal_string_and_inputs_outputs_object(fixtures):
    result = load_problems(str(fixtures / "codeforces_variants.json"))
    literal, columns = result.problems
    assert literal.tests.stdio == [StdioTest("2\n", "4"), StdioTest("5\n", "10")]
    assert (literal.time_limit_s, literal.memory_limit_mb) == (2.0, 512)
    assert columns.tests.stdio == [StdioTest("1\n", "2"), StdioTest("2\n", "3")]
    assert reasons(result) == [
        # Code in the tests string is rejected, never run.
        "row 2: field 'tests' is a string that is neither JSON nor a Python literal",
        "row 3: field 'tests[0]' must be {input, output} or an [input, output] pair",
        "row 4: field 'tests' has no test cases",
    ]


def test_leetcode_functional_harness(fixtures):
    result = load_problems(str(fixtures / "leetcode.json"))
    assert result.format == "leetcode"
    p = result.problems[0]
    assert p.tests.harness.endswith("check(Solution().twoSum)")
    assert p.tests.entry_point is None
    assert p.reference.startswith("class Solution:")
    assert reasons(result) == ["row 1: field 'tests.functional' is empty"]


def test_plain_format(fixtures):
    result = load_problems(str(fixtures / "plain.jsonl"))
    assert result.format == "plain"
    p1, p2 = result.problems
    assert p1.id == "p1" and p1.tests.stdio == [StdioTest("3\n", "9"), StdioTest("4\n", "16")]
    assert p1.reference == "n = int(input())\nprint(n * n)"
    assert p2.language == "cpp" and p2.time_limit_s == 1.5 and p2.memory_limit_mb == 128
    assert p2.tests.stdio[1] == StdioTest("hello\n", "5")
    assert reasons(result) == [
        "row 2: field 'test_cases[0]' must be {input, output} or an [input, output] pair",
        "row 3: field 'problem_id' is missing",
        "row 4: field 'language' is 'cobol'; use one of python, cpp",
    ]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("gsm8k.jsonl", "gsm8k"),
        ("math.jsonl", "math"),
        ("humaneval.jsonl.gz", "humaneval"),
        ("mbpp.jsonl", "mbpp"),
        ("apps.jsonl", "apps"),
        ("code_contests.jsonl", "code_contests"),
        ("codeforces.json", "codeforces"),
        ("leetcode.json", "leetcode"),
        ("plain.jsonl", "plain"),
    ],
)
def test_explicit_format_matches_detection(fixtures, name, fmt):
    auto = load_problems(str(fixtures / name))
    explicit = load_problems(str(fixtures / name), fmt=fmt)
    assert auto.format == explicit.format == fmt
    assert [p.to_dict() for p in auto.problems] == [p.to_dict() for p in explicit.problems]
    assert all(p.meta["source"] == fmt for p in auto.problems)


def test_wrong_explicit_format_reports_every_row(fixtures):
    result = load_problems(str(fixtures / "gsm8k.jsonl"), fmt="humaneval")
    assert not result.problems
    assert [b.reason for b in result.bad_rows][:1] == ["row 0: field 'task_id' is missing"]


def test_every_configurable_format_has_an_adapter():
    from rlrun.data import FORMATS

    assert sorted(ADAPTERS) == sorted(f for f in FORMATS if f != "auto")
