"""Group-relative advantages (GRPO) and the filter for groups that carry no learning signal.

GRPO (Shao et al. 2024, https://arxiv.org/abs/2402.03300, section 4.1.2) replaces PPO's critic
with a baseline computed from the G completions sampled for the same prompt:

    A_i = (r_i - mean(r_1..r_G)) / std(r_1..r_G)

Dr. GRPO (Liu et al. 2025, https://arxiv.org/abs/2503.20783) drops the division by the std,
which up-weights prompts that are nearly always solved or nearly always failed; PPO-Lite
(https://arxiv.org/abs/2508.08221) keeps the group mean but divides by the std of the whole batch.
The three are `scale_rewards` = "group" | "none" | "batch", with TRL's `GRPOConfig.scale_rewards`
semantics: unbiased (Bessel-corrected) std and `A = (r - mean) / (std + 1e-4)`.

Notation used for tensor shapes: B prompts in the batch, G completions per prompt.
"""

from __future__ import annotations

from torch import Tensor

STD_EPS = 1e-4  # TRL's constant; veRL uses 1e-6


def group_advantages(rewards: Tensor, scale: str) -> Tensor:
    """Advantages of each completion against its own group: [B, G] -> [B, G].

    scale: "group" divides by each group's std (GRPO), "batch" by the std of all B*G rewards,
    "none" only subtracts the group mean (Dr. GRPO).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G] (prompts x completions): {list(rewards.shape)}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"algo.scale_rewards={scale!r}: choose one of group, batch, none")
    rewards = rewards.float()
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [B, G]
    if scale == "none" or rewards.numel() == 1 or (scale == "group" and rewards.shape[1] == 1):
        return centred  # a single reward has no std; its centred advantage is already 0 (as in TRL)
    if scale == "group":
        std = rewards.std(dim=1, keepdim=True)  # [B, 1], unbiased
    else:
        std = rewards.std().expand_as(rewards)  # [B, G], one std over the batch
    return centred / (std + STD_EPS)  # [B, G]


def filter_equal_groups(rewards: Tensor) -> Tensor:
    """Keep mask [B] (bool): False for groups whose G rewards are all exactly equal.

    Such a group has zero advantage for every completion under any `scale`, so it adds no
    policy gradient and only dilutes the token count (DAPO's dynamic sampling drops them).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G] (prompts x completions): {list(rewards.shape)}")
    return (rewards != rewards[:, :1]).any(dim=1)  # [B]

