"""`rlrun config show CONFIG [overrides]`: print the resolved config, then (as YAML comments)
which rlrun keys carry the meaning of TRL's GRPOConfig names."""

from __future__ import annotations

import argparse

from rlrun.config import load_config, split_args, to_yaml
from rlrun.trl_names import mapping_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=["show"],
        help="show: print the resolved config and the TRL GRPOConfig names it maps",
    )
    parser.add_argument(
        "args", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]",
        help="recipe YAML (default: built-in defaults) then overrides, e.g. algo.group_size=16",
    )


def main(args: argparse.Namespace) -> int:
    cfg = load_config(*split_args(args.args))
    print(to_yaml(cfg), end="")
    print("\n# TRL GRPOConfig name -> rlrun config (docs/algorithms.md)")
    for line in mapping_lines():
        print(f"#   {line}")
    return 0
