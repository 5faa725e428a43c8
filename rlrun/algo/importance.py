"""Truncated / masked importance weights against the rollout engine's behaviour log-probs.

The rollout engine (vLLM, or an HF engine holding older weights when `algo.max_staleness > 0`)
samples from pi_behaviour, while the PPO ratio of the loss is taken against pi_old, the learner's
own log-probs of the same tokens before this update. The mismatch is corrected by weighting each
token's policy loss with  w = pi_old / pi_behaviour, detached and bounded:

    token level:     w_t = exp(log pi_old(y_t) - log pi_behaviour(y_t))            [N, L]
    sequence level:  w   = exp(sum_t log pi_old(y_t) - log pi_behaviour(y_t))      [N, 1]
                         = prod_t w_t

"truncate" clips w into [floor, cap] (TIS, Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training"); "mask" sets w = 0 where it falls outside (MIS, as
TRL's `*_mask` modes). This is TRL's `vllm_importance_sampling_mode` computation in
`GRPOTrainer._generate_and_score_completions`, including its rule that a NaN behaviour log-prob
(a token the engine could not score) counts as no correction for that token.

Notation used for tensor shapes: N sequences, L completion positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from rlrun import algo_choices


def _bound(weights: Tensor, cap: float, floor: float | None, mode: str) -> Tensor:
    if mode == "truncate":
        return torch.clamp(weights, min=floor, max=cap)
    if mode == "mask":
        low = -math.inf if floor is None else floor
        return weights.masked_fill((weights < low) | (weights > cap), 0.0)
    raise ValueError(f"algo.is_mode={mode!r}: choose one of {', '.join(algo_choices.IS_MODES)}")


def _log_ratio(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    diff = (old_logprobs.detach() - behaviour_logprobs.detach()) * mask  # [N, L]
    return torch.nan_to_num(diff, nan=0.0)  # [N, L]


def token_is_weights(
    old_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    mask: Tensor,
    cap: float,
    floor: float | None = None,
    mode: str = "truncate",
) -> Tensor:
    """Per-token weights min(exp(old - behaviour), cap) (or masked), [N, L], no gradient."""
    log_w = _log_ratio(old_logprobs, behaviour_logprobs, mask)  # [N, L]
    return _bound(torch.exp(log_w), cap, floor, mode)  # [N, L]


def sequence_is_weights(
    old_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    mask: Tensor,
    cap: float,
    floor: float | None = None,
    mode: str = "truncate",
) -> Tensor:
    """One weight per sequence, min(prod_t w_t, cap) (or masked), [N, 1], no gradient."""
    log_w = _log_ratio(old_logprobs, behaviour_logprobs, mask).sum(dim=-1, keepdim=True)  # [N, 1]
    return _bound(torch.exp(log_w), cap, floor, mode)  # [N, 1]


IS_WEIGHTS: dict[str, Callable[[Tensor, Tensor, Tensor, float, float | None, str], Tensor]] = dict(
    zip(algo_choices.IS_CORRECTIONS, (token_is_weights, sequence_is_weights), strict=True))
