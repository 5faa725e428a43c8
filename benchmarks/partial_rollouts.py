"""Step time with and without partial rollouts, on a task with long, long-tailed generations.

    python benchmarks/partial_rollouts.py [--steps 12] [--repeats 2]

Both sides are the same `rlrun train` run (local Ray on every core, the tiny model, toy arithmetic
problems, 8 prompts x 8 samples per step, `algo.max_staleness=2` so generation overlaps
training, 384 new tokens at most) except `rollout.partial=true rollout.partial_tokens=64`.
Generations are long and long-tailed: a completion ends at any of four letters (about one
token in 65), so lengths are roughly geometric with a mean near 65 and a batch's longest
completion near the limit, the shape that makes a synchronous batch wait for its slowest
sample. The two sides take turns `--repeats` times (a shared machine's speed drifts over
minutes); each run's step time is the median `perf/time_step` of its steps after the first.
Prints the table and writes it into docs/benchmarks.md under its own heading.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from docs_section import write_section
from measure import machine

HEADING = "## Rollout: partial rollouts on long generations"
TASK = [
    "model.path=tiny", "data.train=toy:arithmetic", "data.toy_size=512", "data.val_size=0",
    "algo.group_size=8", "algo.prompts_per_step=8", "algo.max_staleness=2",
    "rollout.sampling.max_new_tokens=384", "rollout.sampling.stop=[q, x, z, j]",
    "rollout.batch_size=64", "learner.micro_batch_size=16", "learner.lr=1e-4",
    "trainer.eval_every=0", "trainer.checkpoint_every=0", "metrics.console=off",
    "metrics.progress=off", "metrics.tensorboard=false", "metrics.report=false",
    "metrics.sample_problems=0", "reward.audit_before_training=false",
]
PARTIAL = ["rollout.partial=true", "rollout.partial_tokens=64"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="training steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, alternated")
    return parser.parse_args(argv)


def run(out: Path, steps: int, partial: bool) -> list[dict[str, float]]:
    """The step rows of one `rlrun train` run."""
    cores = os.cpu_count() or 1
    overrides = TASK + [
        f"run.output_dir={out}", f"run.num_cpus={cores}", f"trainer.steps={steps}",
        # generation and training overlap: each role gets half the cores
        f"rollout.num_cpus={cores / 2}", f"learner.num_cpus={cores / 2}",
    ] + (PARTIAL if partial else [])
    subprocess.run([sys.executable, "-m", "rlrun", "train", *overrides], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out / "metrics.jsonl") as f:
        return [r for r in map(json.loads, f) if "perf/time_step" in r]


def summary(runs: list[list[dict[str, float]]]) -> dict[str, float]:
    """Medians over a side's runs of its steps after the first."""
    rows = [r for rows in runs for r in rows[1:]]

    def median(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    return {
        "step_s": median("perf/time_step"),
        "rollout_s": median("perf/time_rollout"),
        "len_mean": median("response/len_mean"),
        "len_max": median("response/len_max"),
        "lag0": statistics.mean(r.get("async/token_lag_0", 1.0) for r in rows),
        "rounds": median("async/partial_rounds"),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sides: dict[bool, list[list[dict[str, float]]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for partial in (False, True):
                out = Path(tmp, f"{'partial' if partial else 'whole'}-{repeat}")
                sides[partial].append(run(out, args.steps, partial))
    whole, part = summary(sides[False]), summary(sides[True])
    header = ("| rollouts | step time (s) | rollout wait (s) | response length mean / max | "
              "tokens trained at the current version | rounds per step |\n"
              "| --- | --- | --- | --- | --- | --- |\n")
    line = "| {} | {:.2f} | {:.2f} | {:.0f} / {:.0f} | {:.0%} | {} |\n"
    table = header + line.format(
        "whole (`rollout.partial=false`)", whole["step_s"], whole["rollout_s"],
        whole["len_mean"], whole["len_max"], whole["lag0"], "-",
    ) + line.format(
        "partial (`rollout.partial=true`, 64 tokens per round)", part["step_s"],
        part["rollout_s"], part["len_mean"], part["len_max"], part["lag0"],
        f"{part['rounds']:.0f}",
    )
    section = (
        f"{HEADING}\n\n`python benchmarks/partial_rollouts.py --steps {args.steps} --repeats "
        f"{args.repeats}` on {machine()}: the tiny model on toy arithmetic, 8 prompts x 8 samples per "
        "step, `algo.max_staleness=2`, at most 384 new tokens, a completion ending at any of "
        "four letters (long-tailed lengths); the two sides alternated, medians over every "
        "step after the first. Step time is the whole step; rollout wait is how long the "
        f"step waited for its batch.\n\n{table}\n"
        f"Partial rollouts: {whole['step_s'] / part['step_s']:.2f}x shorter steps.\n"
    )
    print(section)
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
