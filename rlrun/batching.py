"""From scored groups of completions to the per-rank shards a learner step consumes.

A step (`rlrun.step`) collects groups (the G scored completions of one prompt), drops groups
that are too stale for `algo.max_staleness`, computes group advantages over the whole batch
(before any sharding, so they do not depend on the learner world size), and cuts the batch into
`algo.epochs * algo.mini_batches` optimizer updates, each split into `learner.num_workers`
equal, contiguous rank shares. The loss normaliser of every update is computed over the whole
update (all ranks), so the per-rank losses add up to the global loss whatever the world size.

Notation used for tensor shapes: B groups (prompts), G completions per group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from rlrun.algo import (
    LossNorm,
    filter_equal_groups,
    group_advantages,
    normalize_then_sum_advantages,
    normalized_sum,
    plan_minibatches,
    scale_negative,
    step_advantages,
)
from rlrun.records import ScoredSample


@dataclass
class Group:
    """The G scored completions of one prompt, in generation order."""

    problem_index: int
    scored: list[ScoredSample]

    @property
    def version(self) -> int:
        """The oldest weight version that produced a completion of this group."""
        return min(s.sample.weight_version for s in self.scored)


@dataclass
class TrainSample:
    """One sequence as the learner sees it."""

    prompt_ids: list[int]
    response_ids: list[int]
    behaviour_logprobs: list[float]  # [len(response_ids)], from the rollout engine
    advantage: float
    # No token of it is in the loss or its normalisers (`algo.mask_truncated`); it still
    # counted in its group's advantage statistics.
    masked: bool = False
    # The rollout actor slot that sampled every token of it with the weights the learner holds
    # now, so its behaviour log-probs must equal the learner's (`sync/logprob_gap_max/<slot>`);
    # -1: sampled with other weights, or not by a rollout actor.
    engine: int = -1
    # [len(response_ids)] per-token advantages with `algo.step_advantage` (the outcome
    # `advantage` plus the step parts); None: every token has `advantage`.
    token_advantages: list[float] | None = None
    # [len(response_ids)] 1 on model tokens, 0 on environment observation tokens
    # (`Sample.env_mask`); empty: every response token is the model's.
    env_mask: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.env_mask and len(self.env_mask) != len(self.response_ids):
            raise ValueError(
                f"env_mask has {len(self.env_mask)} entries for {len(self.response_ids)} response "
                "tokens: it needs one per token (1: the model's, 0: an observation), or none"
            )

    def loss_mask(self) -> list[float]:
        """[len(response_ids)]: 1.0 on the tokens the loss counts, 0.0 on the others (every
        token of a `masked` sample, and the environment's observation tokens)."""
        if self.masked or not self.env_mask:
            return [0.0 if self.masked else 1.0] * len(self.response_ids)
        return [1.0 if m else 0.0 for m in self.env_mask]


@dataclass
class Update:
    """One rank's share of one optimizer update, with the update's global normaliser."""

    samples: list[TrainSample]
    norm: LossNorm


# Everything one learner rank trains on in one step: its share of each of the
# epochs * mini_batches updates, in order.
Shard = list[Update]


def rewards_tensor(groups: list[Group]) -> torch.Tensor:
    """Rewards as [B, G]; NaN for an unscored sample."""
    return torch.tensor(
        [[math.nan if s.reward is None else s.reward for s in g.scored] for g in groups],
        dtype=torch.float32,
    )


def components_tensor(
    groups: list[Group], weights: dict[str, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reward components named in `weights` as [B, G, K], and their weights [K].

    NaN where a component gave no score, and for every component of an unscored sample (it
    takes no part in any group statistic).
    """
    names, nan = list(weights), math.nan
    components = torch.tensor(
        [
            [
                [nan] * len(names) if s.reward is None
                else [nan if (c := s.components.get(n)) is None else c for n in names]
                for s in g.scored
            ]
            for g in groups
        ],
        dtype=torch.float32,
    )
    return components, torch.tensor([weights[n] for n in names])


def group_rewards(groups: list[Group], weights: dict[str, float] | None = None) -> torch.Tensor:
    """[B, G]: the rewards whose spread within a group is its learning signal, NaN where unscored.

    With `weights` (`reward.aggregation: normalize_then_sum`, one weight per component name) the
    weighted sum of each sample's components z-scored within the group; without, the rewards.
    """
    if weights is None:
        return rewards_tensor(groups)
    return normalized_sum(*components_tensor(groups, weights))


def split_informative(
    groups: list[Group], weights: dict[str, float] | None = None
) -> tuple[list[Group], list[Group]]:
    """(groups with a reward spread, groups without: all scored rewards equal or fewer than two
    scored); `weights` as in `group_rewards`."""
    if not groups:
        return [], []
    keep = filter_equal_groups(group_rewards(groups, weights)).tolist()  # [B]
    pairs = list(zip(groups, keep, strict=True))
    return [g for g, k in pairs if k], [g for g, k in pairs if not k]


def drop_stale(groups: list[Group], version: int, max_staleness: int) -> tuple[list[Group], int]:
    """Keep groups generated at most `max_staleness` versions before `version`.

    Returns (kept groups, number of dropped samples).
    """
    kept = [g for g in groups if version - g.version <= max_staleness]
    dropped = sum(len(g.scored) for g in groups if version - g.version > max_staleness)
    return kept, dropped


def trim_groups(groups: list[Group], parts: int) -> list[Group]:
    """The longest prefix of groups whose sample count divides into `parts` equal shares."""
    n = len(groups)
    while n and sum(len(g.scored) for g in groups[:n]) % parts:
        n -= 1
    return groups[:n]


def to_train_samples(
    groups: list[Group],
    scale_rewards: str,
    negative_scale: float = 1.0,
    weights: dict[str, float] | None = None,
    mask_truncated: bool = False,
    version: int | None = None,
    step_rule: str = "none",
    step_coef: float = 0.0,
) -> list[TrainSample]:
    """Flatten groups into samples carrying their group-relative advantage, negative
    advantages multiplied by `negative_scale`; with `mask_truncated`, a completion cut at the
    token limit is kept out of the loss (its reward still counts in its group's statistics).

    With `step_rule` local or min (`algo.step_advantage`), a scored sample whose reward placed
    parts at token positions gets `token_advantages`: `rlrun.algo.step_advantages` of its
    outcome advantage and parts, weighted by `step_coef`.
    With `weights` (`reward.aggregation: normalize_then_sum`, one weight per component name) the
    advantages are TRL's normalize_then_sum of the components and `scale_rewards` does not apply.
    `version` is the learner's weight version: samples made entirely by it keep their engine.
    """
    if not groups:
        return []
    if weights is None:
        adv = group_advantages(rewards_tensor(groups), scale_rewards)  # [B, G]
    else:
        adv = normalize_then_sum_advantages(*components_tensor(groups, weights))  # [B, G]
    adv = scale_negative(adv, negative_scale)
    out = []
    for g, row in zip(groups, adv.tolist(), strict=True):
        for s, a in zip(g.scored, row, strict=True):
            out.append(
                TrainSample(
                    prompt_ids=list(s.sample.prompt_ids),
                    response_ids=list(s.sample.response_ids),
                    behaviour_logprobs=list(s.sample.behaviour_logprobs),
                    advantage=float(a),
                    masked=mask_truncated and s.sample.finish_reason == "length",
                    engine=s.sample.engine if version is not None and all(
                        v == version for v in s.sample.versions()) else -1,
                    env_mask=list(s.sample.env_mask),
                )
            )
    if step_rule != "none":
        _add_step_advantages(out, [s for g in groups for s in g.scored], step_rule, step_coef)
    return out


def _add_step_advantages(
    samples: list[TrainSample], scored: list[ScoredSample], rule: str, coef: float
) -> list[TrainSample]:
    """Set `token_advantages` on the samples whose scored twin has token rewards."""
    rows = [i for i, s in enumerate(scored) if s.reward is not None and s.token_rewards]
    if not rows:
        return samples
    length = max(len(samples[i].response_ids) for i in rows)
    parts = torch.full((len(rows), length), math.nan)  # [n, L]
    for r, i in enumerate(rows):
        for part in scored[i].token_rewards:
            if 0 <= part.position < len(samples[i].response_ids):
                parts[r, part.position] = part.value
    outcome = torch.tensor([samples[i].advantage for i in rows])  # [n]
    per_token = step_advantages(outcome, parts, rule, coef)  # [n, L]
    for r, i in enumerate(rows):
        samples[i].token_advantages = per_token[r, : len(samples[i].response_ids)].tolist()
    return samples


def make_shards(
    samples: list[TrainSample],
    *,
    step: int,
    world_size: int,
    epochs: int,
    mini_batches: int,
    max_len: int,
    seed: int,
) -> list[Shard]:
    """Cut `samples` into `epochs * mini_batches` updates, each into `world_size` rank shares.

    The plan comes from `rlrun.algo.plan_minibatches`, whose shuffle depends only on
    (seed, step, epoch), so the global updates are the same for every `world_size`. The token
    count of each update's `LossNorm` is of the tokens `TrainSample.loss_mask` counts.
    `len(samples)` must divide by `mini_batches * world_size` (see `trim_groups`).
    """
    width = max((len(s.response_ids) for s in samples), default=0)
    mask = torch.tensor([s.loss_mask() + [0.0] * (width - len(s.response_ids)) for s in samples],
                        dtype=torch.bool).reshape(len(samples), width)  # [N, L]
    shards: list[Shard] = [[] for _ in range(world_size)]
    for epoch in range(epochs):
        plan = plan_minibatches(
            mask, mini_batches, world_size, max_len, seed=seed, step=step, epoch=epoch
        )
        for mini_batch in plan:
            for shard, idx in zip(shards, mini_batch.shards, strict=True):
                shard.append(Update([samples[i] for i in idx.tolist()], mini_batch.norm))
    return shards


def batch_metrics(groups: list[Group], version: int) -> dict[str, float]:
    """Reward, response-length and staleness statistics of the groups trained on. Reward
    statistics leave out what was not scored (TRL's nanmean): the unscored samples for the
    reward, and for each component the samples it gave no score."""
    scored = [s for g in groups for s in g.scored]
    if not scored:
        return {}
    rewards = np.array([s.reward for s in scored if s.reward is not None], dtype=np.float64)
    lengths = np.array([len(s.sample.response_ids) for s in scored], dtype=np.float64)
    staleness = np.array([version - s.sample.weight_version for s in scored], dtype=np.float64)
    metrics: dict[str, float] = {}
    if len(rewards):
        metrics |= {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std())}
    metrics |= {
        "response/len_mean": float(lengths.mean()),
        "response/len_max": float(lengths.max()),
        "response/truncated_frac": float(
            np.mean([s.sample.finish_reason == "length" for s in scored])
        ),
        "async/staleness_mean": float(staleness.mean()),
        "async/staleness_max": float(staleness.max()),
    }
    names = sorted({name for s in scored for name in s.components})
    for name in names:
        values = _scores(scored, name)
        if values:
            metrics[f"reward/{name}"] = float(np.mean(values))
    if correct := _scores(scored, "correctness"):
        metrics["train/accuracy"] = float(np.mean([c >= 1.0 for c in correct]))
    return metrics | step_metrics(scored)


def step_metrics(scored: list[ScoredSample]) -> dict[str, float]:
    """steps/* over the completions whose steps were checked (`reward.step_rewards`): steps
    per completion, the share of them checked (mean per completion), the share of checked
    steps that are wrong (over the batch), the share of completions with a wrong step, and
    where the first wrong step sits (1-based, and as a share of the completion's steps)."""
    with_steps = [s.steps for s in scored if s.steps]
    if not with_steps:
        return {}
    checked = [[c for c in steps if c.verdict != "uncheckable"] for steps in with_steps]
    n_checked = sum(len(c) for c in checked)
    wrong = sum(c.verdict == "wrong" for steps in with_steps for c in steps)
    firsts = [(next(k for k, c in enumerate(steps) if c.verdict == "wrong"), len(steps))
              for steps in with_steps if any(c.verdict == "wrong" for c in steps)]
    out = {
        "steps/per_completion": float(np.mean([len(steps) for steps in with_steps])),
        "steps/checked_frac": float(np.mean([len(c) / len(steps)
                                             for c, steps in zip(checked, with_steps,
                                                                 strict=True)])),
        "steps/wrong_frac": wrong / n_checked if n_checked else 0.0,
        "steps/with_wrong_frac": len(firsts) / len(with_steps),
    }
    if firsts:
        out["steps/first_wrong"] = float(np.mean([k + 1 for k, _ in firsts]))
        out["steps/first_wrong_rel"] = float(np.mean([(k + 1) / n for k, n in firsts]))
    return out


def token_lag_metrics(groups: list[Group], version: int, max_lag: int) -> dict[str, float]:
    """Per-token staleness of the groups trained on at `version` (partial rollouts mix weight
    versions within a sample): the mean lag, and the share of tokens at each lag 0..max_lag."""
    lags = np.array([version - v for g in groups for s in g.scored for v in s.sample.versions()],
                    dtype=np.int64)
    if not len(lags):
        return {}
    shares = np.bincount(np.minimum(lags, max_lag), minlength=max_lag + 1) / len(lags)
    return {"async/token_staleness_mean": float(lags.mean())} | {
        f"async/token_lag_{k}": float(share) for k, share in enumerate(shares)
    }


def _scores(scored: list[ScoredSample], name: str) -> list[float]:
    # A sample without the component counts as 0, as it adds 0 to the reward; None is no score.
    return [c for s in scored if (c := s.components.get(name, 0.0)) is not None]
