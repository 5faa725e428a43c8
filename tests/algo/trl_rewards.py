"""TRL 1.16's path from reward functions to advantages, for the unscored and aggregation tests.

`trl_rewards_per_func` runs TRL's own `GRPOTrainer._calculate_rewards` (trl/trainer/
grpo_trainer.py), unbound, on an object carrying only what that method reads: the reward
functions' outputs, None turned into NaN, come from TRL's code. `trl_advantages` reproduces,
line for line, the inline block of `GRPOTrainer._generate_and_score_completions` from
`unscorable_mask = ...` to `advantages = torch.nan_to_num(advantages, nan=0.0)`, with TRL's own
`nanstd`, on one process (no slicing).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch


def trl_rewards_per_func(
    funcs: list[Callable[..., list[float | None]]],
    completions: list[str],
    columns: dict[str, list[Any]],
) -> torch.Tensor:
    """[N, K]: what TRL's `_calculate_rewards` makes of `funcs` on `completions`; `columns` are
    the dataset columns each example carries (one list entry per completion)."""
    from accelerate import PartialState
    from trl.trainer.grpo_trainer import GRPOTrainer

    PartialState()  # TRL logs through accelerate when a completion has no reward at all
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        args=SimpleNamespace(report_to=[]),
        state=SimpleNamespace(global_step=0),
        reward_funcs=funcs,
        reward_processing_classes=[None] * len(funcs),
        reward_func_names=[f.__name__ for f in funcs],
        _log_completion_extra=None,
        _log_metric=None,
        environments=None,
    )
    n = len(completions)
    inputs = [{"prompt": "", **{k: v[i] for k, v in columns.items()}} for i in range(n)]
    calculate = GRPOTrainer._calculate_rewards.__wrapped__  # without the profiling decorator
    return calculate(trainer, inputs, [""] * n, completions, [[0]] * n)


def trl_advantages(
    rewards_per_func: torch.Tensor,
    reward_weights: list[float],
    num_generations: int,
    scale_rewards: str = "group",
    multi_objective_aggregation: str = "sum_then_normalize",
) -> torch.Tensor:
    """[N]: GRPOTrainer._generate_and_score_completions's advantages from `rewards_per_func`."""
    from trl.trainer.utils import nanstd

    device = rewards_per_func.device
    weights = torch.tensor(reward_weights, dtype=torch.float32)
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)

    if multi_objective_aggregation == "sum_then_normalize":
        rewards = (rewards_per_func * weights.to(device).unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
        if scale_rewards in ["group", "none"]:
            if num_generations > 1:
                std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
                std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
            else:
                std_rewards = torch.zeros_like(rewards)
        elif scale_rewards == "batch":
            if rewards.numel() > 1:
                std_rewards = nanstd(rewards).expand_as(rewards)
            else:
                std_rewards = torch.zeros_like(rewards)
        else:
            raise ValueError(scale_rewards)
        advantages = rewards - mean_grouped_rewards
        if scale_rewards != "none":
            advantages = advantages / (std_rewards + 1e-4)

    elif multi_objective_aggregation == "normalize_then_sum":
        num_funcs = rewards_per_func.shape[1]
        grouped = rewards_per_func.view(-1, num_generations, num_funcs)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = (
            nanstd(grouped, dim=1, keepdim=True) if num_generations > 1
            else torch.zeros_like(mean_k)
        )
        reward_k = (grouped - mean_k) / (std_k + 1e-4)
        reward_k = reward_k.view(-1, num_funcs)
        rewards = (reward_k * weights.to(device).unsqueeze(0)).nansum(dim=1)
        rewards[unscorable_mask] = torch.nan
        std_rewards = (
            nanstd(rewards).expand_as(rewards) if rewards.numel() > 1
            else torch.zeros_like(rewards)
        )
        advantages = (rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4)

    else:
        raise ValueError(multi_objective_aggregation)

    return torch.nan_to_num(advantages, nan=0.0)
