"""`rlrun plan CONFIG [overrides] [--gpu TYPE]`: per-GPU memory of each role; a layout that fits.

Reads only the model's config.json (a local directory, the tiny model's settings, the hub, or the
copy shipped for the recipes' models when offline), prints the table `rlrun.plan.format_plan`
builds, and exits 0 when every role fits (or no GPU type is known: bytes only), 1 when one does
not, with the override line of the nearest layout that fits.
"""

from __future__ import annotations

import argparse

from rlrun.config import ConfigError, load_config, split_args
from rlrun.plan import (
    DEFAULT_PROMPT_TOKENS,
    GPUS,
    detect_gpu,
    estimate,
    format_plan,
    gpu_spec,
    load_model_config,
    suggest,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "args", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]",
        help="recipe YAML (default: built-in defaults) then overrides, e.g. learner.num_workers=8",
    )
    # Not argparse choices: a wrong name should give one line, not usage + error.
    parser.add_argument(
        "--gpu", help=f"GPU type: {' | '.join(GPUS)} (default: $RLRUN_GPU, else this machine's "
        "nvidia-smi; neither: bytes only, no verdict)",
    )
    parser.add_argument(
        "--prompt-tokens", type=int, default=DEFAULT_PROMPT_TOKENS,
        help=f"prompt length the plan assumes (default {DEFAULT_PROMPT_TOKENS}); a sequence is "
        "this + rollout.sampling.max_new_tokens",
    )
    parser.add_argument(
        "--unchunked-logprobs", action="store_true",
        help="count the full [N, L, V] fp32 log_softmax instead of one chunk of positions "
        "at a time",
    )


def main(args: argparse.Namespace) -> int:
    # Check the cheap inputs first, so a typo answers before the model config is looked up.
    gpu = gpu_spec(args.gpu).name if args.gpu is not None else None
    if args.prompt_tokens < 1:
        raise ConfigError(f"--prompt-tokens {args.prompt_tokens} must be >= 1")
    cfg = load_config(*split_args(args.args))
    gpu = gpu or detect_gpu()
    model_config, source = load_model_config(cfg.model)
    chunked = not args.unchunked_logprobs
    plan = estimate(cfg, model_config, gpu, prompt_tokens=args.prompt_tokens,
                    chunked_logprobs=chunked, source=source)
    fix = None
    if plan.fits is False and gpu is not None:
        fix = suggest(cfg, model_config, gpu, prompt_tokens=args.prompt_tokens,
                      chunked_logprobs=chunked)
    print(format_plan(plan, fix))
    return 1 if plan.fits is False else 0
