"""Policy terms other than PPO's clipped surrogate, and GSPO's sequence-level ratio.

Each function is one formula, computed as TRL 1.16's `GRPOTrainer._compute_loss` computes it
(trl/trainer/grpo_trainer.py), so a run can switch between the two and reproduce its loss. With
the ratio r = pi_theta / pi_old (per token, or one per sequence under GSPO) and the sequence's
advantage A, the per-token losses (to be minimised) are

    clip   max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))      grpo.clip_loss
    cispo  -sg(min(r, cap)) A log pi_theta                       MiniMax-M1
    sapo   -A (4 / tau) sigmoid(tau (r - 1))                     SAPO
    vespo  -sg(phi(w)) A log pi_theta                            VESPO

where sg() stops the gradient. `sequence_log_ratio` turns token log-ratios into GSPO's.

Notation used for tensor shapes: N sequences, L completion positions; R is L for token-level
ratios and 1 for sequence-level ones (they broadcast over the positions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sequence_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """GSPO's log-ratio, one per sequence: the mean of its tokens' log-ratios, [N, L] -> [N, 1].

    GSPO (Group Sequence Policy Optimization, https://arxiv.org/abs/2507.18071) takes the
    ratio of the sequence likelihoods normalised by length,
    s_i = (pi_theta(y_i) / pi_old(y_i))^(1/|y_i|) = exp(mean_t log r_t). The gradient flows
    through the mean to every token, as in TRL's `importance_sampling_level="sequence"`
    (pi_old is detached by the caller).
    """
    per_seq = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)  # [N]
    return per_seq.unsqueeze(-1)  # [N, 1]


def cispo_policy_loss(ratio: Tensor, advantages: Tensor, logprobs: Tensor, cap: float) -> Tensor:
    """CISPO's per-token loss, -sg(min(r, cap)) * A * log pi_theta, [N, L].

    CISPO (MiniMax-M1 report, https://arxiv.org/abs/2506.13585) clips the importance weight, not
    the update: every token keeps its gradient A * grad log pi, weighted by the detached ratio
    capped at `cap` (TRL's `epsilon_high` with loss_type="cispo", ScaleRL's eps_max).
    ratio [N, R], advantages [N, 1], logprobs [N, L] with gradient.
    """
    weight = torch.clamp(ratio, max=cap).detach()  # [N, R]
    return -weight * advantages * logprobs  # [N, L]


def sapo_policy_loss(ratio: Tensor, advantages: Tensor, tau_pos: float, tau_neg: float) -> Tensor:
    """SAPO's per-token loss, -A * (4 / tau) * sigmoid(tau * (r - 1)), [N, R].

    SAPO (Soft Adaptive Policy Optimization, https://arxiv.org/abs/2511.20347) replaces the
    hard clip by a smooth gate: the gradient is A * 4 sigma (1 - sigma) * grad r, which is
    A * grad r at r = 1 and fades as r leaves 1, faster for a larger temperature. Tokens with
    A > 0 use `tau_pos`, all others `tau_neg` (the paper and TRL default to tau_neg > tau_pos,
    damping negative updates more). ratio [N, R] with gradient, advantages [N, 1].
    """
    tau = torch.where(advantages > 0, tau_pos, tau_neg)  # [N, 1]
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau  # [N, R]
    return -gate * advantages  # [N, R]


# VESPO bounds log w at log(1e-8) below and 20 above, as its reference implementation (and TRL).
_VESPO_LOG_MIN = math.log(1e-8)
_VESPO_LOG_MAX = 20.0


@torch.no_grad()
def vespo_weights(
    log_ratio: Tensor,
    mask: Tensor,
    advantages: Tensor,
    k_pos: float,
    lambda_pos: float,
    k_neg: float,
    lambda_neg: float,
    is_weights: Tensor | None = None,
) -> Tensor:
    """VESPO's detached sequence weight phi(w) = exp(lambda + k log w - lambda w), [N, 1].

    VESPO (Variational Sequence-Level Soft Policy Optimization,
    https://arxiv.org/abs/2602.10693) weights each sequence by a gamma-shaped function
    of its importance weight w = prod_t pi_theta / pi_behaviour, normalised so phi(1) = 1: k
    sets how fast phi falls for w < 1, lambda for w > 1; sequences with A >= 0 use
    (k_pos, lambda_pos), the others (k_neg, lambda_neg). log w is the sum of the token
    log-ratios (each clamped to +-20) plus, when given, the logs of the token-level behaviour
    importance weights `is_weights` [N, L] (so w reaches back to the rollout policy), then
    clamped to [log 1e-8, 20]. TRL's `GRPOTrainer.get_gamma_weights`, line for line, except
    that `is_weights` count on completion tokens only (TRL sums padding too, which is log 1
    = 0 unless `is_cap` < 1). log_ratio [N, L], mask [N, L], advantages [N, 1].
    """
    log_w = (torch.clamp(log_ratio, -20.0, 20.0) * mask).sum(dim=-1, keepdim=True)  # [N, 1]
    if is_weights is not None:
        log_is = torch.clamp(torch.log(is_weights), _VESPO_LOG_MIN, _VESPO_LOG_MAX)  # [N, L]
        log_w = log_w + (log_is * mask).sum(dim=-1, keepdim=True)  # [N, 1]
    log_w = torch.clamp(log_w, _VESPO_LOG_MIN, _VESPO_LOG_MAX)  # [N, 1]
    nonneg = advantages >= 0  # [N, 1]
    k = torch.where(nonneg, k_pos, k_neg)  # [N, 1]
    lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)  # [N, 1]
    log_phi = lam + k * log_w - lam * torch.exp(log_w)  # [N, 1]
    return torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # [N, 1]


def vespo_policy_loss(weights: Tensor, advantages: Tensor, logprobs: Tensor) -> Tensor:
    """VESPO's per-token loss, -phi(w) * A * log pi_theta, [N, L]; weights [N, 1] from
    `vespo_weights` (detached), advantages [N, 1], logprobs [N, L] with gradient."""
    return -weights.detach() * advantages * logprobs  # [N, L]
