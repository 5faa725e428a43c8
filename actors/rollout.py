"""Rollout actors: `RolloutActor` wraps one generation engine; `RolloutGroup` drives N of them.

The driver places the group: it hands over a placement group built from
`rlrun.cluster.rollout_demand`, one bundle per actor, or for vLLM with tensor parallelism one
{GPU: 1} bundle per tensor-parallel rank; actor i (and any replacement of it) takes the bundles
of slot i. The group

1. cuts a request into chunks and deals them over the actors (`actors.pool.ActorPool`). The HF
   engine gets chunks of about `rollout.batch_size` sequences; vLLM gets one chunk per actor,
   since it schedules hundreds of sequences itself. Chunk k samples with seed `sampling.seed +
   k`, so results do not depend on which actor ran a chunk;
2. loads each new weight version into every actor, and into every replacement before it
   generates, so no sample comes from weights older than the ones the learner published.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.pool import ActorPool, Chunk
from rlrun.cluster import rollout_demand, torch_threads
from rlrun.config import Config
from rlrun.engines import SamplingParams
from rlrun.records import Sample
from rlrun.weights import WeightUpdate
from rlrun.weights.buckets import ParamMeta
from rlrun.weights.collective import GroupInfo
from rlrun.weights.object_store import ObjectStoreReceiver


@ray.remote
class RolloutActor:
    """One generation engine in its own process; its samples carry its slot in the group, so
    the learner's log-prob check can name the engine that is off."""

    def __init__(self, cfg: Config, model_path: str, slot: int) -> None:
        import torch

        from rlrun.engines import make_engine

        torch.set_num_threads(torch_threads(cfg.rollout.num_threads, cfg.rollout.num_cpus))
        self.engine = make_engine(
            cfg.rollout.engine, model_path, cfg.rollout, cfg.model.dtype,
            weights_backend=cfg.weights.backend, sleep_mode=cfg.placement.mode == "colocated",
            seed=cfg.run.seed,
        )
        self.slot = slot

    def generate(self, prompts: list[str], sampling: SamplingParams) -> list[list[Sample]]:
        return [[dataclasses.replace(s, engine=self.slot) for s in group]
                for group in self.engine.generate(prompts, sampling)]

    def extend(self, samples: list[Sample], sampling: SamplingParams) -> list[Sample]:
        return [dataclasses.replace(s, engine=self.slot)
                for s in self.engine.extend(samples, sampling)]

    def load_weights(self, update: WeightUpdate) -> None:
        self.engine.load_weights(update.version, ObjectStoreReceiver().receive(update))

    # The collective backend (rlrun.weights.collective), phase by phase.

    def init_weight_transfer(self, info: GroupInfo) -> None:
        self.engine.init_weight_transfer(info)

    def start_weight_update(self, version: int) -> None:
        self.engine.start_weight_update(version)

    def update_weights(self, metas: list[ParamMeta], ipc_handles: Any = None) -> None:
        if ipc_handles is None:
            self.engine.update_weights(metas)
        else:  # colocated vLLM: this bucket's CUDA IPC handles, one per GPU
            self.engine.update_weights(metas, ipc_handles)

    def finish_weight_update(self, version: int, checksums: list[int]) -> None:
        self.engine.finish_weight_update(version, checksums)

    def sleep(self, level: int) -> None:
        self.engine.sleep(level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.engine.wake_up(tags)

    def version(self) -> int:
        return self.engine.version


@dataclasses.dataclass(frozen=True)
class Engine:
    """A rollout actor as weight sync addresses it; `RolloutGroup.replace` takes it back."""

    actor: Any
    slot: int
    incarnation: int  # which start of the slot this is (a replacement counts up)
    name: str


class RolloutGroup:
    """`rollout.num_actors` rollout actors on `placement_group` (bundle i holds actor i)."""

    def __init__(
        self, cfg: Config, model_path: str, placement_group: Any, prefix: str
    ) -> None:
        self.cfg = cfg
        self.update: WeightUpdate | None = None

        demand = rollout_demand(cfg)
        per_actor = demand.bundles_per_actor

        def start(slot: int, name: str) -> Any:
            first = slot * per_actor  # a replacement takes its predecessor's bundles
            options: dict[str, Any] = {"num_gpus": cfg.rollout.num_gpus}
            if demand.gpu_per_bundle:
                # vLLM starts one Ray worker per tensor-parallel rank on the bundles named in
                # VLLM_RAY_BUNDLE_INDICES; the actor itself holds no GPU, or worker 0 could
                # never be placed on its bundle. Colocated, each worker takes only its share
                # of a GPU a learner rank also uses.
                env = {"VLLM_RAY_BUNDLE_INDICES": ",".join(str(first + k)
                                                           for k in range(per_actor))}
                if cfg.placement.mode == "colocated":
                    env["VLLM_RAY_PER_WORKER_GPUS"] = str(cfg.rollout.num_gpus)
                options = {"num_gpus": 0, "runtime_env": {"env_vars": env}}
            return RolloutActor.options(
                name=name,
                num_cpus=cfg.rollout.num_cpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group, placement_group_bundle_index=first,
                    placement_group_capture_child_tasks=demand.gpu_per_bundle,
                ),
                **options,
            ).remote(cfg, model_path, slot)

        self.pool = ActorPool(
            start, cfg.rollout.num_actors, prefix=f"{prefix}.rollout", role="rollout",
            timeout_s=cfg.rollout.timeout_s, timeout_key="rollout.timeout_s",
            on_restart=self._catch_up,
        )

    def _catch_up(self, actor: Any) -> None:
        if self.update is not None:
            actor.load_weights.remote(self.update)

    @property
    def restarts(self) -> int:
        return self.pool.restarts

    def engines(self) -> list[Engine]:
        """Every rollout actor as it is now, in slot order."""
        return [Engine(actor, slot, incarnation, name)
                for slot, (actor, incarnation, name) in enumerate(self.pool.slots())]

    def replace(self, engine: Engine) -> None:
        """Start a new actor in `engine`'s slot, unless it was replaced already."""
        self.pool.replace(engine.slot, engine.incarnation)

    def exclusive(self) -> threading.RLock:
        """Held, nothing else is sent to the actors: a collective sync holds it."""
        return self.pool.exclusive()

    def submit(self, prompts: list[str], sampling: SamplingParams) -> Any:
        """Start generating `sampling.n` samples for each prompt; redeem with `wait`."""
        return self._submit("generate", prompts, sampling, sampling.n)

    def submit_extend(self, samples: list[Sample], sampling: SamplingParams) -> Any:
        """Start continuing each sample (a paused one, a trajectory's next turn); redeem with
        `wait`."""
        return self._submit("extend", samples, sampling, 1)

    def _submit(self, method: str, items: list[Any], sampling: SamplingParams, n: int) -> Any:
        """`items` in chunks to the actors' `method`, chunked and seeded as the module docstring
        says."""
        rollout = self.cfg.rollout
        if rollout.engine == "vllm":
            chunk_size = max(1, math.ceil(len(items) / rollout.num_actors))
        else:
            chunk_size = max(1, rollout.batch_size // n)

        def call(actor: Any, chunk: Chunk) -> Any:
            seeded = sampling
            if sampling.seed is not None:
                seeded = dataclasses.replace(sampling, seed=sampling.seed + chunk.ordinal)
            return getattr(actor, method).remote(chunk.items, seeded)

        return self.pool.submit(items, call, chunk_size=chunk_size, what=method)

    def wait(self, request: Any) -> list[Any]:
        return self.pool.wait(request)

    def generate(self, prompts: list[str], sampling: SamplingParams) -> list[list[Sample]]:
        """`sampling.n` samples per prompt, in prompt order."""
        return self.wait(self.submit(prompts, sampling))

    def extend(self, samples: list[Sample], sampling: SamplingParams) -> list[Sample]:
        """Each sample continued from its token ids (a multi-turn trajectory's next turn)."""
        return self.wait(self.submit_extend(samples, sampling))

    def load_weights(self, update: WeightUpdate) -> None:
        """Load a published version into every actor (a dead one is replaced and loads it)."""
        self.update = update
        self.pool.call_all(lambda actor: actor.load_weights.remote(update), "load_weights")

    def sleep(self, level: int) -> None:
        """Colocated placement: free the GPUs for the learner (see the engines' `sleep`)."""
        self.pool.call_all(lambda actor: actor.sleep.remote(level), "sleep")

    def wake_up(self, tags: list[str]) -> None:
        self.pool.call_all(lambda actor: actor.wake_up.remote(tags), "wake_up")

    def versions(self) -> list[int]:
        """The weight version each actor holds."""
        refs = [a.version.remote() for a in self.pool.actors]
        return ray.get(refs, timeout=self.cfg.rollout.timeout_s)

    def shutdown(self) -> None:
        self.pool.shutdown()

