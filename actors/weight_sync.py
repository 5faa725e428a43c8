"""Weight sync from the learner group to the rollout group, one class per `weights.backend`.

The driver builds one with `make_weight_sync` next to the groups it connects and calls
`sync(version)` after every learner step (and after a learner restart, with the version the
learner restored).

- `ObjectStoreSync`: learner rank 0 puts the state dict, every rollout actor gets it.
- `IPCSync` (colocated vLLM): the same phases, but each bucket is handed over as CUDA IPC
  handles of the learner ranks' GPU memory instead of a broadcast.
- `CollectiveSync`: learner rank 0 and every engine form one group (rlrun.weights.collective)
  and each sync runs as three phases, each under `weights.timeout_s`:
  start (every engine opens an update), transfer (the learner ranks stream packed buckets while
  every engine receives them), finish (every engine checks version and checksums, then serves
  the new weights). A member that dies or misses a phase's deadline ends that phase with an
  error naming it and the phase. Then every engine that did not finish is replaced (an engine
  stuck in a broadcast cannot be interrupted, only killed), the group is rebuilt with the
  replacements, and the version is sent once more; a second failure stops the run with that
  one-line error. A learner rank that dies or hangs is a `LearnerFailed`, which the driver
  answers by restarting the learner from its checkpoint.

A rollout actor replaced between syncs (it died while generating) starts from the weights it
was created with: under the collective backend it joins the group at the next sync, and
until then its samples carry an old weight version, so `algo.max_staleness` drops them.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from actors.learner import LearnerFailed, LearnerGroup
from actors.pool import first_line
from actors.rollout import Engine, RolloutGroup
from rlrun.config import Config
from rlrun.weights.collective import GroupInfo, SendStats, rank_offsets


class SyncFailed(RuntimeError):
    """One phase of a collective sync failed: who, and in which phase."""

    def __init__(self, message: str, dead: list[Any], stuck: list[Any]) -> None:
        super().__init__(message)
        self.dead = dead  # members whose actor died
        self.stuck = stuck  # members whose call had not returned by the deadline


def transfer_metrics(nbytes: int, seconds: float) -> dict[str, float]:
    return {"perf/sync_bytes": float(nbytes),
            "perf/sync_gb_per_s": nbytes / seconds / 1e9 if seconds > 0 else 0.0}


class ObjectStoreSync:
    """Learner rank 0 puts, every rollout actor gets (rlrun.weights.object_store)."""

    def __init__(self, learner: LearnerGroup, rollouts: RolloutGroup) -> None:
        self.learner, self.rollouts = learner, rollouts

    def sync(self, version: int) -> dict[str, float]:
        start = time.perf_counter()
        update = self.learner.publish(version)
        self.rollouts.load_weights(update)
        return transfer_metrics(update.nbytes, time.perf_counter() - start)


@dataclasses.dataclass
class _Member:
    """A call in flight and who made it: a rollout engine, or a learner rank (engine None)."""

    name: str
    engine: Engine | None = None


def _engine(engine: Engine) -> _Member:
    return _Member(f"rollout actor {engine.name}", engine)


def _rank(rank: int) -> _Member:
    return _Member(f"learner rank {rank}")


class CollectiveSync:
    """Learner rank 0 broadcasts to every engine in one group; see the module docstring."""

    def __init__(self, cfg: Config, learner: LearnerGroup, rollouts: RolloutGroup) -> None:
        self.cfg, self.learner, self.rollouts = cfg, learner, rollouts
        self.timeout_s = cfg.weights.timeout_s
        # What the group was built from: the learner's incarnation and the rollout actors';
        # any change (a restart, a replacement) means building it again.
        self.built_from: tuple[int, list[int]] | None = None
        self.metas: list[Any] = []

    def _membership(self) -> tuple[int, list[int]]:
        return self.learner.incarnation, [e.incarnation for e in self.rollouts.engines()]

    def _connect(self) -> None:
        """(Re)build the group from learner rank 0 and the current rollout actors."""
        cfg, ranks, engines = self.cfg, self.learner.workers, self.rollouts.engines()
        tp = cfg.rollout.tensor_parallel_size if cfg.rollout.engine == "vllm" else 1
        offsets = rank_offsets([tp] * len(engines))
        address, port = self._one(ranks[0].rendezvous.remote(), _rank(0), "rendezvous")
        on_gpus = cfg.learner.num_gpus > 0 and cfg.rollout.num_gpus > 0
        info = GroupInfo(address, port, 0, 1 + tp * len(engines), cfg.weights.bucket_mb << 20,
                         self.timeout_s, "cuda" if on_gpus else "cpu")
        calls = {ranks[0].open_weight_group.remote(info): _rank(0)}
        calls |= {w.open_weight_group.remote(None): _rank(r) for r, w in enumerate(ranks) if r}
        for engine, offset in zip(engines, offsets, strict=True):
            member = dataclasses.replace(info, rank=offset)
            calls[engine.actor.init_weight_transfer.remote(member)] = _engine(engine)
        self._phase("rendezvous", calls)
        self.metas = self._one(ranks[0].weight_metadata.remote(), _rank(0), "metadata")
        self.built_from = self._membership()

    def sync(self, version: int) -> dict[str, float]:
        """Send weight version `version` to every engine (see the module docstring)."""
        # No other thread submits generation while the group is busy: vLLM must not generate
        # between the start and the finish of an update.
        with self.rollouts.exclusive():
            for attempt in (1, 2):
                try:
                    if self.built_from != self._membership():
                        self._connect()  # first sync, or a member was replaced since
                    return self._sync(version)
                except SyncFailed as err:
                    if attempt == 2:
                        raise RuntimeError(
                            f"weight sync of version {version} failed twice: {err}"
                        ) from None
                    print(f"rlrun train: {err}; replacing it and syncing again", flush=True)
                    self._recover(err)
        raise AssertionError("unreachable")

    def _sync(self, version: int) -> dict[str, float]:
        engines = self.rollouts.engines()
        started = time.perf_counter()
        self._phase("start", {e.actor.start_weight_update.remote(version): _engine(e)
                              for e in engines})
        senders = {w.send_weights.remote(): _rank(r)
                   for r, w in enumerate(self.learner.senders())}
        receivers = {e.actor.update_weights.remote(self.metas): _engine(e) for e in engines}
        results = self._phase("transfer", senders | receivers)
        stats: SendStats = results[next(iter(senders))]
        self._phase("finish", {
            e.actor.finish_weight_update.remote(version, stats.checksums): _engine(e)
            for e in engines
        })
        return transfer_metrics(stats.bytes, time.perf_counter() - started)

    def _recover(self, err: SyncFailed) -> None:
        """Replace every engine that died or is stuck in the group (only killing it frees it);
        a stuck learner rank is the learner's failure. The group is rebuilt next attempt."""
        for member in err.dead + err.stuck:
            if member.engine is not None:
                self.rollouts.replace(member.engine)
        learner = [m for m in err.stuck if m.engine is None]
        if learner:
            raise LearnerFailed(f"{learner[0].name} did not finish the weight transfer in time")
        self.built_from = None

    def _phase(self, phase: str, calls: dict[Any, _Member]) -> dict[Any, Any]:
        """Every call's result within `weights.timeout_s`, or SyncFailed naming the first
        member that failed or the ones that were late. Waits on, after a failure, for the
        calls that can still finish (a sender whose peers died fails by itself), so that only
        members really stuck are reported."""
        started = time.monotonic()
        deadline = started + self.timeout_s
        pending, results, dead, failure = list(calls), {}, [], None
        while pending:
            wait_s = max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
            if not ready:
                break
            try:
                results[ready[0]] = ray.get(ready[0], timeout=0)
            except RayActorError as error:
                if calls[ready[0]].engine is None:
                    raise LearnerFailed(f"{calls[ready[0]].name} died during weight {phase}: "
                                        f"{first_line(error)}") from None
                dead.append(calls[ready[0]])
                failure = failure or f"{calls[ready[0]].name} died during weight {phase}"
            except RayError as error:
                failure = failure or (f"{calls[ready[0]].name} failed during weight {phase}: "
                                      f"{first_line(error)}")
            if failure is not None:
                # The rest of the group cannot complete this phase now. A survivor blocked in
                # a collective with the dead peer ends by the group's own timeout (also
                # weights.timeout_s, counted from its call), so wait until that has fired, plus
                # a margin, before calling anyone stuck.
                deadline = started + self.timeout_s + 10.0
        stuck = [calls[ref] for ref in pending]
        if failure is None and stuck:
            failure = (f"{', '.join(m.name for m in stuck)} did not finish weight {phase} "
                       f"within {self.timeout_s:g}s (weights.timeout_s)")
        if failure is not None:
            raise SyncFailed(failure, dead, stuck)
        return results

    def _one(self, ref: Any, who: _Member, phase: str) -> Any:
        return self._phase(phase, {ref: who})[ref]


class IPCSync(CollectiveSync):
    """Colocated vLLM engines read packed buckets straight out of the learner ranks' GPU
    memory (rlrun.weights.ipc): per bucket, every learner rank packs it on its own GPU and
    hands out a CUDA IPC handle, and every engine copies from the handle of the GPU it sits
    on. The phases, deadlines and recovery are the collective backend's."""

    def _connect(self) -> None:
        info = GroupInfo("", 0, 0, 0, self.cfg.weights.bucket_mb << 20, self.timeout_s, "cuda")
        self._phase("rendezvous", {e.actor.init_weight_transfer.remote(info): _engine(e)
                                   for e in self.rollouts.engines()})
        self.built_from = self._membership()

    def _sync(self, version: int) -> dict[str, float]:
        engines, ranks = self.rollouts.engines(), self.learner.workers
        started, nbytes = time.perf_counter(), 0
        self._phase("start", {e.actor.start_weight_update.remote(version): _engine(e)
                              for e in engines})
        buckets = self._learner_phase("transfer", [w.begin_ipc.remote() for w in ranks])[0]
        for metas in buckets:
            handles: dict[str, Any] = {}
            for part in self._learner_phase("transfer",
                                            [w.ipc_bucket.remote(metas) for w in ranks]):
                handles |= part
            self._phase("transfer", {e.actor.update_weights.remote(metas, handles): _engine(e)
                                     for e in engines})
            nbytes += sum(m.nbytes for m in metas)
        self._learner_phase("transfer", [w.end_ipc.remote() for w in ranks])
        self._phase("finish", {e.actor.finish_weight_update.remote(version, []): _engine(e)
                               for e in engines})
        return transfer_metrics(nbytes, time.perf_counter() - started)

    def _learner_phase(self, phase: str, refs: list[Any]) -> list[Any]:
        results = self._phase(phase, {ref: _rank(r) for r, ref in enumerate(refs)})
        return [results[ref] for ref in refs]


def make_weight_sync(
    cfg: Config, learner: LearnerGroup, rollouts: RolloutGroup
) -> ObjectStoreSync | CollectiveSync:
    """The sync `weights.backend` names, between these two groups."""
    if cfg.weights.backend == "object_store":
        return ObjectStoreSync(learner, rollouts)
    if cfg.weights.backend == "ipc":
        return IPCSync(cfg, learner, rollouts)
    return CollectiveSync(cfg, learner, rollouts)
