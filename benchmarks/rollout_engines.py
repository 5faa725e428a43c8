"""Rollout throughput of the HF engine next to `model.generate`, on tiny models, on this CPU.

    python benchmarks/rollout_engines.py [--threads 1] [--repeats 3]

Both sides get the same model, the same 16 prompts x 8 samples (128 rows, batches of 64),
64 new tokens, temperature 1 with top-k/top-p off, and both return the per-token log-probs
the learner needs (`model.generate` through `output_scores` and `compute_transition_scores`).
Tokens/s counts generated tokens up to and including EOS; the median of the repeats is kept.
Prints a table and writes it into docs/benchmarks.md under its own heading.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch
from docs_section import write_section

from rlrun.config import ModelConfig, RolloutConfig, TinyModelConfig
from rlrun.engines import SamplingParams, make_engine
from rlrun.engines.base import encode_prompts
from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path

HEADING = "## Rollout: HF engine vs `model.generate`"
MODELS = {
    "tiny (default: 64 wide, 2 layers, 0.15M params)": TinyModelConfig(),
    "small (256 wide, 4 layers, 4.3M params)": TinyModelConfig(
        hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024
    ),
}
PROMPTS, N, BATCH, NEW_TOKENS = 16, 8, 64, 64


def prompts() -> list[str]:
    return [
        f"Question: Tom has {3 * i + 2} apples and buys {i + 5} more. How many now?\n"
        "Give the final answer after '#### '.\n"
        for i in range(PROMPTS)
    ]


def time_engine(path: str) -> tuple[float, int]:
    engine = make_engine("hf", path, RolloutConfig(batch_size=BATCH), "float32")
    sampling = SamplingParams(max_new_tokens=NEW_TOKENS, n=N, seed=0)
    start = time.perf_counter()
    groups = engine.generate(prompts(), sampling)
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(c.response_ids) for g in groups for c in g)


def time_generate(path: str) -> tuple[float, int]:
    tokenizer, model = load_tokenizer(path), load_causal_lm(path)
    rows = [ids for ids in encode_prompts(tokenizer, prompts()) for _ in range(N)]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    start, tokens = time.perf_counter(), 0
    for i in range(0, len(rows), BATCH):
        chunk = rows[i : i + BATCH]
        width = max(len(r) for r in chunk)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in chunk])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in chunk])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                top_p=1.0, max_new_tokens=NEW_TOKENS, pad_token_id=pad, eos_token_id=eos,
                output_scores=True, return_dict_in_generate=True,
            )
            model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        for row in out.sequences[:, width:].tolist():
            tokens += row.index(eos) + 1 if eos in row else len(row)
    return time.perf_counter() - start, tokens


def median_rates(path: str, repeats: int) -> tuple[float, float]:
    """Median tokens/s of both sides, alternating runs so load on the machine hits both alike."""
    ours, theirs = [], []
    for _ in range(repeats):
        for fn, rates in ((time_engine, ours), (time_generate, theirs)):
            elapsed, tokens = fn(path)
            rates.append(tokens / elapsed)
    return statistics.median(ours), statistics.median(theirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for label, tiny in MODELS.items():
            path = resolve_model_path(ModelConfig(tiny=tiny), cache)
            ours, theirs = median_rates(path, args.repeats)
            rows.append(f"| {label} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}x |")
            print(rows[-1], flush=True)
    table = "\n".join([
        "| model | rlrun HF engine tokens/s | `model.generate` + log-probs tokens/s | ratio |",
        "| --- | --- | --- | --- |",
        *rows,
    ])
    print(table)
    section = (
        f"{HEADING}\n\n`python benchmarks/rollout_engines.py --threads {args.threads} "
        f"--repeats {args.repeats}`: {PROMPTS} prompts x {N} samples, batches of {BATCH} rows, "
        f"{NEW_TOKENS} new tokens, temperature 1, per-token log-probs returned by both, "
        f"{args.threads} torch thread(s), median of {args.repeats} runs (transformers "
        f"{_transformers_version()}, torch {torch.__version__}).\n\n{table}\n"
    )
    write_section(HEADING, section)
    return 0


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


if __name__ == "__main__":
    sys.exit(main())
