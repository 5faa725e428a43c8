"""The `rlrun` command line: dispatches to one module per subcommand.

Subcommand modules are imported only when chosen, so `rlrun --help` and config errors come back
without importing torch or Ray.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rlrun.errors import InputError, print_last_line

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rlrun.commands.train", "run GRPO training (no arguments: the CPU demo)"),
    "sft": ("rlrun.commands.sft", "supervised warm-start on reference solutions"),
    "eval": ("rlrun.commands.eval", "accuracy and pass@k of a model or checkpoint"),
    "judge": ("rlrun.commands.judge", "judge programs against tests in the sandbox"),
    "check-rewards": (
        "rlrun.commands.check_rewards",
        "audit a reward on references and wrong answers",
    ),
    "data": ("rlrun.commands.data", "inspect or convert a dataset"),
    "config": ("rlrun.commands.config", "show the resolved config"),
    "report": ("rlrun.commands.report", "plots and an HTML report for a run directory"),
    "plan": ("rlrun.commands.plan", "per-GPU memory of each role, and a layout that fits"),
    "sagemaker": ("infra.sagemaker.launch", "launch a SageMaker training job (infra/sagemaker)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlrun",
        description="Reinforcement learning from verifiable rewards on Ray.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in COMMANDS:
        if argv and not argv[0].startswith("-"):
            parser.error(f"unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)}")
        parser.parse_args(argv)
        parser.print_help()
        return 0
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    cmd_parser = argparse.ArgumentParser(prog=f"rlrun {name}", description=COMMANDS[name][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_intermixed_args(rest)
    try:
        return int(module.main(args) or 0)
    except (InputError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
            PermissionError) as err:
        print_last_line(name, str(err))
        return 2


if __name__ == "__main__":
    sys.exit(main())
