"""Group-relative advantages (GRPO) and the filter for groups that carry no learning signal.

GRPO (Shao et al. 2024, https://arxiv.org/abs/2402.03300, section 4.1.2) replaces PPO's critic
with a baseline computed from the G completions sampled for the same prompt:

    A_i = (r_i - mean(r_1..r_G)) / std(r_1..r_G)

Dr. GRPO (Liu et al. 2025, https://arxiv.org/abs/2503.20783) drops the division by the std,
which up-weights prompts that are nearly always solved or nearly always failed; PPO-Lite
(https://arxiv.org/abs/2508.08221) keeps the group mean but divides by the std of the whole batch.
The three are `scale_rewards` = "group" | "none" | "batch", with TRL's `GRPOConfig.scale_rewards`
semantics: unbiased (Bessel-corrected) std and `A = (r - mean) / (std + 1e-4)`.

`scale_negative` multiplies the advantages below zero by a factor in [0, 1]. The policy gradient
splits into reinforcing better-than-group samples and pushing down worse ones (positive and
negative sample reinforcement, Zhu et al. 2025, https://arxiv.org/abs/2506.01347). Pushing a
sampled token down hands its probability to the other tokens in proportion to the model's prior.
A large model's prior puts that mass somewhere sensible; a small or barely trained model's prior
spreads it over junk, and the run collapses. A factor below 1 keeps the gradient's sign pattern
and damps only the push down. 1 is GRPO; 0 keeps only the better-than-group samples, as
RAFT-style rejection sampling does.

A reward may leave a completion unscored (TRL's convention: a reward function returns None, here
NaN in the tensors). As in TRL, group means and stds are taken over the scored completions only
(`torch.nanmean` and TRL's `nanstd`), an unscored completion gets advantage 0, and so does every
completion of a group with fewer than two scored ones: one score has nothing to be compared with.

`step_advantages` turns the parts a reward places at token positions (a verified step's last
token, `reward.step_rewards`) into per-token advantages around the outcome advantage A_i:
`local` adds to each token the part of its own step, `min` the smallest part of its step and
every later one (PURE's min-form credit assignment, https://arxiv.org/abs/2504.15275). The
formulas and the alternatives they were chosen against are in docs/algorithms.md.

`normalize_then_sum_advantages` is TRL's `multi_objective_aggregation="normalize_then_sum"`
(GDPO, https://arxiv.org/abs/2601.05242): each reward component is z-scored within its group,
the weighted sum of those z-scores is z-scored over the whole batch, and `scale` does not apply.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlrun.algo_choices import SCALE_REWARDS, STEP_RULES

STD_EPS = 1e-4  # TRL's constant; veRL uses 1e-6


def group_advantages(rewards: Tensor, scale: str) -> Tensor:
    """Advantages of each completion against its own group: [B, G] -> [B, G].

    scale: "group" divides by each group's std (GRPO), "batch" by the std of all B*G rewards,
    "none" only subtracts the group mean (Dr. GRPO). A NaN reward marks an unscored completion.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G] (prompts x completions): {list(rewards.shape)}")
    if scale not in SCALE_REWARDS:
        raise ValueError(f"algo.scale_rewards={scale!r}: choose one of {', '.join(SCALE_REWARDS)}")
    rewards = rewards.float()
    if torch.isnan(rewards).any():
        return _advantages_with_unscored(rewards, scale)
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [B, G]
    if scale == "none" or rewards.numel() == 1 or (scale == "group" and rewards.shape[1] == 1):
        return centred  # a single reward has no std; its centred advantage is already 0 (as in TRL)
    if scale == "group":
        std = rewards.std(dim=1, keepdim=True)  # [B, 1], unbiased
    else:
        std = rewards.std().expand_as(rewards)  # [B, G], one std over the batch
    return centred / (std + STD_EPS)  # [B, G]


def _advantages_with_unscored(rewards: Tensor, scale: str) -> Tensor:
    # TRL's NaN-aware branch. Kept apart from the plain path, because nanmean / nanstd round
    # differently from mean / std and runs where every completion is scored must not change.
    centred = rewards - torch.nanmean(rewards, dim=1, keepdim=True)  # [B, G]
    if scale == "none":
        advantages = centred
    else:
        if scale == "group":
            std = nanstd(rewards, dim=1) if rewards.shape[1] > 1 else torch.zeros_like(rewards)
        else:
            std = nanstd(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        advantages = centred / (std + STD_EPS)  # [B, G]
    return torch.nan_to_num(advantages, nan=0.0)


def nanstd(x: Tensor, dim: int | None = None) -> Tensor:
    """Unbiased std over the non-NaN entries along `dim` (all entries when None), dimensions
    kept; NaN where fewer than two entries are not NaN. TRL's `trl.trainer.utils.nanstd`."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    variance = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True)
    correction = torch.where(count > 1, count / (count - 1), torch.full_like(variance, torch.nan))
    return torch.sqrt(variance * correction)


def normalized_sum(components: Tensor, weights: Tensor) -> Tensor:
    """Per-group normalised, weighted sum of reward components: [B, G, K], [K] -> [B, G].

    Each component is z-scored within its group over the completions it scored (NaN: not
    scored), then the z-scores are summed with `weights`, a component that did not score a
    completion adding nothing. A completion no component scored stays NaN.
    """
    if components.dim() != 3 or weights.shape != components.shape[2:]:
        raise ValueError(
            f"components must be [B, G, K] and weights [K]: {list(components.shape)}, "
            f"{list(weights.shape)}"
        )
    components = components.float()
    mean = torch.nanmean(components, dim=1, keepdim=True)  # [B, 1, K]
    std = nanstd(components, dim=1) if components.shape[1] > 1 else torch.zeros_like(mean)
    z = (components - mean) / (std + STD_EPS)  # [B, G, K]
    total = (z * weights.float()).nansum(dim=2)  # [B, G]
    return total.masked_fill(torch.isnan(components).all(dim=2), torch.nan)


def normalize_then_sum_advantages(components: Tensor, weights: Tensor) -> Tensor:
    """Advantages under TRL's `multi_objective_aggregation="normalize_then_sum"`:
    [B, G, K], [K] -> [B, G], the `normalized_sum` z-scored over the whole batch."""
    total = normalized_sum(components, weights)  # [B, G]
    std = nanstd(total) if total.numel() > 1 else torch.zeros_like(total)
    advantages = (total - torch.nanmean(total)) / (std + STD_EPS)
    return torch.nan_to_num(advantages, nan=0.0)


def step_advantages(advantages: Tensor, parts: Tensor, rule: str, coef: float) -> Tensor:
    """Per-token advantages from the outcome advantages and step parts: [N], [N, L] -> [N, L].

    parts [N, L] hold each step's part at the step's last token and NaN elsewhere. Step k is
    the tokens after step k-1's last token up to and including its own; a token after the last
    part is in no step and keeps A_i.

        local:  A_it = A_i + coef * p_k(t)                      p_k(t): the part of t's step
        min:    A_it = A_i + coef * min_{j >= k(t)} p_j          PURE's min-form
    """
    if parts.dim() != 2 or advantages.shape != parts.shape[:1]:
        raise ValueError(
            f"advantages must be [N] and parts [N, L]: {list(advantages.shape)}, "
            f"{list(parts.shape)}"
        )
    if rule not in STEP_RULES:
        raise ValueError(f"algo.step_advantage={rule!r}: choose one of {', '.join(STEP_RULES)}")
    n, length = parts.shape
    has = ~torch.isnan(parts)  # [N, L]
    if rule == "min":
        filled = torch.where(has, parts, torch.inf)  # [N, L]
        future = torch.cummin(filled.flip(1), dim=1).values.flip(1)  # [N, L], min over j >= t
        signal = torch.where(torch.isinf(future), 0.0, future)  # [N, L]
    else:
        at = torch.arange(length).expand(n, length)  # [N, L]
        index = torch.where(has, at, length)  # [N, L]: the part's own position, L where none
        next_part = torch.cummin(index.flip(1), dim=1).values.flip(1)  # [N, L], L: no step
        padded = torch.cat([parts.nan_to_num(0.0), parts.new_zeros(n, 1)], dim=1)  # [N, L+1]
        signal = padded.gather(1, next_part)  # [N, L]
    return advantages.unsqueeze(-1) + coef * signal  # [N, L]


def scale_negative(advantages: Tensor, factor: float) -> Tensor:
    """`advantages` with every negative entry multiplied by `factor` (any shape)."""
    if not 0.0 <= factor <= 1.0:
        raise ValueError(f"algo.negative_advantage_scale={factor} must be in [0, 1]")
    if factor == 1.0:
        return advantages
    return torch.where(advantages < 0, advantages * factor, advantages)


def filter_equal_groups(rewards: Tensor) -> Tensor:
    """Keep mask [B] (bool): False for groups whose scored rewards are all exactly equal, or
    that have fewer than two scored rewards (NaN: unscored).

    Such a group has zero advantage for every completion under any `scale`, so it adds no
    policy gradient and only dilutes the token count (DAPO's dynamic sampling drops them).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G] (prompts x completions): {list(rewards.shape)}")
    unscored = torch.isnan(rewards)  # [B, G]
    high = rewards.masked_fill(unscored, -torch.inf).amax(dim=1)  # [B]
    low = rewards.masked_fill(unscored, torch.inf).amin(dim=1)  # [B]
    return ((~unscored).sum(dim=1) >= 2) & (high > low)  # [B]

