"""The judge: W warm executor slots driven from threads, verdicts computed on this side.

`Judge.judge(subs)` spreads submissions over the slots (one submission at a time per slot) and
returns one `JudgeResult` per submission, in order. For each submission it plans the tests
(stdio, then call-based, then the harness), compiles C++ once (cached by source hash), sends
the tests to the slot's executor in growing chunks (4, 8, 16 with `stop_on_first_failure`; the
executor itself stops a chunk at the first crash or timeout), and turns every raw result into
a `Verdict` by comparing here: the executor never sees an expected output.

A broken executor (it died, hung past the request deadline, or a child died inside our setup
code before the program ran) is restarted and the chunk re-run up to `sandbox.retries` times;
after that the tests get `sandbox_error`, which the reward layer never scores as the model's
failure. Nothing a program does can produce a `sandbox_error`.

`make_submission(problem, code, cfg)` turns a completion into a `Submission`: limits from the
problem capped by the config, a deterministic subset of at most `sandbox.max_tests` tests, and
for harness problems the problem's `code_prefix` (HumanEval's signature) before the code.
"""

from __future__ import annotations

import json
import os
import queue
import random
import select
import signal
import struct
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from rlrun.config import SandboxConfig
from rlrun.errors import short_repr
from rlrun.records import JudgeResult, Problem, Submission, Tests, Verdict
from rlrun.sandbox.backends import Launch, make_launch
from rlrun.sandbox.compare import outputs_match, values_equal
from rlrun.sandbox.cpp import CompileCache, CompileOutcome, compile_argv, source_key
from rlrun.sandbox.executor import NotPlainData, decode_plain, encode_plain, stdout_holders
from rlrun.sandbox.harness import PreparedHarness, prepare_harness, with_prompt_definitions

HEAD = 256  # characters of stdout/stderr kept in a verdict
# With stop_on_first_failure the executor stops a chunk at the first crash or timeout itself,
# so only a wrong answer (which only the judge can see) costs up to FIRST_CHUNK - 1 extra runs.
FIRST_CHUNK = 4
MAX_CHUNK = 16
MAX_CHUNK_INPUT = 32 << 20  # characters of stdin per request
START_TIMEOUT_S = 120.0  # a docker container can take a while to start on a busy host


class ExecutorFailure(RuntimeError):
    """The executor process failed us (died, hung, broke the protocol)."""


@dataclass(frozen=True)
class _Binary:
    """A compiled program as its submission holds it: the compile cache's key and the bytes, so
    the cache may drop it while the submission's tests still need it."""

    key: str
    data: bytes


@dataclass
class _Case:
    kind: str  # stdio | call | harness
    payload: dict[str, Any]
    expected: Any


class ExecutorSlot:
    """One executor process and the pipe protocol to it; used by one thread at a time."""

    def __init__(self, backend: str, cfg: SandboxConfig) -> None:
        self.backend = backend
        self.cfg = cfg
        self.proc: subprocess.Popen[bytes] | None = None
        self.launch: Launch | None = None
        self.info: dict[str, Any] = {}
        self.binaries: set[str] = set()
        self._stderr: Any = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.stop()
        launch = make_launch(self.backend, self.cfg)
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            launch.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=launch.env, bufsize=0, start_new_session=True,
        )
        self.launch = launch
        init = dict(launch.init)
        if launch.uid_from_pid:
            init["uid"] = init["gid"] = self.cfg.uid_base + self.proc.pid
        try:
            reply = self.request(init, START_TIMEOUT_S)
        except ExecutorFailure as e:
            raise ExecutorFailure(f"the {self.backend} sandbox executor did not start "
                                  f"(`{' '.join(launch.argv)}`): {e}") from e
        if not reply.get("ok"):
            raise ExecutorFailure(f"the {self.backend} sandbox executor failed to set up its "
                                  f"isolation: {reply.get('error')}")
        self.info = dict(reply, isolation=launch.isolation)
        self.binaries = set()

    def ensure(self) -> None:
        if not self.alive():
            self.start()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            # A killed `docker run` client can leave its container running.
            name = _container_name(self.launch)
            if name:
                subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        if proc.stdout:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 2000))
        return self._stderr.read().decode("utf-8", "replace")

    def request(self, obj: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request and wait for its reply; ExecutorFailure on any fault."""
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise ExecutorFailure("executor is not running")
        data = json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogateescape")
        try:
            view = memoryview(struct.pack(">I", len(data)) + data)
            while view:
                view = view[os.write(proc.stdin.fileno(), view):]
        except OSError as e:
            raise ExecutorFailure(f"executor closed its input ({e}); {self.stderr_tail()}") from e
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        head = self._read(fd, 4, deadline)
        (n,) = struct.unpack(">I", head)
        body = self._read(fd, n, deadline)
        try:
            reply = json.loads(body.decode("utf-8", "surrogateescape"))
            sizes = reply.pop("stdout_bytes", [])
            holders = stdout_holders(reply)
            if len(sizes) != len(holders) or not all(type(k) is int and k >= 0 for k in sizes):
                raise ValueError("its stdout sizes do not match its results")
        except (ValueError, AttributeError, TypeError) as e:
            raise ExecutorFailure(f"executor sent a malformed reply: {e}") from e
        # The stdouts follow the frame as raw bytes (see executor.send_reply).
        outs = memoryview(self._read(fd, sum(sizes), deadline) if sizes else b"")
        pos = 0
        for holder, size in zip(holders, sizes, strict=True):
            holder["stdout"] = outs[pos:pos + size]
            pos += size
        return reply

    def _read(self, fd: int, n: int, deadline: float) -> bytearray:
        # Read into one buffer of the final size: growing one (and os.read's buffer of the
        # remaining size per call) left a reply's worth of freed blocks behind in the allocator.
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExecutorFailure(f"executor did not reply within the deadline "
                                      f"({self.backend} backend)")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            k = os.readv(fd, [view[got:]])
            if not k:
                code = self.proc.poll() if self.proc else None
                raise ExecutorFailure(f"executor exited (status {code}): {self.stderr_tail()}")
            got += k
        return buf


def _container_name(launch: Launch | None) -> str | None:
    if launch is None or not launch.argv or os.path.basename(launch.argv[0]) != "docker":
        return None
    return launch.argv[launch.argv.index("--name") + 1]


class Judge:
    """Runs submissions in W warm executor slots of `backend` (process | bwrap | docker)."""

    def __init__(self, backend: str = "process", workers: int = 2,
                 cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self.backend = backend
        if workers < 1:
            raise ValueError(f"Judge needs at least one worker slot, got workers={workers}")
        self._slots = [ExecutorSlot(backend, self.cfg) for _ in range(workers)]
        try:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda s: s.start(), self._slots))
        except BaseException:
            for slot in self._slots:
                slot.stop()
            raise
        self._free: queue.Queue[ExecutorSlot] = queue.Queue()
        for slot in self._slots:
            self._free.put(slot)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rlrun-judge")
        self._compiles = CompileCache()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def isolation(self) -> dict[str, Any]:
        """What the first slot reported about its isolation (fs, seccomp, uid, PID 1)."""
        return dict(self._slots[0].info)

    @property
    def slot_info(self) -> list[dict[str, Any]]:
        """What each slot reported at its last start (its test uid among them)."""
        return [dict(slot.info) for slot in self._slots]

    def judge(self, subs: list[Submission]) -> list[JudgeResult]:
        """Judge every submission; results in the same order."""
        if self._closed:
            raise RuntimeError("this Judge is closed")
        return list(self._pool.map(self._judge_on_free_slot, subs))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True)
        for slot in self._slots:
            slot.stop()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one submission -----------------------------------------------------------------------

    def _judge_on_free_slot(self, sub: Submission) -> JudgeResult:
        slot = self._free.get()
        try:
            return self._judge_one(slot, sub)
        finally:
            self._free.put(slot)

    def _judge_one(self, slot: ExecutorSlot, sub: Submission) -> JudgeResult:
        cases = _plan(sub)
        total = len(cases)
        if total == 0:
            raise ValueError(f"submission {sub.id} has no tests to run")
        binary: _Binary | None = None
        if sub.language == "cpp" and any(c.kind != "stdio" for c in cases):
            detail = "call-based and harness tests run Python functions; this program is C++"
            return _result(sub.id, total, [Verdict("wrong_answer", detail=detail)])
        if sub.language == "cpp":
            key, outcome = self._compile(slot, sub.code)
            if outcome is None:
                return _result(sub.id, total, [Verdict("sandbox_error", detail=key)] * total)
            if not outcome.ok:
                # The first errors: the later ones are often what the first one caused.
                detail = "compile timed out" if outcome.timed_out else outcome.stderr[:1500]
                return _result(sub.id, total, [Verdict("compile_error", detail=detail)] * total)
            binary = _Binary(key, outcome.binary)
        verdicts: list[Verdict] = []
        stop = self.cfg.stop_on_first_failure
        chunk = FIRST_CHUNK if stop else MAX_CHUNK
        i = 0
        while i < total:
            batch = _take(cases[i:i + chunk])
            raw = self._run_batch(slot, sub, batch, binary, stop)
            for case, r in zip(batch, raw, strict=False):
                v = r if isinstance(r, Verdict) else _verdict(case, r, sub)
                verdicts.append(v)
                if stop and v.status != "accepted":
                    return _result(sub.id, total, verdicts)
            if len(raw) < len(batch):
                detail = "the executor stopped a chunk after a test that passed"
                return _result(sub.id, total, [*verdicts, Verdict("sandbox_error", detail=detail)])
            i += len(batch)
            chunk = min(chunk * 2, MAX_CHUNK)
        return _result(sub.id, total, verdicts)

    def _run_batch(self, slot: ExecutorSlot, sub: Submission, batch: list[_Case],
                   binary: _Binary | None,
                   stop: bool) -> list[dict[str, Any] | Verdict]:
        """Run `batch` on `slot`: `sub`'s Python code, or its compiled `binary`."""
        req: dict[str, Any] = {"op": "run", "tests": [c.payload for c in batch],
                               "stop_on_abnormal": stop}
        if binary is None:
            req.update(lang="python", code=sub.code)
        else:
            req.update(lang="binary", binary=binary.key)
        timeout = sum(float(c.payload["time_limit_s"]) + 2.0 for c in batch) + 10.0
        error = ""
        for _ in range(self.cfg.retries + 1):
            try:
                slot.ensure()
                if binary is not None and binary.key not in slot.binaries:
                    self._put_binary(slot, binary)
                reply = slot.request(req, timeout)
                if not reply.get("ok"):
                    if "missing_binary" in reply:
                        slot.binaries.discard(binary.key if binary else "")
                        error = "the executor lost the compiled binary"
                        continue
                    raise ExecutorFailure(f"executor error: {reply.get('error')}")
                results = reply["results"]
                broken = [r for r in results if not r.get("ready")]
                if broken:
                    raise ExecutorFailure("a test process died in sandbox setup: "
                                          + (broken[0].get("start_error") or
                                             broken[0].get("stderr", "")[-500:]))
                return results
            except ExecutorFailure as e:
                error = str(e)
                slot.stop()
        return [Verdict("sandbox_error", detail=error[-1000:]) for _ in batch]

    def _put_binary(self, slot: ExecutorSlot, binary: _Binary) -> None:
        reply = slot.request({"op": "put_binary", "hash": binary.key,
                              "binary_hex": binary.data.hex()}, 60.0)
        if not reply.get("ok"):
            raise ExecutorFailure(f"executor could not store the binary: {reply.get('error')}")
        slot.binaries.add(binary.key)

    def _compile(self, slot: ExecutorSlot, source: str) -> tuple[str, CompileOutcome | None]:
        argv = compile_argv(self.cfg.cpp_compiler, list(self.cfg.cpp_flags))
        key = source_key(source, argv)
        outcome = self._compiles.get(key)
        if outcome is not None:
            return key, outcome
        with self._compiles.lock(key):
            outcome = self._compiles.get(key)
            if outcome is not None:
                return key, outcome
            req = {"op": "compile", "hash": key, "source": source, "argv": argv,
                   "time_limit_s": self.cfg.compile_time_limit_s,
                   "memory_limit_mb": self.cfg.compile_memory_limit_mb, "return_binary": True}
            error = ""
            for _ in range(self.cfg.retries + 1):
                try:
                    slot.ensure()
                    reply = slot.request(req, self.cfg.compile_time_limit_s + 30.0)
                    if not reply.get("ok"):
                        raise ExecutorFailure(f"executor error: {reply.get('error')}")
                    if reply.get("start_error"):
                        return (f"the C++ compiler {self.cfg.cpp_compiler!r} could not be "
                                f"started: {reply['start_error']}"), None
                    break
                except ExecutorFailure as e:
                    error = str(e)
                    slot.stop()
            else:
                return error, None
            binary = bytes.fromhex(reply.get("binary_hex", "")) if reply["compiled"] else b""
            outcome = CompileOutcome(bool(reply["compiled"]), reply.get("stderr", ""), binary,
                                     bool(reply.get("timed_out")))
            if outcome.ok:
                slot.binaries.add(key)
            self._compiles.put(key, outcome)
            return key, outcome


# ---------------------------------------------------------------------------------------------
# Planning and verdicts.

def _plan(sub: Submission) -> list[_Case]:
    tests = sub.tests
    limits = {"time_limit_s": sub.time_limit_s, "memory_limit_mb": sub.memory_limit_mb}
    cases = [_Case("stdio", dict(limits, mode="stdio", stdin=t.input), t.output)
             for t in tests.stdio]
    if tests.calls and not tests.fn_name:
        raise ValueError(f"submission {sub.id}: call-based tests need tests.fn_name")
    for t in tests.calls:
        try:
            args = encode_plain(list(t.args))
        except NotPlainData as e:
            raise ValueError(f"submission {sub.id}: call test arguments must be JSON data: {e}") \
                from e
        cases.append(_Case("call", dict(limits, mode="call", fn_name=tests.fn_name, args=args),
                           t.expected))
    if tests.harness:
        prepared = prepare_harness(tests.harness, tests.entry_point)
        cases.append(_Case("harness", dict(limits, mode="harness", harness=prepared.source,
                                           entry_point=tests.entry_point,
                                           call_check=prepared.call_check,
                                           names=prepared.names), prepared))
    return cases


def _take(cases: list[_Case]) -> list[_Case]:
    """The leading cases whose inputs fit in one request (at least one)."""
    size = 0
    for n, case in enumerate(cases):
        size += len(case.payload.get("stdin", ""))
        if size > MAX_CHUNK_INPUT and n > 0:
            return cases[:n]
    return cases


def _result(sub_id: str, total: int, verdicts: list[Verdict]) -> JudgeResult:
    passed = sum(v.status == "accepted" for v in verdicts)
    failed = next((v.status for v in verdicts if v.status != "accepted"), None)
    if failed is None and len(verdicts) < total:
        failed = "sandbox_error"
    return JudgeResult(sub_id, failed or "accepted", passed, total, verdicts)


def _abnormal(r: dict[str, Any], sub: Submission) -> tuple[str, str] | None:
    """The verdict of a test that did not end normally, or None if it did."""
    excs = [f.get("t") for f in r.get("frames", []) if isinstance(f, dict) and f.get("k") == "exc"]
    sig, stderr = r.get("signal"), r.get("stderr", "")
    limit_kb = sub.memory_limit_mb * 1024
    if r.get("output_exceeded"):
        return "output_limit", "output over sandbox.output_limit_mb"
    if r.get("timed_out"):
        return "time_limit", f"wall-clock limit {sub.time_limit_s:g}s"
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and r.get("cpu_s", 0) >= sub.time_limit_s):
        return "time_limit", f"CPU limit {sub.time_limit_s:g}s"
    if "MemoryError" in excs:
        return "memory_limit", f"memory limit {sub.memory_limit_mb} MB"
    if sig is not None:
        if "bad_alloc" in stderr or r.get("maxrss_kb", 0) >= 0.9 * limit_kb:
            return "memory_limit", f"memory limit {sub.memory_limit_mb} MB"
        if sig == signal.SIGXFSZ:
            return "runtime_error", "file size limit exceeded"
        return "runtime_error", f"killed by signal {sig}"
    if r.get("exit_code") != 0:
        if "bad_alloc" in stderr:
            return "memory_limit", f"memory limit {sub.memory_limit_mb} MB"
        return "runtime_error", f"exit status {r.get('exit_code')}"
    if r.get("frame_error"):
        return "runtime_error", f"the program corrupted the result pipe ({r['frame_error']})"
    return None


def _verdict(case: _Case, r: dict[str, Any], sub: Submission) -> Verdict:
    stdout = r.get("stdout", b"")
    base = Verdict("accepted", time_s=round(r.get("wall_s", 0.0), 6),
                   memory_mb=round(r.get("maxrss_kb", 0) / 1024, 2),
                   stdout_head=_printable(_text(stdout[:4 * HEAD + 4])[:HEAD]),
                   stderr_head=r.get("stderr", "")[-HEAD:])
    if case.kind == "harness":
        return _harness_verdict(base, case.expected, r, sub)
    abnormal = _abnormal(r, sub)
    if abnormal is not None:
        status, detail = abnormal
        return replace(base, status=status, detail=detail)
    if case.kind == "stdio":
        ok = outputs_match(_text(stdout), case.expected, sub.tests.float_tolerance,
                           sub.tests.case_insensitive)
        return base if ok else replace(base, status="wrong_answer", detail="output differs")
    return _call_verdict(base, case, r, sub.tests)


def _text(stdout: bytes | memoryview) -> str:
    """A program's output as text that compares byte for byte: the bytes that are not UTF-8
    are kept, as lone surrogates. (A UTF-8 character takes at most four bytes, so `4 * k + 4`
    bytes decode to at least the first `k` characters of the whole.)"""
    return str(stdout, "utf-8", "surrogateescape")


def _printable(stdout: str) -> str:
    """`stdout` with the bytes that are not UTF-8 (kept as lone surrogates to compare outputs
    byte for byte) shown as U+FFFD: a verdict's text goes into observations a tokenizer encodes
    and into files, where a lone surrogate cannot be written."""
    return stdout.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _harness_verdict(base: Verdict, prepared: PreparedHarness, r: dict[str, Any],
                     sub: Submission) -> Verdict:
    """A harness test's verdict from the reports of its harness process, which never ran
    program code; the program's process (`r` itself) only explains why the harness lost it."""
    h = r["harness"]
    frames = [f for f in h.get("frames", []) if isinstance(f, dict)]
    base = replace(base, stderr_head=(r.get("stderr", "") + h.get("stderr", ""))[-HEAD:])
    if r.get("output_exceeded"):
        return replace(base, status="output_limit", detail="output over sandbox.output_limit_mb")
    if r.get("timed_out"):
        return replace(base, status="time_limit", detail=f"wall-clock limit {sub.time_limit_s:g}s")
    failed = _harness_failure(prepared, frames)
    if failed:
        return replace(base, status="wrong_answer", detail=failed)
    gone = next((f for f in frames if f.get("k") == "gone"), None)
    if gone is not None:
        if gone.get("s") == "output_limit":
            return replace(base, status="output_limit", detail=str(gone.get("m", ""))[:200])
        # The program's process ended or broke the protocol: its own end says why, unless it
        # was still running when the harness gave up on it.
        own = None if r.get("killed") else _abnormal(r, sub)
        if own is not None:
            return replace(base, status=own[0], detail=own[1])
        return replace(base, status="wrong_answer", detail=str(gone.get("m", ""))[:200])
    abnormal = _abnormal(h, sub)
    if abnormal is not None:
        status, detail = abnormal
        if status == "runtime_error":
            raised = next((f.get("t") for f in frames if f.get("k") == "exc"), None)
            if raised:
                detail = f"the harness stopped on {raised}"
        return replace(base, status=status, detail=detail)
    if not any(f.get("k") == "done" for f in frames):
        return replace(base, status="wrong_answer",
                       detail="the harness did not run to completion")
    seen = {f.get("i") for f in frames if f.get("k") == "site"}
    missing = [s for s in prepared.sites if s.required and s.index not in seen]
    if missing:
        return replace(base, status="wrong_answer",
                       detail=f"the check at harness line {missing[0].line} never ran")
    return base


def _call_verdict(base: Verdict, case: _Case, r: dict[str, Any], tests: Tests) -> Verdict:
    frames = [f for f in r.get("frames", []) if isinstance(f, dict)]
    rets = [f for f in frames if f.get("k") == "ret"]
    if any(f.get("k") == "notplain" for f in frames):
        return replace(base, status="wrong_answer", detail="the return value is not plain data")
    if len(rets) != 1:
        return replace(base, status="runtime_error", detail="the function returned no value")
    try:
        value = decode_plain(rets[0].get("v"))
    except (NotPlainData, TypeError, ValueError, RecursionError):
        return replace(base, status="wrong_answer", detail="the return value is not plain data")
    if values_equal(value, case.expected, tests.float_tolerance):
        return base
    return replace(base, status="wrong_answer", detail=f"returned {short_repr(value)}")


def _harness_failure(prepared: PreparedHarness, frames: list[dict[str, Any]]) -> str:
    """Why the harness process's reports fail the test ("" if every reported check held and
    nothing the program returned was refused as data)."""
    sites = prepared.sites
    for f in frames:
        kind = f.get("k")
        if kind == "np":
            return f"the program returned a value that is not plain data ({str(f.get('m'))[:100]})"
        if kind == "unsupported":
            return (f"the harness passes {str(f.get('m'))[:100]} to the program, which the "
                    "sandbox cannot hand across processes: only plain data and the program's "
                    "own objects can be passed")
        if kind != "site":
            continue
        i = f.get("i")
        if type(i) is not int or not 0 <= i < len(sites):
            return "the harness reported a check it does not have"
        site = sites[i]
        where = f"the check at harness line {site.line}"
        if "np" in f:
            return f"{where} got a value that is not plain data ({str(f['np'])[:100]})"
        try:
            value = decode_plain(f.get("v"))
            if site.kind == "eq_literal":
                ok = value == site.expected
            elif site.kind == "eq_pair":
                ok = type(value) is tuple and len(value) == 2 and value[0] == value[1]
            else:
                ok = bool(value)
        except (NotPlainData, TypeError, ValueError, RecursionError):
            return f"{where} got a malformed value"
        if not ok:
            return f"{where} failed (got {short_repr(value)})"
    return ""


# ---------------------------------------------------------------------------------------------
# Submissions from problems.

def judged_tests(problem: Problem, tests: Tests, max_tests: int | None) -> Tests:
    """The tests of `problem` a submission runs: all of them, or a subset of `max_tests` that
    depends only on the problem's id (the same every time, for every program)."""
    if max_tests is None or tests.count() <= max_tests:
        return tests
    budget = max(0, max_tests - (1 if tests.harness else 0))
    pool = [("stdio", i) for i in range(len(tests.stdio))] + \
           [("call", i) for i in range(len(tests.calls))]
    rng = random.Random(f"rlrun:{problem.id}")
    keep = sorted(rng.sample(range(len(pool)), min(budget, len(pool))))
    chosen = [pool[k] for k in keep]
    return replace(tests, stdio=[tests.stdio[i] for kind, i in chosen if kind == "stdio"],
                   calls=[tests.calls[i] for kind, i in chosen if kind == "call"])


def make_submission(problem: Problem, code: str, cfg: SandboxConfig, language: str | None = None,
                    sub_id: str | None = None) -> Submission:
    """A submission of `code` for `problem`, with limits and the test subset from `cfg`."""
    if problem.tests is None or problem.tests.count() == 0:
        raise ValueError(f"problem {problem.id!r} has no tests, so code for it cannot be judged")
    lang = language or problem.language
    if lang not in ("python", "cpp"):
        raise ValueError(f"problem {problem.id!r}: language {lang!r} is not python or cpp")
    tests = judged_tests(problem, problem.tests, cfg.max_tests)
    if tests.harness and problem.code_prefix and lang == "python":
        prefix = problem.code_prefix
        code = prefix + ("" if prefix.endswith("\n") else "\n") + code
        tests = replace(tests, harness=with_prompt_definitions(tests.harness, prefix,
                                                                tests.entry_point))
    time_limit = min(problem.time_limit_s or cfg.time_limit_s, cfg.max_time_limit_s)
    memory = min(problem.memory_limit_mb or cfg.memory_limit_mb, cfg.max_memory_limit_mb)
    return Submission(id=sub_id or problem.id, code=code, language=lang, tests=tests,  # type: ignore[arg-type]
                      time_limit_s=float(time_limit), memory_limit_mb=int(memory))
