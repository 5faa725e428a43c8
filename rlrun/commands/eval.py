"""`rlrun eval CONFIG --model PATH_OR_CHECKPOINT`: accuracy and pass@k of a model on a split.

Completions come from the same rollout actors training uses (`actors.rollout.RolloutGroup`) and
are scored by the same configured reward (code through the sandbox actors), so an eval number
and a training number mean the same thing. Prints the overall and per-kind/source/difficulty
table, writes one JSON row per problem (`--out`) plus a summary next to it (`<out>.json`, which
`rlrun report` shows), and with `--baseline` lists the problems that flipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

from rlrun.config import Config, ConfigError, load_config
from rlrun.records import Problem

SPLITS = ("val", "test", "train")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="recipe YAML (the run's config)")
    parser.add_argument(
        "--model", required=True,
        help="Hugging Face model dir or id, a training checkpoint dir (holding model/), a run "
        "directory (its latest checkpoint), or tiny",
    )
    parser.add_argument("--split", choices=SPLITS, default="val",
                        help="val: the run's held-out problems (default); train; test: the "
                        "dataset's test split")
    parser.add_argument("--k", help="comma-separated k for pass@k, e.g. 1,5,10 "
                        "(default: trainer.eval_k)")
    parser.add_argument("--samples", type=int,
                        help="sampled completions per problem (default: trainer.eval_samples, "
                        "at least max k; 0 with --greedy)")
    parser.add_argument("--greedy", action="store_true",
                        help="also decode greedily; alone (without --samples) greedy only")
    parser.add_argument("--limit", type=int, help="evaluate only the first N problems")
    parser.add_argument("--baseline", help="per-problem JSONL of an earlier `rlrun eval`: list "
                        "the problems that flipped")
    parser.add_argument("--out", help="per-problem JSONL to write "
                        "(default: <run.output_dir>/eval_<split>_<model>.jsonl)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. data.val=x.jsonl")


def parse_k(text: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(
            f"--k {text!r} is not a comma-separated list of integers (e.g. 1,5,10)"
        ) from None
    if not ks or ks[0] < 1:
        raise ConfigError(f"--k {text!r}: every k must be >= 1")
    return ks


def resolve_checkpoint(model: str, cfg: Config) -> str:
    """A directory or hub id holding an HF-format model, from what a user may pass as --model."""
    from rlrun.checkpoint import latest_checkpoint
    from rlrun.models import model_cache_dir, resolve_model_path

    path = Path(model)
    if path.is_dir():
        for candidate in (path, path / "model"):
            if (candidate / "config.json").is_file():
                return str(candidate)
        latest = latest_checkpoint(str(path))
        # A LoRA run's checkpoints hold adapters; its merged model is in final/model.
        for candidate in ([Path(latest) / "model"] if latest else []) + [path / "final" / "model"]:
            if (candidate / "config.json").is_file():
                return str(candidate)
        raise ConfigError(
            f"--model {model}: the directory holds no config.json, model/config.json or "
            "learner/step_*/ checkpoint; pass a Hugging Face model dir, a checkpoint dir or a "
            "run directory"
        )
    return resolve_model_path(dataclasses.replace(cfg.model, path=model), model_cache_dir(),
                              cfg.run.seed)


def model_slug(model: str) -> str:
    """A short file-name-safe name for a model argument (checkpoint dirs by their step)."""
    parts = [p for p in Path(model).parts if p not in ("/", ".")]
    name = parts[-1] if parts else "model"
    if name == "model" and len(parts) > 1:
        name = parts[-2]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def load_split(cfg: Config, split: str, limit: int | None) -> list[Problem]:
    from rlrun.data import load_from_config, load_problems

    if split in ("train", "val"):
        train, val = load_from_config(cfg)
        problems = train if split == "train" else val
    else:
        d = cfg.data
        source = d.val or d.train
        if source.startswith("toy:"):
            # Toy sets are generated: the test problems continue the sequence past train and val.
            skip = d.toy_size + d.val_size
            problems = load_problems(source, toy_size=skip + d.val_size,
                                     seed=cfg.run.seed).problems[skip:]
        elif Path(source).exists():
            raise ConfigError(
                f"--split test: {source} is a local file with no test split; point data.val "
                "at the test file and use --split val"
            )
        else:
            problems = load_problems(source, fmt=d.format, on_bad_row=d.on_bad_row,
                                     split="test", seed=cfg.run.seed, subset=d.subset).problems
    problems = problems[:limit]
    if not problems:
        raise ConfigError(f"--split {split} has no problems (data.train={cfg.data.train}, "
                          f"data.val={cfg.data.val})")
    return problems


def _sample_counts(args: argparse.Namespace, cfg: Config) -> tuple[list[int], int]:
    k_list = parse_k(args.k) if args.k else sorted(set(cfg.trainer.eval_k))
    if args.samples is not None:
        samples = args.samples
    elif args.greedy:
        samples = 0
    else:
        samples = max(cfg.trainer.eval_samples, k_list[-1])
    if samples < 0:
        raise ConfigError(f"--samples {samples} must be >= 0")
    if samples == 0 and not args.greedy:
        raise ConfigError("--samples 0 needs --greedy (nothing would be generated)")
    if samples and k_list[-1] > samples:
        raise ConfigError(f"--k {','.join(map(str, k_list))} needs --samples >= {k_list[-1]}")
    return k_list, samples


def main(args: argparse.Namespace) -> int:
    from actors.placement import init_ray, place, release
    from actors.rollout import RolloutGroup
    from actors.sandbox import SandboxPool
    from rlrun import evaluation as ev
    from rlrun.data.prompts import render_prompt
    from rlrun.engines import SamplingParams
    from rlrun.models import load_tokenizer
    from rlrun.multiturn import Episodes, ObservationTokens
    from rlrun.preflight import check_environment, environment
    from rlrun.rewards import build_reward

    cfg = load_config(args.config, args.overrides)
    k_list, samples = _sample_counts(args, cfg)
    env_cls = environment(cfg)  # a plug-in that cannot load fails before the data is read
    problems = load_split(cfg, args.split, args.limit)
    baseline = ev.read_jsonl(args.baseline) if args.baseline else None
    model_path = resolve_checkpoint(args.model, cfg)
    tokenizer = load_tokenizer(model_path) if cfg.model.chat_template else None
    reward = build_reward(cfg, None)  # a plug-in that cannot load fails before Ray starts
    if env_cls is not None:
        check_environment(cfg, env_cls, problems)
        observations = ObservationTokens(load_tokenizer(model_path), cfg.model.chat_template)

    init_ray(cfg)
    code = any(p.kind == "code" for p in problems)
    prefix = f"{cfg.run.name}-eval"
    groups = place(cfg, ["rollout"] + (["sandbox"] if code else []), prefix)
    pool = RolloutGroup(cfg, model_path, groups["rollout"], prefix)
    sandbox = SandboxPool(cfg.sandbox, prefix, groups.get("sandbox")) if code else None
    judge = sandbox.judge if sandbox else None
    # The component that says right or wrong: the builtin term, whatever it is named.
    correct = next((f.name for f in cfg.reward.fns if f.fn == "builtin"), "correctness")
    score = reward.using(judge=judge).score
    # With env.name, every attempt is a multi-turn episode, reported after each turn too.
    episodes = None
    if env_cls is not None:
        episodes = Episodes(env_cls, cfg, observations, pool.extend, judge)
        score = episodes.score(score)
    try:
        result = ev.evaluate(
            problems,
            pool.generate,
            score,
            SamplingParams.from_config(cfg.rollout.sampling, seed=cfg.run.seed),
            k_list=k_list,
            samples=samples,
            greedy=args.greedy,
            render=lambda p: render_prompt(p, cfg.data, tokenizer, chat=cfg.model.chat_template),
            batch_size=max(1, cfg.rollout.batch_size * cfg.rollout.num_actors),
            progress=cfg.metrics.progress,
            correct_component=correct,
            episodes=episodes,
        )
    finally:
        reward.close()
        pool.shutdown()
        if sandbox is not None:
            sandbox.shutdown()
        release(groups)

    flips = ev.compare(result, baseline) if baseline is not None else None
    slug = model_slug(model_path if Path(args.model).is_dir() else args.model)
    default = Path(cfg.run.output_dir) / f"eval_{args.split}_{slug}.jsonl"
    out = Path(args.out or default)
    ev.write_jsonl(result, out)
    summary = result.summary(flips, model=args.model, split=args.split, baseline=args.baseline)
    summary_path = out.with_suffix(".json")
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")

    print(f"model: {args.model}  split: {args.split}  problems: {len(problems)}  "
          f"samples: {samples}  greedy: {'yes' if args.greedy else 'no'}")
    print(ev.format_table(summary))
    if flips is not None:
        print(f"\nflips against {args.baseline}:")
        print(ev.format_flips(flips, ev.common_problems(result, baseline)))
    print(f"\nwrote {out} (per problem) and {summary_path} (summary)", file=sys.stderr)
    return 0
