"""Toy tasks: deterministic, prefix-stable, and correct by construction."""

import json
import re
import subprocess
import sys

from rlrun.data.toy import arithmetic_problems, code_problems, step_problems, toy_problems


def test_arithmetic_is_deterministic_and_prefix_stable():
    assert arithmetic_problems(30, 4) == arithmetic_problems(30, 4)
    assert arithmetic_problems(100, 4)[:30] == arithmetic_problems(30, 4)
    assert arithmetic_problems(30, 4) != arithmetic_problems(30, 5)


def test_arithmetic_answers_and_references_are_right():
    for p in arithmetic_problems(200, 0):
        a, op, b = re.findall(r"\d+|[+-]", p.reference.split(" =")[0])
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert p.answer == str(value) and value >= 0
        assert p.reference == f"{a} {op} {b} = {value}\n#### {value}"
        assert re.findall(r"\d+", p.prompt) == [a, b]
        assert p.kind == "math"
    assert arithmetic_problems(18, 0)[17].id == "toy-arith-17"


def test_arithmetic_prompts_vary_so_held_out_problems_are_new_wordings():
    problems = arithmetic_problems(500, 0)
    assert len({p.prompt for p in problems}) > 350
    assert len({p.reference for p in problems}) < 200


def test_code_problems_shape():
    problems = code_problems(60, 1)
    assert problems == code_problems(60, 1)
    assert code_problems(100, 1)[:60] == problems
    assert {p.meta["template"] for p in problems} == {
        "sum", "difference", "product", "max", "reverse", "upper", "square"
    }
    for p in problems:
        assert p.kind == "code" and p.language == "python"
        assert 3 <= len(p.tests.stdio) <= 4
        assert "\n" not in p.reference
    assert problems[7].id == "toy-code-7"


def test_code_references_pass_their_own_tests():
    # One interpreter runs every reference on every input, comparing like a judge would.
    problems = code_problems(40, 2)
    checker = (
        "import io, sys, contextlib, json\n"
        "cases = json.loads(sys.stdin.read())\n"
        "bad = []\n"
        "for pid, code, tests in cases:\n"
        "    for given, expected in tests:\n"
        "        sys.stdin = io.StringIO(given)\n"
        "        out = io.StringIO()\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            exec(code, {})\n"
        "        if out.getvalue().strip() != expected.strip():\n"
        "            bad.append(pid)\n"
        "print(json.dumps(bad))\n"
    )
    payload = json.dumps(
        [[p.id, p.reference, [[t.input, t.output] for t in p.tests.stdio]] for p in problems]
    )
    run = subprocess.run(
        [sys.executable, "-c", checker], input=payload, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []


def test_mixed_interleaves_both_kinds():
    mixed = toy_problems("mixed", 7, 0)
    assert [p.kind for p in mixed] == ["math", "code"] * 3 + ["math"]
    assert len({p.id for p in mixed}) == 7


def test_step_chains_are_deterministic_and_prefix_stable():
    assert step_problems(30, 4) == step_problems(30, 4)
    assert step_problems(100, 4)[:30] == step_problems(30, 4)
    assert step_problems(30, 4) != step_problems(30, 5)
    assert toy_problems("steps", 5, 2) == step_problems(5, 2)


def test_step_chains_write_every_step_and_each_verifies():
    from rlrun.rewards.steps import check_steps

    problems = step_problems(300, 0)
    for p in problems:
        *lines, final = p.reference.split("\n")
        numbers = re.findall(r"\d+", p.prompt)
        assert 2 <= len(lines) == p.meta["steps"] == len(numbers) - 1 <= 4
        assert lines[0].startswith(numbers[0] + " ") and final == f"#### {p.answer}"
        for line, operand in zip(lines, numbers[1:], strict=True):
            a, op, b, _, value = line.split()
            assert b == operand and 0 <= int(value) <= 9
            assert int(value) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert [s.verdict for s in check_steps(p.reference)] == ["correct"] * len(lines) + [
            "uncheckable"]
    # the answers are spread over 0..9, so no single guess is a good one
    counts = [sum(p.answer == str(v) for p in problems) for v in range(10)]
    assert max(counts) < 2 * min(counts)
