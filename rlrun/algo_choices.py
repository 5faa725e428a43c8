"""The names of the `algo.*` choices, which key the registries in rlrun.algo: the config checks
them without importing torch. It adds "none" (off) to `is_correction` and `step_advantage`.
"""

SCALE_REWARDS = ("group", "batch", "none")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm",
                     "seq_mean_token_sum")
POLICY_LOSSES = ("clip", "cispo", "sapo", "vespo")
RATIO_LEVELS = ("token", "sequence")
KL_ESTIMATORS = ("k1", "k2", "k3")
IS_CORRECTIONS = ("token", "sequence")
IS_MODES = ("truncate", "mask")
STEP_RULES = ("local", "min")
