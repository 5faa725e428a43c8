"""`rlrun train [CONFIG] [key=value ...]`: run GRPO training; with no CONFIG, the CPU demo."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
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
    from ray.exceptions import RayError

    from actors.pool import first_line
    from rlrun.cluster import ClusterError
    from rlrun.errors import InputError
    from rlrun.rewards import RewardError
    from rlrun.training import run_dir_for, run_training

    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not os.path.isfile(config):
        config, overrides = None, [config, *overrides]
    cfg = load_config(config or _demo_path(), overrides)
    try:
        run_training(cfg)
    except (ClusterError, InputError, RewardError) as err:
        print(f"rlrun train: {err}", file=sys.stderr)
        return 2
    except (RayError, RuntimeError) as err:
        # A fault inside an actor, or one the driver gave up on: its own first line here (not
        # Ray's wrapper and the remote traceback), the whole traceback in train.log.
        log = Path(run_dir_for(cfg), "train.log")
        where = ""
        if log.parent.is_dir():
            with open(log, "a", encoding="utf-8") as f:
                traceback.print_exception(err, file=f)
            where = f" (traceback in {log})"
        print(f"rlrun train: {first_line(err)}{where}", file=sys.stderr)
        cause = getattr(err, "cause", None)
        return 2 if isinstance(cause, ClusterError | InputError | RewardError) else 1
    return 0
