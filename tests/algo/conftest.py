"""Reference computations from the installed TRL (1.16), for the equivalence tests.

`trl_compute_loss` runs TRL's own `GRPOTrainer._compute_loss` (trl/trainer/grpo_trainer.py),
unbound, on an object that carries only the trainer attributes that method reads, with the
model forward replaced by the given per-token log-probs and entropies. So the loss under test is
computed by TRL's installed code, not by a copy of it.

`trl_importance_ratio` and `trl_advantages` reproduce formulas that TRL writes inline in
`GRPOTrainer._generate_and_score_completions` (same file), line for line, using TRL's own
`nanstd` where TRL does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch


class _OneProcessAccelerator:
    """What `_compute_loss` asks of accelerate for `num_processes` processes; metrics stay local."""

    def __init__(self, num_processes: int) -> None:
        self.num_processes = num_processes
        self.sync_gradients = True

    def reduce(self, tensor, reduction="sum"):
        return tensor

    def gather(self, tensor):
        return tensor.reshape(-1)

    def pad_across_processes(self, tensor, dim=0, pad_index=0):
        return tensor

    gather_for_metrics = gather


@pytest.fixture(scope="session")
def trl_compute_loss():
    from trl.trainer.grpo_trainer import GRPOTrainer

    def run(
        *,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        loss_type: str,
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        delta: float | None = None,
        beta: float = 0.0,
        ref_logprobs: torch.Tensor | None = None,
        use_bias_correction_kl: bool = True,
        importance_sampling_ratio: torch.Tensor | None = None,
        entropies: torch.Tensor | None = None,
        entropy_coef: float = 0.0,
        max_completion_length: int = 8,
        num_processes: int = 1,
        num_items_in_batch: float | None = None,
        importance_sampling_level: str = "token",
        top_entropy_quantile: float = 1.0,
        off_policy_mask_threshold: float | None = None,
        sampling_logprobs: torch.Tensor | None = None,
        metrics: dict | None = None,
        tool_mask: torch.Tensor | None = None,
        **loss_args: float,
    ) -> torch.Tensor:
        """`loss_args`: GRPOConfig fields of the newer loss types (sapo_temperature_pos, ...).
        `metrics`, when given, receives what TRL logs of this call: {name: [value]} of the
        "train" mode (clip_ratio/high_mean, ...). `tool_mask` is TRL's multi-turn mask (a
        rollout_func's `env_mask`): 1 on model tokens, 0 on tool or environment tokens; the
        default `num_items_in_batch` then counts, as TRL's, the tokens of both masks."""
        n, length = logprobs.shape
        trainer = SimpleNamespace(
            _get_per_token_logps_and_entropies=lambda *a, **k: (
                logprobs,
                entropies if entropies is not None else torch.zeros_like(logprobs),
                None,
            ),
            aux_loss_enabled=False,
            top_entropy_quantile=top_entropy_quantile,
            off_policy_mask_threshold=off_policy_mask_threshold,
            importance_sampling_level=importance_sampling_level,
            get_off_policy_mask=GRPOTrainer.get_off_policy_mask,
            get_gamma_weights=GRPOTrainer.get_gamma_weights,
            beta=beta,
            loss_type=loss_type,
            epsilon_low=epsilon,
            epsilon_high=epsilon if epsilon_high is None else epsilon_high,
            use_vllm=importance_sampling_ratio is not None,
            vllm_importance_sampling_correction=importance_sampling_ratio is not None,
            args=SimpleNamespace(
                delta=delta, use_bias_correction_kl=use_bias_correction_kl, steps_per_generation=1,
                **loss_args,
            ),
            model=SimpleNamespace(training=True),
            current_gradient_accumulation_steps=1,
            max_completion_length=max_completion_length,
            accelerator=_OneProcessAccelerator(num_processes),
            _metrics=defaultdict(lambda: defaultdict(list)),
            _entropy_bonus_enabled=entropy_coef != 0.0,
            entropy_coef=entropy_coef,
            use_adaptive_entropy=False,
        )
        trainer.get_high_entropy_mask = lambda *a: GRPOTrainer.get_high_entropy_mask(trainer, *a)
        loss_mask = mask if tool_mask is None else mask * tool_mask
        items = loss_mask.sum() if num_items_in_batch is None else torch.tensor(num_items_in_batch)
        inputs = {
            "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
            "prompt_mask": torch.ones(n, 1, dtype=torch.long),
            "completion_ids": torch.zeros(n, length, dtype=torch.long),
            "completion_mask": mask,
            "advantages": advantages,
            "old_per_token_logps": old_logprobs,
            "num_items_in_batch": items,
        }
        if ref_logprobs is not None:
            inputs["ref_per_token_logps"] = ref_logprobs
        if importance_sampling_ratio is not None:
            inputs["importance_sampling_ratio"] = importance_sampling_ratio
        if sampling_logprobs is not None:
            inputs["sampling_per_token_logps"] = sampling_logprobs
        if tool_mask is not None:
            inputs["tool_mask"] = tool_mask
        loss = GRPOTrainer._compute_loss(trainer, None, inputs)
        if metrics is not None:
            metrics.update(trainer._metrics["train"])
        return loss

    return run


def _trl_importance_ratio(
    old_per_token_logps: torch.Tensor,
    sampling_per_token_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    mode: str,
    clip_max: float | None,
    clip_min: float | None = None,
    tool_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """trl/trainer/grpo_trainer.py, GRPOTrainer._generate_and_score_completions, the block under
    "Compute the importance sampling ratio when using vLLM"."""
    mask = completion_mask if tool_mask is None else completion_mask * tool_mask
    per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
    per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)
    sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
    if sequence_level_is:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    elif mode in ["sequence_mask", "token_mask"]:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        invalid = (ratio < min_val) | (ratio > max_val)
        ratio = ratio.masked_fill(invalid, value=0.0)
    else:
        raise ValueError(mode)
    return ratio


def _trl_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str
) -> torch.Tensor:
    """trl/trainer/grpo_trainer.py, GRPOTrainer._generate_and_score_completions, the
    `multi_objective_aggregation == "sum_then_normalize"` branch, on flat rewards [B*G]."""
    from trl.trainer.utils import nanstd

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
    return advantages


@pytest.fixture(scope="session")
def trl_importance_ratio():
    return _trl_importance_ratio


@pytest.fixture(scope="session")
def trl_advantages():
    return _trl_advantages
