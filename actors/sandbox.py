"""Ray glue for the code sandbox: `SandboxActor` holds one `Judge`, `SandboxPool` drives M of them.

The pool is the driver-side handle the trainer's reward step calls. For each batch it

1. de-duplicates identical submissions (same code, language, tests and limits: every member of
   a GRPO group that wrote the same program), so each distinct program is judged once and its
   result copied to every submission id;
2. cuts the distinct submissions into chunks and gives each chunk to the actor with the least
   outstanding work (tests not yet returned, counted over every batch in flight);
3. collects chunk results as they come back. When an actor dies, the chunks it had not returned
   are judged again on another actor and the actor is restarted (Ray restarts it up to
   `max_restarts` times; after that, or after `ray.kill`, the pool creates it anew under the same
   name). A chunk's results are taken only from the one call that returned them, so nothing is
   lost and nothing is counted twice. A chunk whose actors keep dying is split so that one
   program that brings an actor down cannot take others with it; past `max_attempts` it is
   reported as `sandbox_error`, never scored as the program's failure.

Actors are named `<name>-<i>` in the Ray namespace "rlrun" so `ray list actors` and the dashboard
show them, and they are created with the CPUs of `sandbox.num_cpus`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayError

from rlrun.config import SandboxConfig
from rlrun.records import JudgeResult, Submission, Verdict
from rlrun.sandbox import Judge
from rlrun.sandbox.dedup import dedup, expand

NAMESPACE = "rlrun"


@ray.remote
class SandboxActor:
    """One Ray process holding a `Judge` with `workers_per_actor` warm executor slots."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self._judge = Judge(backend=cfg.backend, workers=cfg.workers_per_actor, cfg=cfg)

    def judge(self, subs: list[Submission]) -> list[JudgeResult]:
        return self._judge.judge(subs)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        self._judge.close()


@dataclass
class _Chunk:
    """Distinct submissions sent to one actor in one call; `slots` index the pool's unique list."""

    slots: list[int]
    cost: int
    attempts: int = 0
    last_error: str = ""
    actor: int = -1
    generation: int = -1


@dataclass
class JudgeHandle:
    """A batch in flight: returned by `SandboxPool.submit`, redeemed by `SandboxPool.wait`."""

    subs: list[Submission]
    unique: list[Submission]
    owner: list[int]  # owner[i]: index in `unique` whose result submission i takes
    results: list[JudgeResult | None]
    pending: dict[ray.ObjectRef, _Chunk] = field(default_factory=dict)
    copies: Counter = field(default_factory=Counter)  # copies[j]: inputs that unique j stands for


@dataclass
class _Slot:
    name: str
    handle: ray.actor.ActorHandle
    generation: int = 0
    outstanding: int = 0
    judged: int = 0


class SandboxPool:
    """Driver-side handle on `cfg.num_actors` sandbox actors.

    `judge(subs)` blocks; `submit(subs)` returns at once so judging overlaps generation, and
    `wait(handle)` returns the results in input order. `stats()` reports counters for metrics.
    """

    def __init__(
        self,
        cfg: SandboxConfig,
        name: str = "sandbox",
        chunk_size: int | None = None,
        max_restarts: int = 3,
        max_attempts: int = 4,
        start_timeout_s: float = 300.0,
    ) -> None:
        if cfg.num_actors < 1:
            raise ValueError(
                f"sandbox.num_actors must be at least 1 for a pool, got {cfg.num_actors}"
            )
        if not ray.is_initialized():
            ray.init(namespace=NAMESPACE)
        self.cfg = cfg
        self.name = name
        # A chunk keeps every slot of an actor busy a few times over, so chunk boundaries cost
        # little idle time, while a dead actor only takes a few submissions' work with it.
        self.chunk_size = chunk_size or max(1, 4 * cfg.workers_per_actor)
        self.max_restarts = max_restarts
        self.max_attempts = max_attempts
        self._lock = threading.RLock()
        self._counters = {"submissions": 0, "unique": 0, "resubmitted": 0, "recreated": 0}
        self._slots = [self._create(f"{name}-{i}") for i in range(cfg.num_actors)]
        self._closed = False
        self._await_ready(start_timeout_s)

    def _create(self, actor_name: str) -> _Slot:
        options = dict(
            name=actor_name,
            namespace=NAMESPACE,
            num_cpus=self.cfg.num_cpus,
            max_restarts=self.max_restarts,
            max_task_retries=0,
            # Threads let a second chunk start on slots the first one's stragglers leave idle,
            # and a ping answer while chunks run; the Judge's slot queue bounds the real work.
            max_concurrency=4,
        )
        for _ in range(50):
            try:
                return _Slot(actor_name, SandboxActor.options(**options).remote(self.cfg))
            except ValueError as err:
                # The name of an actor that was just killed is released asynchronously.
                last = err
                time.sleep(0.1)
        raise ValueError(
            f"a Ray actor named {actor_name!r} already exists in namespace {NAMESPACE!r}; "
            f"give this SandboxPool another name= or shut the other pool down ({last})"
        )

    def _await_ready(self, timeout_s: float) -> None:
        refs = [slot.handle.ping.remote() for slot in self._slots]
        try:
            ray.get(refs, timeout=timeout_s)
        except GetTimeoutError:
            self.shutdown()
            raise TimeoutError(
                f"sandbox actors did not start within {timeout_s:.0f}s; the cluster may lack "
                f"{self.cfg.num_actors} x {self.cfg.num_cpus} free CPUs (sandbox.num_actors, "
                f"sandbox.num_cpus)"
            ) from None
        except RayActorError as err:
            self.shutdown()
            raise RuntimeError(
                f"a sandbox actor failed to start with backend {self.cfg.backend!r}: {err}"
            ) from None

    # ---------------------------------------------------------------- public API

    def judge(self, subs: list[Submission]) -> list[JudgeResult]:
        """Judge `subs`; results come back in the same order, one per submission."""
        return self.wait(self.submit(subs))

    def submit(self, subs: list[Submission]) -> JudgeHandle:
        """Start judging `subs` and return at once; redeem the handle with `wait`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("SandboxPool.submit called after shutdown()")
            unique, owner = dedup(subs)
            handle = JudgeHandle(list(subs), unique, owner, [None] * len(unique),
                                 copies=Counter(owner))
            self._counters["submissions"] += len(subs)
            self._counters["unique"] += len(unique)
            for start in range(0, len(unique), self.chunk_size):
                slots = list(range(start, min(start + self.chunk_size, len(unique))))
                cost = sum(max(1, unique[i].tests.count()) for i in slots)
                self._dispatch(handle, _Chunk(slots, cost))
            return handle

    def wait(
        self,
        handle: JudgeHandle,
        timeout_s: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[JudgeResult]:
        """Block until every submission of `handle` is judged; results in input order.

        `progress(n)` is called as results arrive, with the number of input submissions they
        cover, so a caller can drive a progress bar.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while handle.pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(handle.pending), num_returns=1, timeout=remaining)
            if not ready:
                raise TimeoutError(
                    f"{sum(len(c.slots) for c in handle.pending.values())} submissions still "
                    f"being judged after {timeout_s}s"
                )
            for ref in ready:
                done = self._collect(handle, ref)
                if progress is not None and done:
                    progress(sum(handle.copies[j] for j in done))
        missing = [j for j, res in enumerate(handle.results) if res is None]
        if missing:
            raise RuntimeError(f"internal error: {len(missing)} submissions were never judged")
        return expand(handle.subs, handle.owner, handle.results)

    def stats(self) -> dict[str, int]:
        """Counters since start: submissions, unique, resubmitted, recreated, judged per actor."""
        with self._lock:
            out = dict(self._counters)
            for i, slot in enumerate(self._slots):
                out[f"judged_by_{i}"] = slot.judged
            return out

    def actor_names(self) -> list[str]:
        return [slot.name for slot in self._slots]

    def shutdown(self) -> None:
        """Close every actor's executors (stopping docker containers) and kill the actors."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            closes = [slot.handle.close.remote() for slot in self._slots]
            try:
                ray.get(closes, timeout=30)
            except RayError:
                pass  # an actor that is already dead has nothing left to close
            for slot in self._slots:
                ray.kill(slot.handle, no_restart=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ---------------------------------------------------------------- internals

    def _dispatch(self, handle: JudgeHandle, chunk: _Chunk, avoid: int = -1) -> None:
        candidates = [i for i in range(len(self._slots)) if i != avoid] or [avoid]
        idx = min(candidates, key=lambda i: self._slots[i].outstanding)
        slot = self._slots[idx]
        chunk.actor, chunk.generation = idx, slot.generation
        slot.outstanding += chunk.cost
        ref = slot.handle.judge.remote([handle.unique[i] for i in chunk.slots])
        handle.pending[ref] = chunk

    def _collect(self, handle: JudgeHandle, ref: ray.ObjectRef) -> set[int]:
        """Take one returned chunk; re-dispatch it on failure. Returns the unique slots filled."""
        with self._lock:
            chunk = handle.pending.pop(ref)
            slot = self._slots[chunk.actor]
            if slot.generation == chunk.generation:
                slot.outstanding -= chunk.cost
            try:
                results = ray.get(ref)
            except RayActorError as err:
                self._recover(chunk.actor, chunk.generation)
                return self._retry(handle, chunk, f"sandbox actor {slot.name} died: {err}")
            except RayError as err:
                return self._retry(handle, chunk, f"sandbox actor {slot.name} failed: {err}")
            if len(results) != len(chunk.slots):
                return self._retry(
                    handle, chunk,
                    f"sandbox actor {slot.name} returned {len(results)} results "
                    f"for {len(chunk.slots)} submissions",
                )
            for i, res in zip(chunk.slots, results, strict=True):
                handle.results[i] = res
            slot.judged += len(chunk.slots)
            return set(chunk.slots)

    def _retry(self, handle: JudgeHandle, chunk: _Chunk, error: str) -> set[int]:
        chunk.attempts += 1
        chunk.last_error = error[:2000]
        if chunk.attempts >= self.max_attempts:
            for i in chunk.slots:
                handle.results[i] = _sandbox_error(handle.unique[i], chunk)
            return set(chunk.slots)
        self._counters["resubmitted"] += len(chunk.slots)
        # After a second failure, judge each submission alone: if one program is what brings
        # actors down, only it runs out of attempts.
        parts = [chunk.slots] if chunk.attempts < 2 else [[i] for i in chunk.slots]
        for slots in parts:
            cost = sum(max(1, handle.unique[i].tests.count()) for i in slots)
            part = _Chunk(slots, cost, chunk.attempts, chunk.last_error)
            self._dispatch(handle, part, avoid=chunk.actor)
        return set()

    def _recover(self, idx: int, generation: int) -> None:
        """Make slot `idx` usable again: wait for Ray's restart, or create the actor anew."""
        slot = self._slots[idx]
        if slot.generation != generation:
            return  # another failed chunk already replaced this incarnation
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                ray.get(slot.handle.ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return
            except ActorUnavailableError:
                time.sleep(0.2)  # Ray is restarting it: calls fail fast until it is back
            except (RayError, GetTimeoutError):
                break
        ray.kill(slot.handle, no_restart=True)
        fresh = self._create(slot.name)
        fresh.generation = slot.generation + 1
        fresh.judged = slot.judged
        self._slots[idx] = fresh
        self._counters["recreated"] += 1


def _sandbox_error(sub: Submission, chunk: _Chunk) -> JudgeResult:
    detail = f"not judged after {chunk.attempts} attempts; last error: {chunk.last_error}"
    return JudgeResult(
        id=sub.id,
        status="sandbox_error",
        passed=0,
        total=sub.tests.count(),
        tests=[Verdict(status="sandbox_error", detail=detail)],
    )
