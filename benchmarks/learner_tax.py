"""What running the learner as a Ray actor adds to its step: the same step in this process and
in a learner rank, alternated, on this CPU.

    python benchmarks/learner_tax.py [--sft-model DIR] [--rounds N] [--threads N] [--smoke]

The measurement behind the last two rows of `benchmarks/vs_trl.py`'s per-step table, without
its training runs: both sides run one shard of the first step's shape (the vs_trl recipe,
sampled from the warm-started model), taking turns `--rounds` times, each with `--threads`
torch threads, in this process (`train_on_shard` on a local copy of the policy, AdamW and
reference model) and in a `LearnerGroup` of one rank on a local Ray (the driver's
`group.train([shard])`: the call, the shard's transfer and the metrics' return included).
Taking turns matters: the speed of a shared machine drifts over minutes by more than the
difference looked for. Prints the table and writes it into docs/benchmarks.md under its own
heading (`--smoke`: one round of vs_trl's smoke shard, no table).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from docs_section import SMOKE_HELP, smoke_done, write_section
from measure import cpu_name
from training_runs import with_overrides
from vs_trl import alternate_learner_steps, bench_config
from vs_trl import parse_args as vs_trl_args

HEADING = "## Learner step: in one process vs as a Ray actor"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-model", default=None,
                        help="model to train (default: the demo's tiny model, untrained)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="steps timed on each side (default 10; --smoke: 1)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads on both sides (default: every core)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 10
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    from rlrun.data import load_from_config
    from rlrun.models import resolve_model_path

    args = parse_args(argv)
    recipe = bench_config(vs_trl_args(["--threads", str(args.threads)]
                                      + (["--smoke"] if args.smoke else [])))
    with tempfile.TemporaryDirectory() as out:
        cfg = with_overrides(recipe, [f"run.output_dir={out}"])
        torch.set_num_threads(args.threads)
        model_path = args.sft_model or resolve_model_path(cfg.model, out, seed=cfg.run.seed)
        train, _ = load_from_config(cfg)
        here, actor = alternate_learner_steps(cfg, model_path, train, args.rounds)
    a, b = statistics.median(here), statistics.median(actor)
    table = [
        "| where the learner step runs | median s/step | min | max | vs one process |",
        "| --- | --- | --- | --- | --- |",
        f"| this process, no Ray | {a:.3f} | {min(here):.3f} | {max(here):.3f} | 1.00x |",
        f"| learner rank (Ray actor), timed at the driver | {b:.3f} | {min(actor):.3f} | "
        f"{max(actor):.3f} | {b / a:.2f}x |",
    ]
    if args.smoke:
        return smoke_done("learner_tax")
    command = "python benchmarks/learner_tax.py " + " ".join(argv or sys.argv[1:])
    model = "the warm-started model given" if args.sft_model else "the demo's untrained model"
    section = (
        f"{HEADING}\n\n`{command.strip()}` on {cpu_name()}, {os.cpu_count()} cores, "
        f"{args.threads} torch thread(s) on each side (1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end): one learner step of the vs_trl recipe "
        f"({cfg.algo.prompts_per_step} prompts x {cfg.algo.group_size} completions sampled from "
        f"{model}, {cfg.algo.epochs} passes of {cfg.algo.mini_batches} mini-batches, reference "
        f"model on), {args.rounds} rounds after a warm-up, alternating between this process "
        "and a one-rank `LearnerGroup` so that both see the same machine. The actor's time is "
        "the driver's `group.train([shard])`: the remote call, the shard's transfer and the "
        "metrics' return included (the last two rows of the vs_trl table measure the same "
        "after its training runs)."
        "\n\n" + "\n".join(table) + "\n"
    )
    print("\n".join(table))
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
