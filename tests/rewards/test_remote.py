"""RewardWorkers on a small local Ray: order, errors as themselves, timeouts, code judging."""

import functools

import pytest

from rlrun import records
from rlrun.rewards import RewardError
from rlrun.rewards.remote import RewardWorkers, local_judge

from .helpers import config, math_problem, plugin, sample

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]


RAY_NAMESPACE = "rlrun-test-rewards"


def _batch(n):
    problems = [math_problem(f"p{i}", str(i)) for i in range(n)]
    texts = [f"#### {i if i % 3 else i + 1}" for i in range(n)]
    return problems, [sample(p, t) for p, t in zip(problems, texts, strict=True)]


def test_scores_come_back_in_order_and_overlap_with_the_caller():
    cfg = config("reward.num_cpus=0.5", "reward.max_concurrency=4")
    workers = RewardWorkers(cfg, num_workers=2)
    try:
        problems, samples = _batch(9)
        pending = workers.submit(problems, samples)
        scored = pending.result()
        assert [s.sample.problem_id for s in scored] == [p.id for p in problems]
        assert [s.reward for s in scored] == [0.0 if i % 3 == 0 else 1.0 for i in range(9)]
        assert pending.done()
    finally:
        workers.shutdown()


def test_plugin_error_arrives_as_a_reward_error_naming_the_problem():
    cfg = config("reward.num_cpus=0.5", f"reward.fns=[{{name: x, fn: '{plugin('none_first')}'}}]")
    workers = RewardWorkers(cfg, num_workers=1)
    try:
        problems, samples = _batch(2)
        with pytest.raises(RewardError, match="none_first.*problem p"):
            workers.score(problems, samples)
    finally:
        workers.shutdown()


def test_a_sample_past_the_timeout_fails_the_batch_and_the_pool_recovers():
    cfg = config("reward.num_cpus=0.5", "reward.timeout_s=2.0",
                 f"reward.fns=[{{name: x, fn: '{plugin('slow')}'}}]")
    workers = RewardWorkers(cfg, num_workers=1)
    try:
        problems, samples = _batch(1)
        with pytest.raises(RewardError, match="sample 0 \\(problem p0\\).*reward.timeout_s=2.0"):
            workers.score(problems, samples)
    finally:
        workers.shutdown()


def test_code_is_judged_inside_the_workers_with_a_judge_factory():
    cfg = config("reward.num_cpus=0.5", "sandbox.workers_per_actor=1")
    tests = records.Tests(stdio=[records.StdioTest("2\n", "4\n")])
    p = records.Problem(id="dbl", prompt="?", kind="code", tests=tests)
    texts = ["```python\nprint(int(input()) * 2)\n```", "```python\nprint(0)\n```"]
    workers = RewardWorkers(cfg, functools.partial(local_judge, cfg.sandbox), num_workers=1)
    try:
        scored = workers.score([p, p], [sample(p, t) for t in texts])
        assert [s.reward for s in scored] == [1.0, 0.0]
        assert scored[0].verdicts[0].status == "accepted"
    finally:
        workers.shutdown()
