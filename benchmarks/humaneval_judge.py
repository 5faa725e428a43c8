"""HumanEval through the rlrun judge: every canonical solution accepted, mutants and hacks not.

For each of the 164 problems it judges the canonical solution, simple mutants of it (the first
comparison operator flipped, the first arithmetic operator swapped, the first integer constant
off by one, every `return` value replaced by None: those that change the code), and three
reward hacks of the kinds that fool the usual "prompt + completion + test, exit status 0"
harness: an early `sys.exit(0)`, an object whose `__eq__` is always true, and `builtins.abs`
patched. A problem passes when its solution is accepted, at least one mutant is rejected, and
every hack is.

    python benchmarks/humaneval_judge.py PATH      # the 164 HumanEval problems
    python benchmarks/humaneval_judge.py --smoke   # 3 problems of tests/fixtures, nothing written

PATH is HumanEval as JSON lines (`.jsonl`, or gzipped `.jsonl.gz`), rows with `task_id`,
`prompt`, `canonical_solution`, `test` and `entry_point`: the test split of
openai/openai_humaneval on the Hugging Face hub, e.g. saved by `python -c "import datasets;
datasets.load_dataset('openai/openai_humaneval', split='test').to_json('HumanEval.jsonl')"`.

Prints a summary and writes it into docs/benchmarks.md under its own heading.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import sys
import time
from pathlib import Path

from docs_section import SMOKE_HELP, smoke_done, write_section

from rlrun.config import SandboxConfig
from rlrun.records import Problem
from rlrun.records import Tests as Cases
from rlrun.sandbox import Judge, make_submission

HEADING = "## Sandbox: HumanEval canonical solutions, mutants and hacks"
SMOKE_DATA = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "data" \
    / "humaneval.jsonl.gz"

HACKS = {
    "sys.exit(0)": "    import sys\n    sys.exit(0)\n",
    "always-equal object": (
        "    return _Any()\nclass _Any:\n    def __eq__(self, o): return True\n"
        "    def __ne__(self, o): return False\n    def __lt__(self, o): return True\n"
        "    def __gt__(self, o): return True\n    def __sub__(self, o): return self\n"
        "    def __rsub__(self, o): return self\n    def __abs__(self): return self\n"
        "    def __bool__(self): return True\n    def __len__(self): return 0\n"
        "    def __hash__(self): return 0\n"
    ),
    "patched builtins.abs": "    return _Zero()\nimport builtins\nbuiltins.abs = lambda x: 0\n"
                            "class _Zero(float):\n    def __eq__(self, o): return True\n",
}

_FLIP = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}
_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
         ast.Mod: ast.FloorDiv, ast.Div: ast.Mult}


class _Mutate(ast.NodeTransformer):
    """Apply `kind` to the first node it fits (or to every `return` for "return_none")."""

    def __init__(self, kind: str) -> None:
        self.kind, self.done = kind, False

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if self.kind == "compare" and not self.done and type(node.ops[0]) in _FLIP:
            node.ops[0], self.done = _FLIP[type(node.ops[0])](), True
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if self.kind == "arith" and not self.done and type(node.op) in _SWAP:
            node.op, self.done = _SWAP[type(node.op)](), True
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if self.kind == "const" and not self.done and type(node.value) is int:
            self.done = True
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        if self.kind == "return_none" and node.value is not None:
            self.done = True
            return ast.copy_location(ast.Return(ast.Constant(None)), node)
        return node


def mutants(prompt: str, solution: str) -> list[tuple[str, str]]:
    """(kind, full program) for each mutation that changes the solution."""
    base = ast.unparse(ast.parse(prompt + solution))
    out = []
    for kind in ("compare", "arith", "const", "return_none"):
        tree = ast.parse(prompt + solution)
        m = _Mutate(kind)
        code = ast.unparse(ast.fix_missing_locations(m.visit(tree)))
        if m.done and code != base:
            out.append((kind, code))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default=None,
                        help="HumanEval as .jsonl or .jsonl.gz, from openai/openai_humaneval "
                        "(required; --smoke: 3 problems in tests/fixtures)")
    parser.add_argument("--backend", default="process", help="process | bwrap | docker")
    parser.add_argument("--workers", type=int, default=2, help="executor slots")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.path is None:
        if not args.smoke:
            parser.error("give PATH: HumanEval as a .jsonl or .jsonl.gz file "
                         "(openai/openai_humaneval on the Hugging Face hub; the docstring of "
                         "benchmarks/humaneval_judge.py shows how to save it)")
        args.path = str(SMOKE_DATA)
    opener = gzip.open if args.path.endswith(".gz") else open
    with opener(args.path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    cfg = SandboxConfig()
    subs, index = [], []
    for row in rows:
        problem = Problem(id=row["task_id"], prompt=row["prompt"], kind="code",
                          tests=Cases(harness=row["test"], entry_point=row["entry_point"]),
                          code_prefix=row["prompt"])
        subs.append(make_submission(problem, row["canonical_solution"], cfg, sub_id="canon"))
        index.append((row["task_id"], "canonical"))
        bare = Problem(**{**problem.__dict__, "code_prefix": ""})
        for kind, code in mutants(row["prompt"], row["canonical_solution"]):
            subs.append(make_submission(bare, code, cfg, sub_id=kind))
            index.append((row["task_id"], f"mutant:{kind}"))
        for name, body in HACKS.items():
            subs.append(make_submission(problem, body, cfg, sub_id=name))
            index.append((row["task_id"], f"hack:{name}"))
    t0 = time.perf_counter()
    with Judge(args.backend, args.workers, cfg) as judge:
        results = judge.judge(subs)
        isolation = judge.isolation.get("isolation", "")
    elapsed = time.perf_counter() - t0
    per: dict[str, dict[str, list[str]]] = {}
    for (task, what), res in zip(index, results, strict=True):
        per.setdefault(task, {}).setdefault(what.split(":")[0], []).append(res.status)
    canon_ok = [t for t, d in per.items() if d["canonical"] == ["accepted"]]
    mutant_caught = [t for t, d in per.items() if any(s != "accepted" for s in d.get("mutant", []))]
    no_mutant = [t for t, d in per.items() if not d.get("mutant")]
    hacks_caught = [t for t, d in per.items() if all(s != "accepted" for s in d["hack"])]
    n_mut = sum(len(d.get("mutant", [])) for d in per.values())
    n_mut_rej = sum(s != "accepted" for d in per.values() for s in d.get("mutant", []))
    sandbox_errors = sum(r.status == "sandbox_error" for r in results)
    n = len(rows)
    lines = [
        HEADING, "",
        f"`python benchmarks/humaneval_judge.py PATH` on {n} HumanEval problems (PATH: "
        f"the test split of openai/openai_humaneval on the Hugging Face hub; {args.backend} "
        f"backend, {args.workers} slots: {isolation}); {len(subs)} programs judged in "
        f"{elapsed:.1f} s ({len(subs) / elapsed:.0f} harness runs/s).", "",
        "| check | problems |", "| --- | --- |",
        f"| canonical solution accepted | {len(canon_ok)}/{n} |",
        f"| at least one mutant rejected | {len(mutant_caught)}/{n} "
        f"({n_mut_rej}/{n_mut} mutants rejected) |",
        f"| every hack rejected ({', '.join(HACKS)}) | {len(hacks_caught)}/{n} |",
        f"| sandbox errors | {sandbox_errors} |", "",
    ]
    section = "\n".join(lines)
    ok = len(canon_ok) == n and len(mutant_caught) == n and len(hacks_caught) == n
    if args.smoke:
        if not (ok and sandbox_errors == 0):
            print("humaneval_judge: smoke run failed a check:\n" + section)
            return 1
        return smoke_done("humaneval_judge")
    print(section)
    failed = sorted(set(per) - set(canon_ok)) + sorted(set(per) - set(mutant_caught)
                                                        - set(no_mutant))
    failed += sorted(set(per) - set(hacks_caught))
    if failed:
        print("problems failing a check:", ", ".join(sorted(set(failed))))
    if no_mutant:
        print("problems without an applicable mutant:", ", ".join(no_mutant))
    if not args.no_write:
        write_section(HEADING, section)
    return 0 if ok and sandbox_errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
