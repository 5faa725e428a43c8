"""EarlyStopping: best tracking, patience, min mode, resume, and config mistakes."""

from __future__ import annotations

import pytest

from rlrun.config import ConfigError, EarlyStoppingConfig
from rlrun.metrics.early_stopping import EarlyStopping


def test_patience_counts_evaluations_without_improvement() -> None:
    es = EarlyStopping(EarlyStoppingConfig(metric="val/pass@1", mode="max", patience=2))
    d = es.update(0, {"val/pass@1": 0.2})
    assert d.improved and not d.stop and d.best_step == 0
    assert es.update(10, {"val/pass@1": 0.3}).improved
    d = es.update(20, {"val/pass@1": 0.3})  # equal is not better
    assert not d.improved and not d.stop and d.best_step == 10
    d = es.update(30, {"val/pass@1": 0.25})
    assert d.stop and "patience=2" in d.message and (d.best_step, d.best_value) == (10, 0.3)


def test_min_mode_and_resume() -> None:
    cfg = EarlyStoppingConfig(metric="val/reward_mean", mode="min", patience=3)
    es = EarlyStopping(cfg)
    es.update(0, {"val/reward_mean": 0.5})
    es.update(5, {"val/reward_mean": 0.7})
    resumed = EarlyStopping(cfg, es.state_dict())
    assert resumed.state_dict() == {"best_step": 0, "best_value": 0.5, "stale": 1}
    assert resumed.update(10, {"val/reward_mean": 0.4}).improved


def test_off_by_default() -> None:
    d = EarlyStopping(EarlyStoppingConfig()).update(0, {"val/accuracy": 0.1})
    assert not d.improved and not d.stop


def test_config_mistakes_name_the_key() -> None:
    with pytest.raises(ConfigError, match="trainer.early_stopping.metric"):
        EarlyStopping(EarlyStoppingConfig(metric="reward/mean"))
    es = EarlyStopping(EarlyStoppingConfig(metric="val/pass@5"))
    with pytest.raises(ConfigError, match="val/accuracy, val/pass@1"):
        es.update(0, {"val/accuracy": 0.1, "val/pass@1": 0.1})
