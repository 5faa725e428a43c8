"""`rlrun plan`'s learner estimate next to the measured peak memory of a real learner step on
this CPU, for two small Qwen3 models built from config (no download).

    python benchmarks/plan_accuracy.py [--threads 2] [--smoke]

Models: "byte vocab", the 259-token byte vocabulary of `model.tiny` on a 20M-parameter body
(hidden 512, 6 layers, 8 heads of 64, MLP 1536), where the logits are negligible; "Qwen vocab",
the 151,936-token Qwen vocabulary on a thin body (hidden 320, 2 layers, 5 heads of 64, MLP 1280),
~52M parameters nearly all in the tied embedding, where the output layer and its gradient are
most of the step. Both have tied embeddings and run in float32 (the default `model.dtype` and
`learner.master_dtype`).

The learner config is the default one with: 2 prompts x 8 completions per step (a shard of 16
samples), `algo.mini_batches=2` (two AdamW updates, so the no-grad pi_old pass runs first),
`learner.micro_batch_size` 4 (two micro-batches per update: gradients accumulate) or 2, with and
without `learner.gradient_checkpointing`. Every sample is 64 random prompt tokens + 128 random
response tokens (seed 0), so `rlrun plan --prompt-tokens 64` with
`rollout.sampling.max_new_tokens=128` describes it. Shared-prompt rows stay on (the default):
completions of one prompt that land in one micro-batch share a row, so the planner's tokens per
micro-batch (`micro_batch_size x 192`) are an upper bound. The Qwen-vocabulary model at
micro-batch 4 (467 MB of fp32 logits a micro-batch) takes `response_logprobs`' selective output
layer; at micro-batch 2 (233 MB) the model computes the full logits: both log-prob paths are
measured.

What is measured, and against what: each row runs in a fresh subprocess that imports torch,
transformers and rlrun, runs a warm-up learner step on a 1-layer, 64-wide model (so the
libraries' lazily loaded code, thread pools and allocator arenas exist before the baseline),
frees it and trims the heap (`malloc_trim`), and reads its resident set size (`/proc/self/statm`):
the baseline. It then does what a learner rank does (`actors/learner.py`): `build_policy` (loads
the model from a directory this script saved), `torch.optim.AdamW` on its parameters, and one
`train_on_shard`. Measured = the peak resident set size of the process
(`getrusage(RUSAGE_SELF).ru_maxrss`) minus the baseline: weights, gradients, AdamW's moments
(created at the first update), autograd's saved activations, logits and every temporary, at the
step's worst moment. That is what the planner's learner items add up to
(`estimate(cfg, config, None).learner.total`: a CPU run, no CUDA overhead); the interpreter and
libraries are in the baseline on both sides. The child refuses to report when the learner did
not raise the peak set by the warm-up.

glibc's malloc keeps freed blocks under its mmap threshold (adaptive, up to 32 MiB: most
activations of these models) in its arenas, where the resident size keeps counting them, so a
block freed in one phase inflates the peak of the next by whatever does not fit it. The measured
column therefore runs with `MALLOC_MMAP_THRESHOLD_=131072`: every block of 128 KiB or more is
mapped on its own and unmapped when freed, so the resident peak is the peak of live memory,
which is what the planner predicts (and what a GPU's caching allocator must find, less its
slack: the planner's fixed 2 GiB). The last column runs the same step under glibc's defaults:
what `top` shows for a CPU learner, for comparison.

`--smoke` runs one row (both of its children) on models and samples of a few thousand
parameters and tokens, and writes no table.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from docs_section import SMOKE_HELP, smoke_done, write_section
from measure import machine, peak_rss, rss

from rlrun import batching
from rlrun.config import load_config
from rlrun.plan import estimate

HEADING = "## Memory planner vs measured learner peak (CPU)"
# glibc serves blocks of at least this many bytes with their own mmap and unmaps them on free.
MMAP_THRESHOLD = 128 * 1024
PROMPT, RESPONSE, PROMPTS, GROUP = 64, 128, 2, 8
MODELS = {
    "byte vocab": dict(vocab_size=259, hidden_size=512, num_hidden_layers=6,
                       num_attention_heads=8, num_key_value_heads=8, head_dim=64,
                       intermediate_size=1536),
    "Qwen vocab": dict(vocab_size=151_936, hidden_size=320, num_hidden_layers=2,
                       num_attention_heads=5, num_key_value_heads=5, head_dim=64,
                       intermediate_size=1280),
}
WARMUP = dict(vocab_size=259, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=4, head_dim=16, intermediate_size=128)
# (model, learner.micro_batch_size, learner.gradient_checkpointing)
ROWS = [
    ("byte vocab", 4, False), ("byte vocab", 4, True),
    ("Qwen vocab", 4, False), ("Qwen vocab", 4, True), ("Qwen vocab", 2, False),
]




def use_smoke_sizes() -> None:
    """--smoke: tiny models and samples and one row, in the parent and in each child alike."""
    global PROMPT, RESPONSE, PROMPTS, GROUP, MODELS, ROWS
    PROMPT, RESPONSE, PROMPTS, GROUP = 8, 16, 2, 4
    body = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, head_dim=16, intermediate_size=64)
    MODELS = {"byte vocab": dict(body, vocab_size=259), "Qwen vocab": dict(body, vocab_size=4096)}
    ROWS = [("byte vocab", 2, True)]


def overrides(micro_batch: int, checkpointing: bool) -> list[str]:
    return [
        f"algo.prompts_per_step={PROMPTS}", f"algo.group_size={GROUP}", "algo.mini_batches=2",
        "algo.epochs=1", f"rollout.sampling.max_new_tokens={RESPONSE}",
        f"learner.micro_batch_size={micro_batch}",
        f"learner.gradient_checkpointing={'true' if checkpointing else 'false'}",
    ]


def model_config(name: str) -> dict:
    from transformers import Qwen3Config

    fields = MODELS[name] if name in MODELS else WARMUP
    return Qwen3Config(**fields, tie_word_embeddings=True, max_position_embeddings=4096,
                       pad_token_id=0, eos_token_id=1, bos_token_id=None).to_dict()


def save_model(name: str, folder: Path) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    target = folder / name.replace(" ", "-")
    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config.from_dict(model_config(name))).save_pretrained(target)
    return target


def make_shard(vocab: int, cfg) -> batching.Shard:
    gen = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(cfg.algo.prompts_per_step):
        prompt = torch.randint(3, vocab, (PROMPT,), generator=gen).tolist()
        for i in range(cfg.algo.group_size):
            response = torch.randint(3, vocab, (RESPONSE,), generator=gen).tolist()
            samples.append(batching.TrainSample(prompt, response, [-1.0] * RESPONSE,
                                                1.0 if i % 2 else -1.0))
    return batching.make_shards(
        samples, step=0, world_size=1, epochs=cfg.algo.epochs,
        mini_batches=cfg.algo.mini_batches, max_len=RESPONSE, seed=0,
    )[0]


def learner_step(cfg, path: Path, vocab: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """What a learner rank does (`actors/learner.py`): build the policy and AdamW, train."""
    from rlrun.policy_model import build_policy
    from rlrun.policy_update import train_on_shard, warmup_schedule

    policy = build_policy(cfg, str(path), torch.device("cpu"), 1)
    optimizer = torch.optim.AdamW(policy.trainable(), lr=cfg.learner.lr,
                                  weight_decay=cfg.learner.weight_decay)
    scheduler = warmup_schedule(optimizer, cfg.learner.warmup_steps)
    train_on_shard(policy.train_module, optimizer, scheduler, make_shard(vocab, cfg), cfg,
                   pad_id=0, ref_model=policy.ref, compute_dtype=policy.compute_dtype)
    return policy.model, optimizer


def child(path: Path, warmup: Path, micro_batch: int, checkpointing: bool, smoke: bool = False
          ) -> dict:
    cfg = load_config(None, overrides(micro_batch, checkpointing))
    config = json.loads((path / "config.json").read_text())
    warm = learner_step(load_config(None, overrides(2, checkpointing)), warmup, 259)
    del warm
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    baseline, peak_before = rss(), peak_rss()
    start = time.perf_counter()
    model, optimizer = learner_step(cfg, path, config["vocab_size"])
    seconds = time.perf_counter() - start
    peak = peak_rss()
    if peak <= peak_before and not smoke:  # a smoke run's tiny step may stay under it
        raise RuntimeError("the learner stayed under the peak of the warm-up: no reading")
    after = rss()
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "peak": max(peak - baseline, 1), "after": after - baseline,
            "seconds": seconds}


def run_child(path: Path, warmup: Path, micro_batch: int, checkpointing: bool, threads: int,
              default_malloc: bool = False, smoke: bool = False) -> dict:
    command = [sys.executable, __file__, "--threads", str(threads), "--child", str(path),
               str(warmup), str(micro_batch), "1" if checkpointing else "0"]
    if smoke:
        command.append("--smoke")
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if not default_malloc:
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def path_and_phase(plan) -> tuple[str, str]:
    """The log-prob path and the peak phase the planner reports."""
    path = ("full logits" if plan.item("logits").detail.startswith("full-logits") else
            "selective output layer")
    note = next(n for n in plan.notes if n.startswith("peak in the "))
    return path, note[len("peak in the "):note.index(" phase")]


def gib(n: float) -> str:
    return f"{n / 2**30:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.smoke:
        use_smoke_sizes()
    if args.child:
        path, warmup, micro_batch, ckpt = args.child
        result = child(Path(path), Path(warmup), int(micro_batch), ckpt == "1", args.smoke)
        print(json.dumps(result), flush=True)
        return 0

    rows, worst = [], 0.0
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        paths = {name: save_model(name, Path(tmp)) for name in MODELS}
        warmup = save_model("warm-up", Path(tmp))
        for name, micro_batch, ckpt in ROWS:
            cfg = load_config(None, overrides(micro_batch, ckpt))
            config = json.loads((paths[name] / "config.json").read_text())
            plan = estimate(cfg, config, None, prompt_tokens=PROMPT).learner
            res = run_child(paths[name], warmup, micro_batch, ckpt, args.threads,
                            smoke=args.smoke)
            glibc = run_child(paths[name], warmup, micro_batch, ckpt, args.threads, True,
                              args.smoke)
            ratio = plan.total / res["peak"]
            worst = max(worst, abs(ratio - 1))
            path, phase = path_and_phase(plan)
            rows.append(
                f"| {name} | {res['params'] / 1e6:.1f}M | {config['vocab_size']:,} | "
                f"{micro_batch} | {'on' if ckpt else 'off'} | {path} | {phase} | "
                f"{gib(plan.total)} | {gib(res['peak'])} | **{ratio:.2f}** | "
                f"{gib(glibc['peak'])} ({plan.total / glibc['peak']:.2f}) | "
                f"{res['seconds']:.0f} s |"
            )
            if not args.smoke:
                print(rows[-1], flush=True)
    table = "\n".join([
        "| model | params | vocab | micro-batch | checkpointing | log-prob path | planned peak "
        "phase | planned, GiB | measured peak, GiB | planned / measured | glibc default malloc: "
        "resident peak, GiB (planned / it) | learner setup + step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
    if not args.smoke:
        print(table)
        print(f"worst |planned / measured - 1|: {worst:.1%}")
    command = f"python benchmarks/plan_accuracy.py --threads {args.threads}"
    section = (
        f"{HEADING}\n\n`{command}` on {machine()}, {args.threads} torch thread(s): the "
        f"learner part of `rlrun plan` (`rlrun.plan.estimate(cfg, config, None)`, "
        f"`--prompt-tokens {PROMPT}`; no GPU type, so no CUDA allowance) next to the measured "
        f"peak of what a learner rank does, `build_policy` + AdamW + one `train_on_shard`, for "
        f"two Qwen3 models built from config, float32, tied embeddings: byte vocab (the "
        f"259-token vocabulary of `model.tiny`; hidden 512, 6 layers, MLP 1536) and Qwen vocab "
        f"(151,936 tokens; hidden 320, 2 layers, MLP 1280: nearly every parameter in the "
        f"embedding). Config: the defaults with `{' '.join(overrides(4, False)[:5])}` and each "
        f"row's `learner.micro_batch_size` and `learner.gradient_checkpointing`; a shard of "
        f"{PROMPTS * GROUP} samples ({PROMPTS} prompts x {GROUP}) of {PROMPT} random prompt + "
        f"{RESPONSE} random response tokens (seed 0): a no-grad pi_old pass, then two AdamW "
        f"updates of 8 samples, shared-prompt rows on (the default). Measured: the peak resident "
        f"size (`ru_maxrss`) minus the resident size after imports and a warm-up step on a "
        f"throwaway model, each row in a fresh process, with `MALLOC_MMAP_THRESHOLD_="
        f"{MMAP_THRESHOLD}` so that freed blocks leave the process and the peak is that of live "
        f"memory (weights, gradients, AdamW state, activations, logits, temporaries), as the "
        f"planner counts it. The last column is the same step under glibc's default malloc, "
        f"whose arenas keep freed blocks resident: what `top` shows, which the planner does not "
        f"model. Log-prob path: the `response_logprobs` path of the planner's largest "
        f"micro-batch (full logits up to 256 MB, else the selective output layer); planned "
        f"peak phase: the phase whose items the planner adds (see `rlrun/plan.py`). Worst "
        f"|planned / measured - 1|: {worst:.1%}.\n\n{table}\n"
    )
    if args.smoke:
        return smoke_done("plan_accuracy")
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
