"""Partial rollouts against whole ones on long, long-tailed generations: the time to produce a
batch, and the time of a training step.

    python benchmarks/partial_rollouts.py [--batches 12] [--steps 12] [--repeats 2] [--smoke]

The task: the tiny model on toy arithmetic, 16 prompts x 4 samples per batch, at most 1024 new
tokens, and a completion ends at either of two letters, so lengths are long-tailed (roughly
geometric, a batch's longest several times its mean): the shape that makes a batch wait for
its slowest samples. Partial rollouts run rounds of 64 tokens with the default pool (a quarter
more groups than a batch).

1. Batch: the rollout alone, as a generation-bound run (vLLM on a GPU) sees it. One HF engine
   in this process with every core, fixed weights, `--batches` consecutive batches drawn from
   the same seeded data order: `rlrun.step.collect` against `rlrun.partial.PartialRollouts`
   (`advance` is the engine's generate and extend). Seconds per batch, and tokens generated
   per batch (partial rollouts also generate the groups they carry over).
2. Step: the whole `rlrun train` run on a local Ray with every core, `algo.max_staleness=2`
   (generation overlaps training), the same task, `--steps` steps; the step time is the median
   `perf/time_step` after the first step.

What to expect on a CPU: partial rollouts lose here. A paused sample is continued by
prefilling its prompt and response again under the current weights, and a CPU prefills a token
at about the cost of decoding one; a whole rollout's long tail, meanwhile, is cheap, because the
HF engine drops finished rows and a decode step over a few rows costs little. Partial rollouts
pay off where the opposite holds: on a GPU, where a decode step costs about the same for a few
rows as for a full batch (memory-bound) and prefill is many times cheaper per token. That
comparison is `scripts/gpu_check.py`'s partial-vllm check; on a CPU the learner's step outlasts
the batch's generation anyway, so the step time is the learner's.

The sides take turns `--repeats` times (a shared machine's speed drifts over minutes). Prints
the tables and writes them into docs/benchmarks.md under its own heading (`--smoke`: both
parts once on a few short samples, no tables).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docs_section import SMOKE_HELP, smoke_done, write_section
from measure import machine

HEADING = "## Rollout: partial rollouts on long generations"
TASK = [
    "model.path=tiny", "data.train=toy:arithmetic", "data.toy_size=512", "data.val_size=0",
    "algo.group_size=4", "algo.prompts_per_step=16", "algo.max_staleness=2",
    "rollout.sampling.max_new_tokens=1024", "rollout.sampling.stop=[q, x]",
    "rollout.batch_size=128", "learner.micro_batch_size=64", "sft.enabled=false",
    "reward.audit_before_training=false",
]
RUN = [
    "trainer.eval_every=0", "trainer.checkpoint_every=0", "metrics.console=off",
    "metrics.progress=off", "metrics.tensorboard=false", "metrics.report=false",
    "metrics.sample_problems=0",
]
PARTIAL = ["rollout.partial=true", "rollout.partial_tokens=64"]
# --smoke: a few short samples, so a batch and a step take well under a second
SMOKE = ["data.toy_size=32", "algo.group_size=2", "algo.prompts_per_step=2",
         "rollout.sampling.max_new_tokens=16", "learner.micro_batch_size=4"]
SMOKE_PARTIAL = ["rollout.partial_tokens=4"]
WHY = (
    "Why partial rollouts do not pay on a CPU: a paused sample continues by prefilling its "
    "prompt and response again under the current weights, and a CPU prefills a token at about "
    "the cost of decoding one, while a whole rollout's long tail is cheap, because the HF "
    "engine drops finished rows and a decode step over a few rows costs little. On a GPU both "
    "turn around: a decode step costs about as much for a few rows as for a full batch "
    "(memory-bound) and prefill is many times cheaper per token. And a CPU step is the "
    "learner's: it outlasts the batch's generation, which overlaps it. The GPU comparison is "
    "`scripts/gpu_check.py`'s partial-vllm check (not run here: no GPU).\n"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12, help="batches per rollout run")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, alternated")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:  # two steps: the step table is over the steps after the first
        args.batches, args.steps, args.repeats = 1, 2, 1
    return args


def task(partial: bool, smoke: bool) -> list[str]:
    """The task's overrides for one side."""
    return (TASK + (PARTIAL if partial else []) + (SMOKE if smoke else [])
            + (SMOKE_PARTIAL if smoke and partial else []))


def batches(n: int, partial: bool, smoke: bool = False) -> dict[str, float]:
    """Seconds and generated tokens per batch over `n` batches, with fixed weights."""
    import torch

    from rlrun import step
    from rlrun.config import load_config
    from rlrun.data import load_from_config
    from rlrun.data.prompts import render_prompt
    from rlrun.data_order import DataOrder
    from rlrun.engines import make_engine
    from rlrun.models import resolve_model_path
    from rlrun.partial import PartialRollouts
    from rlrun.rewards import build_reward

    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, task(partial, smoke) + [f"run.output_dir={tmp}"])
        train, _ = load_from_config(cfg)
        prompts = [render_prompt(p, cfg.data, None, chat=False) for p in train]
        engine = make_engine("hf", resolve_model_path(cfg.model, tmp, cfg.run.seed), cfg.rollout,
                             cfg.model.dtype)
        reward = build_reward(cfg, None)
        order = DataOrder(len(train), cfg.run.seed)
        pool = PartialRollouts(train, prompts, order, cfg)

        def advance(new, sampling, paused, continuing):
            return engine.generate(new, sampling), engine.extend(paused, continuing)

        try:
            times, tokens = [], []
            for _ in range(n):
                start = time.perf_counter()
                if partial:
                    rollout = pool.collect(advance, reward.score, version=0)
                else:
                    rollout = step.collect(train, prompts, order, engine.generate, reward.score,
                                           cfg)
                times.append(time.perf_counter() - start)
                tokens.append(rollout.metrics["perf/rollout_tokens_per_s"]
                              * rollout.metrics["perf/time_generate"])
        finally:
            reward.close()
    return {"batch_s": statistics.median(times), "tokens": statistics.mean(tokens)}


def training(out: Path, steps: int, partial: bool, smoke: bool = False
             ) -> list[dict[str, float]]:
    """The step rows of one `rlrun train` run."""
    cores = os.cpu_count() or 1
    overrides = task(partial, smoke) + RUN + [
        f"run.output_dir={out}", f"run.num_cpus={cores}", f"trainer.steps={steps}",
        # generation and training overlap: each role gets half the cores
        f"rollout.num_cpus={cores / 2}", f"learner.num_cpus={cores / 2}",
    ]
    subprocess.run([sys.executable, "-m", "rlrun", "train", *overrides], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out / "metrics.jsonl") as f:
        return [r for r in map(json.loads, f) if "perf/time_step" in r]


def step_summary(runs: list[list[dict[str, float]]]) -> dict[str, float]:
    """Medians over a side's runs of its steps after the first."""
    rows = [r for rows in runs for r in rows[1:]]

    def median(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    return {
        "step_s": median("perf/time_step"),
        "generate_s": median("perf/time_generate"),
        "train_s": median("perf/time_train"),
        # a whole rollout's tokens share their sample's version
        "staleness": statistics.mean(r.get("async/token_staleness_mean",
                                           r["async/staleness_mean"]) for r in rows),
        "reward": statistics.mean(r["reward/mean"] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = {False: "whole (`rollout.partial=false`)",
             True: "partial (`rollout.partial=true`, 64 tokens per round)"}
    batch: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    steps: dict[bool, list[list[dict[str, float]]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for partial in (False, True):
                batch[partial].append(batches(args.batches, partial, args.smoke))
                out = Path(tmp, f"{'partial' if partial else 'whole'}-{repeat}")
                steps[partial].append(training(out, args.steps, partial, args.smoke))

    def mean(side: bool, key: str) -> float:
        return statistics.mean(b[key] for b in batch[side])

    batch_table = (
        "| rollouts | seconds per batch | tokens generated per batch |\n| --- | --- | --- |\n"
        + "".join(f"| {names[s]} | {mean(s, 'batch_s'):.2f} | {mean(s, 'tokens'):,.0f} |\n"
                  for s in (False, True))
    )
    summary = {s: step_summary(steps[s]) for s in (False, True)}
    step_table = (
        "| rollouts | step time (s) | generation (s) | learner (s) | mean token staleness "
        "(versions) | reward |\n| --- | --- | --- | --- | --- | --- |\n"
        + "".join(
            f"| {names[s]} | {m['step_s']:.2f} | {m['generate_s']:.2f} | {m['train_s']:.2f} | "
            f"{m['staleness']:.2f} | {m['reward']:.3f} |\n"
            for s, m in summary.items())
    )
    ratio = mean(False, "batch_s") / mean(True, "batch_s")
    section = (
        f"{HEADING}\n\n`python benchmarks/partial_rollouts.py --batches {args.batches} --steps "
        f"{args.steps} --repeats {args.repeats}` on {machine()}: the tiny model on toy "
        "arithmetic, 16 prompts x 4 samples per batch, at most 1024 new tokens, a completion "
        "ending at either of two letters (long-tailed lengths); partial rollouts in rounds of "
        "64 tokens with the default pool (20 groups in flight); the sides alternated "
        f"{args.repeats} times.\n\nBatch: one HF engine in the benchmark's process with every "
        f"core and fixed weights, {args.batches} consecutive batches, median seconds per batch "
        "(mean over repeats); what a generation-bound run waits for each step.\n\n"
        f"{batch_table}\nTime per batch, whole over partial: {ratio:.2f} (above 1: partial "
        "rollouts are faster).\n\nStep: "
        f"`rlrun train` on a local Ray, `algo.max_staleness=2` (generation overlaps training), "
        f"{args.steps} steps, medians over the steps after the first. Generation is the "
        "rollout actor's time for the batch, learner the learner's step.\n\n"
        f"{step_table}\n{WHY}"
    )
    if args.smoke:
        return smoke_done("partial_rollouts")
    print(section)
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
