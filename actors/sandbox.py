"""Ray glue for the code sandbox: `SandboxActor` holds one `Judge`, `SandboxPool` drives M of them.

The pool is the handle the reward calls. For each batch it

1. de-duplicates identical submissions (same code, language, tests and limits: every member of
   a GRPO group that wrote the same program), so each distinct program is judged once and its
   result copied to every submission id;
2. deals the distinct submissions in chunks to the actor with the least outstanding work
   (tests not yet returned, over every batch in flight), through `actors.pool.ActorPool`;
3. collects the results in input order. A chunk whose actor dies is judged again on a
   replacement, up to `sandbox.retries` times (the budget the judge gives a crashed executor);
   a chunk that keeps failing is split so that one program that brings actors down cannot take
   others with it, and once the budget is spent it is reported as `sandbox_error`, never scored
   as the program's failure: the reward leaves such a sample unscored.

Actors are created with the CPUs of `sandbox.num_cpus`, on the placement group the driver
hands over (one bundle each), or wherever Ray puts them when there is none (`rlrun judge`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.pool import ActorPool, Chunk, Request
from rlrun.config import SandboxConfig
from rlrun.records import JudgeResult, Submission, Verdict
from rlrun.sandbox import Judge
from rlrun.sandbox.dedup import dedup, expand


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


class SandboxPool:
    """`cfg.num_actors` sandbox actors named `<prefix>.sandbox-<i>`.

    `judge(subs)` blocks; `submit(subs)` returns at once so judging overlaps generation, and
    `wait(handle)` returns the results in input order. `stats()` reports counters for metrics.
    """

    def __init__(
        self,
        cfg: SandboxConfig,
        prefix: str = "rlrun",
        placement_group: Any = None,
        chunk_size: int | None = None,
    ) -> None:
        if cfg.num_actors < 1:
            raise ValueError(
                f"sandbox.num_actors must be at least 1 for a pool, got {cfg.num_actors}"
            )
        self.cfg = cfg
        # A chunk keeps every slot of an actor busy a few times over, so chunk boundaries cost
        # little idle time, while a dead actor only takes a few submissions' work with it.
        self.chunk_size = chunk_size or max(1, 4 * cfg.workers_per_actor)
        self.submissions = self.unique = 0

        def start(slot: int, name: str) -> Any:
            strategy = None if placement_group is None else PlacementGroupSchedulingStrategy(
                placement_group, placement_group_bundle_index=slot
            )
            # Threads let a second chunk start on slots the first one's stragglers leave
            # idle; the Judge's slot queue bounds the real work.
            return SandboxActor.options(
                name=name, num_cpus=cfg.num_cpus, max_concurrency=4,
                scheduling_strategy=strategy,
            ).remote(cfg)

        self.pool = ActorPool(
            start, cfg.num_actors, prefix=f"{prefix}.sandbox", role="sandbox",
            timeout_s=cfg.timeout_s, timeout_key="sandbox.timeout_s",
            max_attempts=cfg.retries + 1, give_up=_sandbox_error, split_after=2,
        )
        self._await_ready()

    def _await_ready(self) -> None:
        try:
            ray.get([a.ping.remote() for a in self.pool.actors], timeout=self.cfg.timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.shutdown()
            raise TimeoutError(
                f"sandbox actors did not start within {self.cfg.timeout_s:g}s "
                f"(sandbox.timeout_s); the cluster may lack {self.cfg.num_actors} x "
                f"{self.cfg.num_cpus} free CPUs (sandbox.num_actors, sandbox.num_cpus)"
            ) from None
        except ray.exceptions.RayActorError as err:
            self.shutdown()
            raise RuntimeError(
                f"a sandbox actor failed to start with backend {self.cfg.backend!r}: {err}"
            ) from None

    def judge(self, subs: list[Submission]) -> list[JudgeResult]:
        """Judge `subs`; results come back in the same order, one per submission."""
        return self.wait(self.submit(subs))

    def submit(self, subs: list[Submission]) -> tuple[list[Submission], list[int], Request]:
        """Start judging `subs` and return at once; redeem the handle with `wait`."""
        unique, owner = dedup(subs)
        self.submissions += len(subs)
        self.unique += len(unique)
        request = self.pool.submit(
            unique, lambda actor, chunk: actor.judge.remote(chunk.items),
            chunk_size=self.chunk_size, what="judge", cost=lambda s: max(1, s.tests.count()),
        )
        return list(subs), owner, request

    def wait(
        self,
        handle: tuple[list[Submission], list[int], Request],
        progress: Callable[[int], None] | None = None,
    ) -> list[JudgeResult]:
        """Block until every submission of `handle` is judged; results in input order.

        `progress(n)` is called as results arrive, with the number of input submissions they
        cover, so a caller can drive a progress bar.
        """
        subs, owner, request = handle
        copies = [0] * len(request.results)  # copies[j]: input submissions unique j stands for
        for j in owner:
            copies[j] += 1

        def judged(chunk: Chunk) -> None:
            if progress is not None:
                progress(sum(copies[chunk.start : chunk.start + len(chunk.items)]))

        return expand(subs, owner, self.pool.wait(request, judged))

    def stats(self) -> dict[str, int]:
        """Counters since start: submissions, unique, resubmitted, recreated, judged per actor."""
        counts = {"submissions": self.submissions, "unique": self.unique,
                  "resubmitted": self.pool.retried, "recreated": self.pool.restarts}
        return counts | {f"judged_by_{i}": n for i, n in enumerate(self.pool.done_per_slot())}

    def actor_names(self) -> list[str]:
        return self.pool.names()

    def shutdown(self) -> None:
        """Close every actor's executors (stopping docker containers) and kill the actors."""
        self.pool.shutdown(close=lambda actor: actor.close.remote())

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _sandbox_error(sub: Submission, chunk: Chunk) -> JudgeResult:
    detail = f"not judged after {chunk.attempts} attempts; last error: {chunk.error[:2000]}"
    return JudgeResult(
        id=sub.id,
        status="sandbox_error",
        passed=0,
        total=sub.tests.count(),
        tests=[Verdict(status="sandbox_error", detail=detail)],
    )

