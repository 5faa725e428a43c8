"""Partial rollouts (`rollout.partial`): generation in rounds, unfinished groups carried over.

docs/training.md gives the design (Kimi k1.5's, slime's and APRIL's) and why. The code:

1. a step keeps `rollout.partial_pool` groups in flight, more than the `algo.prompts_per_step`
   it trains; each round draws prompts to refill the pool, starts them and continues the paused
   samples of the others, at most `rollout.partial_tokens` new tokens per sample, under
   whatever weights the engines hold, each token logged with its version;
2. a group whose samples have all finished is scored (with `algo.filter_equal_groups`, one
   without a reward spread leaves the pool); the step takes `algo.prompts_per_step` finished
   groups, oldest first, and the rest wait for a later step;
3. a batch trained at version v holds no token older than v - `algo.max_staleness`: a group at
   that bound makes the step run more rounds until it finishes, a group past it starts over.

A step runs at most `(algo.max_topup_rounds + 2) * ceil(max_new_tokens / partial_tokens)`
rounds: the work of the top-up rounds it replaces, and of finishing the groups at the bound.
A resumed run starts the groups in flight at its checkpoint (`TrainState.in_flight`) over.
Nothing here knows about Ray: `advance` is the rollout actors' generate and extend.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from rlrun import batching
from rlrun.config import Config
from rlrun.data_order import DataOrder
from rlrun.engines.base import SamplingParams
from rlrun.records import Problem, Sample
from rlrun.scoring import ScoreFn
from rlrun.step import (
    Rollout,
    RolloutStats,
    normalize_weights,
    sampling_seed,
    score_batch,
)

# advance(prompts, sampling for them, paused samples, sampling for those) ->
#   (sampling.n samples per prompt, each paused sample continued): one round on the engines
AdvanceFn = Callable[
    [list[str], SamplingParams, list[Sample], SamplingParams],
    tuple[list[list[Sample]], list[Sample]],
]
# Seeds of continuations: the seed of the round's new prompts plus this times the round count.
CONTINUE_SEED_OFFSET = 500_009


@dataclass
class InFlight:
    """One group in the pool: its prompt, its samples so far (None: not started), and its
    scored group once every sample finished."""

    position: int  # in the data order; the samples' group_id
    problem_index: int
    samples: list[Sample] | None = None
    finished: batching.Group | None = None

    @property
    def oldest(self) -> int | None:
        """The weight version of its oldest token (None: not started)."""
        return None if not self.samples else min(s.weight_version for s in self.samples)


class PartialRollouts:
    """The pool of groups in flight, kept from one step to the next."""

    def __init__(self, problems: list[Problem], prompts: list[str], order: DataOrder,
                 cfg: Config, in_flight: list[int] | None = None) -> None:
        self.problems, self.prompts, self.order, self.cfg = problems, prompts, order, cfg
        self.pool: list[InFlight] = []
        self.rounds_run = 0  # rounds of this pool so far: continuations seed by it
        self.restart(in_flight or [])

    def restart(self, in_flight: list[int]) -> None:
        """Empty the pool but for the groups at data positions `in_flight`, not started (a
        resumed run, a learner rewound to its checkpoint)."""
        self.pool = [InFlight(p, self.order.index_at(p)) for p in in_flight]

    def collect(self, advance: AdvanceFn, score: ScoreFn, version: int,
                judges_code: bool = False) -> Rollout:
        """The batch the learner trains at weight `version`: rounds until it has
        `algo.prompts_per_step` finished groups and no group at the staleness bound is left
        unfinished (or the round bound is reached), as `rlrun.step.collect` returns it, with
        the pool's positions in `in_flight`."""
        cfg, algo = self.cfg, self.cfg.algo
        want, weights = algo.prompts_per_step, normalize_weights(cfg)
        pool = cfg.rollout.partial_pool  # groups in flight; unset: a quarter more than a batch
        extra = (pool if pool is not None else math.ceil(1.25 * want)) - want
        limit = cfg.rollout.sampling.max_new_tokens
        max_rounds = (algo.max_topup_rounds + 2) * math.ceil(limit / cfg.rollout.partial_tokens)
        stats = RolloutStats()
        rounds = restarted = 0

        def finished() -> list[InFlight]:
            return [g for g in self.pool if g.finished is not None]

        def at_bound() -> bool:
            """A group in flight could not wait for the next step."""
            return any(g.finished is None and g.oldest is not None and
                       version - g.oldest >= algo.max_staleness for g in self.pool)

        for entry in self.pool:
            oldest = entry.oldest
            if oldest is not None and version - oldest > algo.max_staleness:
                restarted += len(entry.samples or [])
                entry.samples, entry.finished = None, None
        while (len(finished()) < want or at_bound()) and rounds < max_rounds:
            start = self.order.position
            # in flight: what the batch still needs plus the over-provisioned groups
            ready, unfinished = len(finished()), sum(g.finished is None for g in self.pool)
            room = max(0, want - ready + extra - unfinished) if ready < want else 0
            self.pool += [InFlight(start + k, i) for k, i in enumerate(self.order.draw(room))]
            fresh = [g for g in self.pool if g.samples is None]
            paused = [(g, k) for g in self.pool if g.samples and g.finished is None
                      for k, s in enumerate(g.samples) if s.finish_reason == "paused"]
            self.rounds_run += 1
            seed = sampling_seed(cfg.run.seed, start)
            base = dataclasses.replace(
                SamplingParams.from_config(cfg.rollout.sampling, n=algo.group_size, seed=seed),
                round_tokens=cfg.rollout.partial_tokens,
            )
            t0 = time.perf_counter()
            started, continued = advance(
                [self.prompts[g.problem_index] for g in fresh], base,
                [g.samples[k] for g, k in paused if g.samples],
                dataclasses.replace(base, n=1,
                                    seed=seed + CONTINUE_SEED_OFFSET * self.rounds_run),
            )
            for entry, samples in zip(fresh, started, strict=True):
                entry.samples = samples
            stats.t_generate += time.perf_counter() - t0
            stats.tokens += sum(len(s.response_ids) for samples in started for s in samples)
            for (entry, k), sample in zip(paused, continued, strict=True):
                assert entry.samples is not None
                stats.tokens += len(sample.response_ids) - len(entry.samples[k].response_ids)
                entry.samples[k] = sample
            done = [g for g in self.pool if g.finished is None and g.samples
                    and all(s.finish_reason != "paused" for s in g.samples)]
            groups = score_batch(self.problems, [(g.position, g.problem_index, g.samples or [])
                                                for g in done], score, stats)
            flat = {id(g) for g in batching.split_informative(groups, weights)[1]}
            for entry, group in zip(done, groups, strict=True):
                entry.finished = group
                if algo.filter_equal_groups and id(group) in flat:
                    self.pool.remove(entry)  # no learning signal: replaced next round
            stats.seen += len(done)
            stats.equal += len(flat)
            rounds += 1
        # Oldest first: a group left over waits for a later, newer version.
        chosen = sorted(finished(), key=lambda g: (g.oldest, g.position))[:want]
        for entry in chosen:
            self.pool.remove(entry)
        taken = [g.finished for g in chosen if g.finished is not None]
        metrics = stats.metrics(judges_code) | {
            "async/partial_rounds": float(rounds),
            "async/in_flight_groups": float(len(self.pool)),
            "async/restarted_samples": float(restarted),
        }
        return Rollout(taken, self.order.position, metrics,
                       in_flight=sorted(g.position for g in self.pool))
