"""SandboxPool on a small local Ray: order, de-duplication, load spread, surviving actor death."""

import dataclasses
import os
import signal
import time

import pytest
import ray

from actors.sandbox import SandboxPool
from rlrun.config import SandboxConfig
from rlrun.records import StdioTest, Submission
from rlrun.records import Tests as Cases

ECHO = "print(int(input()) * 2)\n"
SLOW_ECHO = "import time\ntime.sleep(0.4)\nprint(int(input()) * 2)\n"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]



def _cfg(actors: int = 2, workers: int = 1) -> SandboxConfig:
    return SandboxConfig(num_actors=actors, workers_per_actor=workers, num_cpus=0.5,
                         stop_on_first_failure=False)


def _sub(sub_id: str, n: int, code: str = ECHO, tests: int = 1) -> Submission:
    cases = [StdioTest(f"{n + k}\n", f"{2 * (n + k)}\n") for k in range(tests)]
    return Submission(id=sub_id, code=code, language="python", tests=Cases(stdio=cases))


def test_results_come_back_in_input_order_with_correct_verdicts():
    subs = [_sub(f"s{i}", i) for i in range(6)]
    subs[3] = Submission(id="s3", code="print(0)\n", language="python", tests=subs[3].tests)
    seen = []
    with SandboxPool(_cfg(), prefix="order") as pool:
        results = pool.wait(pool.submit(subs), progress=seen.append)
    assert [r.id for r in results] == [s.id for s in subs]
    assert [r.status for r in results] == ["accepted"] * 3 + ["wrong_answer"] + ["accepted"] * 2
    assert sum(seen) == len(subs)


def test_identical_submissions_are_judged_once_and_copied_to_every_id():
    same = _sub("x", 5)
    group = [Submission(f"g{i}", same.code, "python", same.tests) for i in range(6)]
    group[4] = _sub("g4", 5, code="print(-1)\n")
    with SandboxPool(_cfg(), prefix="dedup") as pool:
        results = pool.judge(group)
        stats = pool.stats()
    assert [r.id for r in results] == [f"g{i}" for i in range(6)]
    assert [r.status for r in results].count("accepted") == 5
    assert results[4].status == "wrong_answer"
    assert stats["submissions"] == 6 and stats["unique"] == 2
    assert stats["judged_by_0"] + stats["judged_by_1"] == 2


def test_work_goes_to_the_actor_with_least_outstanding_work():
    with SandboxPool(_cfg(), prefix="spread", chunk_size=2) as pool:
        pool.judge([_sub(f"a{i}", i) for i in range(8)])
        even = pool.stats()
        # A big batch is still in flight on one actor, so a small one goes to the other.
        big = pool.submit([_sub("big", 0, tests=6)])
        small = pool.submit([_sub("small", 1)])
        pool.wait(small)
        pool.wait(big)
        after = pool.stats()
    assert even["judged_by_0"] == even["judged_by_1"] == 4
    assert after["judged_by_0"] - even["judged_by_0"] == 1
    assert after["judged_by_1"] - even["judged_by_1"] == 1


def test_killing_an_actor_mid_batch_loses_no_verdict_and_counts_none_twice():
    subs = [_sub(f"k{i}", i, code=SLOW_ECHO) for i in range(10)]
    with SandboxPool(_cfg(), prefix="kill", chunk_size=1) as pool:
        handle = pool.submit(subs)
        time.sleep(1.0)
        ray.kill(ray.get_actor(pool.actor_names()[0]))
        results = pool.wait(handle)
        stats = pool.stats()
        again = pool.judge([_sub("after", 7)])
    assert [r.id for r in results] == [s.id for s in subs]
    assert all(r.status == "accepted" and r.passed == r.total == len(r.tests) == 1
               for r in results), [r.status for r in results]
    assert stats["unique"] == 10 and stats["resubmitted"] >= 1
    assert stats["judged_by_0"] + stats["judged_by_1"] == 10
    assert stats["recreated"] == 1
    assert pool.actor_names() == ["kill.sandbox-0.1", "kill.sandbox-1"]
    assert again[0].status == "accepted"


def test_a_frozen_actor_is_named_replaced_within_its_deadline_and_nothing_is_lost(caplog):
    """SIGSTOPped: alive to Ray, answering nothing. Past sandbox.timeout_s it is named, killed
    and replaced, and its chunk is judged again there."""
    subs = [_sub(f"f{i}", i, code=SLOW_ECHO) for i in range(6)]
    cfg = dataclasses.replace(_cfg(), timeout_s=4.0)
    with SandboxPool(cfg, prefix="freeze", chunk_size=1) as pool:
        frozen = ray.get_actor(pool.actor_names()[0])
        pid = ray.get(frozen.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
        os.kill(pid, signal.SIGSTOP)
        with caplog.at_level("WARNING", logger="actors.pool"):
            results = pool.judge(subs)
        stats = pool.stats()
    assert [r.status for r in results] == ["accepted"] * 6
    assert stats["recreated"] == 1
    assert any(r.getMessage().startswith("sandbox actor freeze.sandbox-0 made no progress for "
                                         "4s in judge (sandbox.timeout_s): replacing it")
               for r in caplog.records), [r.getMessage()[:120] for r in caplog.records]


def test_a_submission_that_always_fails_is_reported_as_sandbox_error_without_its_neighbours():
    # The Judge refuses a submission without tests: every attempt at its chunk fails.
    broken = Submission(id="broken", code=ECHO, language="python", tests=Cases())
    subs = [_sub("n0", 1), broken, _sub("n1", 2), _sub("n2", 3)]
    with SandboxPool(_cfg(), prefix="poison", chunk_size=4) as pool:  # sandbox.retries=2
        results = pool.judge(subs)
    assert [r.id for r in results] == ["n0", "broken", "n1", "n2"]
    assert [r.status for r in results] == ["accepted", "sandbox_error", "accepted", "accepted"]
    assert "not judged after 3 attempts" in results[1].tests[0].detail
