"""A synthetic but realistic run directory, written through MetricsLogger itself."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from rlrun.config import MetricsConfig, load_config, to_dict
from rlrun.metrics import MetricsLogger

STEPS = 30


def step_metrics(step: int, rng: random.Random) -> dict[str, float]:
    """What a learning run logs: reward and accuracy climb, length drifts, KL grows."""
    acc = min(0.9, 0.1 + 0.025 * step + rng.uniform(-0.03, 0.03))
    return {
        "reward/mean": acc,
        "reward/std": math.sqrt(acc * (1 - acc)),
        "reward/correctness": acc,
        "train/accuracy": acc,
        "train/all_equal_frac": 0.5 - 0.01 * step,
        "response/len_mean": 40.0 + step,
        "response/len_max": 64,
        "response/truncated_frac": 0.1,
        "loss/policy": rng.uniform(-0.05, 0.05),
        "loss/kl": 0.001 * step,
        "loss/entropy": 1.5 - 0.02 * step,
        "loss/clip_frac": 0.05,
        "loss/is_weight_mean": 1.0,
        "loss/is_weight_max": 1.3,
        "optim/grad_norm": rng.uniform(0.5, 1.5),
        "optim/lr": 1e-5,
        "perf/time_generate": 2.0 + rng.random(),
        "perf/time_reward": 0.4,
        "perf/time_train": 1.5,
        "perf/time_sync": 0.1,
        "perf/rollout_tokens_per_s": 1500.0,
        "perf/train_tokens_per_s": 900.0,
    }


def write_run(run_dir: Path, cfg: MetricsConfig | None = None) -> Path:
    rng = random.Random(0)
    config = to_dict(load_config(None, ["run.name=synthetic", "trainer.steps=30"]))
    cfg = cfg or MetricsConfig(console="off", progress="off")
    with MetricsLogger(cfg, str(run_dir), config=config, total_steps=STEPS) as logger:
        for step in range(1, STEPS + 1):
            logger.log(step, step_metrics(step, rng))
            logger.log_samples(step, [
                {
                    "problem_id": f"p{(step + g) % 4}",
                    "prompt": f"What is {step} + {g}?",
                    "response": f"{step} + {g} = {step + g}\n#### {step + g}" if g % 2 else "no",
                    "reward": float(g % 2) * min(1.0, step / 20),
                    "components": {"correctness": float(g % 2)},
                }
                for g in range(4)
            ])
            if step % 10 == 0:
                logger.log(step, {"val/accuracy": 0.1 + step / 100, "val/pass@1": 0.1 + step / 100})
    return run_dir


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")
