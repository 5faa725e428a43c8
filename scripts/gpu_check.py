"""The GPU checks: what only a machine with NVIDIA GPUs (and vLLM) can prove.

    bash scripts/gpu_check.sh            # every check this machine can run, one line each

Each check prints `PASS name: what it measured`, `FAIL name: why`, or `SKIP name: why` (no GPU,
too few GPUs, vLLM missing), and the script exits non-zero if any check failed. The checks:

- engine-contract: the vLLM half of tests/engines/test_contract.py (seeds, n samples, log-probs
  against a full forward pass, load_weights);
- nccl-sync (2 GPUs): a learner on one GPU and a vLLM engine on the other,
  `weights.backend=collective`: a round trip through vLLM's native NCCL weight transfer changes
  the engine's outputs, and the engine's log-probs then match the learner's within the contract
  tolerance; the sync's time and GB/s;
- partial-vllm (2 GPUs): partial rollouts on vLLM with a learner on the other GPU, against
  whole rollouts, on long-tailed generations (`algo.max_staleness=2`, 64 tokens per round):
  paused samples are resubmitted and continue under the weights of later syncs; the step and
  generation times of both sides (the measurement benchmarks/partial_rollouts.py cannot make
  on a CPU) and the share of tokens from older versions;
- tp2 (2 GPUs for the engine, 3 with a learner GPU): vLLM at tensor_parallel_size=2 on two
  {GPU: 1} bundles starts, generates, and takes a weight update;
- colocated-ipc (1 GPU): learner and vLLM share the GPU, vLLM sleeps while the learner
  trains and gets the weights over CUDA IPC, two GRPO steps;
- fsdp2-steps (1 GPU, and 2 when there are): two GRPO steps of a model built from config
  under FSDP2 + NCCL; peak GPU memory against `rlrun plan`'s estimate;
- resume: a run resumed from its checkpoint continues with the optimizer state on the GPU and
  the same next-step loss.

The model is a small Qwen3 built from config (`model.path=tiny`, widened so vLLM's attention
kernels take its head size); nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model.tiny.hidden_size=256", "model.tiny.num_heads=4", "model.tiny.num_layers=2",
        "model.tiny.intermediate_size=512"]
SHORT = ["sft.enabled=false", "reward.audit_before_training=false", "trainer.eval_every=0",
         "data.toy_size=256", "data.val_size=8", "trainer.eval_samples=2", "trainer.eval_k=[1]",
         "algo.prompts_per_step=4", "rollout.sampling.max_new_tokens=32",
         "metrics.tensorboard=false", "metrics.report=false", "model.dtype=bfloat16",
         "rollout.gpu_memory_utilization=0.3", "rollout.max_model_len=512"]


def gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def have_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def train(out: Path, *overrides: str, steps: int = 2) -> dict:
    """`rlrun train conf/demo.yaml` with `overrides` in a fresh process; its metrics rows."""
    cmd = [sys.executable, "-m", "rlrun", "train", str(ROOT / "conf" / "demo.yaml"), *SHORT,
           *TINY, f"trainer.steps={steps}", f"run.output_dir={out}", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError(" | ".join(tail))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"rows": [r for r in rows if "reward/mean" in r], "stdout": proc.stdout}


def check_engine_contract() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
         str(ROOT / "tests" / "engines" / "test_contract.py")],
        capture_output=True, text=True, timeout=1500,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    if proc.returncode:
        raise RuntimeError(last)
    return last


def check_nccl_sync() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        run = train(Path(tmp), "rollout.engine=vllm", "rollout.num_gpus=1",
                    "learner.num_gpus=1", "weights.backend=collective")
    rows = run["rows"]
    # The importance ratio of the first update is pi_learner / pi_vllm on the same weights:
    # its spread is how far vLLM's log-probs are from the learner's.
    ratio = max(abs(r["loss/ratio_max"] - 1) for r in rows[:1])
    if ratio > 0.05:
        raise RuntimeError(f"learner/vLLM log-prob ratio reached {1 + ratio:.3f} on step 0")
    sync = rows[-1]
    return (f"{len(rows)} steps; sync {sync['perf/time_sync']:.3f}s, "
            f"{sync['perf/sync_gb_per_s']:.2f} GB/s; step-0 max ratio {1 + ratio:.4f}")


def check_partial_vllm() -> str:
    long_tail = ["rollout.engine=vllm", "rollout.num_gpus=1", "learner.num_gpus=1",
                 "weights.backend=collective", "algo.max_staleness=2",
                 "rollout.sampling.max_new_tokens=1024", "rollout.sampling.stop=[q, x]"]
    runs = {}
    for name, extra in (("whole", []), ("partial", ["rollout.partial=true",
                                                    "rollout.partial_tokens=64"])):
        with tempfile.TemporaryDirectory() as tmp:
            runs[name] = train(Path(tmp), *long_tail, *extra, steps=6)["rows"][1:]

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    older = statistics.mean(r["async/token_lag_1"] + r["async/token_lag_2"]
                            for r in runs["partial"])
    return (f"long-tailed generations (1024 tokens at most), median step after the first: "
            f"whole {median('whole', 'perf/time_step'):.2f}s (generation "
            f"{median('whole', 'perf/time_generate'):.2f}s), partial "
            f"{median('partial', 'perf/time_step'):.2f}s (generation "
            f"{median('partial', 'perf/time_generate'):.2f}s, "
            f"{median('partial', 'async/partial_rounds'):.0f} rounds); {older:.0%} of partial "
            "tokens from an older version")


def check_tp2() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        run = train(Path(tmp), "rollout.engine=vllm", "rollout.tensor_parallel_size=2",
                    "rollout.num_gpus=2", "learner.num_gpus=1" if gpus() >= 3 else
                    "learner.num_gpus=0", "weights.backend=collective" if gpus() >= 3 else
                    "weights.backend=object_store")
    return f"{len(run['rows'])} steps with vLLM at TP=2"


def check_colocated_ipc() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        run = train(Path(tmp), "rollout.engine=vllm", "placement.mode=colocated",
                    "rollout.num_gpus=0.5", "learner.num_gpus=0.5", "weights.backend=ipc")
    sync = run["rows"][-1]
    return (f"{len(run['rows'])} steps colocated; IPC sync {sync['perf/time_sync']:.3f}s, "
            f"{sync['perf/sync_gb_per_s']:.2f} GB/s")


def planned_learner_gib(*overrides: str) -> float:
    """`rlrun plan`'s per-rank learner estimate for the same run, in GiB."""
    from rlrun import plan
    from rlrun.config import load_config

    cfg = load_config(ROOT / "conf" / "demo.yaml", SHORT + TINY + list(overrides))
    model_config, _ = plan.load_model_config(cfg.model)
    # The learner's own bytes, without the fixed CUDA-context allowance torch does not count.
    found = plan.estimate(cfg, model_config, None).learner
    return found.total / 2**30


def check_fsdp2_steps() -> str:
    out = []
    for world in [1, 2] if gpus() >= 2 else [1]:
        overrides = ("learner.strategy=fsdp2", f"learner.num_workers={world}",
                     "learner.num_gpus=1")
        with tempfile.TemporaryDirectory() as tmp:
            run = train(Path(tmp), *overrides)
        rows = run["rows"]
        peak = max(r["perf/learner_peak_gib"] for r in rows)
        out.append(f"{world} rank(s): loss {rows[-1]['loss/total']:.4f}, peak {peak:.3f} GiB "
                   f"(rlrun plan: {planned_learner_gib(*overrides):.3f} GiB)")
    return "; ".join(out)


def check_resume() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        gpu = ["learner.num_gpus=1", "trainer.checkpoint_every=1"]
        first = train(out, *gpu, steps=2)
        resumed = train(out, *gpu, "run.resume=true", steps=3)
    step2 = [r for r in resumed["rows"] if r["step"] == 2]
    if not step2:
        raise RuntimeError("the resumed run logged no step 2")
    return (f"resumed at step 2 after {len(first['rows'])} steps; "
            f"loss {step2[0]['loss/total']:.4f}, optimizer on the GPU")


CHECKS: list[tuple[str, int, bool, Callable[[], str]]] = [
    # name, GPUs needed, needs vLLM, check
    ("engine-contract", 1, True, check_engine_contract),
    ("nccl-sync", 2, True, check_nccl_sync),
    ("partial-vllm", 2, True, check_partial_vllm),
    ("tp2", 2, True, check_tp2),
    ("colocated-ipc", 1, True, check_colocated_ipc),
    ("fsdp2-steps", 1, False, check_fsdp2_steps),
    ("resume", 1, False, check_resume),
]


def main() -> int:
    have, failed = gpus(), 0
    vllm = have_vllm()
    for name, need, needs_vllm, check in CHECKS:
        if have < need:
            print(f"SKIP {name}: needs {need} NVIDIA GPU(s), this machine has {have}", flush=True)
            continue
        if needs_vllm and not vllm:
            print(f"SKIP {name}: vLLM is not installed (pip install -c "
                  "infra/docker/constraints-gpu.txt '.[vllm]')", flush=True)
            continue
        start = time.perf_counter()
        try:
            detail = check()
            print(f"PASS {name}: {detail} ({time.perf_counter() - start:.0f}s)", flush=True)
        except Exception as err:  # noqa: BLE001 - one line per check, the rest still run
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
