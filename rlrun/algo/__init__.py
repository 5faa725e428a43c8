"""GRPO-family algorithm core in plain torch: advantages, policy losses, masks, KL, importance
weights.

No Ray and no model code here: the learner computes log-probs and calls these functions. See
docs/algorithms.md for the mapping of every option to TRL's GRPOConfig and veRL.
"""

from rlrun.algo.advantages import (
    filter_equal_groups,
    group_advantages,
    normalize_then_sum_advantages,
    normalized_sum,
    scale_negative,
    step_advantages,
)
from rlrun.algo.grpo import (
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    LossNorm,
    ddp_loss,
    grpo_loss,
    merge_metrics,
    seq_mean_token_mean,
    seq_mean_token_sum,
    seq_mean_token_sum_norm,
    token_mean,
)
from rlrun.algo.importance import sequence_is_weights, token_is_weights
from rlrun.algo.kl import KL_ESTIMATORS, kl_k1, kl_k2, kl_k3
from rlrun.algo.masks import (
    entropy_threshold,
    gather_entropies,
    high_entropy_mask,
    off_policy_mask,
)
from rlrun.algo.minibatch import MiniBatch, plan_minibatches
from rlrun.algo.policy_losses import (
    cispo_policy_loss,
    sapo_policy_loss,
    sequence_log_ratio,
    vespo_policy_loss,
    vespo_weights,
)

__all__ = [
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "LossNorm",
    "MiniBatch",
    "cispo_policy_loss",
    "ddp_loss",
    "entropy_threshold",
    "filter_equal_groups",
    "gather_entropies",
    "grpo_loss",
    "group_advantages",
    "high_entropy_mask",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "merge_metrics",
    "normalize_then_sum_advantages",
    "normalized_sum",
    "off_policy_mask",
    "plan_minibatches",
    "sapo_policy_loss",
    "scale_negative",
    "step_advantages",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "sequence_is_weights",
    "sequence_log_ratio",
    "token_is_weights",
    "token_mean",
    "vespo_policy_loss",
    "vespo_weights",
]
