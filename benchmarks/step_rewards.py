"""Final-answer reward against step-level reward on toy multi-step arithmetic: the same
warm-started model, seeds, data order, sampling and number of steps, on this CPU.

    python benchmarks/step_rewards.py [--config conf/steps_demo.yaml] [--steps N] [--seeds N]
                                      [--target A] [--sft-model PATH] [--smoke] [KEY=VALUE ...]

1. warm-start the recipe's tiny model once (`rlrun.sft.run_sft`, until held-out sampled accuracy
   reaches `sft.target_accuracy`) on `toy:steps`: chains of 2-4 single-digit additions and
   subtractions, written one step a line; every run starts from it;
2. for each seed (run.seed, run.seed+1, ...: data order and sampling), `rlrun.training.
   run_training` twice from it, identical but for `algo.step_advantage`: `none` (the reward
   of the final answer only, every token of a completion with the same advantage) and the
   recipe's (`local`: the tokens of a step whose arithmetic is wrong also get step_coef x
   reward.step_wrong); the step verifier runs in both, so both log steps/*;
3. per run: held-out accuracy after the last step (`val/accuracy`: trainer.eval_samples sampled
   completions per held-out problem, at the training temperature), the training samples used
   before the first validation at or above `--target` (validation every trainer.eval_every
   steps), and the share of wrong steps among the checked steps of the training completions
   (`steps/wrong_frac`, mean of the last 10 steps).

Prints the table and writes it into docs/benchmarks.md under its own heading; `--smoke` runs
every part of it on tiny sizes in a temporary directory, and prints and writes no table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import measure
from docs_section import SMOKE_HELP, smoke_done, write_section
from training_runs import train_from, with_overrides

from rlrun.config import Config, load_config

HEADING = "## Step-level rewards: final answer vs every step, on toy multi-step arithmetic"
RECIPE = Path(__file__).resolve().parent.parent / "conf" / "steps_demo.yaml"
FIXED = ["metrics.tensorboard=false", "metrics.report=false", "metrics.sample_problems=1",
         "reward.audit_before_training=false"]
BENCH = ["trainer.steps=60", "trainer.eval_every=10", "data.val_size=256", "trainer.eval_k=[1]"]
SMOKE = ["data.toy_size=32", "data.val_size=2", "trainer.eval_samples=1", "trainer.eval_k=[1]",
         "sft.max_steps=2", "sft.eval_every=2", "sft.batch_size=4", "algo.prompts_per_step=2",
         "algo.group_size=2", "rollout.sampling.max_new_tokens=8", "learner.micro_batch_size=4",
         "trainer.steps=1", "trainer.eval_every=1", "algo.mini_batches=1"]
ARMS = (("final answer only", "none"), ("step-level", None))  # None: the recipe's rule


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(RECIPE), help="recipe (default: "
                        "conf/steps_demo.yaml)")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per run (60)")
    parser.add_argument("--seeds", type=int, default=3, help="runs per arm (3)")
    parser.add_argument("--target", type=float, default=0.30,
                        help="held-out accuracy whose samples-to-reach is reported (0.30)")
    parser.add_argument("--sft-model", default=None,
                        help="start from this warm-started model instead of running the SFT")
    parser.add_argument("--out", default=None,
                        help="directory for models and logs (default: runs/step_rewards)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    return parser.parse_args(argv)


def bench_config(args: argparse.Namespace) -> Config:
    overrides = FIXED + (SMOKE if args.smoke else BENCH)
    if args.steps is not None:
        overrides.append(f"trainer.steps={args.steps}")
    return load_config(args.config, overrides + list(args.overrides))


def run_arm(cfg: Config, model_path: str, out: Path, target: float) -> dict[str, Any]:
    """One training run from `model_path`; its held-out curve and what the table needs."""
    summary, wall = train_from(cfg, model_path, out)
    with open(Path(summary["run_dir"]) / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    trained = [r for r in rows if "train/samples" in r]
    curve = [(r["step"], r["val/accuracy"]) for r in rows if "val/accuracy" in r]
    reached = None
    for step, accuracy in curve:
        if accuracy >= target:
            reached = int(sum(r["train/samples"] for r in trained if r["step"] < step))
            break
    wrong = [r["steps/wrong_frac"] for r in trained[-10:] if "steps/wrong_frac" in r]
    return {
        "before": curve[0][1], "after": curve[-1][1], "curve": curve, "reached": reached,
        "samples": int(sum(r["train/samples"] for r in trained)),
        "wrong_steps": statistics.fmean(wrong) if wrong else float("nan"), "wall_s": wall,
    }


def _mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ({' / '.join(f'{v:.3f}' for v in values)})"


def _reached(runs: list[dict[str, Any]]) -> str:
    each = [str(r["reached"]) if r["reached"] is not None else "not reached" for r in runs]
    got = [r["reached"] for r in runs if r["reached"] is not None]
    mean = f"{statistics.fmean(got):,.0f} in {len(got)} of {len(runs)}" if got else "none"
    return f"{mean} ({' / '.join(each)})"


def table(arms: list[tuple[str, list[dict[str, Any]]]], target: float) -> str:
    lines = [
        "| reward | held-out accuracy before (mean, per seed) | after (mean, per seed) | "
        "samples to reach "
        f"{target:g} (mean where reached, per seed) | wrong steps, last 10 steps | "
        "samples per run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, runs in arms:
        lines.append(
            f"| {label} | {_mean([r['before'] for r in runs])} | "
            f"{_mean([r['after'] for r in runs])} | "
            f"{_reached(runs)} | {_mean([r['wrong_steps'] for r in runs])} | "
            f"{runs[0]['samples']:,} |"
        )
    return "\n".join(lines)


def settings(cfg: Config) -> str:
    a, s = cfg.algo, cfg.rollout.sampling
    return (
        f"data {cfg.data.train} ({cfg.data.toy_size} problems, {cfg.data.val_size} held out), "
        f"{cfg.trainer.steps} GRPO steps x {a.prompts_per_step} prompts x {a.group_size} "
        f"completions, {a.epochs} epochs x {a.mini_batches} mini-batches, {s.max_new_tokens} new "
        f"tokens, temperature {s.temperature:g}, lr {cfg.learner.lr:g}, kl_coef {a.kl_coef:g}, "
        f"negative_advantage_scale {a.negative_advantage_scale:g}; step-level: "
        f"algo.step_advantage={a.step_advantage}, step_coef {a.step_coef:g}, "
        f"reward.step_wrong {cfg.reward.step_wrong:g}, step_correct {cfg.reward.step_correct:g}; "
        f"validation {cfg.trainer.eval_samples} samples per held-out problem every "
        f"{cfg.trainer.eval_every} steps"
    )


def main(argv: list[str] | None = None) -> int:
    import ray

    from actors.placement import init_ray
    from rlrun.data import load_from_config
    from rlrun.models import model_cache_dir, resolve_model_path
    from rlrun.sft import run_sft

    args = parse_args(argv)
    if args.smoke and args.out is None:
        with tempfile.TemporaryDirectory(prefix="step_rewards-smoke-") as tmp:
            return main([*(argv if argv is not None else sys.argv[1:]), "--out", tmp])
    cfg = bench_config(args)
    out = Path(args.out or "runs/step_rewards").resolve()
    out.mkdir(parents=True, exist_ok=True)
    train, val = load_from_config(cfg)
    started = time.perf_counter()
    init_ray(cfg)
    try:
        if args.sft_model:
            start = args.sft_model
        else:
            base = resolve_model_path(cfg.model, model_cache_dir(), seed=cfg.run.seed)
            sft = run_sft(with_overrides(cfg, [f"run.output_dir={out}"]), base, train, val)
            start = sft.model_path
            print(f"step_rewards: warm-start: {sft.steps} SFT steps, val/accuracy "
                  f"{sft.accuracy:.3f}", flush=True)
        arms: list[tuple[str, list[dict[str, Any]]]] = [(label, []) for label, _ in ARMS]
        for k in range(1 if args.smoke else args.seeds):
            seed = cfg.run.seed + k
            for (label, rule), (_, runs) in zip(ARMS, arms, strict=True):
                changed = [f"run.seed={seed}"] + ([f"algo.step_advantage={rule}"] if rule else [])
                run = run_arm(with_overrides(cfg, changed), start,
                              out / f"{rule or 'steps'}-{seed}", args.target)
                runs.append(run)
                print(f"step_rewards: seed {seed}: {label}: held-out accuracy "
                      f"{run['before']:.3f} -> {run['after']:.3f}, {run['wall_s']:.0f}s",
                      flush=True)
    finally:
        ray.shutdown()
    if args.smoke:
        return smoke_done("step_rewards")
    result = table(arms, args.target)
    print(result)
    command = "python benchmarks/step_rewards.py" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:]))
    minutes = (time.perf_counter() - started) / 60
    section = "\n".join([
        HEADING, "",
        f"Command: `{command}` ({minutes:.0f} minutes on {measure.machine()}).", "",
        f"Settings: {settings(cfg)}. One warm-start for every run; the two arms of a seed "
        "share the data order and the sampling seeds.", "",
        result, "",
        verdict(arms), "",
    ])
    write_section(HEADING, section)
    return 0


def verdict(arms: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """The closing note, from the numbers: did step-level reward help, seed by seed?"""
    (_, final), (_, steps) = arms
    diffs = [s["after"] - f["after"] for f, s in zip(final, steps, strict=True)]
    wrong = [s["wrong_steps"] - f["wrong_steps"] for f, s in zip(final, steps, strict=True)]
    higher, lower = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    if higher == len(diffs):
        answer = "it helped: held-out accuracy was higher in every seed"
    elif lower == len(diffs):
        answer = "it hurt: held-out accuracy was lower in every seed"
    else:
        answer = (f"not clearly: held-out accuracy was higher in {higher} of {len(diffs)} seeds, "
                  f"lower in {lower} and the same in {len(diffs) - higher - lower}")
    fewer = ("fewer wrong steps in every seed" if all(w < 0 for w in wrong)
             else "more wrong steps in every seed" if all(w > 0 for w in wrong)
             else "fewer wrong steps in some seeds, more in others")
    reach = [(f["reached"], s["reached"]) for f, s in zip(final, steps, strict=True)]
    sooner = sum(s is not None and (f is None or s < f) for f, s in reach)
    later = sum(f is not None and (s is None or f < s) for f, s in reach)
    return (
        f"Did step-level reward help? By the final answer, {answer} (step-level minus "
        f"final-answer, per seed: {' / '.join(f'{d:+.3f}' for d in diffs)}; mean "
        f"{statistics.fmean(diffs):+.3f}). It reached the target sooner in {sooner} of "
        f"{len(reach)} seeds and later in {later}. On the arithmetic itself its training "
        f"completions had {fewer} (share of checked steps, per seed: "
        f"{' / '.join(f'{w:+.3f}' for w in wrong)})."
    )


if __name__ == "__main__":
    sys.exit(main())
