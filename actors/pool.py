"""A fixed number of actors of one role: chunked dispatch, ordered results, bounded retries.

`ActorPool` is the one piece of fault handling the rollout and sandbox groups share:

1. `submit` cuts a request's items into chunks and sends each to the actor with the least
   outstanding work (ties go to the lowest slot, so one actor gets chunks 0, 1, ... in order);
2. `wait` collects the chunks and returns one result per item, in item order. A chunk whose
   actor died, or did not answer within `timeout_s` (then it is killed: a hung actor is as good
   as dead), goes to a replacement actor started in the same slot; `on_restart` runs on every
   replacement before anything else is sent to it (the rollout group loads the current weights
   there). A chunk's results are taken from exactly one call, so nothing is lost or counted
   twice. After `max_attempts` calls a chunk either fails the request with one line naming the
   actor and what it was doing, or, with `give_up`, its items get a stand-in result (the sandbox
   reports `sandbox_error`, never a program's failure); with `split_after`, a chunk that failed
   that often is retried one item at a time, so one item that kills actors takes only itself
   down.

Actors are named `<prefix>-<slot>` (a replacement: `<prefix>-<slot>.<n>`), where the prefix
carries the run's name, so `ray list actors` and the dashboard tell runs and roles apart and two
runs on one cluster never collide.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
    RayError,
)

from actors.stacks import actor_stack

# How long a replacement actor may take to start: a Ray worker process and a model load, which
# for a vLLM engine on a large model takes minutes.
ACTOR_START_TIMEOUT_S = 1800.0

log = logging.getLogger(__name__)

# Errors after which an actor is replaced: it died, or Ray cannot reach it.
DEAD = (RayActorError, ActorDiedError, ActorUnavailableError)


class PoolError(RuntimeError):
    """A request could not be completed within the pool's attempts."""


@dataclass
class Chunk:
    """Items sent to one actor in one call."""

    start: int  # offset of its first item in the request
    items: list[Any]
    ordinal: int  # its place among the request's chunks as first cut (a split keeps it)
    cost: float
    attempts: int = 0
    error: str = ""
    slot: int = -1
    incarnation: int = -1
    deadline: float = 0.0


@dataclass
class Request:
    """A request in flight: `ActorPool.submit` returns it, `ActorPool.wait` redeems it."""

    call: Callable[[Any, Chunk], Any]
    what: str  # what the actors are doing, for error messages ("generate", "judge")
    results: list[Any]
    pending: dict[Any, Chunk] = field(default_factory=dict)


@dataclass
class _Slot:
    name: str
    actor: Any
    incarnation: int = 0
    outstanding: float = 0.0
    done: int = 0  # items this slot has returned results for, over its incarnations


class ActorPool:
    """`size` actors, the one in slot i made by `start(i, name)`; see the module docstring.

    `timeout_s` bounds every call (`timeout_key` is the config key that sets it, named in the
    error). Thread-safe: a request may be waited on while another thread submits.
    """

    def __init__(
        self,
        start: Callable[[int, str], Any],
        size: int,
        *,
        prefix: str,
        role: str,
        timeout_s: float,
        timeout_key: str,
        max_attempts: int = 3,
        on_restart: Callable[[Any], None] | None = None,
        give_up: Callable[[Any, str], Any] | None = None,
        split_after: int | None = None,
    ) -> None:
        self._start = start
        self.prefix, self.role = prefix, role
        self.timeout_s, self.timeout_key = timeout_s, timeout_key
        self.max_attempts = max_attempts
        self.on_restart, self.give_up, self.split_after = on_restart, give_up, split_after
        self.restarts = 0  # actors replaced
        self.retried = 0  # items sent again after a failed call
        self._lock = threading.RLock()
        self._slots = [_Slot(f"{prefix}-{i}", start(i, f"{prefix}-{i}")) for i in range(size)]

    @property
    def actors(self) -> list[Any]:
        with self._lock:
            return [slot.actor for slot in self._slots]

    def names(self) -> list[str]:
        with self._lock:
            return [slot.name for slot in self._slots]

    def exclusive(self) -> threading.RLock:
        """Held, no other thread sends a call to the pool's actors (`with pool.exclusive():`)."""
        return self._lock

    def slots(self) -> list[tuple[Any, int, str]]:
        """(actor, incarnation, name) of every slot; `replace` takes an incarnation back."""
        with self._lock:
            return [(slot.actor, slot.incarnation, slot.name) for slot in self._slots]

    def done_per_slot(self) -> list[int]:
        """Items each slot has returned results for since the pool started."""
        with self._lock:
            return [slot.done for slot in self._slots]

    def submit(
        self,
        items: Sequence[Any],
        call: Callable[[Any, Chunk], Any],
        *,
        chunk_size: int,
        what: str,
        cost: Callable[[Any], float] = lambda item: 1.0,
    ) -> Request:
        """Send `items` in chunks of `chunk_size`; `call(actor, chunk)` starts one remote call
        that returns one result per item of `chunk.items`. Returns at once."""
        request = Request(call, what, [None] * len(items))
        with self._lock:
            for ordinal, start in enumerate(range(0, len(items), chunk_size)):
                part = list(items[start : start + chunk_size])
                self._send(request, Chunk(start, part, ordinal, sum(map(cost, part))))
        return request

    def wait(
        self, request: Request, progress: Callable[[Chunk], None] | None = None
    ) -> list[Any]:
        """One result per item, in item order, once every chunk is back. `progress(chunk)` is
        called for each chunk whose items got their results."""
        while request.pending:
            earliest = min(c.deadline for c in request.pending.values())
            wait_s = max(0.0, earliest - time.monotonic())
            ready, _ = ray.wait(list(request.pending), num_returns=1, timeout=wait_s)
            if ready:
                done = self._collect(request, ready[0])
                if progress is not None and done is not None:
                    progress(done)
                continue
            now = time.monotonic()
            for ref, chunk in list(request.pending.items()):
                if chunk.deadline <= now:
                    del request.pending[ref]
                    self._release(chunk)
                    slot = self._slots[chunk.slot]
                    self._log_stall(slot, request.what)
                    self.replace(chunk.slot, chunk.incarnation)
                    done = self._retry(request, chunk, (
                        f"{self.role} actor {slot.name} did not finish {request.what} within "
                        f"{self.timeout_s:g}s ({self.timeout_key})"
                    ))
                    if progress is not None and done is not None:
                        progress(done)
        return list(request.results)

    def map(self, items: Sequence[Any], call: Callable[[Any, Chunk], Any], *, chunk_size: int,
            what: str, cost: Callable[[Any], float] = lambda item: 1.0) -> list[Any]:
        return self.wait(self.submit(items, call, chunk_size=chunk_size, what=what, cost=cost))

    def call_all(self, call: Callable[[Any], Any], what: str) -> None:
        """Run `call(actor)` on every actor and wait. An actor that dies or hangs is replaced
        instead (its replacement gets `on_restart`, which is how it catches up); one whose call
        fails otherwise (an argument whose owner died with its node) ends the call, named."""
        with self._lock:
            calls = {call(slot.actor): (i, slot.incarnation) for i, slot in enumerate(self._slots)}
        ready, late = ray.wait(list(calls), num_returns=len(calls), timeout=self.timeout_s)
        for ref in ready:
            try:
                ray.get(ref, timeout=0)  # ready: this only raises what the call raised
            except DEAD as err:
                log.warning("%s actor %s died during %s (%s): replacing it", self.role,
                            self._slots[calls[ref][0]].name, what, first_line(err))
                self.replace(*calls[ref])
            except RayError as err:
                raise PoolError(f"{self.role} actor {self._slots[calls[ref][0]].name} failed "
                                f"in {what}: {first_line(err)}") from err
        for ref in late:
            self._log_stall(self._slots[calls[ref][0]], what)
            self.replace(*calls[ref])

    def _log_stall(self, slot: _Slot, what: str) -> None:
        """One line naming the actor that missed its deadline, then its stack, before it is
        killed."""
        log.warning("%s actor %s made no progress for %gs in %s (%s): replacing it; its "
                    "stack:\n%s", self.role, slot.name, self.timeout_s, what, self.timeout_key,
                    actor_stack(slot.actor))

    def _send(self, request: Request, chunk: Chunk) -> None:
        with self._lock:
            index = min(range(len(self._slots)), key=lambda i: self._slots[i].outstanding)
            slot = self._slots[index]
            chunk.slot, chunk.incarnation = index, slot.incarnation
            chunk.attempts += 1
            chunk.deadline = time.monotonic() + self.timeout_s
            slot.outstanding += chunk.cost
            request.pending[request.call(slot.actor, chunk)] = chunk

    def _release(self, chunk: Chunk) -> None:
        with self._lock:
            slot = self._slots[chunk.slot]
            if slot.incarnation == chunk.incarnation:
                slot.outstanding -= chunk.cost

    def _collect(self, request: Request, ref: Any) -> Chunk | None:
        """Take one returned call; the chunk if its items got results, None if it was sent
        again."""
        chunk = request.pending.pop(ref)
        self._release(chunk)
        name = self._slots[chunk.slot].name
        try:
            results = ray.get(ref, timeout=0)  # ready: this only raises what the call raised
        except DEAD as err:
            self.replace(chunk.slot, chunk.incarnation)
            return self._retry(request, chunk,
                               f"{self.role} actor {name} died: {first_line(err)}")
        except RayError as err:
            return self._retry(request, chunk,
                               f"{self.role} actor {name} failed: {first_line(err)}")
        if len(results) != len(chunk.items):
            return self._retry(request, chunk, (
                f"{self.role} actor {name} returned {len(results)} results for "
                f"{len(chunk.items)} items"
            ))
        request.results[chunk.start : chunk.start + len(results)] = results
        with self._lock:
            self._slots[chunk.slot].done += len(chunk.items)
        return chunk

    def _retry(self, request: Request, chunk: Chunk, error: str) -> Chunk | None:
        chunk.error = error
        if chunk.attempts >= self.max_attempts:
            if self.give_up is None:
                raise PoolError(
                    f"{error}; gave up on {len(chunk.items)} items after {chunk.attempts} attempts"
                )
            request.results[chunk.start : chunk.start + len(chunk.items)] = [
                self.give_up(item, chunk) for item in chunk.items]
            return chunk
        split = self.split_after is not None and chunk.attempts >= self.split_after
        parts = (
            [Chunk(chunk.start + k, [item], chunk.ordinal, chunk.cost / len(chunk.items),
                   chunk.attempts, error) for k, item in enumerate(chunk.items)]
            if split else [chunk]
        )
        self.retried += len(chunk.items)
        for part in parts:
            self._send(request, part)
        return None

    def replace(self, index: int, incarnation: int) -> None:
        """Start a new actor in slot `index` unless another caller already replaced the
        `incarnation` that failed."""
        with self._lock:
            slot = self._slots[index]
            if slot.incarnation != incarnation:
                return
            ray.kill(slot.actor, no_restart=True)
            name = f"{self.prefix}-{index}.{incarnation + 1}"
            actor = self._start(index, name)
            # Started before any call is sent, so the replacement's start-up (a process, a model
            # load) is not charged to the deadline of its first call: with a deadline shorter
            # than the start-up, every replacement would be replaced in turn.
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=ACTOR_START_TIMEOUT_S)
            except (RayError, GetTimeoutError) as err:
                raise PoolError(
                    f"{self.role} actor {name}, a replacement, did not start within "
                    f"{ACTOR_START_TIMEOUT_S:g}s: {first_line(err)}"
                ) from None
            fresh = _Slot(name, actor, incarnation + 1, done=slot.done)
            if self.on_restart is not None:
                # Queued before any work, so the replacement serves nothing before it.
                self.on_restart(fresh.actor)
            self._slots[index] = fresh
            self.restarts += 1

    def shutdown(self, close: Callable[[Any], Any] | None = None) -> None:
        """Kill every actor, after `close(actor)` (bounded by `timeout_s`) where given."""
        with self._lock:
            if close is not None:
                refs = [close(slot.actor) for slot in self._slots]
                try:
                    ray.get(refs, timeout=min(self.timeout_s, 30.0))
                except (RayError, GetTimeoutError):
                    pass  # a dead or stuck actor has nothing left to close
            for slot in self._slots:
                ray.kill(slot.actor, no_restart=True)


def first_line(err: BaseException) -> str:
    """One line for an error: for an exception raised inside a remote call, the original
    exception's type and first line rather than Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(cause, RayError):
        err = cause
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__
