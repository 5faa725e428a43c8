"""`rlrun train [CONFIG] [key=value ...]`: run GRPO training; with no CONFIG, the CPU demo."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlrun.config import load_config

DEMO = "conf/demo.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config", nargs="?",
        help=f"recipe YAML (default: {DEMO}); a key=value here is taken as an override",
    )
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.steps=20")


def _demo_path() -> str:
    # The demo ships with the source tree; look beside the package too, so `rlrun train` works
    # from any directory of an editable install.
    here = Path(DEMO)
    if here.is_file():
        return str(here)
    return str(Path(__file__).resolve().parents[2] / DEMO)


def main(args: argparse.Namespace) -> int:
    from rlrun.cluster import ClusterError
    from rlrun.data import DataError
    from rlrun.models import ModelLoadError
    from rlrun.rewards import RewardError
    from rlrun.training import run_training

    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not os.path.isfile(config):
        config, overrides = None, [config, *overrides]
    cfg = load_config(config or _demo_path(), overrides)
    try:
        run_training(cfg)
    except (ClusterError, DataError, ModelLoadError, RewardError) as err:
        print(f"rlrun train: {err}", file=sys.stderr)
        return 2
    return 0
