"""Code extraction fallbacks, verdict scoring, and judging through a real local sandbox."""

import random
import re
import time

import pytest

from rlrun import records
from rlrun.data import load_problems
from rlrun.records import JudgeResult, Problem, StdioTest, Verdict
from rlrun.rewards import RewardError
from rlrun.rewards.code import (
    _fenced_blocks,
    extract_code,
    judge_completions,
    score_judged,
    score_result,
)
from rlrun.sandbox import Judge

from .helpers import FIXTURES, config

ADD = "a, b = map(int, input().split())\nprint(a + b)"
CPP_ADD = "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b; }"


@pytest.mark.parametrize("tag", ["python", "py", "python3", "Python"])
def test_python_fence_tags(tag):
    assert extract_code(f"Here:\n```{tag}\n{ADD}\n```\n", "python") == (ADD, "python")


@pytest.mark.parametrize("tag", ["cpp", "c++", "cc", "cxx"])
def test_cpp_fence_tags(tag):
    assert extract_code(f"```{tag}\n{CPP_ADD}\n```", "cpp") == (CPP_ADD, "cpp")


def test_last_block_in_the_expected_language_wins_over_later_other_blocks():
    text = f"```python\nprint(1)\n```\n```python\n{ADD}\n```\nRun it:\n```bash\npython a.py\n```"
    assert extract_code(text, "python") == (ADD, "python")


def test_falls_back_to_the_last_block_of_any_tag_with_the_fence_language():
    assert extract_code(f"```\n{ADD}\n```", "python") == (ADD, "python")
    assert extract_code(f"```cpp\n{CPP_ADD}\n```", "python") == (CPP_ADD, "cpp")


def test_unclosed_fence_and_empty_block_are_no_code():
    assert extract_code(f"```python\n{ADD}\n", "python") == (None, "python")
    assert extract_code("```python\n\n```", "python") == (None, "python")
    assert extract_code("no code here", "python") == (None, "python")


@pytest.mark.timeout(60)
def test_a_long_line_of_backticks_is_read_in_linear_time():
    # The fence pattern scanned to the end of the line from each ``` on it: 200,000 backticks
    # took over ten seconds per completion.
    start = time.monotonic()
    assert extract_code("`" * 200_000, "python") == (None, "python")
    assert extract_code("```python " + "`" * 200_000 + "\nx = 1\n```", "python")[0] is not None
    assert time.monotonic() - start < 2


def test_blocks_are_what_the_fence_pattern_finds():
    pattern = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
    rng = random.Random(0)
    pieces = ["```", "`", "``", "\n", "python", "cpp", " ", "\t", "x = 1", "ü", "c++ {", "#"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        assert _fenced_blocks(text) == pattern.findall(text), text


def test_bare_body_only_when_allowed_and_keeps_indentation():
    body = "    return a + b\n"
    assert extract_code(body, "python", allow_bare=True) == ("    return a + b", "python")
    assert extract_code(body, "python") == (None, "python")
    fenced = "```python\n    return a + b\n```"
    assert extract_code(fenced, "python", allow_bare=True) == ("    return a + b", "python")


def _result(status, passed, total, test_statuses):
    return JudgeResult("0", status, passed, total, [Verdict(s) for s in test_statuses])


def test_score_fraction_all_or_nothing_and_compile_error():
    partial = _result("wrong_answer", 3, 4, ["accepted"] * 3 + ["wrong_answer"])
    assert score_result(partial, "fraction", -0.5) == 0.75
    assert score_result(partial, "all_or_nothing", -0.5) == 0.0
    assert score_result(_result("accepted", 4, 4, ["accepted"] * 4), "all_or_nothing", -0.5) == 1.0
    assert score_result(_result("compile_error", 0, 4, ["compile_error"]), "fraction", -0.5) == -0.5


def test_sandbox_error_is_never_scored():
    cfg = config()
    assert score_judged(_result("sandbox_error", 0, 1, ["sandbox_error"]), cfg) is None
    # One infrastructure fault among passing tests still refuses a score.
    mixed = _result("wrong_answer", 1, 2, ["accepted", "sandbox_error"])
    assert score_judged(mixed, cfg) is None


def test_zero_tests_run_is_an_error_not_a_zero():
    with pytest.raises(RewardError, match="0 tests"):
        score_result(_result("accepted", 0, 0, []), "fraction", 0.0)


def _stdio_problem():
    tests = records.Tests(stdio=[StdioTest("1 2\n", "3\n"), StdioTest("5 7\n", "12\n")])
    return Problem(id="add", prompt="add two numbers", kind="code", tests=tests)


def test_judges_stdio_programs_in_the_sandbox():
    cfg = config("reward.no_code_reward=-1.0", "reward.compile_error_reward=-0.5",
                 "sandbox.stop_on_first_failure=false")
    p = _stdio_problem()
    texts = [
        f"```python\n{ADD}\n```",
        "```python\ninput()\nprint(3)\n```",
        "I don't know.",
        f"```cpp\n{CPP_ADD}\n```",
        "```cpp\nint main( {\n```",
    ]
    with Judge("process", 2, cfg.sandbox) as judge:
        outcomes = judge_completions([p] * len(texts), texts, judge.judge, cfg)
    assert [o.score for o in outcomes] == [1.0, 0.5, -1.0, 1.0, -0.5]
    assert outcomes[2].result is None
    assert outcomes[3].language == "cpp"


def test_humaneval_canonical_solutions_pass_and_bare_bodies_are_accepted():
    cfg = config()
    problems = load_problems(str(FIXTURES / "humaneval_subset.jsonl")).problems
    fenced = [f"```python\n{p.reference}```" for p in problems]
    bare = [p.reference for p in problems]
    with Judge("process", 2, cfg.sandbox) as judge:
        outcomes = judge_completions(problems * 2, fenced + bare, judge.judge, cfg)
    assert [o.score for o in outcomes] == [1.0] * (2 * len(problems))


def test_code_problem_without_tests_names_the_problem():
    p = Problem(id="nope", prompt="x", kind="code", tests=records.Tests())
    with pytest.raises(RewardError, match="nope"):
        judge_completions([p], ["```python\nprint(1)\n```"], lambda subs: [], config())
