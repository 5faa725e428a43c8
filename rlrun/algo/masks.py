"""Masks on the policy term: high-entropy tokens only, and off-policy negative sequences out.

Both multiply the per-token policy loss before the behaviour importance weights and before the
KL term is added (so KL still acts on every token), as in TRL 1.16's
`GRPOTrainer._compute_loss`; neither changes the aggregation's normalisers.

- High-entropy tokens ("Beyond the 80/20 Rule", Wang et al. 2025,
  https://arxiv.org/abs/2506.01939): only the top-rho fraction of tokens by entropy of
  pi_theta at that position get a policy gradient. The threshold is the (1 - rho) quantile of
  the entropies of every completion token of the global mini-batch, on all ranks
  (`gather_entropies`, then `entropy_threshold`), so it does not depend on how the batch is
  split into ranks and micro-batches. TRL's `get_high_entropy_mask` (which gathers over
  processes, per micro-batch).
- Off-policy sequence mask (DeepSeek-V3.2, https://arxiv.org/abs/2512.02556, eq. 9): a
  sequence with negative advantage is dropped when the mean over its tokens of
  log pi_behaviour - log pi_theta (an estimate of KL(pi_behaviour || pi_theta)) exceeds the
  threshold delta: pushing down a sample the current policy would no longer produce mostly
  adds noise. TRL's `get_off_policy_mask`.

Notation used for tensor shapes: N sequences, L completion positions, K entropies.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def gather_entropies(entropies: Tensor, world_size: int) -> Tensor:
    """Every rank's `entropies` [K_r], concatenated in rank order, [sum_r K_r].

    All-gathered over the default process group (the learner's) when `world_size` > 1; ranks
    hold different numbers of tokens, so each pads to the longest and the padding is cut off.
    """
    if world_size == 1:
        return entropies
    count = torch.tensor([entropies.numel()], device=entropies.device)
    counts = [torch.zeros_like(count) for _ in range(world_size)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    padded = entropies.new_zeros(max(sizes))  # [K_max]
    padded[: entropies.numel()] = entropies
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded)
    return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])


def entropy_threshold(entropies: Tensor, quantile: float) -> Tensor:
    """The entropy at or above which a token is in the top `quantile` fraction, a scalar.

    entropies [K]: the entropy of every completion token of the global mini-batch (padding
    excluded). This is `torch.quantile(entropies, 1 - quantile)` with linear interpolation, as
    TRL computes it, done by sorting so that it has no 2**24-element limit (a mini-batch of
    1024 completions of 16k tokens exceeds it). No entropies give +inf: no token is kept.
    """
    if entropies.numel() == 0:
        return entropies.new_tensor(float("inf"))
    ordered = entropies.float().sort().values  # [K]
    # torch.quantile's arithmetic: the rank in the input's dtype, then lerp between neighbours.
    rank = ordered.new_tensor(1.0 - quantile) * (ordered.numel() - 1)
    below, above = rank.long(), rank.ceil().long()
    return torch.lerp(ordered[below], ordered[above], rank - below)


def high_entropy_mask(entropy: Tensor, mask: Tensor, threshold: Tensor | float) -> Tensor:
    """1 on completion tokens whose entropy is >= `threshold`, 0 elsewhere, [N, L].

    entropy [N, L], mask [N, L]; the result has mask's dtype and no gradient.
    """
    keep = (entropy.detach() * mask >= threshold) & mask.bool()  # [N, L]
    return keep.to(mask.dtype)


def off_policy_mask(
    advantages: Tensor,
    logprobs: Tensor,
    behaviour_logprobs: Tensor,
    mask: Tensor,
    threshold: float,
) -> Tensor:
    """0 for sequences with A < 0 and mean_t (log pi_behaviour - log pi_theta) > threshold, else
    1; [N, 1], no gradient.

    advantages [N, 1], logprobs [N, L] (pi_theta, detached here), behaviour_logprobs [N, L],
    mask [N, L]. A NaN behaviour log-prob (a token the engine could not score) counts as no
    drift, as in TRL, so one unscored token cannot drop a sequence.
    """
    drift = torch.nan_to_num(behaviour_logprobs.detach() - logprobs.detach(), nan=0.0)  # [N, L]
    mean_drift = (drift * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(
        min=1.0
    )  # [N, 1]
    keep = (advantages >= 0) | (mean_drift <= threshold)  # [N, 1]
    return keep.to(mask.dtype)
