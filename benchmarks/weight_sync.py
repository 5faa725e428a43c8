"""Weight sync per backend: the object store against the collective broadcast, on this CPU.

    python benchmarks/weight_sync.py [--syncs 5] [--engines 2] [--smoke]

For a tiny, a ~50M and a ~500M-parameter model (Qwen3 shapes built from config, fp32 as a CPU
run trains them), one learner rank and `--engines` HF rollout engines on a local Ray, the same
`sync(version)` the driver calls after every step (`actors/weight_sync.py`) runs `--syncs`
times per backend, back to back in one run. Seconds are the median sync, from the learner
holding new weights to the last engine serving them; GB/s divides the state dict's bytes by
that time (each engine receives all of them). Prints a table and writes it into
docs/benchmarks.md under its own heading (`--smoke`: the tiny model only, one engine, one sync
per backend after the warm-up, no table). No speed is asked of a CPU: the goal on GPUs is a
7B (15 GB in bf16) in under 1 s within a node, which `bash scripts/gpu_check.sh` measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import ray
from docs_section import SMOKE_HELP, smoke_done, write_section
from measure import cpu_name
from ray.exceptions import RayError
from ray.util.placement_group import placement_group, remove_placement_group

from actors.learner import LearnerFailed, LearnerGroup
from actors.pool import PoolError, first_line
from actors.rollout import RolloutGroup
from actors.weight_sync import SyncFailed, make_weight_sync
from rlrun.config import load_config
from rlrun.models import resolve_model_path

HEADING = "## Weight sync: object store vs collective broadcast"
# name: (hidden, layers, heads, intermediate) of the Qwen3 built from config (byte vocabulary)
MODELS = {
    "tiny": (64, 2, 4, 256),
    "~50M": (768, 7, 12, 2048),
    "~500M": (1536, 18, 12, 4096),
}
BACKENDS = ("object_store", "collective")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", type=int, default=5, help="syncs timed per backend and model")
    parser.add_argument("--engines", type=int, default=2, help="rollout engines")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        args.syncs, args.engines = 1, 1
    return args


def measure(model: str, backend: str, engines: int, syncs: int, cache: str) -> dict:
    hidden, layers, heads, inter = MODELS[model]
    cfg = load_config(None, [
        f"model.tiny.hidden_size={hidden}", f"model.tiny.num_layers={layers}",
        f"model.tiny.num_heads={heads}", f"model.tiny.intermediate_size={inter}",
        f"weights.backend={backend}", f"rollout.num_actors={engines}", "rollout.num_cpus=0.25",
        "learner.num_cpus=0.5", "weights.bucket_mb=256", f"run.output_dir={cache}/out",
    ])
    path = resolve_model_path(cfg.model, cache)
    pgs = [placement_group([{"CPU": 0.5}]), placement_group([{"CPU": 0.25}] * engines)]
    ray.get([pg.ready() for pg in pgs], timeout=120)
    learner = LearnerGroup(cfg, path, pgs[0], f"bench-{backend}")
    rollouts = RolloutGroup(cfg, path, pgs[1], f"bench-{backend}")
    try:
        learner.start()
        sync = make_weight_sync(cfg, learner, rollouts)
        sync.sync(1)  # builds the group (collective) and warms both sides up
        seconds, nbytes = [], 0
        for version in range(2, syncs + 2):
            start = time.perf_counter()
            metrics = sync.sync(version)
            seconds.append(time.perf_counter() - start)
            nbytes = int(metrics["perf/sync_bytes"])
        if rollouts.versions() != [syncs + 1] * engines:
            raise RuntimeError(f"engines ended on {rollouts.versions()}")
    finally:
        learner.shutdown()
        rollouts.shutdown()
        for pg in pgs:
            remove_placement_group(pg)
    params = nbytes // 4
    median = statistics.median(seconds)
    return {"model": model, "backend": backend, "params": params, "bytes": nbytes,
            "seconds": median, "gb_per_s": nbytes / median / 1e9}


def total_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        # "local": a Ray of this run's own, never a cluster /tmp/ray names
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            for model in list(MODELS)[:1] if args.smoke else MODELS:
                for backend in BACKENDS:
                    try:
                        row = measure(model, backend, args.engines, args.syncs, cache)
                    except (LearnerFailed, SyncFailed, PoolError, RayError) as err:
                        if args.smoke:  # nothing is too big for this machine in a smoke run
                            raise
                        # A row that does not fit this machine is a result too.
                        text = first_line(err)
                        failed = ("out of memory" if "OutOfMemoryError" in text
                                  else text)
                        row = {"model": model, "backend": backend, "failed": failed}
                        print(f"weight_sync: {model} {backend}: {row['failed']}", flush=True)
                    else:
                        if not args.smoke:
                            print(f"weight_sync: {model} {backend}: {row['seconds']:.3f} s, "
                                  f"{row['gb_per_s']:.2f} GB/s", flush=True)
                    rows.append(row)
        finally:
            ray.shutdown()
    table = [
        "| model | parameters | fp32 bytes | backend | seconds per sync (median) | GB/s | "
        "vs object store |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        base = next(r for r in rows if r["model"] == row["model"]
                    and r["backend"] == "object_store")
        if "failed" in row:
            table.append(f"| {row['model']} | | | `{row['backend']}` | {row['failed']} | | |")
            continue
        ratio = "" if "failed" in base else f"{base['seconds'] / row['seconds']:.2f}x"
        table.append(
            f"| {row['model']} | {row['params'] / 1e6:,.1f}M | {row['bytes'] / 1e6:,.1f} MB | "
            f"`{row['backend']}` | {row['seconds']:.3f} | {row['gb_per_s']:.2f} | {ratio} |"
        )
    if args.smoke:
        return smoke_done("weight_sync")
    cpu = cpu_name()
    command = "python benchmarks/weight_sync.py " + " ".join(argv or sys.argv[1:])
    load = os.getloadavg()[0]
    section = (
        f"{HEADING}\n\n`{command.strip()}` on {cpu}, {os.cpu_count()} cores (1-minute load "
        f"average {load:.1f} at the end), local Ray: one learner rank and {args.engines} HF "
        f"rollout engines, fp32 weights, {args.syncs} timed syncs per row after one warm-up. A "
        "sync is what the driver runs after every step, from the learner holding new weights to "
        "the last engine serving them (`perf/time_sync`); GB/s divides the state dict's bytes "
        "by that time, each engine receiving all of them. `object_store`: learner rank 0 puts, "
        "every engine gets and loads. `collective`: one packed gloo broadcast from learner "
        "rank 0 to every engine in 256 MB buckets, each checksummed, staged and loaded after "
        "the checks. On GPUs the collective path is NCCL into vLLM (`bash "
        "scripts/gpu_check.sh` measures it). A row that could not run on this machine "
        f"({total_gib():.0f} GiB of memory) says why.\n\n" + "\n".join(table) + "\n"
    )
    print("\n".join(table))
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
