"""One training step, as pure code: from the data order to the learner ranks' shards.

The driver (`rlrun.training`) runs a step as

1. draw      the next prompts in the seeded data order (`rlrun.data_order`);
2. generate  `algo.group_size` completions per prompt with the `generate` it is handed (the
             rollout actors);
3. score     them with the `score` it is handed (the reward: sandbox for code, verifier for
             math); with `algo.filter_equal_groups`, groups whose rewards are all equal (or
             with fewer than two scored samples) are dropped and more prompts drawn, up to
             `algo.max_topup_rounds` times;
4. batch     drop groups more than `algo.max_staleness` versions old, compute group-relative
             advantages over the whole batch, and cut the batch into one shard per learner
             rank (so the advantages are the same whatever the number of ranks);

then hands the shards to the learner and the new weights to the rollout actors. Steps 1-3 are
`collect`, step 4 is `make_batch`; `step_metrics` and `sample_rows` turn a finished step into
what is logged. Nothing here knows about Ray: tests drive it with fake engines and judges.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlrun import batching
from rlrun.config import Config, response_limit
from rlrun.data_order import DataOrder
from rlrun.engines.base import SamplingParams
from rlrun.multiturn import episode_metrics
from rlrun.records import VERDICT_STATUSES, Problem, Sample
from rlrun.rewards.reward import component_weights
from rlrun.scoring import EpisodeFn, GenerateFn, ScoreFn, score_groups


@dataclass
class Rollout:
    """Steps 1-3 of one batch: the scored groups and where the data order stands after them."""

    groups: list[batching.Group]
    data_position: int
    metrics: dict[str, float] = field(default_factory=dict)
    # Partial rollouts: data positions of the groups drawn but left in flight for a later step.
    in_flight: list[int] = field(default_factory=list)


@dataclass
class Batch:
    """Step 4: the groups trained on, their samples with advantages, one shard per rank."""

    groups: list[batching.Group]
    samples: list[batching.TrainSample]
    shards: list[batching.Shard]
    dropped: int  # samples dropped as too stale


def sampling_seed(seed: int, data_position: int) -> int:
    """The sampling seed of the prompts drawn at `data_position`: it follows the data order, so
    a resumed run samples what the uninterrupted run would have."""
    return seed * 1_000_003 + data_position


def normalize_weights(cfg: Config) -> dict[str, float] | None:
    """The component weights to normalize then sum with (`reward.aggregation:
    normalize_then_sum`); None under `sum`, where each sample's reward is already the sum."""
    return component_weights(cfg) if cfg.reward.aggregation == "normalize_then_sum" else None


def collect(
    problems: list[Problem],
    prompts: list[str],
    order: DataOrder,
    generate: GenerateFn,
    score: ScoreFn,
    cfg: Config,
    judges_code: bool = False,
    episodes: EpisodeFn | None = None,
) -> Rollout:
    """Steps 1-3: draw, generate and score until the batch holds `algo.prompts_per_step`
    groups (or the top-up rounds run out). `prompts[i]` is the rendered prompt of
    `problems[i]`; `judges_code` adds the sandbox verdict counts to the metrics; `episodes`
    (multi-turn, `rlrun.multiturn`) runs the turns after the first."""
    algo, weights = cfg.algo, normalize_weights(cfg)
    groups: list[batching.Group] = []
    stats = RolloutStats()
    for _ in range(algo.max_topup_rounds + 1):
        # 1. draw
        start = order.position
        indices = order.draw(algo.prompts_per_step - len(groups))
        # 2. generate
        t0 = time.perf_counter()
        sampling = SamplingParams.from_config(
            cfg.rollout.sampling, n=algo.group_size, seed=sampling_seed(cfg.run.seed, start)
        )
        generated = generate([prompts[i] for i in indices], sampling)
        if episodes is not None:
            generated = episodes([problems[i] for i in indices], generated, sampling)
        stats.t_generate += time.perf_counter() - t0
        stats.tokens += sum(len(s.response_ids) for samples in generated for s in samples)
        # 3. score
        new = score_batch(problems, [(start + k, i, samples) for k, (i, samples)
                                      in enumerate(zip(indices, generated, strict=True))],
                           score, stats)
        informative, flat = batching.split_informative(new, weights)
        stats.seen += len(new)
        stats.equal += len(flat)
        groups += informative if algo.filter_equal_groups else new
        if len(groups) >= algo.prompts_per_step or not algo.filter_equal_groups:
            break
    return Rollout(groups, order.position, stats.metrics(judges_code))


@dataclass
class RolloutStats:
    """What steps 1-3 of a batch count, for its metrics."""

    seen: int = 0  # groups scored
    equal: int = 0  # of them without a reward spread
    tokens: int = 0  # tokens generated
    unscored: int = 0  # samples the reward could not score
    t_generate: float = 0.0
    t_score: float = 0.0
    verdicts: Counter[str] = field(default_factory=Counter)

    def metrics(self, judges_code: bool) -> dict[str, float]:
        """train/all_equal_frac, train/unscored, perf/* and, judging code, sandbox/*."""
        out = {
            "train/all_equal_frac": self.equal / max(self.seen, 1),
            "train/unscored": float(self.unscored),
            "perf/time_generate": self.t_generate,
            "perf/time_reward": self.t_score,
            "perf/rollout_tokens_per_s": (self.tokens / self.t_generate
                                          if self.t_generate > 0 else 0.0),
        }
        if judges_code:
            t = self.t_score
            out["sandbox/tests_per_s"] = sum(self.verdicts.values()) / t if t else 0.0
            out |= {f"sandbox/{s}": float(self.verdicts[s]) for s in VERDICT_STATUSES}
        return out


def score_batch(
    problems: list[Problem],
    generated: list[tuple[int, int, list[Sample]]],
    score: ScoreFn,
    stats: RolloutStats,
) -> list[batching.Group]:
    """Step 3: one scored group per (data position, problem index, its samples), counted in
    `stats`; a group's samples carry its problem id and data position as `group_id`."""
    t0 = time.perf_counter()
    scored = score_groups(
        score, [problems[index] for _, index, _ in generated],
        [[dataclasses.replace(s, problem_id=problems[index].id, group_id=position)
          for s in samples] for position, index, samples in generated],
    )
    stats.t_score += time.perf_counter() - t0
    flat = [s for group in scored for s in group]
    stats.verdicts.update(v.status for s in flat for v in s.verdicts)
    stats.unscored += sum(s.reward is None for s in flat)
    return [batching.Group(index, group)
            for (_, index, _), group in zip(generated, scored, strict=True)]


def make_batch(rollout: Rollout, version: int, step: int, cfg: Config) -> Batch:
    """Step 4 for a learner at weight version `version`: drop stale groups, keep as many as
    divide into equal rank shares, compute advantages, cut the shards."""
    algo, world = cfg.algo, cfg.learner.num_workers
    groups, dropped = batching.drop_stale(rollout.groups, version, algo.max_staleness)
    groups = batching.trim_groups(groups, algo.mini_batches * world)
    samples = batching.to_train_samples(
        groups, algo.scale_rewards, algo.negative_advantage_scale, normalize_weights(cfg),
        mask_truncated=algo.mask_truncated, version=version, step_rule=algo.step_advantage,
        step_coef=algo.step_coef,
    )
    if not samples:
        return Batch(groups, samples, [[] for _ in range(world)], dropped)
    shards = batching.make_shards(
        samples, step=step, world_size=world, epochs=algo.epochs, mini_batches=algo.mini_batches,
        max_len=response_limit(cfg), seed=cfg.run.seed,
    )
    return Batch(groups, samples, shards, dropped)


def step_metrics(
    batch: Batch,
    rollout: Rollout,
    learner: dict[str, float],
    version: int,
    timings: dict[str, float],
    token_lags: int = 0,
) -> dict[str, float]:
    """Everything one step logs: batch statistics, the rollout's and the learner's metrics,
    and `timings` (perf/time_rollout, perf/time_train, perf/time_sync, perf/time_step, ... in
    seconds); with `token_lags` > 0 (partial rollouts), the share of tokens per version lag
    up to it."""
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in batch.samples)
    t_train = timings.get("perf/time_train", 0.0)
    t_step = timings.get("perf/time_step", 0.0)
    lags = batching.token_lag_metrics(batch.groups, version, token_lags) if token_lags else {}
    return (
        batching.batch_metrics(batch.groups, version)
        | episode_metrics([s for g in batch.groups for s in g.scored])
        | lags
        | rollout.metrics
        | learner
        | {
            "async/dropped_samples": float(batch.dropped),
            "train/samples": float(len(batch.samples)),
            "perf/train_tokens_per_s": tokens / t_train if t_train > 0 else 0.0,
            "perf/samples_per_s": len(batch.samples) / t_step if t_step > 0 else 0.0,
        }
        | timings
    )


def sample_rows(batch: Batch, prompts: list[str]) -> list[dict[str, Any]]:
    """One samples.jsonl row per completion trained on, with the advantage it was trained with
    (an unscored sample's reward is None and its advantage 0); a multi-turn trajectory's
    `response` is its last turn, and `turns` gives every turn's response, the observation that
    answered it, its reward and the environment's numbers; with `reward.step_rewards`,
    `steps` gives each step's text, verdict and character span in the response."""
    scored = [(g, s) for g in batch.groups for s in g.scored]  # batch.samples' order
    rows = []
    for (g, s), t in zip(scored, batch.samples, strict=True):
        row = {
            "problem_id": s.sample.problem_id,
            "prompt": prompts[g.problem_index],
            "response": s.sample.response_text,
            "reward": s.reward,
            "advantage": t.advantage,
            "components": dict(s.components),
        }
        if s.sample.turns:
            row["turns"] = [{"turn": k + 1, "response": t.response, "observation": t.observation,
                             "reward": t.reward, "judged": t.judged} | t.info
                            for k, t in enumerate(s.sample.turns)]
        if s.steps:
            text = s.sample.response_text
            row["steps"] = [{"text": text[c.start : c.end], "verdict": c.verdict,
                             "start": c.start, "end": c.end} for c in s.steps]
        rows.append(row)
    return rows
