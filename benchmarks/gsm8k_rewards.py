"""GSM8K reward audit: every test problem's gold solution must score 1, the same text with the
final answer changed must score 0, under each math extractor.

    python benchmarks/gsm8k_rewards.py PATH     # the GSM8K test split, 1319 problems
    python benchmarks/gsm8k_rewards.py --smoke  # 50 rows of tests/fixtures, no table written

PATH is a file of GSM8K's test split, rows with `question` and `answer` (the worked solution,
ending in `#### n`), as JSON lines or Parquet: the `main` config of openai/gsm8k on the Hugging
Face hub, e.g. saved by `python -c "import datasets; datasets.load_dataset('openai/gsm8k',
'main', split='test').to_json('gsm8k_test.jsonl')"`.

`strict` is veRL's GSM8K `####` extractor (the default), `flexible` reads the last number, and
`math_verify` hands the text to Hugging Face math-verify (what TRL's accuracy reward uses), shown
for comparison. Prints a table and writes it into docs/benchmarks.md under its own heading.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from docs_section import SMOKE_HELP, smoke_done, write_section

from rlrun.config import load_config
from rlrun.data import load_problems
from rlrun.records import Problem, Sample
from rlrun.rewards import build_reward
from rlrun.rewards.audit import math_wrong

HEADING = "## Rewards: GSM8K answer extraction"
SMOKE_DATA = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rewards"
              / "gsm8k_test_subset.jsonl")


def _sample(problem: Problem, text: str) -> Sample:
    return Sample([], [], text, [], "stop", problem_id=problem.id)


def _run(
    mode: str, problems: list[Problem], texts: list[str]
) -> tuple[list[str], int, int, float]:
    """(ids scored 1.0, no answer extracted, timed out, seconds) over one pass."""
    reward = build_reward(load_config(overrides=[f"reward.math_extractor={mode}"]), None)
    start = time.perf_counter()
    evals = reward.evaluate(problems, [_sample(p, t) for p, t in zip(problems, texts, strict=True)])
    elapsed = time.perf_counter() - start
    statuses = [e.correctness.status for e in evals if e.correctness is not None]
    ones = [e.scored.sample.problem_id for e in evals if e.scored.components["correctness"] == 1.0]
    return ones, statuses.count("no_answer"), statuses.count("timeout"), elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=None,
                        help="GSM8K test split, a .jsonl or .parquet file of openai/gsm8k "
                        "(required; --smoke: the 50-row subset in tests/fixtures)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.path is None:
        if not args.smoke:
            parser.error("give PATH: the GSM8K test split as a .jsonl or .parquet file "
                         "(openai/gsm8k on the Hugging Face hub; the docstring of "
                         "benchmarks/gsm8k_rewards.py shows how to save it)")
        args.path = str(SMOKE_DATA)
    problems = load_problems(args.path, fmt="gsm8k").problems
    gold = [p.reference or "" for p in problems]
    # The "final answer" of a GSM8K solution is the one after ####; change it, keep the rest.
    wrong = [math_wrong(text, p.answer, "strict") for p, text in zip(problems, gold, strict=True)]
    n = len(problems)
    rows, worst = [], []
    for mode in ("strict", "flexible", "math_verify"):
        ref_ok, ref_none, ref_slow, t_ref = _run(mode, problems, gold)
        wrong_ok, wrong_none, wrong_slow, t_wrong = _run(mode, problems, wrong)
        rate = 2 * n / (t_ref + t_wrong)
        failed = sorted({p.id for p in problems} - set(ref_ok))
        worst += [f"{mode}: gold fails {pid}" for pid in failed[:5]]
        worst += [f"{mode}: changed answer passes {pid}" for pid in wrong_ok[:5]]
        rows.append(
            f"| {mode} | {len(ref_ok)}/{n} | {len(wrong_ok)}/{n} | {ref_none + wrong_none} | "
            f"{ref_slow + wrong_slow} | {rate:,.0f} |"
        )
    table = "\n".join([
        "| extractor | gold solution scores 1 | changed answer scores 1 | no answer found | "
        "timeouts | answers/s |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
    if args.smoke:
        return smoke_done("gsm8k_rewards")
    print(table)
    if worst:
        print("\nworst rows:\n  " + "\n  ".join(worst))
    section = (
        f"{HEADING}\n\n`python benchmarks/gsm8k_rewards.py PATH` on {n} GSM8K test problems "
        "(PATH: the test split of openai/gsm8k on the Hugging Face hub): each gold solution "
        "text, and the same text with its final `#### n` changed to n+1, scored by the rlrun "
        "reward (one process, answers/s over both passes).\n\n"
        f"{table}\n"
    )
    write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
