"""Sandbox throughput: tests per second of rlrun's judge next to what people use today.

In one run on this machine, for five workloads (a trivial stdin program, a ~50 ms CPU-bound
Python program, a C++ program, a trivial call-based test, a HumanEval-style harness of ten
asserts), it measures tests per second of

  (a) `rlrun judge --backend process`, run as a separate command on a JSONL file, timed from
      process start to exit (startup, parsing, judging and writing the output all count), and
      its marginal rate: the extra tests of a full run over a run of a tenth of them, divided by
      the extra time, which leaves out the fixed cost of starting (the rate of a long run);
  (b) the same with `--backend docker` (one long-lived container per executor, started inside
      the timed run);
  (c) one `subprocess` per test: `python -c CODE` with this interpreter (the one the judge's
      executor uses), or the compiled C++ binary, input on stdin, output compared in the parent
      (a call-based test prints the function's result as JSON; a harness test is the program,
      the harness and `check(add)` in one `python -c`, passing on exit status 0);
  (d) one `docker run --rm -i --network none IMAGE ...` per test, the same way;
  (e) for the stdin Python workloads, a plain fork server with no isolation, as one would write
      it by hand: a process of this interpreter that imports the executor's PRELOAD modules
      once, then per test makes a memfd for stdin and a pipe, forks, and runs the compiled
      program in the child with fresh std streams (no namespaces, uid, rlimits, seccomp, work
      directory or process-group kill), timed inside the process, its runs between those of
      (a), so the two see the same spells of other load. The judge's executor forks
      the same way; (a) adds the isolation and the judge's own work (frames, JSON, comparing),
      and saves per fork what such a server spends: the streams it builds in every child,
      `random`'s at-fork re-seeding in Python (the executor re-seeds from 32 bytes before
      each fork instead), and copies of the pages it writes while a child still shares them.

Next to each wall-clock rate of (a), (c) and (e) it reports the CPU time per test of every
process the method started, which does not depend on what else runs on a shared machine, and
from the CPU time per test of (a) marginal and of (e) the rates they would reach with the CPUs
to themselves.

With `--baseline REV` it also runs (a) with the `rlrun judge` of git revision REV (a temporary
`git worktree`, run as `python -m rlrun` with PYTHONPATH pointing at it, the same interpreter),
on the same tests with the same settings, the two interleaved run by run, and reports both side
by side in a second table.

Every method runs the same number of tests at once as the judge has worker slots (--workers,
default the CPU count), so the comparison is of the isolation machinery, not of parallelism.
Every test of every method must pass, or the script stops: a fast judge that gets answers wrong
measures nothing. (b) and (d) are skipped with a note when `docker info` fails or the image is
missing (build it with infra/docker/build_sandbox_image.sh).

The table goes to stdout and into this script's section of docs/benchmarks.md.

    .venv/bin/python benchmarks/sandbox_throughput.py            # full run, updates the doc
    .venv/bin/python benchmarks/sandbox_throughput.py --quick --no-write
    .venv/bin/python benchmarks/sandbox_throughput.py --smoke   # a few tests each, no docker
    .venv/bin/python benchmarks/sandbox_throughput.py --baseline HEAD~1   # also that revision
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from docs_section import SMOKE_HELP, smoke_done
from measure import cpu_name

from rlrun.sandbox.executor import PRELOAD

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- sandbox_throughput:begin -->", "<!-- sandbox_throughput:end -->"
IMAGE = "rlrun-sandbox:latest"

TRIVIAL = "a, b = map(int, input().split())\nprint(a + b)\n"
CPP = (
    "#include <cstdio>\n"
    "int main() { long long a, b; if (scanf(\"%lld %lld\", &a, &b) != 2) return 1;\n"
    "  printf(\"%lld\\n\", a + b); return 0; }\n"
)


def cpu_program(iterations: int) -> str:
    return (
        "a, b = map(int, input().split())\n"
        f"s = 0\nfor i in range({iterations}):\n    s += i * i % 7\n"
        "print(a + b)\n"
    )


def calibrate_cpu_iterations(target_s: float = 0.05) -> int:
    """Loop count that takes about `target_s` of CPU in this interpreter on this machine."""
    probe = 1_000_000
    code = f"import time\nt = time.process_time()\ns = 0\nfor i in range({probe}):\n" \
           "    s += i * i % 7\nprint(time.process_time() - t)\n"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout) for _ in range(3)]
    return max(1000, int(probe * target_s / min(runs)))


ADD = "def add(a, b):\n    return a + b\n"
# (c) and (d) of a call-based test: the program, then one call on arguments from stdin.
CALL_MAIN = "import json, sys\nprint(json.dumps(add(*json.loads(sys.stdin.read()))))\n"


@dataclass
class Workload:
    name: str
    language: str
    code: str
    n_tests: int
    n_docker_run: int
    kind: str = "stdio"  # stdio | call | harness


def cases(n: int) -> list[tuple[str, str]]:
    return [(f"{i} {2 * i + 1}\n", f"{3 * i + 1}\n") for i in range(n)]


def harness_check(i: int) -> str:
    """A HumanEval-style check of `add`, ten asserts, distinct for each test."""
    return "def check(candidate):\n" + "".join(
        f"    assert candidate({i}, {j}) == {i + j}\n" for j in range(10))


def jsonl_lines(w: Workload, n_tests: int, tests_per_sub: int) -> list[str]:
    """Submissions of `tests_per_sub` distinct tests each (distinct, so nothing is de-duplicated;
    a harness is one test). C++ programs differ by a comment per 500 tests, so a few
    compilations are part of the cost."""
    lines = []
    for k in range(0, n_tests, tests_per_sub):
        code = w.code if w.language == "python" else f"// variant {k // 500}\n{w.code}"
        line = {"id": f"{w.name}-{k}", "language": w.language, "code": code, "time_limit_s": 5}
        if w.kind == "harness":
            line.update(functional=harness_check(k), entry_point="add")
        elif w.kind == "call":
            line.update(fn_name="add", tests=[{"input": [i, 2 * i + 1], "output": 3 * i + 1}
                                              for i in range(k, min(k + tests_per_sub, n_tests))])
        else:
            line["tests"] = [{"input": i, "output": o}
                             for i, o in cases(n_tests)[k:k + tests_per_sub]]
        lines.append(json.dumps(line))
    return lines


def per_test_jobs(w: Workload, n: int, argv: list[str]) -> list[tuple[list[str], str, str]]:
    """(argv, stdin, expected stdout) of `n` tests of `w` for (c) and (d): `argv` is the command
    before the Python source (`python -c`), or the whole command of a C++ binary."""
    if w.kind == "harness":
        return [([*argv, w.code + harness_check(i) + "check(add)\n"], "", "") for i in range(n)]
    if w.kind == "call":
        return [([*argv, w.code + CALL_MAIN], json.dumps([i, 2 * i + 1]), str(3 * i + 1))
                for i in range(n)]
    full = [*argv, w.code] if w.language == "python" else argv
    return [(full, i, o) for i, o in cases(n)]


# (e): run as `python -I -S -c FORK_SERVER SPEC.json`; prints its wall and CPU seconds (its own
# and its children's) over the tests and how many tests failed, as JSON.
FORK_SERVER = """
import gc, json, os, resource, sys, time
spec = json.load(open(sys.argv[1]))
for name in spec["preload"]:
    __import__(name)
code = compile(spec["code"], "main.py", "exec")
gc.collect()
gc.freeze()
def cpu_s():
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))
t0, c0 = time.perf_counter(), cpu_s()
bad = 0
for stdin, expected in spec["cases"]:
    fd = os.memfd_create("stdin")
    os.write(fd, stdin.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(fd, 0)
        os.dup2(w, 1)
        sys.stdin, sys.stdout = open(0), open(1, "w")
        exec(code, {"__name__": "__main__"})
        sys.stdout.flush()
        os._exit(0)
    os.close(w)
    os.close(fd)
    out = b""
    while chunk := os.read(r, 1 << 16):
        out += chunk
    os.close(r)
    status = os.waitpid(pid, 0)[1]
    bad += status != 0 or out.decode().rstrip() != expected.rstrip()
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": cpu_s() - c0, "bad": bad}))
"""


def run_fork_server(w: Workload, n: int, workers: int, tmp: Path) -> tuple[float, float]:
    """(tests/s, CPU ms per test) of (e): `workers` FORK_SERVER processes at once, each on its
    share of `n` tests; the slowest one's wall time counts."""
    all_cases = cases(n)
    procs = []
    for k in range(workers):
        spec = tmp / f"fork-server-{k}.json"
        spec.write_text(json.dumps({"preload": list(PRELOAD), "code": w.code,
                                    "cases": all_cases[k::workers]}))
        procs.append(subprocess.Popen([sys.executable, "-I", "-S", "-c", FORK_SERVER, str(spec)],
                                      stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"(e) on {w.name}: a fork-server process exited "
                         f"{[p.returncode for p in procs]}")
    results = [json.loads(out) for out in outputs]
    if any(r["bad"] for r in results):
        raise SystemExit(f"(e) on {w.name}: tests failed: {results}")
    return n / max(r["wall"] for r in results), 1000 * sum(r["cpu"] for r in results) / n


def children_cpu_s() -> float:
    """CPU seconds used so far by waited-for descendants (their own descendants included)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_rlrun_judge(w: Workload, n_tests: int, backend: str, workers: int, tmp: Path,
                    tree: Path = ROOT) -> tuple[float, float]:
    """(seconds, CPU seconds) of one `rlrun judge` run on `n_tests` tests, with the rlrun of
    source tree `tree`. The CPU count covers the command, its executors and their test
    processes; for docker only what runs outside containers."""
    tests_per_sub = 1 if w.kind == "harness" else 10
    src, out = tmp / f"{w.kind}-{n_tests}.jsonl", tmp / f"{w.kind}-{backend}.out.jsonl"
    src.write_text("\n".join(jsonl_lines(w, n_tests, tests_per_sub)) + "\n")
    cmd = [sys.executable, "-m", "rlrun", "judge", str(src), "--out", str(out),
           "--backend", backend, "--workers", str(workers)]
    # Run from `tmp`: `python -m` puts the working directory first on sys.path.
    env = dict(os.environ, PYTHONPATH=str(tree))
    start, cpu = time.perf_counter(), children_cpu_s()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    elapsed, cpu = time.perf_counter() - start, children_cpu_s() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} ({tree}) exited {proc.returncode}:\n"
                         f"{proc.stderr[-3000:]}")
    results = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [r for r in results if r["status"] != "accepted"]
    judged = sum(len(r["tests"]) for r in results)
    if bad or judged != n_tests:
        raise SystemExit(f"rlrun judge --backend {backend} ({tree}) on {w.name}: {len(bad)} "
                         f"submissions not accepted, {judged}/{n_tests} tests judged; "
                         f"first: {bad[:1]}")
    return elapsed, cpu


@dataclass
class JudgeFigures:
    """Best-of-runs figures of one rlrun judge on one workload."""

    rate: float  # tests/s, start to exit
    marginal: float  # tests/s beyond the fixed cost of starting
    cpu_ms: float  # CPU ms per test, start to exit
    marginal_cpu_ms: float  # CPU ms per test beyond the fixed cost of starting


def measure_judges(w: Workload, backend: str, workers: int, tmp: Path, trees: dict[str, Path],
                   runs: int, between: Callable[[], None] | None = None
                   ) -> dict[str, JudgeFigures]:
    """Figures of each tree's `rlrun judge` on `w`: a full run and a run of a tenth of the tests
    (the fixed cost) each, `runs` times, the trees in turn (alternating which goes first), so
    all of them see the same spells of other load; `between` (another method's run) after each
    round, for the same reason. Best run of each size: the least disturbed."""
    small = max(1, w.n_tests // 10)
    times: dict[tuple[str, int], list[tuple[float, float]]] = {}
    labels = list(trees)
    for r in range(runs):
        for label in labels if r % 2 == 0 else labels[::-1]:
            for n in (w.n_tests, small):
                times.setdefault((label, n), []).append(
                    run_rlrun_judge(w, n, backend, workers, tmp, trees[label]))
        if between is not None:
            between()
    figures = {}
    for label in labels:
        (t_full, cpu_full), (t_small, cpu_small) = (
            (min(t for t, _ in times[label, n]), min(c for _, c in times[label, n]))
            for n in (w.n_tests, small))
        extra = w.n_tests - small
        figures[label] = JudgeFigures(
            rate=w.n_tests / t_full, marginal=extra / max(t_full - t_small, 1e-9),
            cpu_ms=1000 * cpu_full / w.n_tests,
            marginal_cpu_ms=1000 * max(cpu_full - cpu_small, 0.0) / extra)
    return figures


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[tuple[Path, str]]:
    """(path, short hash) of a temporary detached `git worktree` of `rev`, removed afterwards."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="rlrun-baseline-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha],
                       check=True, capture_output=True)
        try:
            found = subprocess.run([sys.executable, "-c", "import rlrun; print(rlrun.__file__)"],
                                   env=dict(os.environ, PYTHONPATH=str(path)), cwd=tmp,
                                   check=True, capture_output=True, text=True).stdout.strip()
            if not found.startswith(str(path)):
                raise SystemExit(f"PYTHONPATH={path} imports rlrun from {found}, not from {rev}")
            yield path, sha
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                           check=False, capture_output=True)


def run_per_test(jobs: list[tuple[list[str], str, str]], w: Workload, workers: int,
                 timeout_s: float = 30) -> tuple[float, float]:
    """(tests/s, CPU ms per test) of starting each job's command once, `workers` at a time,
    comparing stdout here."""
    def one(job: tuple[list[str], str, str]) -> bool:
        argv, stdin, expected = job
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=timeout_s)
        return proc.returncode == 0 and proc.stdout.rstrip() == expected.rstrip()

    start, cpu = time.perf_counter(), children_cpu_s()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, jobs))
    elapsed, cpu = time.perf_counter() - start, children_cpu_s() - cpu
    if not all(ok):
        raise SystemExit(f"{jobs[0][0][:3]}... on {w.name}: {ok.count(False)}/{len(jobs)} "
                         "tests failed")
    return len(jobs) / elapsed, 1000 * cpu / len(jobs)


def docker_ready() -> str | None:
    """None when docker and the sandbox image can be used, else why not."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "`docker info` fails (no daemon; see infra/docker/start_dockerd.sh)"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        return f"image {IMAGE} missing (infra/docker/build_sandbox_image.sh builds it)"
    return None


def best(runs: int, measure_once) -> tuple[float, float]:
    """Highest rate and lowest CPU per test of `runs` runs: on a shared machine the best run is
    the one least disturbed by other work."""
    results = [measure_once() for _ in range(runs)]
    return max(r for r, _ in results), min(c for _, c in results)


def measure(w: Workload, workers: int, tmp: Path, docker_note: str | None, runs: int,
            baseline: Path | None) -> tuple[dict[str, float], JudgeFigures | None]:
    """The row of `w` (rates and CPU per test of each method) and the baseline's (a) figures."""
    trees = {"now": ROOT} if baseline is None else {"now": ROOT, "baseline": baseline}
    plain: list[tuple[float, float]] = []

    def plain_run() -> None:
        plain.append(run_fork_server(w, w.n_tests, workers, tmp))

    # (e) runs between the rounds of (a), so both see the same spells of other load.
    stdio = w.language == "python" and w.kind == "stdio"
    judges = measure_judges(w, "process", workers, tmp, trees, runs, plain_run if stdio else None)
    now = judges["now"]
    row: dict[str, float] = {"a": now.rate, "a_marginal": now.marginal, "a_cpu": now.cpu_ms,
                             "a_marginal_cpu": now.marginal_cpu_ms}
    if plain:
        row["e"], row["e_cpu"] = max(r for r, _ in plain), min(c for _, c in plain)
    if docker_note is None:
        row["b"] = max(w.n_tests / run_rlrun_judge(w, w.n_tests, "docker", workers, tmp)[0]
                       for _ in range(runs))
    n_sub = min(w.n_tests, max(20, w.n_tests // 10))
    if w.language == "python":
        argv = [sys.executable, "-c"]
        docker_argv = ["python3", "-c"]
    else:
        # Compile once, as anyone would; the per-test cost is starting the binary.
        src, binary = tmp / "main.cpp", tmp / "main"
        src.write_text(w.code)
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", str(binary), str(src)], check=True)
        argv = [str(binary)]
        docker_argv = ["/work/main"]
    row["c"], row["c_cpu"] = best(
        runs, lambda: run_per_test(per_test_jobs(w, n_sub, argv), w, workers))
    if docker_note is None:
        mount = ["-v", f"{tmp}:/work:ro"] if w.language == "cpp" else []
        argv = ["docker", "run", "--rm", "-i", "--network", "none", *mount, IMAGE, *docker_argv]
        row["d"], _ = run_per_test(per_test_jobs(w, w.n_docker_run, argv), w, workers,
                                   timeout_s=120)
    return row, judges.get("baseline")


def table(rows: dict[str, dict[str, float]], docker_note: str | None) -> str:
    def cell(row: dict[str, float], key: str) -> str:
        return f"{row[key]:,.1f}" if key in row else "skipped"

    cpus = os.cpu_count() or 1
    lines = [
        "| workload | (a) rlrun judge, process | (a) marginal | (b) rlrun judge, docker | "
        "(c) subprocess per test | (d) docker run per test | (a) / (d) | "
        "(e) fork per test, no isolation | "
        f"CPU ms per test, (a) / (a) marginal / (c) / (e) | (a) marginal on {cpus} idle CPUs | "
        f"(e) on {cpus} idle CPUs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        ratio = f"{row['a'] / row['d']:,.0f}x" if "d" in row else "—"
        cpu = f"{row['a_cpu']:.2f} / {row['a_marginal_cpu']:.2f} / {row['c_cpu']:.2f}"
        plain, plain_idle = "—", "—"
        if "e" in row:
            cpu += f" / {row['e_cpu']:.2f}"
            plain, plain_idle = cell(row, "e"), f"{idle_rate(row['e_cpu']):,.0f}"
        lines.append(f"| {name} | {cell(row, 'a')} | {cell(row, 'a_marginal')} | "
                     f"{cell(row, 'b')} | {cell(row, 'c')} | {cell(row, 'd')} | {ratio} | "
                     f"{plain} | {cpu} | {idle_rate(row['a_marginal_cpu']):,.0f} | "
                     f"{plain_idle} |")
    if docker_note:
        lines.append(f"\n(b) and (d) skipped: {docker_note}.")
    return "\n".join(lines)


def idle_rate(cpu_ms: float) -> float:
    """Tests per second with every CPU of this machine busy at `cpu_ms` CPU ms per test."""
    return (os.cpu_count() or 1) * 1000 / max(cpu_ms, 1e-9)


def baseline_table(rows: dict[str, dict[str, float]], baselines: dict[str, JudgeFigures],
                   sha: str) -> str:
    """(a) of this tree next to (a) of the baseline revision, per workload."""
    cpus = os.cpu_count() or 1
    lines = [
        f"| workload | tests/s, {sha} / now | marginal tests/s, {sha} / now | "
        f"marginal CPU ms per test, {sha} / now | marginal on {cpus} idle CPUs, {sha} / now |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        b = baselines[name]
        lines.append(f"| {name} | {b.rate:,.1f} / {row['a']:,.1f} | "
                     f"{b.marginal:,.1f} / {row['a_marginal']:,.1f} | "
                     f"{b.marginal_cpu_ms:.2f} / {row['a_marginal_cpu']:.2f} | "
                     f"{idle_rate(b.marginal_cpu_ms):,.0f} / "
                     f"{idle_rate(row['a_marginal_cpu']):,.0f} |")
    return "\n".join(lines)


def machine() -> str:
    """The CPU model, CPU count, architecture and kernel, e.g. for the table's caption."""
    return (f"{cpu_name()}, {os.cpu_count()} CPUs ({platform.machine()}, "
            f"Linux {platform.release()})")


def write_section(body: str) -> None:
    DOC.parent.mkdir(exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    section = f"{BEGIN}\n{body}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="executor slots of the judge and parallel runs of (c) and (d)")
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--runs", type=int, default=2,
                        help="runs of (a), (b) and (c) per workload; the best one is reported")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true",
                        help=SMOKE_HELP + " ((b) and (d) skipped: docker is slow to start)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also run (a) with the rlrun judge of git revision REV (a temporary "
                        "worktree), interleaved with this tree's, and report the two side by side")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs = 1

    load = os.getloadavg()
    scale = 100 if args.smoke else 10 if args.quick else 1
    n_docker_run = 4 if args.quick else 20
    iterations = calibrate_cpu_iterations()
    workloads = [
        Workload("trivial stdin (Python a+b)", "python", TRIVIAL, 5000 // scale, n_docker_run),
        Workload("~50 ms CPU-bound Python", "python", cpu_program(iterations), 200 // scale,
                 n_docker_run),
        Workload("C++ a+b (g++ -O2)", "cpp", CPP, 2000 // scale, n_docker_run),
        Workload("call-based add(a, b)", "python", ADD, 2000 // scale, n_docker_run, "call"),
        Workload("harness: check(add), 10 asserts", "python", ADD, 1000 // scale, n_docker_run,
                 "harness"),
    ]
    docker_note = "not run in a smoke run" if args.smoke else docker_ready()
    rows, baselines = {}, {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlrun-bench-")))
        os.chmod(tmp, 0o755)  # the container's non-root user runs the C++ binary from here
        baseline, sha = stack.enter_context(worktree(args.baseline)) if args.baseline \
            else (None, "")
        for w in workloads:
            print(f"measuring {w.name} ...", file=sys.stderr)
            rows[w.name], baselines[w.name] = measure(w, args.workers, tmp, docker_note,
                                                      args.runs, baseline)
    command = " ".join(["python benchmarks/sandbox_throughput.py"]
                       + (["--quick"] if args.quick else [])
                       + ([f"--runs {args.runs}"] if args.runs != 2 else [])
                       + ([f"--workers {args.workers}"] if args.workers != os.cpu_count() else [])
                       + ([f"--baseline {args.baseline}"] if args.baseline else []))
    counts = ", ".join(f"{w.name}: {w.n_tests} tests in (a)/(b)" for w in workloads)
    body = "\n".join([
        "## Sandbox throughput (tests per second)",
        "",
        table(rows, docker_note),
        "",
        f"Tests per second, higher is better, best of {args.runs} runs of (a), (b), (c), (e) "
        f"(one of (d)); {args.workers} tests at a time in every method, on {machine()}. "
        "(a) and (b) are the `rlrun judge` command timed from start to exit, 10 tests per "
        "submission (a harness is one test: ten asserts, one submission each; it runs the "
        "program and the harness in two processes); (a) marginal is the rate beyond the "
        "fixed cost of starting: the extra tests of a full run over a run of a tenth of "
        "them, divided by the extra time (and "
        "likewise for CPU time); (c) starts `python -c` (this interpreter, the one the "
        "executor uses) or "
        "the C++ binary compiled once, per test (a call prints the function's result as JSON; "
        "a harness runs program, harness and `check(add)` in that one process); "
        "(d) starts `docker run --rm -i --network none` per test; "
        "(e), for stdin Python, is a plain fork server written by hand: a process of this "
        "interpreter with the executor's preloaded modules forks per test and runs the "
        "program with fresh std streams, stdin from a memfd and stdout to a pipe, with no "
        "isolation at all, timed inside that process, its runs between those of (a) (so its "
        "rate and CPU time compare with (a) marginal, which adds the isolation and the "
        "judge's own work and saves what such a server spends per fork: the streams it builds "
        "in every child, `random`'s at-fork re-seeding, copies of the pages it writes while a "
        "child still shares them). "
        "C++ in (a)/(b): one "
        "distinct program per 500 tests, each compiled once inside the timed run. "
        f"The CPU-bound program loops {iterations:,} times (about 50 ms here). "
        f"Load average (1 min) of the machine: {load[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end: other work shared these CPUs, so the "
        "wall-clock rates are lower bounds. CPU ms per test counts every process the method "
        "started (for (a): the command, its executors and their test processes), which other "
        "load does not change; the last two columns are the CPU count divided by the CPU "
        "time per test of (a) marginal and of (e), the rates they reach with the CPUs to "
        "themselves. "
        f"{counts}.",
    ])
    if baseline is not None:
        body += "\n".join([
            "", "",
            f"`rlrun judge --backend process` of this tree (now) and of revision {sha} (its "
            "`git worktree`, run as `python -m rlrun` with PYTHONPATH pointing at it) in the same "
            "run, on the same tests, the two interleaved run by run:",
            "",
            baseline_table(rows, baselines, sha),
        ])
    body += f"\n\nCommand: `{command}`"
    if args.smoke:
        return smoke_done("sandbox_throughput")
    print(body)
    if not args.no_write:
        write_section(body)
        print(f"\nupdated {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
