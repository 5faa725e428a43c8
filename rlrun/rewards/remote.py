"""Rewards off the driver: a pool of Ray actors that score samples concurrently.

`RewardWorkers(cfg)` starts `reward.num_workers` actors, each holding a `Reward` built from the
same config. `submit(problems, samples)` returns at once (so the driver can generate the next
batch meanwhile) and `PendingScores.result()` collects. Each sample is one remote call, at most
`reward.max_concurrency` are in flight, and one that runs past `reward.timeout_s` fails the
batch with a `RewardError` naming it (its actor is replaced, so a hung plug-in cannot wedge the
pool). Errors a reward raises (plug-in failures, `SandboxFailure`) arrive as themselves.

Code problems need a judge inside each actor: pass `judge_factory`, a picklable zero-argument
callable run once per actor, e.g. `functools.partial(local_judge, cfg.sandbox)`.

Ray is imported lazily so `rlrun.rewards` imports without it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from rlrun.config import Config, SandboxConfig, from_dict, to_dict
from rlrun.records import Problem, Sample, ScoredSample
from rlrun.rewards.code import JudgeFn
from rlrun.rewards.errors import RewardError
from rlrun.rewards.reward import build_reward


def local_judge(cfg: SandboxConfig) -> JudgeFn:
    """A judge running in the calling process (use with functools.partial as a judge_factory)."""
    from rlrun.sandbox import Judge

    return Judge(cfg.backend, cfg.workers_per_actor, cfg).judge


class RewardActor:
    """One Ray process holding a `Reward`; `score` is called from several threads at once."""

    def __init__(self, config: dict[str, Any], judge_factory: Callable[[], JudgeFn] | None) -> None:
        cfg = from_dict(config)
        self._judge = judge_factory() if judge_factory is not None else None
        self._reward = build_reward(cfg, self._judge)

    def score(self, problems: list[Problem], samples: list[Sample]) -> list[ScoredSample]:
        return self._reward.score(problems, samples)

    def close(self) -> None:
        # A bound `Judge.judge` (what `local_judge` returns) owns executor processes to stop.
        close = getattr(getattr(self._judge, "__self__", None), "close", None)
        if callable(close):
            close()


class PendingScores:
    """Scores being computed; `result()` blocks until all are back or one failed."""

    def __init__(self, thread: threading.Thread, box: dict[str, Any]) -> None:
        self._thread = thread
        self._box = box

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> list[ScoredSample]:
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


class RewardWorkers:
    """Driver-side handle on `reward.num_workers` reward actors."""

    def __init__(
        self,
        cfg: Config,
        judge_factory: Callable[[], JudgeFn] | None = None,
        num_workers: int | None = None,
    ) -> None:
        import ray

        # Build once here so a bad plug-in or config fails on the driver, before any actor starts.
        build_reward(cfg, None)
        self.cfg = cfg
        self._config = to_dict(cfg)
        self._factory = judge_factory
        self._n = num_workers if num_workers is not None else cfg.reward.num_workers
        if self._n < 1:
            raise RewardError(f"reward.num_workers={self._n}: RewardWorkers needs at least 1")
        self._per_actor = max(1, math.ceil(cfg.reward.max_concurrency / self._n))
        self._cls = ray.remote(RewardActor).options(
            num_cpus=cfg.reward.num_cpus, max_concurrency=self._per_actor
        )
        self._lock = threading.Lock()
        self._actors = [self._start() for _ in range(self._n)]

    def _start(self) -> Any:
        return self._cls.remote(self._config, self._factory)

    def _replace(self, index: int) -> None:
        import ray

        with self._lock:
            ray.kill(self._actors[index], no_restart=True)
            self._actors[index] = self._start()

    def score(self, problems: list[Problem], samples: list[Sample]) -> list[ScoredSample]:
        """Score a batch and wait for it."""
        return self.submit(problems, samples).result()

    def submit(self, problems: list[Problem], samples: list[Sample]) -> PendingScores:
        """Start scoring a batch in the background and return its handle."""
        if len(problems) != len(samples):
            raise RewardError(f"{len(problems)} problems for {len(samples)} samples: pass one each")
        box: dict[str, Any] = {}

        def drive() -> None:
            try:
                box["value"] = self._drive(problems, samples)
            except BaseException as err:
                box["error"] = err

        thread = threading.Thread(target=drive, name="rlrun-reward-batch", daemon=True)
        thread.start()
        return PendingScores(thread, box)

    def _drive(self, problems: list[Problem], samples: list[Sample]) -> list[ScoredSample]:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        timeout = self.cfg.reward.timeout_s
        limit = self.cfg.reward.max_concurrency
        results: list[ScoredSample | None] = [None] * len(samples)
        todo = list(range(len(samples)))
        inflight: dict[Any, tuple[int, int, float]] = {}  # ref -> (sample, actor, deadline)
        retried: set[int] = set()
        turn = 0
        try:
            while todo or inflight:
                while todo and len(inflight) < limit:
                    i = todo.pop(0)
                    a = turn % self._n
                    turn += 1
                    with self._lock:
                        actor = self._actors[a]
                    ref = actor.score.remote([problems[i]], [samples[i]])
                    inflight[ref] = (i, a, time.monotonic() + timeout)
                nearest = min(d for _, _, d in inflight.values())
                ready, _ = ray.wait(
                    list(inflight), num_returns=1, timeout=max(0.0, nearest - time.monotonic())
                )
                for ref in ready:
                    i, a, _ = inflight.pop(ref)
                    try:
                        results[i] = ray.get(ref)[0]
                    except RayTaskError as err:
                        cause = getattr(err, "cause", None)
                        raise (cause if isinstance(cause, Exception) else err) from None
                    except RayActorError:
                        if i in retried:
                            raise RewardError(
                                f"the reward actor died twice scoring sample {i} "
                                f"(problem {problems[i].id})"
                            ) from None
                        retried.add(i)
                        self._replace(a)
                        todo.append(i)
                now = time.monotonic()
                for i, a, deadline in list(inflight.values()):
                    if now >= deadline:
                        self._replace(a)
                        raise RewardError(
                            f"reward for sample {i} (problem {problems[i].id}) took longer than "
                            f"reward.timeout_s={timeout}s"
                        )
        finally:
            for ref in inflight:
                try:
                    ray.cancel(ref)
                except Exception:  # the task finished or its actor is gone: nothing to cancel
                    pass
        return [r for r in results if r is not None]

    def shutdown(self) -> None:
        """Stop every reward actor."""
        import ray

        with self._lock:
            try:
                ray.get([a.close.remote() for a in self._actors], timeout=10)
            except Exception:  # an actor that is dead or stuck is killed below all the same
                pass
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            self._actors = []
