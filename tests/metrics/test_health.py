"""HealthMonitor: each known failure warns once when it starts, names the metric and the knob."""

from __future__ import annotations

import math

import pytest

from rlrun.config import ConfigError, HealthConfig, load_config
from rlrun.metrics.health import HealthMonitor


def test_all_equal_groups_with_mixed_accuracy_suggest_temperature() -> None:
    monitor = HealthMonitor(HealthConfig(all_equal_frac=0.8))
    first = monitor.check(1, {"train/all_equal_frac": 0.95, "train/accuracy": 0.5})
    assert len(first) == 1
    assert "train/all_equal_frac=0.95" in first[0] and "rollout.sampling.temperature" in first[0]
    assert "top_k" in first[0]
    # Persisting: no repeat. A validation-only log in between does not reset it.
    assert monitor.check(2, {"train/all_equal_frac": 0.97, "train/accuracy": 0.5}) == []
    assert monitor.check(2, {"val/accuracy": 0.3}) == []
    assert monitor.check(3, {"train/all_equal_frac": 0.5, "train/accuracy": 0.5}) == []
    # Cleared and back: warns again.
    assert len(monitor.check(4, {"train/all_equal_frac": 0.9, "train/accuracy": 0.5})) == 1


def test_all_equal_groups_of_wrong_answers_suggest_easier_problems() -> None:
    [warning] = HealthMonitor().check(1, {"train/all_equal_frac": 1.0, "train/accuracy": 0.0})
    assert "sft.enabled" in warning and "temperature" not in warning


def _ramp(monitor: HealthMonitor, val: list[float]) -> list[str]:
    """20 steps of reward rising 0.13 -> 0.7, validation at steps 5, 10, 15, 20."""
    out = []
    for step in range(1, 21):
        metrics = {"reward/mean": 0.1 + 0.03 * step}
        if step % 5 == 0:
            metrics["val/accuracy"] = val[step // 5 - 1]
        out += monitor.check(step, metrics)
    return out


def test_reward_rising_with_flat_validation_is_flagged() -> None:
    warnings = _ramp(HealthMonitor(HealthConfig(window=10)), [0.2, 0.2, 0.2, 0.2])
    assert len(warnings) == 1
    assert "reward/mean rose" in warnings[0] and "val/accuracy stayed at 0.2" in warnings[0]
    assert "check-rewards" in warnings[0]


def test_reward_rising_with_validation_rising_is_healthy() -> None:
    assert _ramp(HealthMonitor(HealthConfig(window=10)), [0.2, 0.25, 0.3, 0.35]) == []


def test_validation_metric_follows_early_stopping_metric() -> None:
    cfg = load_config(None, ["trainer.early_stopping.metric=val/pass@1", "trainer.max_bad_steps=5"])
    monitor = HealthMonitor.from_config(cfg)
    assert monitor.val_metric == "val/pass@1" and monitor.max_bad_steps == 5


def test_length_blow_up_and_truncation() -> None:
    monitor = HealthMonitor(HealthConfig(window=6, length_growth=2.0, truncated_frac=0.5))
    warnings = []
    for step, length in enumerate([20, 22, 25, 50, 60, 70], start=1):
        warnings += monitor.check(step, {"response/len_mean": length,
                                         "response/truncated_frac": 0.1 * step})
    # step 6: first half mean 22.3, second half mean 60 (> 2x); truncated 0.6 > 0.5
    assert len(warnings) == 2
    assert any("response/len_mean grew 22 -> 60" in w for w in warnings)
    assert any("response/truncated_frac=0.60" in w and "max_new_tokens" in w for w in warnings)


def test_non_finite_steps_are_counted_and_stop_the_run_after_max_bad_steps() -> None:
    monitor = HealthMonitor(max_bad_steps=1)
    assert monitor.check(1, {"loss/policy": 0.1, "optim/grad_norm": 1.0}) == []
    [w1] = monitor.check(2, {"loss/policy": math.nan, "optim/grad_norm": 1.0})
    assert "loss/policy is nan" in w1 and "skipped" in w1 and not monitor.should_stop
    [w2] = monitor.check(3, {"loss/policy": 0.2, "optim/grad_norm": math.inf})
    assert "optim/grad_norm is inf" in w2 and "stopping the run" in w2
    assert monitor.bad_steps == 2 and monitor.should_stop


def test_the_learners_skip_count_is_used_when_reported() -> None:
    monitor = HealthMonitor(max_bad_steps=3)
    # All updates of the step skipped: grad norm is nan, but the count comes from the learner.
    [w] = monitor.check(1, {"train/bad_steps": 2.0, "optim/grad_norm": math.nan})
    assert w.startswith("step 1: train/bad_steps=2") and monitor.bad_steps == 2
    assert monitor.check(2, {"train/bad_steps": 0.0, "optim/grad_norm": 1.0}) == []
    monitor.check(3, {"train/bad_steps": 2.0})
    assert monitor.bad_steps == 4 and monitor.should_stop


def test_a_window_too_short_for_a_trend_names_the_key() -> None:
    with pytest.raises(ConfigError, match="metrics.health.window"):
        HealthMonitor(HealthConfig(window=1))
