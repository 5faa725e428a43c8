"""Rollout actors: `RolloutActor` wraps one generation engine; `RolloutPool` drives N of them.

The pool is a plain object (the coordinator holds it) that

1. cuts a request into chunks of about `rollout.batch_size` sequences, each with its own
   sampling seed, and deals them round-robin over the actors;
2. collects the chunks; when an actor has died, it starts a replacement in the same placement
   bundle, loads the current weights into it, and re-issues the chunks the dead actor had not
   returned. Each chunk's result is taken from exactly one call, so no sample is lost or
   counted twice, and a re-issued chunk keeps its seed.

Resources per actor are `rollout.num_cpus` / `rollout.num_gpus`, set at creation.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlrun.config import Config, from_dict, to_dict
from rlrun.weights import WeightUpdate, make_receiver

MAX_ATTEMPTS = 3  # calls per chunk before the pool gives up on a chunk that kills its actor


@ray.remote
class RolloutActor:
    """One generation engine in its own process."""

    def __init__(self, config: dict, model_path: str) -> None:
        from rlrun.engines import make_engine

        cfg = from_dict(config)
        self.engine = make_engine(cfg.rollout.engine, model_path, cfg.rollout, cfg.model.dtype)

    def generate(self, prompts: list[str], sampling: Any) -> list[list[Any]]:
        return self.engine.generate(prompts, sampling)

    def load_weights(self, version: int, weights: WeightUpdate) -> None:
        self.engine.load_weights(version, make_receiver(weights.backend).receive(weights))

    def version(self) -> int:
        return self.engine.version


@dataclass
class _Chunk:
    start: int  # index of its first prompt in the request
    prompts: list[str]
    sampling: Any
    slot: int
    attempts: int = 0
    actor: Any = None  # the handle the chunk was last sent to


@dataclass
class PendingGeneration:
    """A request in flight: `RolloutPool.submit` returns it, `RolloutPool.wait` redeems it."""

    num_prompts: int
    pending: dict[ray.ObjectRef, _Chunk] = field(default_factory=dict)
    results: dict[int, list[list[Any]]] = field(default_factory=dict)


class RolloutPool:
    """Driver-side handle on `rollout.num_actors` rollout actors.

    Thread-safe: the coordinator generates the next batch in the background (off-policy) while
    validation or a weight load runs in another thread.
    """

    def __init__(self, cfg: Config, model_path: str, placement_group: Any = None) -> None:
        self.cfg = cfg
        self.model_path = model_path
        self.placement_group = placement_group
        self.update: WeightUpdate | None = None
        self.restarts = 0
        self._lock = threading.RLock()
        self.actors = [self._start(i) for i in range(cfg.rollout.num_actors)]
        self._next_slot = 0

    def _start(self, slot: int) -> ray.actor.ActorHandle:
        strategy = None
        if self.placement_group is not None:
            strategy = PlacementGroupSchedulingStrategy(
                self.placement_group, placement_group_bundle_index=slot
            )
        actor = RolloutActor.options(
            num_cpus=self.cfg.rollout.num_cpus,
            num_gpus=self.cfg.rollout.num_gpus,
            scheduling_strategy=strategy,
        ).remote(to_dict(self.cfg), self.model_path)
        if self.update is not None:
            # Queued before any generate call, so the replacement never samples old weights.
            actor.load_weights.remote(self.update.version, self.update)
        return actor

    def _restart(self, slot: int, dead: ray.actor.ActorHandle) -> None:
        with self._lock:  # two threads that saw the same death start one replacement
            if self.actors[slot] is dead:
                self.actors[slot] = self._start(slot)
                self.restarts += 1

    def _send(self, pending: PendingGeneration, chunk: _Chunk) -> None:
        with self._lock:
            chunk.actor = self.actors[chunk.slot]
        chunk.attempts += 1
        pending.pending[chunk.actor.generate.remote(chunk.prompts, chunk.sampling)] = chunk

    def submit(self, prompts: list[str], sampling: Any) -> PendingGeneration:
        """Start generating `sampling.n` completions for each prompt; returns at once.

        With `sampling.seed` set, chunk k samples with seed `sampling.seed + k`, so results do
        not depend on which actor ran a chunk.
        """
        per_chunk = max(1, self.cfg.rollout.batch_size // max(sampling.n, 1))
        pending = PendingGeneration(num_prompts=len(prompts))
        for k, start in enumerate(range(0, len(prompts), per_chunk)):
            chunk_sampling = sampling
            if sampling.seed is not None:
                chunk_sampling = dataclasses.replace(sampling, seed=sampling.seed + k)
            with self._lock:
                slot = self._next_slot % len(self.actors)
                self._next_slot += 1
            chunk = _Chunk(start, prompts[start : start + per_chunk], chunk_sampling, slot)
            self._send(pending, chunk)
        return pending

    def wait(self, pending: PendingGeneration) -> list[list[Any]]:
        """Completions per prompt, in request order, once every chunk has come back."""
        while pending.pending:
            ready, _ = ray.wait(list(pending.pending), num_returns=1)
            chunk = pending.pending.pop(ready[0])
            try:
                pending.results[chunk.start] = ray.get(ready[0])
            except RayActorError as err:
                if chunk.attempts >= MAX_ATTEMPTS:
                    raise RuntimeError(
                        f"rollout actors died {chunk.attempts} times generating the same "
                        f"{len(chunk.prompts)} prompts; last error: {err}"
                    ) from err
                self._restart(chunk.slot, chunk.actor)
                self._send(pending, chunk)
        out: list[list[Any]] = []
        for start in sorted(pending.results):
            out.extend(pending.results[start])
        return out

    def generate(self, prompts: list[str], sampling: Any) -> list[list[Any]]:
        return self.wait(self.submit(prompts, sampling))

    def load_weights(self, version: int, weights_ref: WeightUpdate) -> None:
        """Load a published update into every actor (restarting dead ones, which load it too)."""
        with self._lock:
            self.update = weights_ref
            calls = [(a.load_weights.remote(version, weights_ref), slot, a)
                     for slot, a in enumerate(self.actors)]
        for ref, slot, handle in calls:
            try:
                ray.get(ref)
            except RayActorError:
                self._restart(slot, handle)

    def versions(self) -> list[int]:
        return ray.get([a.version.remote() for a in self.actors])

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
