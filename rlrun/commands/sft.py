"""`rlrun sft [CONFIG] [overrides]`: supervised warm-start on reference solutions, on its own."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "args", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]",
        help="recipe YAML then overrides; sft.* sets steps, learning rate and the accuracy target",
    )


def main(args: argparse.Namespace) -> int:
    from rlrun.config import load_config, split_args

    cfg = load_config(*split_args(args.args))

    from actors.placement import init_ray
    from rlrun.data import load_from_config
    from rlrun.models import model_cache_dir, resolve_model_path
    from rlrun.sft import run_sft

    train, val = load_from_config(cfg)
    model_path = resolve_model_path(cfg.model, model_cache_dir(), seed=cfg.run.seed)
    init_ray(cfg)
    result = run_sft(cfg, model_path, train, val)
    print(f"sft done: steps: {result.steps} val/accuracy: {result.accuracy:.3f} "
          f"model: {result.model_path}")
    return 0
