"""`rlrun train [CONFIG] [key=value ...]`: run GRPO training; with no CONFIG, the CPU demo."""

from __future__ import annotations

import argparse
import os
import signal
import traceback
from pathlib import Path

from rlrun.config import Config, load_config
from rlrun.interrupts import OWN_SESSION, Interrupted, die_with_parent, run_in_own_session

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
    return str(here) if here.is_file() else str(Path(__file__).resolve().parents[2] / DEMO)


def main(args: argparse.Namespace) -> int:
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not os.path.isfile(config):
        config, overrides = None, [config, *overrides]
    cfg = load_config(config or _demo_path(), overrides)
    if os.environ.get(OWN_SESSION) == "1":
        die_with_parent()
    elif not (cfg.run.ray_address or os.environ.get("RAY_ADDRESS")):
        # The driver starts a local Ray: both go in a session of their own (rlrun.interrupts).
        return run_in_own_session(["train", *([config] if config else []), *overrides])
    return train(cfg)


def train(cfg: Config) -> int:
    """Run `cfg`; errors as one line on stderr (their tracebacks in train.log)."""
    from ray.exceptions import RayError

    from actors.pool import first_line
    from rlrun.cluster import ClusterError
    from rlrun.errors import InputError, print_last_line
    from rlrun.preflight import run_dir_for
    from rlrun.rewards import RewardError
    from rlrun.training import run_training

    try:
        run_training(cfg)
    except Interrupted as err:
        print_last_line("train", str(err))
        return 128 + int(getattr(signal, err.signal_name))
    except (ClusterError, InputError, RewardError) as err:
        print_last_line("train", str(err))
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
        print_last_line("train", f"{first_line(err)}{where}")
        cause = getattr(err, "cause", None)
        return 2 if isinstance(cause, ClusterError | InputError | RewardError) else 1
    return 0

