"""`rlrun judge INPUT.jsonl --out OUT.jsonl`: judge programs against tests, without training.

Each input line is one program and its tests:

    {"id": "p1-0", "language": "python" | "cpp", "code": "...",
     "tests": [{"input": "1 2\\n", "output": "3\\n"}, ...]            stdin/stdout tests
     | "functional": "def check(candidate): ...", "entry_point": "f"  an assert-style harness
     | "fn_name": "f", "tests": [{"input": [1, 2], "output": 3}, ...]  call-based tests
     "time_limit_s": 2, "memory_limit_mb": 512,                       optional, capped
     "float_tolerance": 1e-6, "case_insensitive": false}              optional, stdin/stdout

Each output line is `{"id", "status", "passed", "total", "tests": [verdict, ...]}` in input
order, where `status` is `accepted` only if every test passed and otherwise the first failing
test's status. A line that cannot be judged gives `{"id", "line", "status": "invalid_input",
"error"}` naming the problem; the other lines are still judged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlrun.config import ConfigError, SandboxConfig
from rlrun.records import CallTest, JudgeResult, Problem, StdioTest, Submission, Tests

INVALID = "invalid_input"
LANGUAGES = ("python", "cpp")


class LineError(ValueError):
    """An input line that cannot be turned into a submission; the message says why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = SandboxConfig()
    parser.description = (
        "Judge programs against tests in the sandbox. One JSON object per input line: id, "
        "language (python|cpp), code, and tests [{input, output}] | functional (+entry_point) "
        "| fn_name + tests [{input: [args], output: value}]; optional time_limit_s, "
        "memory_limit_mb. Exit status: 0 when every line was judged, 1 when some line was "
        "malformed (its output record says why), 2 when the input cannot be read."
    )
    parser.add_argument("input", help="JSONL file of submissions ('-' reads standard input)")
    parser.add_argument(
        "--out", default="-", help="JSONL file for the results (default '-': standard output)"
    )
    parser.add_argument(
        "--backend", choices=["process", "docker", "bwrap"], default=defaults.backend,
        help="isolation: process (namespaces + rlimits, no extra software), docker "
        "(long-lived locked-down containers of --docker-image, one per worker slot), bwrap "
        f"(bubblewrap) (default {defaults.backend})",
    )
    parser.add_argument(
        "--actors", type=int, default=0, metavar="M",
        help="0 (default): judge in this process with one local judge, which starts in well "
        "under a second and is the fastest on one machine; M >= 1: spread the work over M Ray "
        "sandbox actors (local Ray, or the cluster in $RAY_ADDRESS / --address)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, metavar="W",
        help="parallel executor slots of the local judge, or of each actor "
        "(default: CPU count locally, sandbox.workers_per_actor with --actors)",
    )
    parser.add_argument(
        "--time-limit", type=float, default=None, metavar="S",
        help=f"per-test wall-clock limit for lines without time_limit_s "
        f"(default {defaults.time_limit_s}); line limits are capped at "
        f"max({defaults.max_time_limit_s}, S)",
    )
    parser.add_argument(
        "--memory-limit", type=int, default=None, metavar="MB",
        help=f"per-test memory limit for lines without memory_limit_mb "
        f"(default {defaults.memory_limit_mb}); capped likewise at "
        f"max({defaults.max_memory_limit_mb}, MB)",
    )
    parser.add_argument(
        "--all-tests", action="store_true",
        help="run every test of a submission (default: stop at its first failing test)",
    )
    parser.add_argument("--max-tests", type=int, default=None, metavar="N",
                        help="judge at most N tests per submission (a deterministic subset)")
    parser.add_argument("--docker-image", default=defaults.docker_image,
                        help=f"image of the docker backend (default {defaults.docker_image})")
    parser.add_argument("--actor-cpus", type=float, default=defaults.num_cpus, metavar="C",
                        help=f"CPUs Ray reserves for each actor (default {defaults.num_cpus})")
    parser.add_argument("--address", default=None,
                        help="Ray cluster address for --actors (default: $RAY_ADDRESS or local)")


def sandbox_config(args: argparse.Namespace) -> SandboxConfig:
    """The sandbox settings the command-line flags describe."""
    positive = (("--time-limit", args.time_limit), ("--memory-limit", args.memory_limit),
                ("--actor-cpus", args.actor_cpus))
    for flag, value in positive:
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}")
    if args.actors < 0:
        raise ConfigError(f"--actors must be 0 (local judge) or more, got {args.actors}")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    cfg = SandboxConfig(backend=args.backend, docker_image=args.docker_image,
                        max_tests=args.max_tests, stop_on_first_failure=not args.all_tests,
                        num_actors=max(1, args.actors), num_cpus=args.actor_cpus)
    if args.time_limit is not None:
        cfg.time_limit_s = args.time_limit
        cfg.max_time_limit_s = max(cfg.max_time_limit_s, args.time_limit)
    if args.memory_limit is not None:
        cfg.memory_limit_mb = args.memory_limit
        cfg.max_memory_limit_mb = max(cfg.max_memory_limit_mb, args.memory_limit)
    if args.workers is not None:
        cfg.workers_per_actor = args.workers
    elif args.actors == 0:
        cfg.workers_per_actor = os.cpu_count() or 1
    return cfg


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    # JSON true/false are Python bools, which are also ints: accept them only where asked for.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise LineError(f"'{key}' must be {what}, got {json.dumps(value)[:40]}")
    return value


def _tests(obj: dict[str, Any]) -> Tests:
    fn_name = _field(obj, "fn_name", str, "a function name string")
    harness = _field(obj, "functional", str, "the text of an assert harness")
    raw = _field(obj, "tests", list, "a list of {input, output} objects")
    tests = Tests(harness=harness, entry_point=_field(obj, "entry_point", str, "a string"),
                  fn_name=fn_name,
                  float_tolerance=_field(obj, "float_tolerance", (int, float), "a number"),
                  case_insensitive=bool(_field(obj, "case_insensitive", bool, "true or false")))
    for n, case in enumerate(raw or []):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise LineError(f"tests[{n}] must be an object with 'input' and 'output'")
        if fn_name:
            if not isinstance(case["input"], list):
                raise LineError(f"tests[{n}].input must be the list of arguments of {fn_name}()")
            tests.calls.append(CallTest(args=case["input"], expected=case["output"]))
        else:
            if not isinstance(case["input"], str) or not isinstance(case["output"], str):
                raise LineError(f"tests[{n}] input and output must be strings (stdin/stdout test;"
                                " give fn_name for call-based tests)")
            tests.stdio.append(StdioTest(input=case["input"], output=case["output"]))
    if tests.count() == 0:
        raise LineError("no tests: give 'tests' (a non-empty list) or 'functional'")
    return tests


def parse_line(text: str, lineno: int, cfg: SandboxConfig) -> Submission:
    """One input line as a submission with limits applied; raises LineError naming the problem."""
    from rlrun.sandbox import make_submission

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise LineError(f"not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(obj, dict):
        raise LineError(f"must be a JSON object, got {type(obj).__name__}")
    sub_id = obj.get("id", f"line{lineno}")
    if not isinstance(sub_id, str | int) or isinstance(sub_id, bool):
        raise LineError(f"'id' must be a string or integer, got {type(sub_id).__name__}")
    code = obj.get("code")
    if not isinstance(code, str):
        raise LineError("'code' is missing or not a string")
    language = obj.get("language", "python")
    if language not in LANGUAGES:
        raise LineError(f"'language' must be one of {', '.join(LANGUAGES)}, got {language!r}")
    time_limit = _field(obj, "time_limit_s", (int, float), "a number of seconds")
    memory_limit = _field(obj, "memory_limit_mb", int, "an integer number of MB")
    if time_limit is not None and time_limit <= 0 or memory_limit is not None and memory_limit <= 0:
        raise LineError("'time_limit_s' and 'memory_limit_mb' must be positive")
    problem = Problem(id=str(sub_id), prompt="", kind="code", tests=_tests(obj),
                      language=language, time_limit_s=time_limit, memory_limit_mb=memory_limit)
    try:
        return make_submission(problem, code, cfg, language=language, sub_id=str(sub_id))
    except ValueError as err:
        raise LineError(str(err)) from None


def read_lines(path: str) -> list[tuple[int, str]]:
    """Non-blank lines of the input with their 1-based line numbers."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _judge_all(subs: list[Submission], cfg: SandboxConfig, args: argparse.Namespace,
               bar: Any) -> list[JudgeResult]:
    from rlrun.sandbox.dedup import dedup, expand

    unique, owner = dedup(subs)
    per_unique = Counter(owner)
    if args.actors == 0:
        from rlrun.sandbox import Judge

        results: list[JudgeResult] = []
        step = max(16, 8 * cfg.workers_per_actor)
        starts = range(0, len(unique), step)
        with Judge(backend=cfg.backend, workers=cfg.workers_per_actor, cfg=cfg) as judge, \
                ThreadPoolExecutor(2) as chunks:
            # Two chunks in flight, so the slots the first one's last tests leave idle already
            # work on the next; the bar moves once per chunk.
            futures = [chunks.submit(judge.judge, unique[s:s + step]) for s in starts]
            for start, future in zip(starts, futures, strict=True):
                batch = future.result()
                results.extend(batch)
                bar.update(sum(per_unique[j] for j in range(start, start + len(batch))))
        return expand(subs, owner, results)

    import ray

    from actors.sandbox import SandboxPool

    if not ray.is_initialized():
        # "local" unless given an address: never the cluster /tmp/ray names (dead or not ours).
        ray.init(address=args.address or os.environ.get("RAY_ADDRESS") or "local",
                 log_to_driver=False)
    with SandboxPool(cfg, prefix=f"judge-{os.getpid()}") as pool:
        return pool.wait(pool.submit(subs), progress=bar.update)


def summary_line(results: list[dict[str, Any]], elapsed_s: float) -> str:
    """`judged N submissions, T tests in S s (R tests/s): accepted=.. wrong_answer=..`"""
    counts = Counter(r["status"] for r in results)
    n_tests = sum(len(r.get("tests", [])) for r in results)
    rate = n_tests / elapsed_s if elapsed_s > 0 else 0.0
    per_status = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    return (f"judged {len(results)} submissions, {n_tests} tests in {elapsed_s:.2f}s "
            f"({rate:.0f} tests/s): {per_status or 'nothing to judge'}")


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    cfg = sandbox_config(args)
    try:
        lines = read_lines(args.input)
    except (OSError, UnicodeDecodeError) as err:
        print(f"rlrun judge: cannot read {args.input}: {err}", file=sys.stderr)
        return 2

    # Opened before judging, so an output that cannot be written fails first, not last.
    try:
        out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    except OSError as err:
        print(f"rlrun judge: cannot write --out {args.out}: {err.strerror}", file=sys.stderr)
        return 2
    records: list[dict[str, Any] | None] = []
    subs: list[Submission] = []
    where: list[int] = []
    for lineno, text in lines:
        try:
            subs.append(parse_line(text, lineno, cfg))
            where.append(len(records))
            records.append(None)
        except LineError as err:
            records.append({"id": _id_of(text), "line": lineno, "status": INVALID,
                            "error": f"{args.input} line {lineno}: {err}",
                            "passed": 0, "total": 0, "tests": []})

    start = time.perf_counter()
    with tqdm(total=len(subs), unit="sub", desc="judging", disable=not sys.stderr.isatty(),
              file=sys.stderr) as bar:
        results = _judge_all(subs, cfg, args, bar) if subs else []
    elapsed = time.perf_counter() - start
    for pos, res in zip(where, results, strict=True):
        records[pos] = res.to_dict()

    try:
        for rec in records:
            out.write(json.dumps(rec) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    done = [r for r in records if r is not None]
    print(summary_line(done, elapsed), file=sys.stderr if args.out == "-" else sys.stdout)
    return 1 if any(r["status"] == INVALID for r in done) else 0


def _id_of(text: str) -> str | None:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    sub_id = obj.get("id") if isinstance(obj, dict) else None
    return str(sub_id) if isinstance(sub_id, str | int) and not isinstance(sub_id, bool) else None

