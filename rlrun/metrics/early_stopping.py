"""Early stopping on a validation metric, and the best model so far.

After each validation, `EarlyStopping.update(step, metrics)` says whether this evaluation is the
new best and whether `patience` evaluations in a row have failed to improve on the best (the run
should stop). `BestModel` acts on it for a training run: it exports the new best model to
run.output_dir/best/model and says where in best.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlrun.checkpoint import absolute, is_uri, join
from rlrun.config import Config, ConfigError, EarlyStoppingConfig


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


class BestModel:
    """Early stopping for a run, keeping the best model in run.output_dir/best/model (for a URI:
    uploaded there) and best.json in the run directory; `export(path)` writes the model."""

    def __init__(self, cfg: Config, run_dir: str, export: Callable[[str], None]) -> None:
        self.stopping = EarlyStopping(cfg.trainer.early_stopping)
        # Absolute: the learner rank that writes it runs in a directory of its own, maybe on
        # another node.
        self.model = join(absolute(cfg.run.output_dir), "best", "model")
        self.run_dir = run_dir
        self.export = export

    def update(self, version: int, metrics: dict[str, float]) -> bool:
        """Record the validation of weight `version`; True when the run should stop."""
        decision = self.stopping.update(version, metrics)
        if decision.message:
            print(f"rlrun train: early stopping: {decision.message}", flush=True)
        if decision.improved:
            self.export(self.model)
            best = {"weight_version": version, "metric": self.stopping.cfg.metric,
                    "value": decision.best_value,
                    # relative to the run directory when that is where the model is
                    "model": self.model if is_uri(self.model) else os.path.join("best", "model")}
            Path(self.run_dir, "best.json").write_text(json.dumps(best) + "\n")
        return decision.stop
