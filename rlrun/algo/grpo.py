"""The GRPO objective: clipped policy loss, loss aggregation over the global batch, KL, entropy.

GRPO (Shao et al. 2024, https://arxiv.org/abs/2402.03300, eq. 3) maximises, per token t of
completion i with advantage A_i,

    min( r_t A_i,  clip(r_t, 1 - eps_low, 1 + eps_high) A_i ) - beta * KL_t(pi_theta || pi_ref)

with r_t = pi_theta(y_t) / pi_old(y_t). `grpo_loss` returns the negative of it plus the pieces
the GRPO family added:

- clip-higher (DAPO, https://arxiv.org/abs/2503.14476): eps_high > eps_low (`clip_low`,
  `clip_high`);
- dual-clip (Ye et al. 2020, https://arxiv.org/abs/1912.09729): for A < 0 the ratio in the
  unclipped term is capped at c > 1, so one very unlikely token cannot blow up the loss. It is
  TRL's `delta` ("two-sided GRPO", INTELLECT-2) computed as TRL does (clamp(r, max=c) before the
  min); for c > 1 + eps_high that is exactly veRL's `clip_ratio_c`;
- truncated importance sampling against the rollout engine's behaviour log-probs (importance.py),
  multiplied into the per-token policy loss;
- KL to a frozen reference (kl.py), optionally weighted by r_t (TRL `use_bias_correction_kl`);
- an entropy bonus: minus `entropy_coef` times the mean token entropy;
- other policy terms in place of the clipped surrogate (`policy_loss`: CISPO, SAPO, VESPO) and
  GSPO's sequence-level ratio (`ratio_level`), in policy_losses.py;
- masks on the policy term (masks.py): high-entropy tokens only (`entropy_mask_quantile`),
  off-policy negative sequences dropped (`off_policy_mask_threshold`);
- per-token advantages A_it in place of A_i in the policy term (`token_advantages`, from the
  step parts of `algo.step_advantage`); what is decided per sequence (the off-policy mask,
  VESPO's weight, the clip statistics under GSPO's sequence ratio) still uses A_i.

Each `policy_loss` is a function in `POLICY_LOSSES` (`clip_loss`, ...): from `PolicyInputs`
it returns the per-token policy term before masks and importance weights, and adds its own
statistics. Each `loss_agg` is a function in `LOSS_AGGREGATIONS`:

    token_mean               sum_{i,t} l_it / T                      DAPO; TRL "dapo" (and "bnpo")
    seq_mean_token_mean      sum_i (sum_t l_it / |y_i|) / S           original GRPO; TRL "grpo"
    seq_mean_token_sum_norm  sum_{i,t} l_it / (S * L_max)             Dr. GRPO; TRL "dr_grpo"
    seq_mean_token_sum       sum_{i,t} l_it / S                       LUSPO; TRL "luspo"

T (tokens), S (sequences) and L_max (the configured maximum completion length, not the longest
completion in the batch) are counted over the GLOBAL mini-batch (`LossNorm`), across all ranks
and micro-batches. Each call therefore returns its share of the global loss: the shares of all
micro-batches on all ranks sum to the loss one process would compute on the whole mini-batch.

Gradient convention under DDP/FSDP: backward on each micro-batch's share accumulates the rank's
gradient, but DDP *averages* gradients over ranks, which would divide the global gradient by the
world size. Call backward on `ddp_loss(share, world_size)` (share * world_size) instead.

Notation used for tensor shapes: N sequences on this rank (micro-batch), L completion positions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlrun import algo_choices
from rlrun.algo.importance import IS_WEIGHTS
from rlrun.algo.kl import KL_ESTIMATORS
from rlrun.algo.masks import off_policy_mask
from rlrun.algo.policy_losses import (
    cispo_policy_loss,
    sapo_policy_loss,
    sequence_log_ratio,
    vespo_policy_loss,
    vespo_weights,
)

if TYPE_CHECKING:
    from rlrun.config import AlgoConfig


@dataclass
class LossNorm:
    """Normalisers over the GLOBAL mini-batch (all ranks), so rank losses sum to the global loss."""

    total_tokens: float  # completion tokens with mask 1 in the global mini-batch
    total_seqs: float  # sequences in the global mini-batch
    max_len: int  # maximum completion length (rollout.sampling.max_new_tokens), for Dr. GRPO
    # tokens the entropy mask keeps in the global mini-batch: the entropy bonus averages over
    # them (None: no entropy mask)
    entropy_mask_tokens: float | None = None

    @classmethod
    def from_mask(cls, mask: Tensor, max_len: int) -> LossNorm:
        """Normalisers when `mask` [N, L] is the whole global mini-batch."""
        return cls(float(mask.sum().item()), float(mask.shape[0]), int(max_len))


def token_mean(per_token: Tensor, mask: Tensor, norm: LossNorm) -> Tensor:
    """sum_{i,t} l_it / T: every token weighs the same (DAPO, TRL loss_type="dapo")."""
    return (per_token * mask).sum() / max(norm.total_tokens, 1.0)


def seq_mean_token_mean(per_token: Tensor, mask: Tensor, norm: LossNorm) -> Tensor:
    """sum_i (sum_t l_it / |y_i|) / S: every sequence weighs the same (GRPO, TRL "grpo")."""
    per_seq = (per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)  # [N]
    return per_seq.sum() / max(norm.total_seqs, 1.0)


def seq_mean_token_sum_norm(per_token: Tensor, mask: Tensor, norm: LossNorm) -> Tensor:
    """sum_{i,t} l_it / (S * L_max): a constant normaliser, no length bias (Dr. GRPO)."""
    return (per_token * mask).sum() / max(norm.total_seqs * norm.max_len, 1.0)


def seq_mean_token_sum(per_token: Tensor, mask: Tensor, norm: LossNorm) -> Tensor:
    """sum_{i,t} l_it / S: a sequence weighs by its length (LUSPO, TRL "luspo").

    LUSPO (https://arxiv.org/abs/2602.05261) scales GSPO's per-sequence loss by the sequence's
    length, undoing the length bias of the per-sequence mean.
    """
    return (per_token * mask).sum() / max(norm.total_seqs, 1.0)


LOSS_AGGREGATIONS: dict[str, Callable[[Tensor, Tensor, LossNorm], Tensor]] = dict(zip(
    algo_choices.LOSS_AGGREGATIONS,
    (token_mean, seq_mean_token_mean, seq_mean_token_sum_norm, seq_mean_token_sum), strict=True))


def ddp_loss(loss_share: Tensor, world_size: int) -> Tensor:
    """The tensor a DDP/FSDP rank calls backward on: its global-loss share times world_size.

    DDP averages gradients over ranks; the shares already carry the global normalisers, so
    their gradients must be summed, not averaged. Multiplying by world_size makes the averaged
    gradient equal the gradient of the global loss, whatever the number of ranks.
    """
    return loss_share * world_size


def _share(x: Tensor, mask: Tensor, denom: float) -> Tensor:
    return (x.detach() * mask).sum() / max(denom, 1.0)


def _masked_max(x: Tensor, mask: Tensor) -> Tensor:
    # ratios and weights are >= 0, so padding as 0 leaves the maximum (and an empty batch gives 0)
    return torch.where(mask.bool(), x.detach(), 0.0).max() if x.numel() else x.new_zeros(())


def _check_shapes(logprobs: Tensor, advantages: Tensor, **others: Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.shape != logprobs.shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but logprobs has {tuple(logprobs.shape)}: "
                "every per-token tensor must be [N, L] over the same completion positions"
            )
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}, expected [N]={logprobs.shape[0]} "
            "(one advantage per sequence)"
        )


def _behaviour_weights(
    old_logprobs: Tensor,
    behaviour_logprobs: Tensor | None,
    mask: Tensor,
    cfg: AlgoConfig,
    norm: LossNorm,
    stats: dict[str, Tensor],
) -> Tensor | None:
    """Truncated importance weights pi_old / pi_behaviour, [N, L] or [N, 1] (None: no
    correction), with their metrics added to `stats`."""
    if cfg.is_correction == "none":
        return None
    if behaviour_logprobs is None:
        raise ValueError(
            f"algo.is_correction={cfg.is_correction} needs the rollout engine's behaviour "
            "log-probs (behaviour_logprobs); pass them or set algo.is_correction=none"
        )
    is_weights = IS_WEIGHTS[cfg.is_correction](
        old_logprobs, behaviour_logprobs, mask, cfg.is_cap, cfg.is_floor, cfg.is_mode
    )  # [N, L] per token, [N, 1] per sequence
    if cfg.is_correction == "token":
        counted, count = mask, norm.total_tokens
    else:
        counted, count = torch.ones_like(is_weights), norm.total_seqs  # [N, 1]
    stats["loss/is_weight_mean"] = _share(is_weights, counted, count)
    stats["loss/is_weight_max"] = _masked_max(is_weights, counted)
    return is_weights


@dataclass
class PolicyInputs:
    """What a policy loss reads, and where it adds its own metrics. R is L for a per-token
    ratio and 1 for GSPO's sequence ratio (`ratio_level`)."""

    logprobs: Tensor  # [N, L], with gradient
    log_ratio: Tensor  # [N, L], per token whatever ratio_level is (VESPO builds its weight on it)
    ratio: Tensor  # [N, R], the ratio ratio_level asks for
    adv: Tensor  # [N, 1], or [N, L] with per-token advantages
    seq_adv: Tensor  # [N, 1]: the sequence's advantage, for what is decided per sequence
    mask: Tensor  # [N, L]
    is_weights: Tensor | None  # behaviour importance weights, [N, L] or [N, 1] (None: off)
    norm: LossNorm
    stats: dict[str, Tensor]  # metric tensors, as in grpo_loss


def _ratio_share(t: Tensor, x: PolicyInputs, cfg: AlgoConfig) -> Tensor:
    """Share of the global mean of a quantity of the ratio: per token [N, L], or per sequence
    [N, 1] under `ratio_level: sequence` (decided by the config, not the shape: a micro-batch
    of one-token completions is [N, 1] too)."""
    if cfg.ratio_level == "sequence":
        return _share(t, torch.ones_like(t), x.norm.total_seqs)
    return _share(t, x.mask, x.norm.total_tokens)


def clip_loss(x: PolicyInputs, cfg: AlgoConfig) -> Tensor:
    """PPO's clipped surrogate, negated: max(-A min(r, c), -A clip(r, 1-eps_low, 1+eps_high)).

    [N, R]. The dual-clip cap c (`dual_clip`, TRL `delta`) bounds a negative-advantage token's
    loss by -A c. The clip fractions count, as TRL does, where the clip bound the gradient, on
    the capped ratio: with c below 1 + eps_high none counts as clipped high. A sequence ratio is
    counted with the sequence's advantage.
    """
    capped = x.ratio if cfg.dual_clip is None else torch.clamp(x.ratio, max=cfg.dual_clip)
    clipped = torch.clamp(x.ratio, 1 - cfg.clip_low, 1 + cfg.clip_high)  # [N, R]
    adv = x.adv if cfg.ratio_level == "token" else x.seq_adv  # [N, 1] or [N, L]
    low = ((capped < 1 - cfg.clip_low) & (adv < 0)).to(x.mask.dtype)  # [N, R]
    high = ((capped > 1 + cfg.clip_high) & (adv > 0)).to(x.mask.dtype)  # [N, R]
    x.stats["loss/clip_frac"] = _ratio_share(torch.maximum(low, high), x, cfg)
    x.stats["loss/clip_frac_low"] = _ratio_share(low, x, cfg)
    x.stats["loss/clip_frac_high"] = _ratio_share(high, x, cfg)
    if cfg.dual_clip is not None:
        dual = ((x.ratio > cfg.dual_clip) & (adv < 0)).to(x.mask.dtype)  # [N, R]
        x.stats["loss/dual_clip_frac"] = _ratio_share(dual, x, cfg)
    return torch.maximum(-x.adv * capped, -x.adv * clipped)  # [N, L] or [N, R]


def cispo_loss(x: PolicyInputs, cfg: AlgoConfig) -> Tensor:
    """CISPO's loss (`cispo_policy_loss`), [N, L], and the fraction of ratios the cap bounds
    where it matters, on positive advantages."""
    capped = ((x.ratio > cfg.cispo_cap) & (x.adv > 0)).to(x.mask.dtype)  # [N, R]
    x.stats["loss/cispo_cap_frac"] = _ratio_share(capped, x, cfg)
    return cispo_policy_loss(x.ratio, x.adv, x.logprobs, cfg.cispo_cap)


def sapo_loss(x: PolicyInputs, cfg: AlgoConfig) -> Tensor:
    """SAPO's loss (`sapo_policy_loss`), [N, R]."""
    return sapo_policy_loss(x.ratio, x.adv, cfg.sapo_tau_pos, cfg.sapo_tau_neg)


def vespo_loss(x: PolicyInputs, cfg: AlgoConfig) -> Tensor:
    """VESPO's loss (`vespo_policy_loss`), [N, L], and its mean sequence weight. The weight
    holds the token-level importance weights, so `grpo_loss` does not multiply them in again."""
    if cfg.is_correction == "sequence":
        raise ValueError(
            "algo.policy_loss=vespo folds token-level importance weights into its sequence "
            "weight: set algo.is_correction=token or none"
        )
    weights = vespo_weights(
        x.log_ratio, x.mask, x.seq_adv, cfg.vespo_k_pos, cfg.vespo_lambda_pos, cfg.vespo_k_neg,
        cfg.vespo_lambda_neg, x.is_weights,
    )  # [N, 1]
    x.stats["loss/vespo_weight_mean"] = _share(weights, torch.ones_like(weights), x.norm.total_seqs)
    return vespo_policy_loss(weights, x.adv, x.logprobs)


PolicyLoss = Callable[[PolicyInputs, "AlgoConfig"], Tensor]
POLICY_LOSSES: dict[str, PolicyLoss] = dict(zip(
    algo_choices.POLICY_LOSSES, (clip_loss, cispo_loss, sapo_loss, vespo_loss), strict=True))


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgoConfig,
    norm: LossNorm,
    behaviour_logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    entropy_mask: Tensor | None = None,
    token_advantages: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """This call's share of the global GRPO loss, and its share of the metrics.

    logprobs [N, L] carry the gradient; old_logprobs [N, L] are the learner's log-probs before the
    update (pass logprobs.detach() for the first epoch of an on-policy step); advantages [N];
    mask [N, L] is 1 on completion tokens that count; behaviour_logprobs [N, L] come from the
    rollout engine (needed unless cfg.is_correction is "none" and
    cfg.off_policy_mask_threshold is null); ref_logprobs [N, L] from the reference model (needed
    when cfg.kl_coef > 0, ignored otherwise); entropy [N, L] per-token entropy of pi_theta, with
    gradient (needed when cfg.entropy_coef > 0); entropy_mask [N, L] is `high_entropy_mask` with
    the threshold of the global mini-batch, and norm.entropy_mask_tokens its count there (both
    needed when cfg.entropy_mask_quantile < 1, ignored otherwise); token_advantages [N, L]
    replace advantages in the policy term, token by token (None: A_i on every token). Pass
    float32 log-probs: ratios of bfloat16 log-probs are too coarse for the clip.

    Metrics follow `merge_metrics`: keys ending in "_max" are maxima over this call's tokens,
    every other value is this call's share of a global mean, so summing them over micro-batches
    and ranks gives the mean over the global mini-batch.
    """
    _check_shapes(
        logprobs, advantages, old_logprobs=old_logprobs, mask=mask,
        behaviour_logprobs=behaviour_logprobs, ref_logprobs=ref_logprobs, entropy=entropy,
        entropy_mask=entropy_mask, token_advantages=token_advantages,
    )
    aggregate = LOSS_AGGREGATIONS[cfg.loss_agg]
    mask = mask.to(logprobs.dtype)  # [N, L]
    adv = advantages.detach().to(logprobs.dtype).unsqueeze(-1)  # [N, 1]
    # The advantage of each token in the policy term: A_i, or A_it with step advantages.
    token_adv = adv if token_advantages is None else (
        token_advantages.detach().to(logprobs.dtype))  # [N, 1] or [N, L]
    stats: dict[str, Tensor] = {}  # metric tensors, read back in one device sync at the end

    # 1. Truncated importance weights pi_old / pi_behaviour for the rollout engine's mismatch.
    is_weights = _behaviour_weights(old_logprobs, behaviour_logprobs, mask, cfg, norm, stats)

    # 2. The ratio against the learner's pre-update policy: per token (PPO) or, under GSPO, one
    # per sequence, [N, R]; then the policy term built on it, [N, L] or [N, R].
    log_ratio = logprobs - old_logprobs.detach()  # [N, L]
    if cfg.ratio_level == "sequence":
        ratio = torch.exp(sequence_log_ratio(log_ratio, mask))  # [N, 1]
    else:
        ratio = torch.exp(log_ratio)  # [N, L]
    x = PolicyInputs(logprobs, log_ratio, ratio, token_adv, adv, mask, is_weights, norm, stats)
    pg_loss = POLICY_LOSSES[cfg.policy_loss](x, cfg)

    # 3. Masks on the policy term, then the importance weights (VESPO has them in its own).
    if cfg.off_policy_mask_threshold is not None:
        if behaviour_logprobs is None:
            raise ValueError(
                f"algo.off_policy_mask_threshold={cfg.off_policy_mask_threshold} needs the "
                "rollout engine's behaviour log-probs (behaviour_logprobs); pass them or set "
                "algo.off_policy_mask_threshold=null"
            )
        keep = off_policy_mask(adv, logprobs, behaviour_logprobs, mask,
                               cfg.off_policy_mask_threshold)  # [N, 1]
        stats["loss/off_policy_drop_frac"] = _share(1 - keep, torch.ones_like(keep),
                                                    norm.total_seqs)
        pg_loss = pg_loss * keep  # [N, R]
    if cfg.entropy_mask_quantile < 1.0:
        if entropy_mask is None or norm.entropy_mask_tokens is None:
            raise ValueError(
                f"algo.entropy_mask_quantile={cfg.entropy_mask_quantile} needs entropy_mask "
                "and norm.entropy_mask_tokens from the global mini-batch's entropies; pass "
                "them or set algo.entropy_mask_quantile=1"
            )
        entropy_mask = entropy_mask.to(mask.dtype)  # [N, L]
        stats["loss/entropy_mask_frac"] = _share(entropy_mask, mask, norm.total_tokens)
        pg_loss = pg_loss * entropy_mask  # [N, L]
    if is_weights is not None and cfg.policy_loss != "vespo":
        pg_loss = pg_loss * is_weights  # [N, L]

    # 4. KL to the reference policy, added per token before aggregation (as in TRL).
    per_token_loss = pg_loss  # [N, L]
    if cfg.kl_coef != 0.0:
        if ref_logprobs is None:
            raise ValueError(
                f"algo.kl_coef={cfg.kl_coef} needs the reference model's log-probs (ref_logprobs); "
                "pass them or set algo.kl_coef=0"
            )
        kl = KL_ESTIMATORS[cfg.kl_estimator](logprobs, ref_logprobs.detach())  # [N, L]
        if cfg.kl_bias_correction:
            kl = kl * ratio  # [N, L]
        per_token_loss = pg_loss + cfg.kl_coef * kl  # [N, L]
        stats["loss/kl"] = _share(kl, mask, norm.total_tokens)

    # 5. Aggregate over the global mini-batch; subtract the entropy bonus, a token mean (over
    # the tokens the entropy mask keeps, when it is on).
    loss = aggregate(per_token_loss, mask, norm)
    stats["loss/policy"] = aggregate(pg_loss.detach(), mask, norm)
    if entropy is not None:
        mean_entropy = token_mean(entropy, mask, norm)
        stats["loss/entropy"] = mean_entropy.detach()
        if cfg.entropy_coef != 0.0:
            if cfg.entropy_mask_quantile < 1.0:
                mean_entropy = (entropy * entropy_mask).sum() / max(norm.entropy_mask_tokens, 1.0)
            loss = loss - cfg.entropy_coef * mean_entropy
    elif cfg.entropy_coef != 0.0:
        raise ValueError(
            f"algo.entropy_coef={cfg.entropy_coef} needs the per-token entropy (entropy); "
            "pass it or set algo.entropy_coef=0"
        )

    with torch.no_grad():  # metrics: no graph on the hot path
        stats["loss/ratio_mean"] = _ratio_share(ratio, x, cfg)
        stats["loss/ratio_max"] = _masked_max(ratio, mask)
    stats["loss/total"] = loss.detach()
    values = torch.stack([v.to(torch.float64) for v in stats.values()]).tolist()
    return loss, dict(zip(stats, values, strict=True))


def merge_metrics(parts: Sequence[dict[str, float]], mean: bool = False) -> dict[str, float]:
    """The one rule that merges learner metrics: of micro-batches into an update, of updates
    into a step (`mean`: each share divided by the number of updates), of ranks into a step.

    Keys under "loss/" and "sync/" are shares of a global value and add up, except maxima
    (ending in "_max", or with a "_max/" part, one per engine), which take the largest. Any
    other key (the optimizer's grad norm and lr, skipped updates) is the same in every part,
    and the first part's stands. Across ranks, all-reduce with SUM and MAX by the same rule.
    """
    merged: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            if key.endswith("_max") or "_max/" in key:
                merged[key] = max(merged.get(key, value), value)
            elif not key.startswith(_SHARES):
                merged.setdefault(key, value)
            elif mean:
                merged[key] = merged.get(key, 0.0) + value / len(parts)
            else:
                merged[key] = merged[key] + value if key in merged else value
    return merged


_SHARES = ("loss/", "sync/")
