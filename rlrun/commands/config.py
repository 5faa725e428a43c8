"""`rlrun config show CONFIG [overrides]`: print the resolved config."""

from __future__ import annotations

import argparse

from rlrun.config import load_config, split_args, to_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show"], help="show: print the resolved config")
    parser.add_argument(
        "args", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]",
        help="recipe YAML (default: built-in defaults) then overrides, e.g. algo.group_size=16",
    )


def main(args: argparse.Namespace) -> int:
    cfg = load_config(*split_args(args.args))
    print(to_yaml(cfg), end="")
    return 0
