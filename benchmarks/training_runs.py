"""How benchmarks launch rlrun training runs: a recipe with overrides applied, and a timed
`run_training` from an already warm-started model."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from rlrun.config import Config


def with_overrides(cfg: Config, overrides: list[str]) -> Config:
    """A validated copy of `cfg` with `key=value` overrides applied."""
    from omegaconf import OmegaConf

    from rlrun.config import from_dict, to_dict, validate

    merged = OmegaConf.merge(to_dict(cfg), OmegaConf.from_dotlist(list(overrides)))
    out = from_dict(OmegaConf.to_container(merged))
    validate(out)
    return out


def train_from(cfg: Config, model_path: str, out: Path) -> tuple[dict[str, Any], float]:
    """`run_training` of `cfg` from the model at `model_path`, with no second SFT, into `out`:
    the run's summary and its wall seconds. `out` is emptied first, as run_training refuses a
    directory that holds an earlier run's checkpoints."""
    from rlrun.training import run_training

    shutil.rmtree(out, ignore_errors=True)
    run_cfg = with_overrides(
        cfg, [f"model.path={model_path}", f"run.output_dir={out}", "sft.enabled=false"]
    )
    started = time.perf_counter()
    summary = run_training(run_cfg)
    return summary, time.perf_counter() - started
