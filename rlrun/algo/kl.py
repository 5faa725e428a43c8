"""Per-token estimators of KL(pi_theta || pi_ref) from tokens sampled from pi_theta.

From John Schulman, "Approximating KL Divergence" (http://joschu.net/blog/kl-approx.html). With
the token's log-ratio  log r = log pi_ref(y) - log pi_theta(y)  and y ~ pi_theta:

    k1 = -log r                 unbiased, high variance, can be negative
    k2 = (log r)^2 / 2          biased, low variance, always >= 0
    k3 = (r - 1) - log r        unbiased, low variance, always >= 0   (GRPO paper eq. 4, TRL)

None of them is clamped: TRL does not clamp k3 (veRL's `low_var_kl` clamps it to [-10, 10]).

Notation used for tensor shapes: N sequences, L completion positions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rlrun import algo_choices


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 = log pi_theta - log pi_ref, [N, L] (veRL kl_loss_type "kl")."""
    return logprobs - ref_logprobs  # [N, L]


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2 = (log pi_theta - log pi_ref)^2 / 2, [N, L] (veRL "mse")."""
    return 0.5 * (logprobs - ref_logprobs) ** 2  # [N, L]


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 = exp(log r) - log r - 1 with log r = log pi_ref - log pi_theta, [N, L].

    The estimator of the GRPO paper and of TRL `GRPOTrainer._compute_loss` (veRL "low_var_kl"
    without its clamp).
    """
    log_r = ref_logprobs - logprobs  # [N, L]
    return torch.exp(log_r) - log_r - 1  # [N, L]


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = dict(
    zip(algo_choices.KL_ESTIMATORS, (kl_k1, kl_k2, kl_k3), strict=True))
