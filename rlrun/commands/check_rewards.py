"""`rlrun check-rewards CONFIG [--data PATH] [--split val] [--limit N] [overrides]`.

Runs the reward audit (`rlrun.rewards.audit`, docs/rewards.md) on the dataset, prints its table
and ends with one summary line (`reference: 1319/1319 passed, wrong: 0/1319 passed`), after the
step audit's line with `reward.step_rewards=true` (reference steps that do not verify are
reported, not failed on). Exits 1 when the reference pass rate is below
`reward.audit_min_pass_rate`. Code is judged by a local `rlrun.sandbox.Judge` in this process
(`sandbox.backend`, `sandbox.workers_per_actor` workers): no Ray cluster is needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rlrun.config import Config, load_config
from rlrun.records import Problem
from rlrun.rewards import RewardError, build_reward
from rlrun.rewards.audit import run_audit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="recipe YAML (default: built-in defaults)")
    parser.add_argument(
        "overrides", nargs="*", help="key=value overrides, e.g. reward.math_extractor=flexible"
    )
    parser.add_argument("--data", help="dataset to audit instead of data.train / data.val")
    parser.add_argument(
        "--split", choices=["train", "val"], default="train",
        help="which of the config's datasets to audit (ignored with --data)",
    )
    parser.add_argument("--limit", type=int, help="audit only the first N problems")
    parser.add_argument("--worst", type=int, default=10, help="failing rows to list (default 10)")


def _problems(cfg: Config, args: argparse.Namespace) -> list[Problem]:
    from rlrun.data import load_from_config, load_problems

    if args.data is None and args.split == "val" and cfg.data.val is None:
        return load_from_config(cfg)[1][: args.limit]
    source = args.data or (cfg.data.val if args.split == "val" else cfg.data.train)
    result = load_problems(
        source, fmt=cfg.data.format, on_bad_row=cfg.data.on_bad_row, split=cfg.data.split,
        limit=args.limit, toy_size=cfg.data.toy_size, seed=cfg.run.seed,
    )
    if result.bad_rows:
        print(f"{source}: skipped {len(result.bad_rows)} unusable rows of {result.total_rows}")
    return result.problems


def main(args: argparse.Namespace) -> int:
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not Path(config).exists():
        config, overrides = None, [config, *overrides]
    cfg = load_config(config, overrides)
    problems = _problems(cfg, args)
    if not problems:
        print("check-rewards: the dataset has no problems to audit", file=sys.stderr)
        return 1
    start = time.perf_counter()
    try:
        if any(p.kind == "code" for p in problems):
            from rlrun.sandbox import Judge

            with Judge(cfg.sandbox.backend, cfg.sandbox.workers_per_actor, cfg.sandbox) as judge, \
                    build_reward(cfg, judge.judge) as reward:
                report = run_audit(reward, problems)
        else:
            with build_reward(cfg, None) as reward:
                report = run_audit(reward, problems)
    except RewardError as err:
        print(f"check-rewards: {err}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    kinds = sorted({p.kind for p in problems})
    print(f"audit of {len(problems)} problems ({', '.join(kinds)}; math extractor "
          f"{cfg.reward.math_extractor}, code scoring {cfg.reward.code_scoring}) in {elapsed:.1f}s")
    print(report.table(args.worst))
    rate, need = report.reference_pass_rate, cfg.reward.audit_min_pass_rate
    if report.reference_total == 0:
        print("no problem has a reference answer or solution to audit", file=sys.stderr)
    elif rate < need:
        print(
            f"reference pass rate {rate:.1%} is below reward.audit_min_pass_rate={need:.0%}: the "
            "reward rejects the dataset's own answers; check reward.math_extractor or the tests",
            file=sys.stderr,
        )
    if report.steps is not None:
        print(report.steps.summary())
    print(report.summary())
    return 0 if rate >= need else 1
