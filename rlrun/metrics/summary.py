"""The summary a training run prints when it ends, and appends to its train.log."""

from __future__ import annotations

import math
from typing import Any


def format_summary(summary: dict[str, Any]) -> str:
    """Steps, throughput, held-out numbers before and after, restarts and where things are."""
    def fmt(d: dict[str, float]) -> str:
        return " ".join(f"{k}: {v:.4g}" for k, v in sorted(d.items()) if isinstance(v, float)
                        and math.isfinite(v)) or "-"

    before, after = summary["val_initial"], summary["val_final"]
    moved = [
        f"{key} {before[key]:.3f} -> {after[key]:.3f} ({after[key] - before[key]:+.3f})"
        # A multi-turn run also shows what one attempt alone did (val/turn1/accuracy).
        for key in ("val/accuracy", "val/reward_mean", "val/turn1/accuracy")
        if key in before and key in after
    ]
    lines = [
        f"done: {summary['steps']} steps in {summary['wall_s']}s "
        f"({summary['samples_per_s']:.1f} samples/s)"
        + (f" (stopped by {summary['stopped_by_signal']})" if summary["stopped_by_signal"] else ""),
        *([f"  held-out: {', '.join(moved)}"] if moved else []),
        f"  val before: {fmt(summary['val_initial'])}",
        f"  val after:  {fmt(summary['val_final'])}",
        f"  reward (last step): {summary['final'].get('reward/mean', float('nan')):.4g}",
        f"  weight version: {summary['weight_version']}  rollout restarts: "
        f"{summary['rollout_restarts']}  learner restarts: {summary['learner_restarts']}",
        f"  checkpoint: {summary['checkpoint']}",
        f"  run dir: {summary['run_dir']}",
    ]
    return "\n".join(lines)
