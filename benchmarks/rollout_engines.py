"""Rollout throughput of rlrun's two engines on this CPU: the HF engine next to vLLM (CPU build).

    python benchmarks/rollout_engines.py [--threads N] [--repeats 5] [--smoke]

The demo's rollout (conf/demo.yaml): its tiny model, 16 toy:mixed prompts as the demo renders
them, 8 samples each (128 rows, the demo's rollout.batch_size), its sampling (temperature 1,
top-k/top-p off, 96 new tokens, its stop string), one seed. One change: the tiny model gets 2
attention heads instead of 4, because vLLM's CPU attention needs a head size of at least 32;
both engines load the same weights. The HF engine is `rollout.engine=hf`; vLLM is
`rollout.engine=vllm` with `rollout.num_gpus=0`, which on vLLM's CPU platform means eager mode,
no chunked prefill and a `rollout.kv_cache_mb` KV cache (rlrun/engines/vllm.py).

vLLM takes over the process it runs in (it turns `torch.set_num_threads` into a no-op and seeds
global generators), so each engine runs in a child process of its own (this script re-invoked
with `--engine`), both with the same OMP_NUM_THREADS and torch threads. Both children stay up
and take turns, one `generate` call at a time, so load from other users of the machine hits
both alike. Start-up: `make_engine` until it returns, after torch and transformers are imported
(for vLLM it includes importing vllm). Throughput: the median of `--repeats` calls after one
warm-up call; tokens count every generated token (EOS and stop included), each of which comes
back with its log-prob. Ms per decode step, with the whole batch and with a few rows generated
one at a time, separates a step's fixed cost from what each row adds. Prints a table and
writes it into docs/benchmarks.md under its own heading; `--smoke` runs the same code on tiny
sizes and writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from docs_section import write_section
from measure import cpu_name

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Rollout: HF engine vs vLLM on CPU"
ENGINES = ("hf", "vllm")
LABELS = {"hf": "HF engine (`rollout.engine=hf`)",
          "vllm": "vLLM (`rollout.engine=vllm`, `rollout.num_gpus=0`)"}
MARK = "@@rollout_engines@@ "  # prefixes the children's protocol lines
SINGLE_ROWS = 4  # rows generated one at a time, for the per-step cost without batching
SMOKE = {"prompts": 2, "n": 2, "max_new_tokens": 8, "repeats": 1, "kv_cache_mb": 16}


# ----------------------------------------------------------------------------- child process


def child(engine_name: str, threads: int) -> int:
    """One engine in this process: reads a job, builds the engine, then answers each "run"
    (the whole batch in one call) or "single" line (a few rows one at a time) on stdin with
    its timing on stdout; everything else the process prints goes to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # vLLM logs to stdout: keep the protocol channel clean
    import torch

    torch.set_num_threads(threads)  # before vLLM is imported, which makes this a no-op
    import transformers  # noqa: F401  (both engines need it; not counted as start-up)

    from rlrun.config import RolloutConfig
    from rlrun.engines import SamplingParams, make_engine

    job = json.loads(sys.stdin.readline())  # sent once the model is built
    cfg = RolloutConfig(engine=engine_name, num_gpus=0, batch_size=job["batch_size"],
                        kv_cache_mb=job["kv_cache_mb"])
    sampling = SamplingParams(**job["sampling"])
    start = time.perf_counter()
    options = {"seed": job["seed"]} if engine_name == "vllm" else {}
    engine = make_engine(engine_name, job["model"], cfg, job["dtype"], **options)
    startup = time.perf_counter() - start
    send(proto, {"ready": True, "startup_s": startup, "threads": torch.get_num_threads()})
    one = dataclasses.replace(sampling, n=1)
    for line in sys.stdin:
        command = line.strip()
        if command not in ("run", "single"):
            break
        # "run": the whole batch in one call; "single": the first prompts one row at a time
        calls = [(job["prompts"], sampling)] if command == "run" else \
            [([p], one) for p in job["prompts"][:SINGLE_ROWS]]
        cpu, start, samples = os.times(), time.perf_counter(), []
        for prompts, params in calls:
            samples += [s for g in engine.generate(prompts, params) for s in g]
        elapsed, cpu_end = time.perf_counter() - start, os.times()
        logprobs = [lp for s in samples for lp in s.behaviour_logprobs]
        lengths = [len(s.response_ids) for s in samples]
        send(proto, {
            "elapsed_s": elapsed,
            "cpu_s": cpu_end.user + cpu_end.system - cpu.user - cpu.system,
            "samples": len(samples),
            "tokens": sum(lengths),
            # sequential decode steps: the longest response of the batch, or every token of
            # rows generated one at a time
            "steps": max(lengths) if command == "run" else sum(lengths),
            "logprobs": len(logprobs),
            "finite": all(math.isfinite(lp) and lp <= 0 for lp in logprobs),
            "stopped": sum(s.finish_reason == "stop" for s in samples),
            "threads": torch.get_num_threads(),
        })
    return 0


def send(proto: IO[str], message: dict[str, Any]) -> None:
    proto.write(MARK + json.dumps(message) + "\n")


# ----------------------------------------------------------------------------- driver


class Child:
    """An engine's process, its stderr kept in a log shown if it fails."""

    def __init__(self, name: str, threads: int, log_dir: str) -> None:
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                            "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
                            "TOKENIZERS_PARALLELISM": "false"}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--engine", name, "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            env=env, cwd=ROOT,
        )
        self.started = time.perf_counter()

    def start(self, job: dict[str, Any]) -> None:
        """Send the job (the engine starts building), the process having started already."""
        self.ask(json.dumps(job))

    def ready(self) -> dict[str, Any]:
        ready = self.answer()
        return {"startup_s": ready["startup_s"], "threads": ready["threads"],
                "process_s": time.perf_counter() - self.started}

    def ask(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        self.log.flush()
        tail = self.log_path.read_text()[-4000:]
        raise RuntimeError(f"the {self.name} engine's process exited "
                           f"({self.proc.wait()}); its log ends:\n{tail}")

    def run(self, command: str = "run") -> dict[str, Any]:
        self.ask(command)
        out = self.answer()
        if out["logprobs"] != out["tokens"] or not out["finite"]:
            raise RuntimeError(f"{self.name}: {out['tokens']} tokens but {out['logprobs']} "
                               f"log-probs (all finite and <= 0: {out['finite']})")
        return out

    def quit(self) -> None:
        stdin = self.proc.stdin
        if self.proc.poll() is None and stdin is not None and not stdin.closed:
            try:
                self.ask("quit")
                stdin.close()
            except OSError:
                pass

    def close(self) -> None:
        self.quit()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def demo_job(smoke: bool, cache_dir: str) -> tuple[dict[str, Any], str]:
    """What both children run: the demo's model (2 heads), prompts and sampling; and the
    tiny model's description."""
    from rlrun.config import ModelConfig, load_config
    from rlrun.data.prompts import render_prompt
    from rlrun.data.toy import toy_problems
    from rlrun.engines import SamplingParams
    from rlrun.models import resolve_model_path

    demo = load_config(ROOT / "conf" / "demo.yaml")
    tiny = dataclasses.replace(demo.model.tiny, num_heads=2)
    path = resolve_model_path(ModelConfig(tiny=tiny), cache_dir, seed=demo.run.seed)
    kind = demo.data.train.removeprefix("toy:")
    n_prompts = SMOKE["prompts"] if smoke else demo.algo.prompts_per_step
    prompts = [render_prompt(p, demo.data) for p in toy_problems(kind, n_prompts, demo.run.seed)]
    sampling = SamplingParams.from_config(
        demo.rollout.sampling, n=SMOKE["n"] if smoke else demo.algo.group_size,
        seed=demo.run.seed)
    if smoke:
        sampling.max_new_tokens = SMOKE["max_new_tokens"]
    job = {
        "model": path, "dtype": demo.model.dtype, "seed": demo.run.seed, "prompts": prompts,
        "sampling": dataclasses.asdict(sampling),
        "batch_size": demo.rollout.batch_size,
        "kv_cache_mb": SMOKE["kv_cache_mb"] if smoke else demo.rollout.kv_cache_mb,
    }
    described = (f"hidden {tiny.hidden_size}, {tiny.num_layers} layers, {tiny.num_heads} heads "
                 f"of {tiny.hidden_size // tiny.num_heads}, MLP {tiny.intermediate_size}, "
                 f"byte vocabulary, {demo.model.dtype}")
    return job, described


def measure(smoke: bool, threads: int, repeats: int, tmp: str) -> tuple[dict, dict, str]:
    """The job, each engine's start-up and per-call results, and the model's description.

    Full run: the engines start one after the other (start-ups do not share the cores), each
    makes a warm-up call, then they take turns, the order flipping every repeat. Smoke run:
    both processes start while the model is built, and no warm-up call."""
    children: dict[str, Child] = {}
    results: dict[str, dict[str, Any]] = {name: {"runs": [], "single": []} for name in ENGINES}
    try:
        if smoke:
            children = {name: Child(name, threads, tmp) for name in ENGINES}
        job, model = demo_job(smoke, tmp)
        for name in ENGINES:
            if not smoke:
                children[name] = Child(name, threads, tmp)
            children[name].start(job)
            if not smoke:
                results[name] |= children[name].ready()
        for name in ENGINES:
            if smoke:
                results[name] |= children[name].ready()
            print(f"{name}: ready, make_engine took {results[name]['startup_s']:.1f} s",
                  flush=True)
        for name in () if smoke else ENGINES:
            results[name]["warmup"] = children[name].run()
        for r in range(repeats):
            for name in ENGINES if r % 2 == 0 else ENGINES[::-1]:
                out = children[name].run()
                results[name]["runs"].append(out)
                results[name]["single"].append(children[name].run("single"))
                print(f"{name}: repeat {r + 1}: {out['samples'] / out['elapsed_s']:.1f} "
                      f"samples/s, {out['tokens'] / out['elapsed_s']:,.0f} tokens/s, "
                      f"{ms_per_step(out):.1f} ms per decode step "
                      f"({ms_per_step(results[name]['single'][-1]):.1f} one row at a time)",
                      flush=True)
    finally:
        for c in children.values():
            c.quit()
        for c in children.values():
            c.close()
    return job, results, model


def ms_per_step(out: dict[str, Any]) -> float:
    return 1000 * out["elapsed_s"] / out["steps"]


def summarise(results: dict[str, Any]) -> None:
    """Medians over the repeats, into each engine's results."""
    for r in results.values():
        runs, single = r["runs"], r["single"]
        r |= {
            "samples_per_s": statistics.median(x["samples"] / x["elapsed_s"] for x in runs),
            "tokens_per_s": statistics.median(x["tokens"] / x["elapsed_s"] for x in runs),
            "cpu_ms_per_token": statistics.median(1000 * x["cpu_s"] / x["tokens"] for x in runs),
            "step_ms": statistics.median(ms_per_step(x) for x in runs),
            "single_step_ms": statistics.median(ms_per_step(x) for x in single),
            "mean_len": statistics.mean(x["tokens"] / x["samples"] for x in runs),
            "stopped": statistics.mean(x["stopped"] / x["samples"] for x in runs),
        }


def table(results: dict[str, Any], rows: int) -> str:
    lines = [
        "| engine | start-up, s | samples/s | generated tokens/s | CPU ms per token | "
        f"ms per decode step, {rows} rows | ms per decode step, 1 row | mean response tokens "
        "| torch threads |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ENGINES:
        r = results[name]
        lines.append(
            f"| {LABELS[name]} | {r['startup_s']:.1f} | {r['samples_per_s']:.1f} | "
            f"{r['tokens_per_s']:,.0f} | {r['cpu_ms_per_token']:.2f} | {r['step_ms']:.1f} | "
            f"{r['single_step_ms']:.1f} | {r['mean_len']:.1f} | {r['runs'][-1]['threads']} |")
    hf, vl = results["hf"], results["vllm"]
    lines.append(
        f"| vLLM / HF | {vl['startup_s'] / hf['startup_s']:.1f}x | "
        f"{vl['samples_per_s'] / hf['samples_per_s']:.2f}x | "
        f"{vl['tokens_per_s'] / hf['tokens_per_s']:.2f}x | "
        f"{vl['cpu_ms_per_token'] / hf['cpu_ms_per_token']:.2f}x | "
        f"{vl['step_ms'] / hf['step_ms']:.2f}x | "
        f"{vl['single_step_ms'] / hf['single_step_ms']:.2f}x | | |")
    return "\n".join(lines)


def versions() -> str:
    import torch
    import transformers
    import vllm

    return (f"torch {torch.__version__}, transformers {transformers.__version__}, "
            f"vllm {vllm.__version__}")


def load() -> float:
    return os.getloadavg()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="OMP_NUM_THREADS and torch threads of each engine's process "
                             "(default: every core, %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed generate calls per engine, after one warm-up")
    parser.add_argument("--smoke", action="store_true",
                        help="check that the benchmark runs: tiny sizes, one repeat, no "
                             "figures, docs/benchmarks.md left as it is")
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        return child(args.engine, args.threads)
    repeats = SMOKE["repeats"] if args.smoke else args.repeats

    load_before = load()
    with tempfile.TemporaryDirectory(prefix="rollout_engines-") as tmp:
        job, results, model = measure(args.smoke, args.threads, repeats, tmp)
    load_after = load()
    if args.smoke:
        print("rollout_engines: smoke run done (tiny sizes, so no figures; "
              "docs/benchmarks.md unchanged)")
        return 0

    summarise(results)
    text = table(results, len(job["prompts"]) * job["sampling"]["n"])
    print(text)
    s = job["sampling"]
    n_prompts, n = len(job["prompts"]), s["n"]
    command = "python benchmarks/rollout_engines.py" + "".join(
        f" --{k} {v}" for k, v in (("threads", args.threads), ("repeats", repeats))
        if v != parser.get_default(k))
    section = (
        f"{HEADING}\n\n"
        f"`{command}` on {cpu_name()}, {os.cpu_count()} cores, {versions()} "
        f"(1-minute load average {load_before:.1f} at the start, {load_after:.1f} at the end; "
        f"the machine is shared). The demo's rollout (conf/demo.yaml): {n_prompts} toy:mixed "
        f"prompts as the demo renders them x {n} samples = {n_prompts * n} rows in one "
        f"`generate` call (rollout.batch_size {job['batch_size']}), temperature "
        f"{s['temperature']:g}, top-k/top-p off, at most {s['max_new_tokens']} new tokens, the "
        f"demo's stop string (a newline and a closing code fence), seed {s['seed']}. The model "
        f"is the demo's tiny one with 2 attention heads instead of 4 (vLLM's CPU attention "
        f"needs a head size of at least 32), the same weights in both ({model}; untrained, so "
        f"responses are random bytes that mostly run to the token limit). Each engine runs in "
        f"its own process with {args.threads} OpenMP/torch thread(s); vLLM runs on its CPU "
        f"platform as rlrun sets it up (eager, no chunked prefill, {job['kv_cache_mb']} MiB KV "
        f"cache, threads unbound). Both return every token's log-prob. Start-up: `make_engine` "
        f"until it returns (vLLM's includes importing vllm; the whole process, from launch to "
        f"ready: HF {results['hf']['process_s']:.1f} s, vLLM {results['vllm']['process_s']:.1f} "
        f"s). Samples/s, tokens/s and CPU time (user + system of the engine's process) per "
        f"generated token: median of {repeats} calls per engine after a warm-up call, the two "
        f"processes taking turns. Ms per decode step: a call's time over its longest response "
        f"(the steps the batch needs), and the same with the first {SINGLE_ROWS} prompts "
        f"generated one row at a time (call time over tokens).\n\n"
        f"{text}\n\n{verdict(results, n_prompts * n)}\n"
    )
    write_section(HEADING, section)
    return 0


def verdict(results: dict[str, Any], rows: int) -> str:
    """Which engine is faster here, and what the per-step columns say about why."""
    hf, vl = results["hf"], results["vllm"]
    ratio = vl["tokens_per_s"] / hf["tokens_per_s"]
    per_row = {name: 1000 * (r["step_ms"] - r["single_step_ms"]) / (rows - 1)
               for name, r in results.items()}  # microseconds each further row adds to a step
    steps = (f"one row at a time a decode step takes {vl['single_step_ms']:.1f} ms in vLLM and "
             f"{hf['single_step_ms']:.1f} ms in the HF engine, and each further row adds "
             f"{per_row['vllm']:.0f} us to vLLM's step and {per_row['hf']:.0f} us to the HF "
             f"engine's")
    if ratio < 1:
        return (
            f"The HF engine is the faster one here: {1 / ratio:.2f}x vLLM's tokens/s, and vLLM "
            f"also takes {vl['startup_s'] / hf['startup_s']:.1f}x as long to start. A model of "
            f"this size does almost no arithmetic per token, so a step's cost is bookkeeping: "
            f"{steps}. Both decode each row's new token to look for stop strings; besides, "
            f"vLLM schedules every request, allocates its KV-cache slots and builds its "
            f"log-prob record in Python at each step, and samples with a generator per seeded "
            f"request, where the HF engine samples and scores its whole padded batch in a few "
            f"tensor operations per step. What vLLM is built "
            f"for (paged attention over long, uneven sequences, continuous batching, CUDA "
            f"graphs and fused GPU kernels) has nothing to win on a 2-layer byte model on "
            f"CPU; this table says nothing about real models or GPUs."
        )
    return (
        f"vLLM is the faster one here: {ratio:.2f}x the HF engine's tokens/s, though it takes "
        f"{vl['startup_s'] / hf['startup_s']:.1f}x as long to start; {steps}."
    )


if __name__ == "__main__":
    sys.exit(main())
