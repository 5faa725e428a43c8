"""Early stopping on a validation metric, and which evaluation was the best so far.

After each validation, `EarlyStopping.update(step, metrics)` says whether this evaluation is the
new best (the training loop keeps and marks that checkpoint) and whether `patience`
evaluations in a row have failed to improve on the best (the run should stop).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rlrun.config import ConfigError, EarlyStoppingConfig


@dataclass
class Decision:
    improved: bool  # this evaluation is the best so far
    stop: bool  # patience is used up
    best_step: int | None
    best_value: float | None
    message: str  # one line for the log


@dataclass
class _State:
    best_step: int | None = None
    best_value: float | None = None
    stale: int = 0  # evaluations since the best one


class EarlyStopping:
    """Tracks `trainer.early_stopping.metric`; with metric null (the default) it is off and
    never reports a best or a stop."""

    def __init__(self, cfg: EarlyStoppingConfig, state: dict[str, Any] | None = None) -> None:
        if cfg.metric is not None and not cfg.metric.startswith("val/"):
            raise ConfigError(
                f"config key trainer.early_stopping.metric={cfg.metric!r} is not allowed: name a "
                "validation metric such as val/accuracy or val/pass@1"
            )
        self.cfg = cfg
        self.state = _State(**(state or {}))

    def update(self, step: int, metrics: dict[str, float]) -> Decision:
        metric = self.cfg.metric
        if metric is None:
            return Decision(False, False, None, None, "")
        if metric not in metrics:
            found = ", ".join(sorted(k for k in metrics if k.startswith("val/"))) or "none"
            raise ConfigError(
                f"config key trainer.early_stopping.metric={metric!r}: validation logged no such "
                f"metric (it logged {found}); pick one of those or add k to trainer.eval_k"
            )
        value, s = float(metrics[metric]), self.state
        better = s.best_value is None or (
            value > s.best_value if self.cfg.mode == "max" else value < s.best_value
        )
        if better:
            s.best_step, s.best_value, s.stale = step, value, 0
            return Decision(True, False, step, value, f"{metric}={value:.4g} is the best so far")
        s.stale += 1
        stop = s.stale >= self.cfg.patience
        message = (
            f"{metric}={value:.4g}, no better than {s.best_value:.4g} at step {s.best_step} for "
            f"{s.stale} evaluation(s)"
        )
        if stop:
            message += f": stopping (trainer.early_stopping.patience={self.cfg.patience})"
        return Decision(False, stop, s.best_step, s.best_value, message)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores so a resumed run keeps its best and its patience count."""
        return asdict(self.state)
