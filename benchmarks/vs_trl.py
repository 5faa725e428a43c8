"""rlrun next to TRL's `GRPOTrainer`: same warm-started model, prompts, group size, sampling and
number of optimizer steps, on this CPU, in one run.

    python benchmarks/vs_trl.py [--config conf/demo.yaml] [--steps N] [--seeds N] [--quick]
                                [--smoke] [KEY=VALUE ...]

1. build the tiny model of the config and warm-start it once with `rlrun.sft.run_sft` (until
   held-out sampled accuracy reaches `sft.target_accuracy`); both trainers start from it;
2. TRL: `GRPOTrainer` configured from the same config (`benchmarks/trl_grpo.py`), on the
   prompts rlrun's coordinator draws, in the same order, rewarded by rlrun's own reward;
3. rlrun: `rlrun.training.run_training` on local Ray, from the warm-started model; then once
   more per `--rlrun-variant KEY=VALUE` (by default, a synchronous recipe is also run with
   `algo.max_staleness=1`, generation overlapping training), each an extra row. With
   `--seeds N`, steps 2 and 3 run N times, with run.seed, run.seed+1, ... (data order and
   sampling) from the same warm-started model: a reward difference smaller than the spread
   between seeds says nothing;
4. both final models (Hugging Face format) are scored the same way: `trainer.eval_samples`
   sampled completions per held-out problem with the training sampling settings and one seed,
   by the HF engine and the rlrun reward (`rlrun.sft.held_out_accuracy`).

Samples/s counts training completions over the RL phase only (TRL: `trainer.train()`; rlrun:
from the start of step 0 to the end of the last step, so Ray start-up and rlrun's own
validation before and after training are left out of it and counted in the wall time; the
benchmark sets `trainer.eval_every=0` so rlrun does not validate between steps, as TRL does not).
Completion lengths drift apart as the two policies train, so completion tokens/s is shown too.
Prints the table and writes it into docs/benchmarks.md under its own heading; `--smoke` runs
every part of this on tiny sizes in a temporary directory, and prints and writes no table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import measure
from docs_section import DOCS, SMOKE_HELP, smoke_done, write_section
from training_runs import train_from, with_overrides
from trl_grpo import run_trl

from rlrun.batching import Shard
from rlrun.config import Config, load_config
from rlrun.records import Problem

HEADING = "## Training: rlrun vs TRL `GRPOTrainer`"
DEMO = Path(__file__).resolve().parent.parent / "conf" / "demo.yaml"
# Math only: TRL gets rlrun's reward without a sandbox, and both score the same problems.
FIXED = [
    "data.train=toy:arithmetic", "data.val=null", "sft.enabled=true", "sft.math_fraction=null",
    "metrics.tensorboard=false", "metrics.report=false",
    "metrics.sample_problems=1", "trainer.eval_every=0",
    # Like for like: TRL takes no stop strings, tops up no filtered groups and has no damping of
    # negative advantages (a variant row can still turn that on for rlrun).
    "rollout.sampling.stop=[]", "algo.filter_equal_groups=false",
    "algo.negative_advantage_scale=1.0",
]
QUICK = ["data.val_size=16", "trainer.eval_samples=2", "trainer.eval_k=[1]", "sft.max_steps=40",
         "sft.eval_every=20"]
QUICK_STEPS = 3
# --smoke: every part of the benchmark (warm-start, TRL, rlrun, the learner-step rows, the
# held-out scoring) on a few samples, one step each.
SMOKE = ["data.toy_size=32", "data.val_size=2", "trainer.eval_samples=1", "trainer.eval_k=[1]",
         "sft.max_steps=2", "sft.eval_every=2", "sft.batch_size=4", "algo.prompts_per_step=2",
         "algo.group_size=2", "rollout.sampling.max_new_tokens=8", "learner.micro_batch_size=4"]
SMOKE_STEPS = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=str(DEMO) if DEMO.is_file() else None,
        help="rlrun recipe both trainers follow (default: conf/demo.yaml)",
    )
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (trainer.steps)")
    parser.add_argument(
        "--quick", action="store_true",
        help=f"short run: {QUICK_STEPS} steps, 16 held-out problems, short warm-start",
    )
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    parser.add_argument("--out", default=None,
                        help="directory for models and logs (default: runs/vs_trl; --smoke: a "
                        "temporary one)")
    parser.add_argument(
        "--sft-model", default=None,
        help="start from this warm-started model instead of running the SFT again",
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1,
        help="torch threads of the TRL process and of rlrun's rollout actor and learner, which "
        "take turns in a synchronous step (default: every core of this machine)",
    )
    parser.add_argument(
        "--rlrun-variant", action="append", default=[], metavar="KEY=VALUE",
        help="also run rlrun with these settings changed (space-separated), as an extra row "
        "(repeatable; default, when the recipe is synchronous: algo.max_staleness=1 with one "
        "thread per role, as generation and training then run at the same time; none: no "
        "extra row)",
    )
    parser.add_argument(
        "--seeds", type=int, default=1,
        help="RL runs per trainer, with run.seed, run.seed+1, ... (data order and sampling); "
        "one warm-start and one held-out evaluation seed for all",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    return parser.parse_args(argv)


def bench_config(args: argparse.Namespace) -> Config:
    threads = [f"rollout.num_threads={args.threads}", f"learner.num_threads={args.threads}"]
    overrides = (list(FIXED) + threads + (list(QUICK) if args.quick or args.smoke else [])
                 + (list(SMOKE) if args.smoke else []))
    steps = args.steps if args.steps is not None else (
        SMOKE_STEPS if args.smoke else QUICK_STEPS if args.quick else None)
    if steps is not None:
        overrides.append(f"trainer.steps={steps}")
    return load_config(args.config, overrides + list(args.overrides))


def evaluate(path: str, cfg: Config, val: list[Problem]) -> float:
    """Held-out sampled accuracy of the model at `path` (same n, seed and settings for all)."""
    from rlrun.engines.hf import HFEngine
    from rlrun.rewards import build_reward
    from rlrun.sft import held_out_accuracy

    engine = HFEngine(path, cfg.rollout, cfg.model.dtype)
    return held_out_accuracy(engine, build_reward(cfg, None), val, cfg, seed=cfg.run.seed)


def rlrun_phase(run_dir: str) -> tuple[float, list[dict[str, float]]]:
    """Seconds from the start of step 0 to the end of the last step, and the step rows."""
    with open(Path(run_dir) / "metrics.jsonl") as f:
        rows = [r for r in map(json.loads, f) if "reward/mean" in r]
    first = rows[0]
    step0 = first["perf/time_rollout"] + first["perf/time_train"] + first["perf/time_sync"]
    return rows[-1]["time"] - first["time"] + step0, rows


def run_rlrun(cfg: Config, model_path: str, run_out: Path) -> dict[str, Any]:
    """`run_training` from the warm-started model (no second SFT), into `run_out`."""
    from rlrun.checkpoint import latest_checkpoint

    summary, wall = train_from(cfg, model_path, run_out)
    phase, rows = rlrun_phase(summary["run_dir"])
    final = latest_checkpoint(str(run_out))
    if final is None:
        raise RuntimeError(f"rlrun saved no checkpoint under {run_out}")
    keys = ("perf/time_generate", "perf/time_reward", "perf/time_rollout", "perf/time_train",
            "perf/time_sync")
    return {
        "model_path": str(Path(final) / "model"),
        "steps": summary["steps"],
        "samples": int(sum(r["train/samples"] for r in rows)),
        "tokens": int(sum(r["train/samples"] * r["response/len_mean"] for r in rows)),
        "wall_s": wall,
        "train_s": phase,
        "timings": {k.split("time_")[1]: sum(r[k] for r in rows) for k in keys},
        "reward_curve": [r["reward/mean"] for r in rows],
        "step_s": [r["perf/time_rollout"] + r["perf/time_train"] + r["perf/time_sync"]
                   for r in rows],
    }


def first_shard(cfg: Config, model_path: str, train: list[Problem]) -> Shard:
    """One learner shard of the first step's shape: the first prompts of `train`, a group of
    completions each sampled from `model_path`, seeded random advantages."""
    import torch

    from rlrun.batching import TrainSample, make_shards
    from rlrun.data.prompts import render_prompt
    from rlrun.engines import SamplingParams
    from rlrun.engines.hf import HFEngine

    algo = cfg.algo
    engine = HFEngine(model_path, cfg.rollout, cfg.model.dtype)
    prompts = [render_prompt(p, cfg.data, engine.tokenizer, chat=cfg.model.chat_template)
               for p in train[: algo.prompts_per_step]]
    sampling = SamplingParams.from_config(cfg.rollout.sampling, n=algo.group_size,
                                          seed=cfg.run.seed)
    gen = torch.Generator().manual_seed(cfg.run.seed)
    samples = [
        TrainSample(s.prompt_ids, s.response_ids, s.behaviour_logprobs,
                    float(torch.randn(1, generator=gen)))
        for group in engine.generate(prompts, sampling) for s in group
    ]
    return make_shards(
        samples, step=0, world_size=1, epochs=algo.epochs, mini_batches=algo.mini_batches,
        max_len=cfg.rollout.sampling.max_new_tokens, seed=cfg.run.seed,
    )[0]


class LocalLearner:
    """rlrun's learner step in this process, without Ray: the policy, AdamW, the warm-up
    schedule and (when `algo.kl_coef` > 0) the reference model, as a learner rank builds them."""

    def __init__(self, cfg: Config, model_path: str) -> None:
        import torch
        from transformers import AutoTokenizer

        from rlrun.models import load_causal_lm
        from rlrun.policy_update import shares_prompts, warmup_schedule

        self.cfg = cfg
        self.model = load_causal_lm(model_path, cfg.model.dtype)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.learner.lr,
                                           weight_decay=cfg.learner.weight_decay)
        self.scheduler = warmup_schedule(self.optimizer, cfg.learner.warmup_steps)
        self.pad = AutoTokenizer.from_pretrained(model_path).pad_token_id
        self.share = shares_prompts(self.model, cfg)
        self.ref_model = (load_causal_lm(model_path, cfg.model.dtype).eval()
                          if cfg.algo.kl_coef > 0 else None)

    def step(self, shard: Shard) -> float:
        """Seconds of the whole `train_on_shard` (pi_old and reference passes, every
        micro-batch's forward/backward, optimizer steps)."""
        from rlrun.policy_update import train_on_shard

        start = time.perf_counter()
        train_on_shard(self.model, self.optimizer, self.scheduler, shard, self.cfg, self.pad,
                       ref_model=self.ref_model)
        return time.perf_counter() - start


def alternate_learner_steps(cfg: Config, model_path: str, train: list[Problem], rounds: int
                            ) -> tuple[list[float], list[float]]:
    """Seconds per learner step in this process (`LocalLearner`, no Ray) and in a one-rank
    `LearnerGroup` on a local Ray (timed at the driver: the call, the shard's transfer and the
    metrics' return included), taking turns `rounds` times after one warm-up round each, on one
    shard of the first step's shape, so that both see the same machine. Both copies start from
    `model_path` and take the same updates. The driver calls `torch.set_num_threads` beforehand."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from actors.learner import LearnerGroup
    from actors.placement import init_ray

    shard = first_shard(cfg, model_path, train)
    local = LocalLearner(cfg, model_path)
    init_ray(cfg)
    here, actor = [], []
    try:
        pg = placement_group([{"CPU": cfg.learner.num_cpus}])
        ray.get(pg.ready(), timeout=120)
        group = LearnerGroup(cfg, model_path, pg, "learner-step")
        group.start()
        for _ in range(rounds + 1):
            here.append(local.step(shard))
            start = time.perf_counter()
            group.train([shard])
            actor.append(time.perf_counter() - start)
        group.shutdown()
        remove_placement_group(pg)
    finally:
        ray.shutdown()
    return here[1:], actor[1:]


def batch_steps(step_s: list[float], updates: int) -> list[float]:
    """Seconds per generation batch from seconds per optimizer step: TRL generates (and runs its
    pi_old and reference passes) in the first of each batch's `updates` optimizer steps, so a
    median over optimizer steps would leave all of that out."""
    return [sum(step_s[i : i + updates]) for i in range(0, len(step_s) - updates + 1, updates)]


def machine() -> str:
    import ray
    import trl

    return f"{measure.machine()}, trl {trl.__version__}, ray {ray.__version__}"


def settings(cfg: Config) -> str:
    a, s, learner = cfg.algo, cfg.rollout.sampling, cfg.learner
    return (
        f"data {cfg.data.train} (math only, so TRL can take rlrun's reward without a sandbox), "
        f"{cfg.trainer.steps} optimizer steps x {a.prompts_per_step} prompts x {a.group_size} "
        f"completions, {s.max_new_tokens} new tokens, temperature {s.temperature:g}, top_p "
        f"{s.top_p:g}, top_k {s.top_k}, loss_agg {a.loss_agg}, scale_rewards {a.scale_rewards}, "
        f"clip {a.clip_low:g}/{a.clip_high:g}, beta {a.kl_coef:g}, lr {learner.lr:g}, micro-batch "
        f"{learner.micro_batch_size}, rlrun max_staleness {a.max_staleness}, "
        f"{cfg.rollout.num_actors} rollout actor(s), {learner.num_workers} learner rank(s)"
    )


def merge_trl(results: list[Any]) -> Any:
    """One TRL row from runs with different seeds: totals, and every step's time."""
    from dataclasses import replace

    first = results[0]
    return replace(
        first,
        optimizer_steps=sum(r.optimizer_steps for r in results),
        samples=sum(r.samples for r in results),
        tokens=sum(r.tokens for r in results),
        wall_s=sum(r.wall_s for r in results),
        train_s=sum(r.train_s for r in results),
        timings={k: sum(r.timings.get(k, 0.0) for r in results) for k in first.timings},
        step_s=[t for r in results for t in r.step_s],
    )


def merge_rlrun(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One rlrun row from runs with different seeds: totals, and every step's time."""
    first = results[0]
    totals = {k: sum(r[k] for r in results) for k in ("steps", "samples", "tokens", "wall_s",
                                                       "train_s")}
    return first | totals | {
        "timings": {k: sum(r["timings"][k] for r in results) for k in first["timings"]},
        "step_s": [t for r in results for t in r["step_s"]],
    }


def _after(values: list[float]) -> str:
    """Held-out accuracy after training: the value, or the mean and each seed's value."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({' / '.join(f'{v:.3f}' for v in values)})"


def tables(cfg: Config, before: float, trl: Any, trl_after: list[float],
           runs: list[dict[str, Any]], learner_steps: tuple[list[float], list[float]]
           ) -> tuple[str, str]:
    """The results table and the per-step breakdown; `trl` and each of `runs` (the rlrun rows,
    each with its `label` and held-out accuracies `after`) hold the totals over the seeds."""
    updates = cfg.algo.mini_batches * cfg.algo.epochs
    step_samples = cfg.algo.prompts_per_step * cfg.algo.group_size
    trl_rate, trl_tok = trl.samples / trl.train_s, trl.tokens / trl.train_s
    # Per step (a generation batch and its updates, as rlrun's step), so a burst of load from
    # other users of the machine weighs less. Every TRL run's steps are whole batches.
    trl_med = step_samples / statistics.median(batch_steps(trl.step_s, updates))
    main = [
        "| trainer | optimizer steps | samples | samples/s (RL phase) | samples/s (median step) "
        "| completion tokens/s | mean completion tokens | RL phase s | wall s | "
        "held-out accuracy before | after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| TRL `GRPOTrainer` | {trl.optimizer_steps} | {trl.samples} | {trl_rate:.1f} | "
        f"{trl_med:.1f} | {trl_tok:,.0f} | {trl.tokens / trl.samples:.1f} | {trl.train_s:.1f} | "
        f"{trl.wall_s:.1f} | {before:.3f} | {_after(trl_after)} |",
    ]
    t = trl.timings
    n = trl.optimizer_steps // updates
    trl_gen, trl_rew = t.get("generate", 0.0), t.get("reward", 0.0)
    breakdown = [
        "| seconds per step (RL phase) | generate | reward | train | weight sync | other | total |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| TRL `GRPOTrainer` | {trl_gen / n:.3f} | {trl_rew / n:.3f} | "
        f"{(trl.train_s - trl_gen - trl_rew) / n:.3f} | - | - | {trl.train_s / n:.3f} |",
    ]
    for rl in runs:
        rate, tok = rl["samples"] / rl["train_s"], rl["tokens"] / rl["train_s"]
        med = step_samples / statistics.median(rl["step_s"])
        main += [
            f"| {rl['label']} | {rl['steps'] * updates} | {rl['samples']} | {rate:.1f} | "
            f"{med:.1f} | {tok:,.0f} | {rl['tokens'] / rl['samples']:.1f} | "
            f"{rl['train_s']:.1f} | {rl['wall_s']:.1f} | {before:.3f} | {_after(rl['after'])} |",
            f"| {rl['label']} / TRL | | | {rate / trl_rate:.2f}x | {med / trl_med:.2f}x | "
            f"{tok / trl_tok:.2f}x | | | | | |",
        ]
        r, m = rl["timings"], rl["steps"]
        # Rollout time is what the step waited for generation and reward: with max_staleness > 0
        # they run during the previous step's training, so the step waits for less than they take.
        other = rl["train_s"] - r["rollout"] - r["train"] - r["sync"]
        mark = " (overlapped)" if rl["overlapped"] else ""
        breakdown.append(
            f"| {rl['label']} | {r['generate'] / m:.3f}{mark} | {r['reward'] / m:.3f}{mark} | "
            f"{r['train'] / m:.3f} | {r['sync'] / m:.3f} | {other / m:.3f} | "
            f"{rl['train_s'] / m:.3f} |"
        )
    here, actor = (statistics.median(t) for t in learner_steps)
    breakdown += [
        f"| rlrun learner step in one process, no Ray (same batch shape) | | | {here:.3f} | | | |",
        f"| rlrun learner step as the pipeline's learner rank, timed at the driver | | | "
        f"{actor:.3f} ({actor / here:.2f}x one process) | | | |",
    ]
    return "\n".join(main), "\n".join(breakdown)


def main(argv: list[str] | None = None) -> int:
    import ray
    import torch

    from actors.placement import init_ray
    from rlrun.cluster import torch_threads
    from rlrun.data import load_from_config
    from rlrun.models import model_cache_dir, resolve_model_path
    from rlrun.sft import run_sft

    args = parse_args(argv)
    if args.smoke and args.out is None:
        with tempfile.TemporaryDirectory(prefix="vs_trl-smoke-") as tmp:
            return main([*(argv if argv is not None else sys.argv[1:]), "--out", tmp])
    cfg = bench_config(args)
    # TRL runs in this process with every core; so do rlrun's rollout actor and learner, which
    # take turns within a synchronous step (bench_config sets their num_threads). Evaluation
    # runs here too, with the same setting for every model.
    threads = args.threads
    torch.set_num_threads(threads)
    load_start = os.getloadavg()
    out = Path(args.out or "runs/vs_trl").resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train, val = load_from_config(cfg)
    overlap = "algo.max_staleness=1 rollout.num_threads=1 learner.num_threads=1"
    default_extra = [overlap] if cfg.algo.max_staleness == 0 and not args.smoke else []
    # A smoke run trains no overlapped row, so a renamed key in it fails here instead.
    with_overrides(cfg, overlap.split())
    extra = args.rlrun_variant or default_extra
    variants = [("rlrun", [])] + [(f"rlrun, {v}", v.split()) for v in extra if v != "none"]
    init_ray(cfg)
    try:
        if args.sft_model:
            start = args.sft_model
        else:
            base = resolve_model_path(cfg.model, model_cache_dir(), seed=cfg.run.seed)
            sft = run_sft(with_overrides(cfg, [f"run.output_dir={out}"]), base, train, val)
            start = sft.model_path
            print(f"vs_trl: warm-start: {sft.steps} SFT steps, val/accuracy {sft.accuracy:.3f}")
        before = evaluate(start, cfg, val)
        print(f"vs_trl: held-out accuracy of the warm-started model: {before:.3f}", flush=True)

        seeds = [cfg.run.seed + k for k in range(args.seeds)]
        trls: list[Any] = []
        per_variant: list[list[dict[str, Any]]] = [[] for _ in variants]
        for seed in seeds:
            seeded = with_overrides(cfg, [f"run.seed={seed}"])
            trl = run_trl(seeded, start, train, str(out / f"trl-{seed}"))
            if not args.smoke:
                print(f"vs_trl: seed {seed}: TRL {trl.samples / trl.train_s:.1f} samples/s over "
                      f"{trl.train_s:.1f}s", flush=True)
            trls.append(trl)
            for i, (label, changed) in enumerate(variants):
                rl = run_rlrun(with_overrides(seeded, changed), start, out / f"rlrun-{i}-{seed}")
                if not args.smoke:
                    print(f"vs_trl: seed {seed}: {label} {rl['samples'] / rl['train_s']:.1f} "
                          f"samples/s over {rl['train_s']:.1f}s", flush=True)
                per_variant[i].append(rl)
    finally:
        # A full run times the learner steps below on a fresh Ray, which
        # alternate_learner_steps starts; a smoke run times nothing and keeps this one rather
        # than pay for a second start (Ray shuts itself down at exit if a step fails first).
        if not args.smoke:
            ray.shutdown()
    torch.set_num_threads(torch_threads(cfg.learner.num_threads, cfg.learner.num_cpus))
    learner_steps = alternate_learner_steps(cfg, start, train, rounds=1 if args.smoke else 10)
    torch.set_num_threads(threads)
    trl_after = [evaluate(t.model_path, cfg, val) for t in trls]
    runs = [
        merge_rlrun(results) | {
            "label": label,
            "overlapped": with_overrides(cfg, changed).algo.max_staleness > 0,
            "after": [evaluate(r["model_path"], cfg, val) for r in results],
        }
        for (label, changed), results in zip(variants, per_variant, strict=True)
    ]
    trl = merge_trl(trls)
    load = f"{load_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"

    main_table, breakdown = tables(cfg, before, trl, trl_after, runs, learner_steps)
    if args.smoke:
        return smoke_done("vs_trl")
    print(main_table + "\n\n" + breakdown)
    print(f"vs_trl: total {time.perf_counter() - started:.0f}s")
    command = "python benchmarks/vs_trl.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    updates = cfg.algo.epochs * cfg.algo.mini_batches
    pi_old_note = (
        "With one update per generation batch (as here) neither runs a pi_old pass: both take "
        "the detached log-probs of the update itself."
        if updates == 1 else
        f"Both fix pi_old before each generation batch's {updates} updates: TRL with a no-grad "
        "pass over the whole batch, rlrun with one over the samples its first update does not "
        "hold (that update's own forward pass gives pi_old of the rest, bit for bit)."
    )
    seeds_note = (
        f" Each row sums {args.seeds} RL runs from the same warm-started model that differ only "
        f"in run.seed ({', '.join(map(str, seeds))}: data order and sampling); held-out "
        "accuracy after is their mean, each run's in brackets, all scored with the same "
        "evaluation seed."
        if args.seeds > 1 else ""
    )
    variant_note = (
        " Rows named `rlrun, KEY=VALUE ...` are rlrun with those settings changed "
        "(`--rlrun-variant`); TRL has no counterpart for them."
        if len(runs) > 1 else ""
    ) + (
        " \"(overlapped)\": generation and reward of the next batch ran during training, so "
        "the step waited for less than their time."
        if any(rl["overlapped"] for rl in runs) else ""
    )
    section = (
        f"{HEADING}\n\n`{command.strip()}` on {machine()} (1-minute load average {load}; "
        f"the machine is shared). TRL runs with {threads} torch thread(s) (`--threads`, by "
        f"default every core), and so do rlrun's rollout actor and learner, which take turns "
        f"within a step (`rollout.num_threads`, `learner.num_threads`). Recipe: "
        f"{_shown(args.config) if args.config else 'the schema defaults'}; "
        f"{settings(cfg)}. Both start from the same "
        f"warm-started model (rlrun SFT); TRL trains on the prompts rlrun draws, in the same "
        f"order, with rlrun's reward. Held-out accuracy: {len(val)} problems x "
        f"{cfg.trainer.eval_samples} sampled completions, seed {cfg.run.seed}, same engine "
        "and reward for every model. Samples/s counts training completions over the RL phase "
        "only (the median-step column divides one step's samples by the median step time, "
        "which weighs bursts of load from other users of the machine less; a step is one "
        f"generation batch and its {updates} optimizer updates for both, so TRL's is the sum of "
        f"{updates} consecutive optimizer steps, the first of which generates); wall time also "
        "counts model loading, Ray actors starting and, for rlrun, its "
        "own validation before and after training. Per step, rlrun's train time is from the "
        "driver sending each learner rank its shard to the ranks returning their metrics, and "
        "weight sync is the learner putting its weights and the rollout actors loading them; "
        "TRL's train time is everything in `trainer.train()` but generation and reward. The "
        "last two rows time one learner step of the first step's shape after all runs, 10 "
        "times each after a warm-up, taking turns so that both see the same machine: rlrun's "
        "`train_on_shard` in this process with the learner's threads, and the same step in a "
        "one-rank `LearnerGroup` (the learner the pipeline runs) timed at the driver as the "
        "train column is, so their ratio is what running the learner as a Ray actor adds (the "
        "call, the shard's transfer, the metrics' return); medians. "
        f"{pi_old_note}{seeds_note}{variant_note}\n\n"
        f"{main_table}\n\n{breakdown}\n"
    )
    write_section(HEADING, section)
    return 0


def _shown(path: str) -> str:
    """`path` relative to the repository when it lies inside it."""
    resolved = Path(path).resolve()
    root = DOCS.parent.parent
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else path


if __name__ == "__main__":
    sys.exit(main())
