"""Print `rlrun plan`'s sizing tables as markdown: per-GPU learner memory for full fine-tuning
(DDP vs FSDP2 over 8 ranks, with and without CPU offload and activation checkpointing) and LoRA,
and the smallest vLLM tensor-parallel size that fits with the KV-cache sequences it leaves.

    .venv/bin/python scripts/sizing_table.py                     # the table in docs/gpu.md
    .venv/bin/python scripts/sizing_table.py --new-tokens 2048 --prompt-tokens 1024

Arithmetic only (`rlrun.plan.estimate` on the model configs shipped in rlrun/model_configs/):
no GPU, no network. An estimate, not a measurement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlrun import plan  # noqa: E402
from rlrun.config import load_config  # noqa: E402

MODELS = ["Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-14B-Instruct"]
GPUS = ["a10g", "a100-40", "a100-80", "h100"]
WORLD = 8
TPS = (1, 2, 4, 8)

# Learner layouts: a label and the overrides that make it.
LEARNERS: list[tuple[str, list[str]]] = [
    (f"DDP x{WORLD}", ["learner.strategy=ddp"]),
    (f"DDP x{WORLD} + ckpt", ["learner.strategy=ddp", "learner.gradient_checkpointing=true"]),
    (f"FSDP2 x{WORLD}", ["learner.strategy=fsdp2"]),
    (f"FSDP2 x{WORLD} + ckpt", ["learner.strategy=fsdp2", "learner.gradient_checkpointing=true"]),
    (f"FSDP2 x{WORLD} + offload + ckpt",
     ["learner.strategy=fsdp2", "learner.cpu_offload=true", "learner.gradient_checkpointing=true"]),
    (f"LoRA r=16, DDP x{WORLD} + ckpt",
     ["learner.strategy=ddp", "learner.lora.rank=16", "learner.gradient_checkpointing=true"]),
]


def model_config(model: str) -> dict:
    shipped = plan.shipped_config(model)
    if shipped is not None:
        return shipped
    return plan.load_model_config(load_config(None, [f"model.path={model}"]).model)[0]


def base(model: str, args: argparse.Namespace) -> list[str]:
    return [
        f"model.path={model}", "model.dtype=bfloat16", "rollout.engine=vllm",
        f"rollout.sampling.max_new_tokens={args.new_tokens}",
        f"rollout.max_model_len={args.prompt_tokens + args.new_tokens}",
        "algo.group_size=8", "algo.prompts_per_step=64",
        f"learner.num_workers={WORLD}", "learner.num_gpus=1",
        f"learner.micro_batch_size={args.micro_batch}",
    ]


def short(name: str) -> str:
    return name.split("/")[-1].replace("-Instruct", "")


def learner_table(args: argparse.Namespace) -> list[str]:
    lines = ["| model | learner | " + " | ".join(GPUS) + " | host per rank |",
             "| --- | --- | " + " | ".join("---" for _ in GPUS) + " | --- |"]
    for model in args.models:
        config = model_config(model)
        for label, overrides in LEARNERS:
            cfg = load_config(None, base(model, args) + overrides + ["rollout.num_gpus=1"])
            cells, host = [], 0.0
            for gpu in GPUS:
                learner = plan.estimate(cfg, config, gpu, prompt_tokens=args.prompt_tokens).learner
                verdict = "FITS" if learner.fits else "NO"
                cells.append(f"{learner.total / plan.GIB:.1f} {verdict}")
                host = learner.host
            hosted = f"{host / plan.GIB:.1f} GiB" if host else "-"
            lines.append(f"| {short(model)} | {label} | " + " | ".join(cells) + f" | {hosted} |")
    return lines


def rollout_cell(model: str, config: dict, gpu: str, args: argparse.Namespace) -> str:
    """The smallest TP that fits and the next one up, each with its KV sequences."""
    found = []
    for tp in TPS:
        cfg = load_config(None, base(model, args) + [
            f"rollout.tensor_parallel_size={tp}", f"rollout.num_gpus={tp}",
            f"rollout.gpu_memory_utilization={args.util}"])
        rollout = plan.estimate(cfg, config, gpu, prompt_tokens=args.prompt_tokens).rollout
        if rollout.fits:
            found.append(f"TP={tp}: {rollout.sequences:,}")
        if len(found) == 2:
            break
    return "; ".join(found) or f"does not fit at TP={TPS[-1]}"


def rollout_table(args: argparse.Namespace) -> list[str]:
    lines = ["| model | " + " | ".join(GPUS) + " |",
             "| --- | " + " | ".join("---" for _ in GPUS) + " |"]
    for model in args.models:
        config = model_config(model)
        cells = [rollout_cell(model, config, gpu, args) for gpu in GPUS]
        lines.append(f"| {short(model)} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=2,
                        help="sequences per learner micro-batch (default 2)")
    parser.add_argument("--util", type=float, default=0.9,
                        help="vLLM gpu_memory_utilization (default 0.9)")
    parser.add_argument("--models", nargs="+", default=MODELS)
    args = parser.parse_args(argv)
    seq = args.prompt_tokens + args.new_tokens
    print(f"Learner, GiB per GPU ({WORLD} ranks; bf16 compute, fp32 master weights and AdamW; "
          f"micro-batch {args.micro_batch} x {seq} tokens; ckpt = activation checkpointing; "
          "FITS/NO against the usable memory):\n")
    print("\n".join(learner_table(args)))
    print(f"\nvLLM, the smallest tensor-parallel size that starts and the next one up (bf16, "
          f"gpu_memory_utilization {args.util:g}, max_model_len {seq}), each with the full "
          f"{seq}-token sequences its KV cache holds per engine:\n")
    print("\n".join(rollout_table(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
