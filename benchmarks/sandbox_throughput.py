"""Sandbox throughput: tests per second of rlrun's judge next to what people use today.

In one run on this machine, for three workloads (a trivial stdin program, a ~50 ms CPU-bound
Python program, a C++ program), it measures tests per second of

  (a) `rlrun judge --backend process`, run as a separate command on a JSONL file, timed from
      process start to exit (startup, parsing, judging and writing the output all count);
  (b) the same with `--backend docker` (one long-lived container per executor, started inside
      the timed run);
  (c) one `subprocess` per test: `python -c CODE` with this interpreter (the one the judge's
      executor uses), or the compiled C++ binary, input on stdin, output compared in the parent;
  (d) one `docker run --rm -i --network none IMAGE ...` per test, the same way.

Next to each wall-clock rate of (a) and (c) it reports the CPU time per test of every process
the method started, which does not depend on what else runs on a shared machine, and from it
the rate (a) would reach with the CPUs to itself.

Every method runs the same number of tests at once as the judge has worker slots (--workers,
default the CPU count), so the comparison is of the isolation machinery, not of parallelism.
Every test of every method must pass, or the script stops: a fast judge that gets answers wrong
measures nothing. (b) and (d) are skipped with a note when `docker info` fails or the image is
missing (build it with infra/docker/build_sandbox_image.sh).

The table goes to stdout and into this script's section of docs/benchmarks.md.

    .venv/bin/python benchmarks/sandbox_throughput.py            # full run, updates the doc
    .venv/bin/python benchmarks/sandbox_throughput.py --quick --no-write
    .venv/bin/python benchmarks/sandbox_throughput.py --smoke   # a few tests each, no docker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from docs_section import SMOKE_HELP, smoke_done

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


@dataclass
class Workload:
    name: str
    language: str
    code: str
    n_tests: int
    n_docker_run: int


def cases(n: int) -> list[tuple[str, str]]:
    return [(f"{i} {2 * i + 1}\n", f"{3 * i + 1}\n") for i in range(n)]


def jsonl_lines(w: Workload, tests_per_sub: int) -> list[str]:
    """Submissions of `tests_per_sub` distinct tests each (distinct, so nothing is de-duplicated).
    C++ programs differ by a comment per 500 tests, so a few compilations are part of the cost."""
    all_cases = cases(w.n_tests)
    lines = []
    for k in range(0, w.n_tests, tests_per_sub):
        code = w.code if w.language == "python" else f"// variant {k // 500}\n{w.code}"
        tests = [{"input": i, "output": o} for i, o in all_cases[k:k + tests_per_sub]]
        lines.append(json.dumps({"id": f"{w.name}-{k}", "language": w.language, "code": code,
                                 "tests": tests, "time_limit_s": 5}))
    return lines


def children_cpu_s() -> float:
    """CPU seconds used so far by waited-for descendants (their own descendants included)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_rlrun_judge(w: Workload, backend: str, workers: int, tmp: Path) -> tuple[float, float]:
    """(tests/s, CPU ms per test) of one `rlrun judge` run. The CPU count covers the command,
    its executors and their test processes; for docker only what runs outside containers."""
    tests_per_sub = 10
    src, out = tmp / f"{w.name}-{backend}.jsonl", tmp / f"{w.name}-{backend}.out.jsonl"
    src.write_text("\n".join(jsonl_lines(w, tests_per_sub)) + "\n")
    rlrun = shutil.which("rlrun", path=str(Path(sys.executable).parent)) or "rlrun"
    cmd = [rlrun, "judge", str(src), "--out", str(out), "--backend", backend,
           "--workers", str(workers)]
    start, cpu = time.perf_counter(), children_cpu_s()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - start, children_cpu_s() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    results = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [r for r in results if r["status"] != "accepted"]
    judged = sum(len(r["tests"]) for r in results)
    if bad or judged != w.n_tests:
        raise SystemExit(f"rlrun judge --backend {backend} on {w.name}: {len(bad)} submissions "
                         f"not accepted, {judged}/{w.n_tests} tests judged; first: {bad[:1]}")
    return w.n_tests / elapsed, 1000 * cpu / w.n_tests


def run_per_test(argv_for: list[str], w: Workload, n: int, workers: int,
                 timeout_s: float = 30) -> tuple[float, float]:
    """(tests/s, CPU ms per test) of starting `argv_for` once per test, `workers` at a time,
    comparing stdout here."""
    todo = cases(n)

    def one(case: tuple[str, str]) -> bool:
        proc = subprocess.run(argv_for, input=case[0], capture_output=True, text=True,
                              timeout=timeout_s)
        return proc.returncode == 0 and proc.stdout.rstrip() == case[1].rstrip()

    start, cpu = time.perf_counter(), children_cpu_s()
    with ThreadPoolExecutor(workers) as pool:
        ok = list(pool.map(one, todo))
    elapsed, cpu = time.perf_counter() - start, children_cpu_s() - cpu
    if not all(ok):
        raise SystemExit(f"{argv_for[:3]}... on {w.name}: {ok.count(False)}/{n} tests failed")
    return n / elapsed, 1000 * cpu / n


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


def measure(w: Workload, workers: int, tmp: Path, docker_note: str | None,
            runs: int) -> dict[str, float]:
    row: dict[str, float] = {}
    row["a"], row["a_cpu"] = best(runs, lambda: run_rlrun_judge(w, "process", workers, tmp))
    if docker_note is None:
        row["b"], _ = best(runs, lambda: run_rlrun_judge(w, "docker", workers, tmp))
    n_sub = min(w.n_tests, max(20, w.n_tests // 10))
    if w.language == "python":
        argv = [sys.executable, "-c", w.code]
        docker_argv = ["python3", "-c", w.code]
    else:
        # Compile once, as anyone would; the per-test cost is starting the binary.
        src, binary = tmp / "main.cpp", tmp / "main"
        src.write_text(w.code)
        subprocess.run(["g++", "-O2", "-std=c++17", "-o", str(binary), str(src)], check=True)
        argv = [str(binary)]
        docker_argv = ["/work/main"]
    row["c"], row["c_cpu"] = best(runs, lambda: run_per_test(argv, w, n_sub, workers))
    if docker_note is None:
        mount = ["-v", f"{tmp}:/work:ro"] if w.language == "cpp" else []
        argv = ["docker", "run", "--rm", "-i", "--network", "none", *mount, IMAGE, *docker_argv]
        row["d"], _ = run_per_test(argv, w, w.n_docker_run, workers, timeout_s=120)
    return row


def table(rows: dict[str, dict[str, float]], docker_note: str | None) -> str:
    def cell(row: dict[str, float], key: str) -> str:
        return f"{row[key]:,.1f}" if key in row else "skipped"

    cpus = os.cpu_count() or 1
    lines = [
        "| workload | (a) rlrun judge, process | (b) rlrun judge, docker | "
        "(c) subprocess per test | (d) docker run per test | (a) / (d) | "
        f"CPU ms per test, (a) / (c) | (a) on {cpus} idle CPUs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        ratio = f"{row['a'] / row['d']:,.0f}x" if "d" in row else "—"
        idle = cpus * 1000 / row["a_cpu"]
        lines.append(f"| {name} | {cell(row, 'a')} | {cell(row, 'b')} | {cell(row, 'c')} | "
                     f"{cell(row, 'd')} | {ratio} | {row['a_cpu']:.2f} / {row['c_cpu']:.2f} | "
                     f"{idle:,.0f} |")
    if docker_note:
        lines.append(f"\n(b) and (d) skipped: {docker_note}.")
    return "\n".join(lines)


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
    ]
    docker_note = "not run in a smoke run" if args.smoke else docker_ready()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="rlrun-bench-") as tmp:
        os.chmod(tmp, 0o755)  # the container's non-root user runs the C++ binary from here
        for w in workloads:
            print(f"measuring {w.name} ...", file=sys.stderr)
            rows[w.name] = measure(w, args.workers, Path(tmp), docker_note, args.runs)
    command = " ".join(["python benchmarks/sandbox_throughput.py"]
                       + (["--quick"] if args.quick else [])
                       + ([f"--runs {args.runs}"] if args.runs != 2 else [])
                       + ([f"--workers {args.workers}"] if args.workers != os.cpu_count() else []))
    counts = ", ".join(f"{w.name}: {w.n_tests} tests in (a)/(b)" for w in workloads)
    body = "\n".join([
        "## Sandbox throughput (tests per second)",
        "",
        table(rows, docker_note),
        "",
        f"Tests per second, higher is better, best of {args.runs} runs of (a), (b), (c) "
        f"(one of (d)); {args.workers} tests at a time in every method, "
        f"on {os.cpu_count()} CPUs ({platform.machine()}, Linux {platform.release()}). "
        "(a) and (b) are the `rlrun judge` command timed from start to exit, 10 tests per "
        "submission; (c) starts `python -c` (this interpreter, the one the executor uses) or "
        "the C++ binary compiled once, per test; "
        "(d) starts `docker run --rm -i --network none` per test. C++ in (a)/(b): one "
        "distinct program per 500 tests, each compiled once inside the timed run. "
        f"The CPU-bound program loops {iterations:,} times (about 50 ms here). "
        f"Load average (1 min) of the machine: {load[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end: other work shared these CPUs, so the "
        "wall-clock rates are lower bounds. CPU ms per test counts every process the method "
        "started (for (a): the command, its executors and their test processes), which other "
        "load does not change; the last column is the CPU count divided by it, the rate (a) "
        "reaches with the CPUs to itself. "
        f"{counts}.",
        "",
        f"Command: `{command}`",
    ])
    if args.smoke:
        return smoke_done("sandbox_throughput")
    print(body)
    if not args.no_write:
        write_section(body)
        print(f"\nupdated {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
