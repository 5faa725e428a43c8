"""`rlrun report RUN_DIR`: PNG curves under RUN_DIR/plots/ and a self-contained report.html."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run directory (run.output_dir) holding metrics.jsonl")


def main(args: argparse.Namespace) -> int:
    from rlrun.metrics.report import write_report

    try:
        path = write_report(args.run_dir)
    except (FileNotFoundError, ValueError) as err:
        print(f"rlrun report: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0
