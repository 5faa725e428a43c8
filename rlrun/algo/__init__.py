"""GRPO-family algorithm core in plain torch: advantages, policy loss, KL, importance weights.

No Ray and no model code here: the learner computes log-probs and calls these functions. See
docs/algorithms.md for the mapping of every option to TRL's GRPOConfig and veRL.
"""

from rlrun.algo.advantages import (
    filter_equal_groups,
    group_advantages,
    normalize_then_sum_advantages,
    normalized_sum,
    scale_negative,
)
from rlrun.algo.grpo import (
    LOSS_AGGREGATIONS,
    LossNorm,
    clipped_policy_loss,
    ddp_loss,
    grpo_loss,
    merge_metrics,
    seq_mean_token_mean,
    seq_mean_token_sum_norm,
    token_mean,
)
from rlrun.algo.importance import sequence_is_weights, token_is_weights
from rlrun.algo.kl import KL_ESTIMATORS, kl_k1, kl_k2, kl_k3
from rlrun.algo.minibatch import MiniBatch, plan_minibatches

__all__ = [
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "LossNorm",
    "MiniBatch",
    "clipped_policy_loss",
    "ddp_loss",
    "filter_equal_groups",
    "grpo_loss",
    "group_advantages",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "merge_metrics",
    "normalize_then_sum_advantages",
    "normalized_sum",
    "plan_minibatches",
    "scale_negative",
    "seq_mean_token_mean",
    "seq_mean_token_sum_norm",
    "sequence_is_weights",
    "token_is_weights",
    "token_mean",
]
