"""Reward plug-ins run in a process of their own: a hang or a crash is stopped and named."""


import pytest

from rlrun.rewards import RewardError, build_reward
from rlrun.rewards.plugin_worker import PluginWorker

from .helpers import FIXTURES, config, math_problem, plugin, sample

P = [math_problem("p0", "18"), math_problem("p1", "7")]
S = [sample(P[0], "#### 18", n_tokens=2), sample(P[1], "hang", n_tokens=1)]


def test_a_plugin_answers_from_its_own_process():
    worker = PluginWorker(plugin("kwargs_seen"), "reward.fns[1].fn", timeout_s=30)
    try:
        assert worker(P, S) == [2.0, 1.0]
        assert worker(P[:1], S[:1]) == [2.0]  # the same process answers again
    finally:
        worker.close()


def test_a_hanging_call_is_stopped_at_its_deadline_with_its_stack(capfd):
    worker = PluginWorker(plugin("never_returns"), "reward.fns[1].fn", timeout_s=2)
    with pytest.raises(RewardError, match=r"'.*plugins\.py:never_returns' \(reward\.fns\[1\]\.fn\)"
                       r" made no progress for 2 s scoring a batch of 2 samples "
                       r"\(reward\.timeout_s\)"):
        worker(P, S)
    stack = capfd.readouterr().err
    assert "never_returns" in stack and "plugins.py" in stack  # faulthandler's dump


def test_the_worker_after_a_hang_starts_again():
    worker = PluginWorker(plugin("hangs_on_hang"), "reward.fns[1].fn", timeout_s=2)
    with pytest.raises(RewardError, match="made no progress"):
        worker(P, S)
    assert worker(P[:1], S[:1]) == [0.0]
    worker.close()


def test_a_plugin_that_kills_its_interpreter_is_named_with_the_exit_code():
    worker = PluginWorker(plugin("kills_its_interpreter"), "reward.fns[1].fn", timeout_s=30)
    with pytest.raises(RewardError, match=r"kills_its_interpreter.*died scoring a batch of 2 "
                       r"samples \(exit code 3\)"):
        worker(P, S)


def test_an_import_that_never_finishes_is_stopped():
    spec = f"{FIXTURES / 'hangs_on_import.py'}:reward"
    with pytest.raises(RewardError, match=r"made no progress for 2 s importing it"):
        PluginWorker(spec, "reward.fns[0].fn", timeout_s=2)


def test_errors_inside_the_worker_keep_their_message():
    worker = PluginWorker(plugin("raises_on_bad"), "reward.fns[1].fn", timeout_s=30)
    bad = [sample(P[0], "good"), sample(P[1], "bad")]
    with pytest.raises(RewardError, match=r"raised on sample 1 \(problem p1\): ValueError"):
        worker(P, bad)
    worker.close()


def test_the_reward_scores_through_its_workers_and_closes_them():
    cfg = config(f"reward.fns=[{{name: c}}, {{name: k, fn: '{plugin('kwargs_seen')}', weight: 2}}]")
    with build_reward(cfg, None) as reward:
        scored = reward.score(P, S)
        workers = [t.fn for t in reward.terms if t.fn is not None]
        assert [s.components["k"] for s in scored] == [2.0, 1.0]
        assert [s.reward for s in scored] == [1.0 + 4.0, 0.0 + 2.0]
    assert all(w._process is None for w in workers)


def test_reward_timeout_must_be_positive():
    from rlrun.config import ConfigError

    with pytest.raises(ConfigError, match="reward.timeout_s"):
        config("reward.timeout_s=0")
