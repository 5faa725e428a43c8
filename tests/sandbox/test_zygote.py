"""What a test inherits from the zygote it is forked from, and what it does not.

The zygote sets some process state once for all its children (no supplementary groups, no core
dumps, argv) and re-seeds `random` before each fork; a test must still see only its own
descriptors and fresh random state, and must run to its own end whatever it does to its pipes.
"""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import assert_still_works, stdio_sub

pytestmark = pytest.mark.system


def test_each_test_starts_from_fresh_random_state(judge) -> None:
    code = "import random, sys\nprint('ok')\nprint(random.getrandbits(64), file=sys.stderr)\n"
    (res,) = judge.judge([stdio_sub(code, [("", "ok\n")] * 4)])
    assert res.status == "accepted", res
    assert len({v.stderr_head.strip() for v in res.tests}) == 4, res


def test_state_the_zygote_sets_once_reaches_every_test(judge) -> None:
    code = ("import os, resource, sys\n"
            "print(os.getgroups(), resource.getrlimit(resource.RLIMIT_CORE), sys.argv)\n")
    # The docker backend runs everything as the container's user, nobody, in its own group
    # (which, unprivileged, it cannot leave); the others drop every supplementary group.
    groups = "[65534]" if judge.backend == "docker" else "[]"
    (res,) = judge.judge([stdio_sub(code, [("", f"{groups} (0, 0) ['main.py']\n")] * 2)])
    assert res.status == "accepted", res


def test_a_test_sees_no_descriptor_but_its_own(judge) -> None:
    # 0-2 and the result pipe (3); the pipes to a harness's process (4, 5) exist for harness
    # tests only, and the zygote's request and reply pipes never.
    code = ("import os\n"
            "for fd in range(3, 64):\n"
            "    try:\n        os.fstat(fd)\n        print(fd)\n"
            "    except OSError:\n        pass\n")
    (res,) = judge.judge([stdio_sub(code, [("", "3\n")])])
    assert res.status == "accepted", res


def test_a_test_that_closes_its_pipes_still_runs_to_its_end(judge) -> None:
    closes = "import os, time\nfor fd in (0, 1, 2, 3):\n    os.close(fd)\n"
    exits = stdio_sub(closes + "time.sleep(0.2)\nos._exit(3)\n", [("", "")])
    sleeps = stdio_sub(closes + "time.sleep(30)\n", [("", "")])
    r_exits, r_sleeps = judge.judge([exits, sleeps])
    assert (r_exits.status, r_exits.tests[0].detail) == ("runtime_error", "exit status 3")
    assert r_sleeps.status == "time_limit", r_sleeps
    assert_still_works(judge)


def test_a_stdio_test_that_floods_its_result_pipe_only_stalls_itself(judge) -> None:
    # The result pipe of a stdio test is read once the test is over, so a program that fills it
    # blocks until its own time limit, and the slot goes on.
    code = "import os\nos.write(3, b'x' * (1 << 20))\nprint('done')\n"
    (res,) = judge.judge([stdio_sub(code, [("", "done\n")])])
    assert res.status == "time_limit", res
    assert_still_works(judge)


def test_output_that_fills_a_pipe_before_the_zygote_reads_it_arrives_whole(judge) -> None:
    # The zygote waits a few milliseconds for a one-process test to end before it reads its
    # pipes (QUIET_S in the executor): a program that fills both sooner waits for the zygote,
    # then is read to its end.
    code = ("import sys\nsys.stderr.write('e' * (1 << 17))\n"
            "sys.stdout.write('x' * (1 << 20) + '\\n')\n")
    (res,) = judge.judge([stdio_sub(code, [("", "x" * (1 << 20) + "\n")] * 2)])
    assert res.status == "accepted", res


def test_a_test_ends_when_its_processes_do(judge) -> None:
    # The zygote waits up to 0.2 s for pipes to close and for a harness test's program to exit
    # after its harness: a test whose processes are all gone must not wait that out.
    from rlrun.records import Submission
    from rlrun.records import Tests as Cases

    harness = Cases(harness="def check(candidate):\n    assert candidate(1) == 1\n",
                    entry_point="f")
    subs = [stdio_sub("print(1)", [("", "1\n")] * 8),
            *[Submission(str(i), "def f(x):\n    return x\n", "python", harness)
              for i in range(8)]]
    res = judge.judge(subs)
    assert all(r.status == "accepted" for r in res), res
    times = sorted(v.time_s for r in res for v in r.tests)
    assert times[len(times) // 2] < 0.1, times
