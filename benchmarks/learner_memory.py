"""Peak memory of one learner forward+backward: chunked `response_logprobs` next to the one-pass
[N, L, V] formula it replaced, on a ~52M-parameter Qwen3 with the 152k Qwen vocabulary, on this
CPU, in one run.

    python benchmarks/learner_memory.py [--threads 2] [--repeats 2] [--dtypes float32 [bfloat16]]
                                        [--smoke]

The model is built from config (no download): hidden 320, 2 layers, 5 heads of 64, MLP 1280,
vocabulary 151,936 with tied embeddings, so nearly all of it is the embedding, as the logits are
nearly all of a small learner's activations. The batch is 8 sequences of 64 prompt + 256 response
tokens (plain rows, random tokens, seed 0); the step is `response_logprobs` (temperature 0.7)
and a policy-gradient loss `-(logp * advantage * mask).sum() / mask.sum()` (minus 0.01 x mean
entropy when entropy is on), then `.backward()`.

How memory is measured: each variant runs in a fresh subprocess that builds the model and batch,
reads its resident set size (`/proc/self/statm`), runs one step, and reads the peak resident set
size of its life (`getrusage(RUSAGE_SELF).ru_maxrss`). Peak minus before is what the step took
at its worst moment, everything included: logits, the log-prob tensors, autograd's saved
tensors, gradients of activations and weights. torch's CPU allocator hands tensors of this size
straight back to the OS when freed, so resident size follows live tensors. The child refuses to
report if the step did not raise the peak set while building the model. It also reports the
bytes autograd saves in the forward (distinct storages packed by `saved_tensors_hooks`, weights
excluded), and the median time of `--repeats` more steps.

`--dtypes bfloat16` runs the model in bf16 as well (the fp32 copy then doubles the logits
instead of copying them); it needs a CPU with bf16 matrix units, elsewhere one step takes tens of
minutes. Prints a table and writes it into docs/benchmarks.md under its own heading. `--smoke`
runs both variants' children, entropy on, on a model and batch of a few thousand parameters and
tokens, and writes no table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from docs_section import SMOKE_HELP, smoke_done, write_section
from measure import machine, peak_rss, rss
from torch import Tensor

from rlrun import batching
from rlrun.policy_update import TensorBatch, collate, response_logprobs

HEADING = "## Learner: peak memory of the log-probs, chunked vs one pass over [N, L, V]"
SEQUENCES, PROMPT, RESPONSE, TEMPERATURE = 8, 64, 256, 0.7
MODEL = dict(
    vocab_size=151_936, hidden_size=320, num_hidden_layers=2, num_attention_heads=5,
    num_key_value_heads=5, head_dim=64, intermediate_size=1280, tie_word_embeddings=True,
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def use_smoke_sizes() -> None:
    """--smoke: a tiny model and batch, in the parent and in each child alike."""
    global SEQUENCES, PROMPT, RESPONSE, MODEL
    SEQUENCES, PROMPT, RESPONSE = 2, 8, 16
    MODEL = dict(MODEL, vocab_size=512, hidden_size=32, num_attention_heads=2,
                 num_key_value_heads=2, head_dim=16, intermediate_size=64)


# BASELINE, for comparison only: `response_logprobs` as it was before chunking (commit 4423ba9),
# one pass over [N, L, V] in fp32.
def baseline_response_logprobs(
    model: torch.nn.Module, batch: TensorBatch, temperature: float, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
    ).logits  # [R, T, V]
    picked = logits[batch.rows.unsqueeze(-1), batch.response_index].float()  # [N, L, V]
    logp_all = torch.log_softmax(picked / temperature, dim=-1)  # [N, L, V]
    logp = torch.gather(logp_all, 2, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # [N, L]
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # [N, L]
    return logp * batch.mask, entropy


VARIANTS = {"one pass (before)": baseline_response_logprobs, "chunked (now)": response_logprobs}


def build(dtype: torch.dtype) -> tuple[torch.nn.Module, TensorBatch, int]:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**MODEL)).to(dtype)
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    samples = [
        batching.TrainSample(
            torch.randint(3, MODEL["vocab_size"], (PROMPT,), generator=gen).tolist(),
            torch.randint(3, MODEL["vocab_size"], (RESPONSE,), generator=gen).tolist(),
            [0.0] * RESPONSE, 1.0 if i % 2 else -1.0,
        )
        for i in range(SEQUENCES)
    ]
    return model, collate(samples, pad_id=0, dtype=dtype), params


def step(fn, model: torch.nn.Module, batch: TensorBatch, with_entropy: bool) -> None:
    logp, entropy = fn(model, batch, TEMPERATURE, with_entropy)  # [N, L], [N, L]
    tokens = batch.mask.sum()
    loss = -(logp * batch.advantages.unsqueeze(-1) * batch.mask).sum() / tokens
    if entropy is not None:
        loss = loss - 0.01 * (entropy * batch.mask).sum() / tokens
    loss.backward()
    model.zero_grad(set_to_none=True)


def saved_bytes(fn, model: torch.nn.Module, batch: TensorBatch, with_entropy: bool) -> int:
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(model, batch, TEMPERATURE, with_entropy)
    return sum(storages.values())


def child(variant: str, dtype: str, with_entropy: bool, repeats: int, smoke: bool = False
          ) -> dict:
    fn = VARIANTS[variant]
    model, batch, params = build(DTYPES[dtype])
    model.train()
    before, peak_before = rss(), peak_rss()
    start = time.perf_counter()
    step(fn, model, batch, with_entropy)
    first = time.perf_counter() - start
    peak = peak_rss()
    if peak <= peak_before and not smoke:  # a smoke run's tiny step may stay under it
        raise RuntimeError("the step stayed under the peak of building the model: no reading")
    saved = saved_bytes(fn, model, batch, with_entropy)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(fn, model, batch, with_entropy)
        times.append(time.perf_counter() - start)
    return {"params": params, "peak": max(peak - before, 1), "saved": saved,
            "time": statistics.median(times) if times else first}


def run_child(variant: str, dtype: str, with_entropy: bool, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", variant, "--dtypes", dtype,
               "--repeats", str(args.repeats), "--threads", str(args.threads)]
    if with_entropy:
        command.append("--entropy")
    if args.smoke:
        command.append("--smoke")
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def gb(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=2, help="timed steps after the first")
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=list(DTYPES))
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--entropy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.smoke:
        use_smoke_sizes()
        args.repeats = 1
    if args.child:
        result = child(args.child, args.dtypes[0], args.entropy, args.repeats, args.smoke)
        print(json.dumps(result), flush=True)
        return 0

    rows, params = [], 0
    for dtype in args.dtypes:
        for with_entropy in (True,) if args.smoke else (False, True):
            res = {v: run_child(v, dtype, with_entropy, args) for v in VARIANTS}
            before, now = res.values()
            params = now["params"]
            rows.append(
                f"| {dtype} | {'on' if with_entropy else 'off'} | {gb(before['peak'])} | "
                f"{gb(now['peak'])} | {before['peak'] / now['peak']:.1f}x | "
                f"{gb(before['saved'])} | {gb(now['saved'])} | "
                f"{before['time']:.2f} s | {now['time']:.2f} s |"
            )
            if not args.smoke:
                print(rows[-1], flush=True)
    table = "\n".join([
        "| model dtype | entropy | peak, one pass (before) | peak, chunked (now) | ratio | "
        "autograd saves, before | autograd saves, now | s/step, before | s/step, now |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
    if not args.smoke:
        print(table)
    n, t, v = SEQUENCES, PROMPT + RESPONSE, MODEL["vocab_size"]
    command = (f"python benchmarks/learner_memory.py --threads {args.threads} "
               f"--repeats {args.repeats} --dtypes {' '.join(args.dtypes)}")
    section = (
        f"{HEADING}\n\n`{command}` on {machine()}, {args.threads} torch thread(s): one forward"
        f"+backward of `response_logprobs` (temperature {TEMPERATURE}) and a policy-gradient "
        f"loss on a {params / 1e6:.0f}M-parameter Qwen3 built from config (hidden "
        f"{MODEL['hidden_size']}, {MODEL['num_hidden_layers']} layers, vocabulary {v:,}, tied "
        f"embeddings), {n} sequences x ({PROMPT} prompt + {RESPONSE} response) tokens in plain "
        f"rows. Peak: the most resident memory the step added, each variant in a fresh process "
        f"(`ru_maxrss` minus resident size before the step). For scale, in fp32 the model's "
        f"logits [R, T, V] are {gb(n * t * v * 4)}, one [N, L, V] is {gb(n * RESPONSE * v * 4)} "
        f"and the weights' gradients {gb(params * 4)}. At this size the chunked step never makes "
        f"the logits: the output layer runs inside the model's forward on the response "
        f"positions only, 64 MiB of them at a time, each chunk recomputed in backward "
        f"(`_selective_head`; batches whose logits stay under 256 MB keep them and pick the "
        f"positions from them instead). Autograd "
        f"saves: distinct storages packed in the forward, weights excluded. s/step: median of "
        f"{args.repeats} steps after the first.\n\n"
        f"{table}\n"
    )
    if args.smoke:
        return smoke_done("learner_memory")
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
