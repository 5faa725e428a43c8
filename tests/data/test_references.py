"""Adapted records are coherent: each fixture's reference solution passes its own tests when
run the way the interfaces describe (HumanEval: code_prefix + reference + harness, then
check(entry_point); MBPP/LeetCode: reference + harness; stdio: reference fed each input)."""

import json
import subprocess
import sys

from rlrun.data import load_problems

CHECKER = r"""
import contextlib, io, json, sys
failed = []
for pid, program, stdio in json.loads(sys.stdin.read()):
    try:
        if stdio is None:
            exec(program, {"__name__": "__main__"})
        for given, expected in stdio or []:
            sys.stdin, out = io.StringIO(given), io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(program, {"__name__": "__main__"})
            if out.getvalue().split() != expected.split():
                failed.append(pid)
    except Exception as err:
        failed.append(f"{pid}: {err!r}")
print(json.dumps(failed))
"""


def programs(problem):
    tests = problem.tests
    if tests.harness:
        program = problem.code_prefix + problem.reference + "\n" + tests.harness
        if tests.entry_point:
            program += f"\ncheck({tests.entry_point})\n"
        return [problem.id, program, None]
    return [problem.id, problem.reference, [[t.input, t.output] for t in tests.stdio]]


def test_fixture_references_pass_their_tests(fixtures):
    cases = []
    for name in ("humaneval.jsonl.gz", "mbpp.jsonl", "leetcode.json", "plain.jsonl",
                 "code_contests.jsonl"):
        for problem in load_problems(str(fixtures / name)).problems:
            if problem.reference and problem.language == "python":
                cases.append(programs(problem))
    apps = load_problems(str(fixtures / "apps.jsonl")).problems
    cases += [programs(p) for p in apps if p.reference and p.tests.stdio]
    assert len(cases) == 11
    run = subprocess.run(
        [sys.executable, "-c", CHECKER], input=json.dumps(cases), capture_output=True,
        text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []
