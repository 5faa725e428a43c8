"""The pipeline learns, not just runs: a short GRPO run through the real actors raises reward,
on the training batches and on held-out prompts.

The task is one a tiny untrained model can make progress on within a minute: the plug-in
reward pays the fraction of digits in the response (tests/fixtures/training/rewards.py).
Parametrised by config so further recipes (the CPU demo) can be added as rows.
"""

import json
import os

import pytest

from rlrun.config import load_config
from rlrun.training import run_training
from tests.test_training import small_overrides

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DIGITS = os.path.join(os.path.dirname(__file__), "fixtures", "training", "rewards.py")
LEARNING = [
    f"reward.fns=[{{name: correctness, weight: 0.0}}, "
    f"{{name: digits, fn: '{DIGITS}:digit_fraction'}}]",
    "trainer.steps=12", "algo.group_size=8", "algo.prompts_per_step=4", "learner.lr=1e-2",
    "rollout.sampling.max_new_tokens=16", "learner.micro_batch_size=32",
]


RAY_NAMESPACE = "rlrun"


@pytest.mark.parametrize("overrides", [
    pytest.param(["algo.max_staleness=0"], id="synchronous"),
    pytest.param(["algo.max_staleness=1"], id="staleness-1"),
    pytest.param(["algo.filter_equal_groups=true", "algo.kl_coef=0.01"], id="filter-and-kl"),
])
def test_reward_rises(ray_cluster, tmp_path, overrides):
    cfg = load_config(None, small_overrides(tmp_path) + LEARNING + overrides)
    summary = run_training(cfg)
    with open(tmp_path / "metrics.jsonl") as f:
        rewards = [r["reward/mean"] for r in map(json.loads, f) if "reward/mean" in r]
    assert len(rewards) == 12
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.25, rewards
    # Held-out prompts, validated before the first and after the last update.
    before, after = summary["val_initial"], summary["val_final"]
    assert after["val/reward_mean"] > before["val/reward_mean"] + 0.25, (before, after)
