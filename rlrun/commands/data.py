"""`rlrun data inspect PATH` and `rlrun data convert PATH --out OUT.jsonl`.

inspect prints the detected format, row counts, two sample problems and every unusable row
with its reason; convert writes the normalised problems as JSON lines (`Problem.to_dict`),
which `--format rlrun` (or detection) reads back unchanged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from rlrun.data import FORMATS, DataError, load_problems
from rlrun.records import Problem

SHOWN_CHARS = 400


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["inspect", "convert"])
    parser.add_argument("source", help="JSONL/JSON/Parquet file or folder, HF dataset id, toy:*")
    parser.add_argument("--format", default="auto", choices=FORMATS, help="row format (auto)")
    parser.add_argument("--limit", type=int, default=None, help="read at most N usable problems")
    parser.add_argument("--split", default="train", help="split of an HF dataset id")
    parser.add_argument("--subset", default=None, help="config name of an HF dataset id")
    parser.add_argument("--out", help="convert: output JSONL path")
    parser.add_argument(
        "--on-bad-row", default="skip", choices=["skip", "fail"],
        help="convert: skip unusable rows (default) or stop at the first",
    )
    parser.add_argument("--toy-size", type=int, default=2000, help="problems in a toy:* set")
    parser.add_argument("--seed", type=int, default=0, help="seed of a toy:* set")


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + f"... [{len(text)} chars]"


def describe(problem: Problem) -> str:
    """A few lines showing what a problem holds."""
    prompt = problem.prompt if isinstance(problem.prompt, str) else json.dumps(problem.prompt)
    head = f"id: {problem.id}  kind: {problem.kind}"
    lines = [head + (f"  language: {problem.language}" if problem.kind == "code" else "")]
    lines.append("prompt: " + _clip(prompt).replace("\n", "\n        "))
    if problem.kind == "math":
        lines.append(f"answer: {problem.answer}")
    if problem.tests is not None:
        t = problem.tests
        parts = [f"{len(t.stdio)} stdin/stdout"] if t.stdio else []
        if t.calls:
            parts.append(f"{len(t.calls)} calls of {t.fn_name}")
        if t.harness:
            parts.append("harness" + (f" on {t.entry_point}" if t.entry_point else ""))
        lines.append("tests: " + ", ".join(parts))
        if t.stdio:
            lines.append(f"  first input: {_clip(t.stdio[0].input)!r}")
            lines.append(f"  first output: {_clip(t.stdio[0].output)!r}")
    limits = [f"{problem.time_limit_s:g} s"] if problem.time_limit_s else []
    limits += [f"{problem.memory_limit_mb} MB"] if problem.memory_limit_mb else []
    if limits:
        lines.append("limits: " + ", ".join(limits))
    lines.append("reference: " + ("yes" if problem.reference else "no"))
    return "\n".join(lines)


def _inspect(args: argparse.Namespace) -> int:
    result = load_problems(
        args.source, fmt=args.format, limit=args.limit, split=args.split, subset=args.subset,
        toy_size=args.toy_size, seed=args.seed,
    )
    detected = " (detected)" if args.format == "auto" and result.format != "toy" else ""
    print(f"source: {args.source}")
    print(f"format: {result.format}{detected}")
    print(f"rows read: {result.total_rows}")
    print(f"usable problems: {len(result.problems)}")
    print(f"unusable rows: {len(result.bad_rows)}")
    kinds = Counter(p.kind for p in result.problems)
    print("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    counts = [p.tests.count() for p in result.problems if p.tests is not None]
    if counts:
        print(f"tests per code problem: min {min(counts)}, median "
              f"{statistics.median(counts):g}, max {max(counts)}")
    print(f"with reference solution: {sum(p.reference is not None for p in result.problems)}")
    for n, problem in enumerate(result.problems[:2], 1):
        print(f"\n--- sample {n} ---\n{describe(problem)}")
    if result.bad_rows:
        print("\n--- unusable rows ---")
        for bad in result.bad_rows:
            print(bad.reason)
    return 0 if result.problems else 1


def _convert(args: argparse.Namespace) -> int:
    if not args.out:
        raise DataError("rlrun data convert needs --out OUT.jsonl")
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    try:  # before reading the dataset, which may take long
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.touch()
    except OSError as err:
        raise DataError(f"cannot write --out {out}: {err.strerror}") from None
    result = load_problems(
        args.source, fmt=args.format, on_bad_row=args.on_bad_row, limit=args.limit,
        split=args.split, subset=args.subset, toy_size=args.toy_size, seed=args.seed,
    )
    with tmp.open("w", encoding="utf-8") as f:
        for problem in result.problems:
            f.write(json.dumps(problem.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(out)
    print(f"wrote {len(result.problems)} problems ({result.format} format) to {out}; "
          f"skipped {len(result.bad_rows)} unusable rows")
    for bad in result.bad_rows:
        print(bad.reason, file=sys.stderr)
    return 0


def main(args: argparse.Namespace) -> int:
    try:
        return _inspect(args) if args.action == "inspect" else _convert(args)
    except DataError as err:
        print(f"rlrun data {args.action}: {err}", file=sys.stderr)
        return 2
