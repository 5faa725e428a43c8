"""The judge on correct and incorrect programs: stdio, calls, harnesses, C++, retries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlrun.config import SandboxConfig
from rlrun.records import CallTest, Problem, StdioTest, Submission
from rlrun.records import Tests as Cases
from rlrun.sandbox import Judge, make_submission
from tests.sandbox.conftest import assert_still_works, can_isolate, stdio_sub

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sandbox" / "humaneval_subset.jsonl"
ADD_CPP = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n"


def humaneval_rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def humaneval_problem(row: dict) -> Problem:
    return Problem(id=row["task_id"], prompt=row["prompt"], kind="code",
                   tests=Cases(harness=row["test"], entry_point=row["entry_point"]),
                   code_prefix=row["prompt"])


# -- make_submission (pure) ----------------------------------------------------------------------

def test_make_submission_caps_limits_and_prefixes_harness_code() -> None:
    cfg = SandboxConfig(max_time_limit_s=3.0, max_memory_limit_mb=1024)
    row = humaneval_rows()[0]
    problem = humaneval_problem(row)
    problem.time_limit_s, problem.memory_limit_mb = 60.0, 4096
    sub = make_submission(problem, row["canonical_solution"], cfg, sub_id="x")
    assert (sub.id, sub.time_limit_s, sub.memory_limit_mb) == ("x", 3.0, 1024)
    assert sub.code.startswith(row["prompt"]) and sub.code.endswith(row["canonical_solution"])
    problem.time_limit_s = problem.memory_limit_mb = None
    sub = make_submission(problem, "pass", cfg)
    assert (sub.time_limit_s, sub.memory_limit_mb) == (cfg.time_limit_s, cfg.memory_limit_mb)


def test_max_tests_is_a_deterministic_subset() -> None:
    tests = Cases(stdio=[StdioTest(str(i), str(i)) for i in range(20)])
    problem = Problem(id="p1", prompt="", kind="code", tests=tests)
    cfg = SandboxConfig(max_tests=5)
    a = make_submission(problem, "x", cfg).tests.stdio
    b = make_submission(problem, "x", cfg).tests.stdio
    assert a == b and len(a) == 5
    assert [int(t.input) for t in a] == sorted(int(t.input) for t in a)
    assert len(make_submission(problem, "x", SandboxConfig()).tests.stdio) == 20


def test_make_submission_rejects_problems_without_tests() -> None:
    with pytest.raises(ValueError, match="has no tests"):
        make_submission(Problem(id="m", prompt="", kind="math", answer="1"), "x",
                        SandboxConfig())


# -- judging -----------------------------------------------------------------------------------

pytestmark_system = pytest.mark.system


@pytestmark_system
def test_stdio_accepted_and_wrong_answer(judge) -> None:
    good = stdio_sub("a, b = map(int, input().split())\nprint(a + b)   \n",
                     [("1 2\n", "3"), ("5 5\n", "10\n\n")])
    bad = stdio_sub("a, b = map(int, input().split())\nprint(a - b)",
                    [("1 2\n", "3"), ("5 5\n", "10")])
    r_good, r_bad = judge.judge([good, bad])
    assert (r_good.status, r_good.passed, r_good.total) == ("accepted", 2, 2)
    assert (r_bad.status, r_bad.passed, r_bad.total) == ("wrong_answer", 0, 2)
    assert len(r_bad.tests) == 1  # stop_on_first_failure
    assert r_good.tests[0].time_s > 0 and r_good.tests[0].memory_mb > 0


@pytestmark_system
def test_all_tests_run_without_stop_on_first_failure() -> None:
    if can_isolate():
        pytest.skip(can_isolate())
    cfg = SandboxConfig(stop_on_first_failure=False)
    with Judge("process", 1, cfg) as j:
        (res,) = j.judge([stdio_sub("print(int(input()) % 2)",
                                    [(str(i), "0") for i in range(40)])])
    assert (res.status, res.passed, res.total, len(res.tests)) == ("wrong_answer", 20, 40, 40)
    assert [v.status for v in res.tests[:2]] == ["accepted", "wrong_answer"]


@pytestmark_system
def test_output_that_is_not_utf8_is_compared_as_bytes_and_shown_as_text(judge) -> None:
    code = "import sys\nsys.stdout.buffer.write(b'caf\\xe9 ' + input().encode() + b'\\n')"
    (res,) = judge.judge([stdio_sub(code, [("x\n", "café x\n")])])
    # Latin-1 bytes are not the expected UTF-8 text; the head shows them as U+FFFD, so the
    # verdict can be tokenized into an observation and written as UTF-8.
    assert res.status == "wrong_answer"
    assert res.tests[0].stdout_head == "caf\ufffd x\n"
    res.tests[0].stdout_head.encode("utf-8")


# 16 tests that each print just under the output cap in bytes that JSON would escape into six.
# Prints the MB the judge read (pipes included) and the peak MB of the judge and the executor.
ESCAPED_OUTPUT = """
import resource
from rlrun.config import SandboxConfig
from rlrun.records import StdioTest, Submission, Tests
from rlrun.sandbox import Judge
def read_mb():
    return int(open("/proc/self/io").read().split()[1]) >> 20
code = "import sys\\nsys.stdout.buffer.write(b'\\\\x01\\\\xe9' * ((4 << 20) - 64))\\n"
tests = Tests(stdio=[StdioTest(str(i), "0") for i in range(16)])
with Judge("process", 1, SandboxConfig(stop_on_first_failure=False)) as j:
    before = read_mb()
    (res,) = j.judge([Submission("s", code, "python", tests)])
    read = read_mb() - before
print(res.status, len(res.tests), repr(res.tests[0].stdout_head[:4]), res.tests[-1].detail)
print(read, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10)
"""


@pytestmark_system
def test_outputs_json_would_escape_travel_as_bytes() -> None:
    """Sixteen tests of 8 MB of control bytes and Latin-1 each: as JSON text the reply was
    768 MB, built in the executor (1.8 GB at its peak) and read by the judge (1.8 GB); as
    bytes after the frame, 128 MB (the executor's peak 270 MB, the judge's 170 MB here)."""
    if can_isolate():
        pytest.skip(can_isolate())
    proc = subprocess.run([sys.executable, "-c", ESCAPED_OUTPUT], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict, sizes = proc.stdout.splitlines()
    assert verdict == "wrong_answer 16 '\\x01\ufffd\\x01\ufffd' output differs"
    read_mb, judge_mb, executor_mb = map(int, sizes.split())
    # What the judge reads is the wire format; its own peak depends on its allocator as well.
    assert read_mb < 160 and executor_mb < 500, (read_mb, judge_mb, executor_mb)


@pytestmark_system
def test_float_tolerance_and_case_insensitive(judge) -> None:
    sub = stdio_sub("print(1 / 3)", [("", "0.333333")], float_tolerance=1e-5)
    strict = stdio_sub("print(1 / 3)", [("", "0.333333")])
    yes = stdio_sub("print('YES')", [("", "yes")], case_insensitive=True)
    assert [r.status for r in judge.judge([sub, strict, yes])] == \
        ["accepted", "wrong_answer", "accepted"]


@pytestmark_system
def test_call_based(judge) -> None:
    tests = Cases(fn_name="two_sum", calls=[CallTest([[2, 7, 11], 9], [0, 1]),
                                            CallTest([[3, 3], 6], [0, 1])])
    plain = "def two_sum(nums, t):\n    return [0, 1]\n"
    as_tuple = "def two_sum(nums, t):\n    return (0, 1)\n"
    method = "class Solution:\n    def two_sum(self, nums, t):\n        return [0, 1]\n"
    wrong = "def two_sum(nums, t):\n    return [1, 0]\n"
    crash = "def two_sum(nums, t):\n    return nums[10]\n"
    strs = "def two_sum(nums, t):\n    return ['0', '1']\n"
    res = judge.judge([Submission(str(i), c, "python", tests)
                       for i, c in enumerate([plain, as_tuple, method, wrong, crash, strs])])
    assert [r.status for r in res] == ["accepted", "accepted", "accepted", "wrong_answer",
                                       "runtime_error", "wrong_answer"]


@pytestmark_system
def test_humaneval_fixture_canonical_accepted_and_mutations_rejected(judge) -> None:
    rows = humaneval_rows()
    cfg = SandboxConfig(time_limit_s=5.0)
    good = [make_submission(humaneval_problem(r), r["canonical_solution"], cfg) for r in rows]
    results = judge.judge(good)
    assert [r.status for r in results] == ["accepted"] * len(rows), \
        [(r.id, r.tests[0].detail) for r in results if r.status != "accepted"]
    mutants = [make_submission(humaneval_problem(r), "    return None\n", cfg) for r in rows]
    assert all(r.status != "accepted" for r in judge.judge(mutants))


@pytestmark_system
def test_mbpp_and_leetcode_style_harnesses(judge) -> None:
    mbpp = Cases(harness="assert add(1, 2) == 3\nassert add(2, 2) == 4\n")
    leet = Cases(harness="def check(candidate):\n    assert candidate([1, 2]) == 3\n"
                 "check(Solution().total)\n")
    subs = [Submission("m1", "def add(a, b):\n    return a + b\n", "python", mbpp),
            Submission("m2", "def add(a, b):\n    return 3\n", "python", mbpp),
            Submission("l1", "class Solution:\n    def total(self, x):\n        return sum(x)\n",
                       "python", leet),
            Submission("l2", "class Solution:\n    def total(self, x):\n        return 0\n",
                       "python", leet)]
    assert [r.status for r in judge.judge(subs)] == \
        ["accepted", "wrong_answer", "accepted", "wrong_answer"]


@pytestmark_system
def test_python_syntax_error_is_a_runtime_error(judge) -> None:
    (res,) = judge.judge([stdio_sub("def f(:\n", [("", "")])])
    assert res.status == "runtime_error" and "SyntaxError" in res.tests[0].stderr_head


@pytestmark_system
def test_seccomp_denies_sockets_namespaces_and_sessions(judge) -> None:
    code = ("import ctypes, os, socket\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def unshare():\n"
            "    if libc.unshare(0x10000000) != 0:\n"
            "        raise OSError(ctypes.get_errno(), 'unshare')\n"
            "for f in (lambda: socket.socket(socket.AF_INET), unshare, os.setsid,\n"
            "          lambda: os.setpgid(0, 0)):\n"
            "    try:\n        f()\n        print('allowed')\n"
            "    except OSError as e:\n        print(e.errno)\n")
    (res,) = judge.judge([stdio_sub(code, [("", "1\n1\n1\n1\n")])])
    assert res.status == "accepted", res
    assert judge.isolation["seccomp"] == "deny-list"


@pytestmark_system
def test_cpp_accepted_wrong_compile_error_runtime_error(judge) -> None:
    cases = [("1 2\n", "3\n"), ("40 2\n", "42\n")]
    wrong = ADD_CPP.replace("a+b", "a*b")
    broken = "int main() { return undefined_name; }\n"
    crash = "#include <cstdlib>\nint main(){ std::abort(); }\n"
    programs = [ADD_CPP, wrong, broken, crash]
    res = judge.judge([stdio_sub(c, cases, language="cpp") for c in programs])
    assert [r.status for r in res] == ["accepted", "wrong_answer", "compile_error",
                                       "runtime_error"]
    assert "undefined_name" in res[2].tests[0].detail
    assert res[2].total == 2
    # Of a long error output the verdict keeps the first errors, which the rest follow from.
    many = "int main() {\n" + "".join(f"  int v{i} = undefined_{i};\n" for i in range(60)) + "}\n"
    (long,) = judge.judge([stdio_sub(many, cases, language="cpp")])
    assert "undefined_0" in long.tests[0].detail and len(long.tests[0].detail) <= 1500


@pytestmark_system
def test_cpp_binary_is_shared_by_slots_and_limits_apply(judge) -> None:
    loop = "int main(){ volatile long x = 0; for(;;) x++; }\n"
    bomb = ("#include <vector>\n#include <cstdio>\nint main(){ std::vector<char*> v;"
            " for(;;){ char* p = new char[1<<24]; for(int i=0;i<(1<<24);i+=4096) p[i]=1;"
            " v.push_back(p);} }\n")
    subs = [stdio_sub(ADD_CPP, [("1 2\n", "3\n")], language="cpp") for _ in range(4)]
    subs += [stdio_sub(loop, [("", "")], language="cpp", time_limit_s=0.5),
             stdio_sub(bomb, [("", "")], language="cpp", memory_limit_mb=64)]
    res = judge.judge(subs)
    assert [r.status for r in res] == ["accepted"] * 4 + ["time_limit", "memory_limit"]


@pytestmark_system
def test_executor_killed_mid_test_is_retried() -> None:
    if can_isolate():
        pytest.skip(can_isolate())
    with Judge("process", 1, SandboxConfig(retries=1)) as j:
        slot = j._slots[0]
        first_pid = slot.proc.pid
        killer = threading.Timer(0.3, lambda: os.killpg(first_pid, signal.SIGKILL))
        killer.start()
        (res,) = j.judge([stdio_sub("import time\ntime.sleep(0.6)\nprint('ok')",
                                    [("", "ok")], time_limit_s=2.0)])
        killer.join()
        assert res.status == "accepted", res
        assert slot.proc.pid != first_pid
        assert_still_works(j)


@pytestmark_system
def test_sandbox_error_after_retries_is_never_a_program_verdict() -> None:
    if can_isolate():
        pytest.skip(can_isolate())
    with Judge("process", 1, SandboxConfig(retries=0)) as j:
        pid = j._slots[0].proc.pid
        killer = threading.Timer(0.3, lambda: os.killpg(pid, signal.SIGKILL))
        killer.start()
        (res,) = j.judge([stdio_sub("import time\ntime.sleep(0.6)", [("", "")],
                                    time_limit_s=2.0)])
        killer.join()
        assert res.status == "sandbox_error" and res.passed == 0, res
        time.sleep(0.05)
        assert_still_works(j)


@pytestmark_system
def test_missing_compiler_is_a_sandbox_error_that_names_it() -> None:
    if can_isolate():
        pytest.skip(can_isolate())
    with Judge("process", 1, SandboxConfig(cpp_compiler="/nonexistent/g++")) as j:
        (res,) = j.judge([stdio_sub(ADD_CPP, [("1 2\n", "3\n")], language="cpp")])
    assert res.status == "sandbox_error", res
    assert "/nonexistent/g++" in res.tests[0].detail


@pytestmark_system
def test_cpp_for_a_python_harness_is_a_wrong_answer(judge) -> None:
    sub = Submission("c", ADD_CPP, "cpp", Cases(harness="assert f(1) == 1\n"))
    (res,) = judge.judge([sub])
    assert res.status == "wrong_answer" and "C++" in res.tests[0].detail


# -- harness tests: the harness in its own process, the program's objects behind handles --------

SORTS = ("def sort_all(xs, reverse=False):\n"
         "    if xs is None:\n        raise ValueError('no list', 7)\n"
         "    if xs and type(xs[0]) is list:\n"
         "        for row in xs:\n            row.sort(reverse=reverse)\n"
         "        return len(xs)\n"
         "    xs.sort(reverse=reverse)\n")
SORTS_CHECK = """
def check(candidate):
    xs = [3, 1, 2]
    assert candidate(xs) is None
    assert xs == [1, 2, 3]
    rows = [[2, 1], [4, 3]]
    row = rows[0]
    assert candidate(rows, reverse=True) == 2
    assert row == [2, 1] and rows == [[2, 1], [4, 3]]
    assert candidate(xs=rows) == 2 and row == [1, 2]
    try:
        candidate(None)
    except ValueError as e:
        assert e.args == ('no list', 7)
    else:
        assert False
    n = 0
    while candidate([n, 0]) is None and n < 7:
        n += 1
    assert n == 7
"""


@pytestmark_system
def test_harness_sees_argument_mutation_and_the_programs_exceptions(judge) -> None:
    tests = Cases(harness=SORTS_CHECK, entry_point="sort_all")
    copies = SORTS.replace("xs.sort(reverse=reverse)", "xs = sorted(xs, reverse=reverse)")
    raises = SORTS.replace("raise ValueError('no list', 7)", "raise TypeError('no list')")
    res = judge.judge([Submission(str(i), code, "python", tests)
                       for i, code in enumerate([SORTS, copies, raises])])
    assert [r.status for r in res] == ["accepted", "wrong_answer", "runtime_error"], res
    assert "line 5" in res[1].tests[0].detail
    assert "TypeError" in res[2].tests[0].detail
    assert "no list" in res[2].tests[0].stderr_head


@pytestmark_system
def test_harness_uses_the_programs_classes_objects_and_modules(judge) -> None:
    code = ("import math\n\nclass Pair:\n    def __init__(self, a, b):\n"
            "        self.a, self.b = a, b\n\n"
            "def max_chain_length(arr, n):\n    best = [1] * n\n"
            "    for i in range(1, n):\n        for j in range(i):\n"
            "            if arr[i].a > arr[j].b:\n"
            "                best[i] = max(best[i], best[j] + 1)\n"
            "    return max(best)\n\n"
            "def area(r):\n    return math.pi * r * r\n")
    harness = ("assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)],"
               " 4) == 3\nassert Pair(1, 2).b == 2\n"
               "assert math.isclose(area(2), 12.566, rel_tol=0.001)\n")
    wrong = code.replace("best[j] + 1", "best[j] + 2")
    res = judge.judge([Submission("ok", code, "python", Cases(harness=harness)),
                       Submission("wrong", wrong, "python", Cases(harness=harness))])
    assert [r.status for r in res] == ["accepted", "wrong_answer"], res


@pytestmark_system
def test_harness_refuses_results_and_arguments_that_are_not_plain_data(judge) -> None:
    gen = "def f(n):\n    return (i for i in range(n))\n"
    sub = lambda code, harness: Submission("s", code, "python",  # noqa: E731
                                           Cases(harness=harness, entry_point="f"))
    listed = "def check(candidate):\n    assert list(candidate(3)) == [0, 1, 2]\n"
    compared = "def check(candidate):\n    assert candidate(3) == [0, 1, 2]\n"
    truthy = "def check(candidate):\n    if not candidate(3):\n        raise ValueError\n"
    callback = "def check(candidate):\n    assert candidate(lambda x: x) == 1\n"
    res = judge.judge([sub(gen, listed), sub(gen, compared), sub(gen, truthy),
                       sub("def f(g):\n    return g(1)\n", callback)])
    assert [r.status for r in res] == ["wrong_answer"] * 4, res
    assert all("not plain data" in r.tests[0].detail for r in res[:3]), res
    assert "cannot hand across" in res[3].tests[0].detail


@pytestmark_system
def test_harness_limits_are_the_programs(judge) -> None:
    check = "def check(candidate):\n    assert candidate(1) == 1\n"
    sub = lambda code, **kw: Submission("s", code, "python",  # noqa: E731
                                        Cases(harness=check, entry_point="f"), **kw)
    res = judge.judge([
        sub("def f(x):\n    return bytearray(10 ** 10)\n", memory_limit_mb=128),
        sub("def f(x):\n    while True:\n        pass\n", time_limit_s=0.5),
        sub("def f(x):\n    import os\n    os._exit(0)\n"),
        sub("raise RuntimeError('at import')\ndef f(x):\n    return x\n"),
    ])
    assert [r.status for r in res] == ["memory_limit", "time_limit", "wrong_answer",
                                       "runtime_error"], res
    assert "stopped answering" in res[2].tests[0].detail
    assert_still_works(judge)
