"""TRL's GRPOConfig names and the rlrun config that carries their meaning, in one table.

Users come from TRL. A TRL name written where rlrun expects its own (`algo.beta=0.04`,
`algo.loss_agg=dapo`) fails with one line naming what to write instead (`rlrun.config` asks
`key_hint` and `value_hint`), and `rlrun config show` prints the whole table (`mapping_lines`).
docs/algorithms.md explains each row; tests/algo/test_trl_parity_losses.py checks that every
`loss_type` row computes TRL's loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrlName:
    """One TRL GRPOConfig field (or one value of it) and its rlrun equivalent."""

    trl: str  # the GRPOConfig field
    rlrun: str  # an rlrun key, or key=value settings separated by spaces; "" when rlrun has none
    value: str | None = None  # a value of `trl` with settings of its own (None: any value)
    note: str = ""  # what differs, or what to do when rlrun has no equivalent
    # False: the rlrun key does not take the TRL value as it is (`note` says how to get it)
    same_value: bool = True


TRL_NAMES: tuple[TrlName, ...] = (
    TrlName("num_generations", "algo.group_size"),
    TrlName("max_completion_length", "rollout.sampling.max_new_tokens"),
    TrlName("temperature", "rollout.sampling.temperature"),
    TrlName("learning_rate", "learner.lr"),
    TrlName("scale_rewards", "algo.scale_rewards"),
    TrlName("scale_rewards", "algo.scale_rewards=group", "True"),
    TrlName("scale_rewards", "algo.scale_rewards=none", "False"),
    TrlName("loss_type", "algo.policy_loss + algo.loss_agg"),
    TrlName("loss_type", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_mean", "grpo"),
    TrlName("loss_type", "algo.policy_loss=clip algo.loss_agg=token_mean", "bnpo",
            "rlrun counts tokens over the global mini-batch, TRL over each micro-batch"),
    TrlName("loss_type", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_sum_norm",
            "dr_grpo"),
    TrlName("loss_type", "algo.policy_loss=clip algo.loss_agg=token_mean", "dapo"),
    TrlName("loss_type", "algo.policy_loss=cispo algo.loss_agg=token_mean", "cispo",
            "TRL's epsilon_high is then the cap: algo.cispo_cap"),
    TrlName("loss_type", "algo.policy_loss=sapo algo.loss_agg=seq_mean_token_mean", "sapo"),
    TrlName("loss_type", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_sum", "luspo",
            "with algo.ratio_level=sequence as in the LUSPO paper"),
    TrlName("loss_type", "algo.policy_loss=vespo algo.loss_agg=token_mean", "vespo"),
    TrlName("importance_sampling_level", "algo.ratio_level"),
    TrlName("epsilon", "algo.clip_low"),
    TrlName("epsilon_high", "algo.clip_high", note="algo.cispo_cap with loss_type=cispo"),
    TrlName("delta", "algo.dual_clip"),
    TrlName("sapo_temperature_pos", "algo.sapo_tau_pos"),
    TrlName("sapo_temperature_neg", "algo.sapo_tau_neg"),
    TrlName("vespo_k_pos", "algo.vespo_k_pos"),
    TrlName("vespo_lambda_pos", "algo.vespo_lambda_pos"),
    TrlName("vespo_k_neg", "algo.vespo_k_neg"),
    TrlName("vespo_lambda_neg", "algo.vespo_lambda_neg"),
    TrlName("beta", "algo.kl_coef"),
    TrlName("use_bias_correction_kl", "algo.kl_bias_correction"),
    TrlName("entropy_coef", "algo.entropy_coef"),
    TrlName("top_entropy_quantile", "algo.entropy_mask_quantile"),
    TrlName("off_policy_mask_threshold", "algo.off_policy_mask_threshold"),
    TrlName("multi_objective_aggregation", "reward.aggregation"),
    TrlName("multi_objective_aggregation", "reward.aggregation=sum", "sum_then_normalize"),
    TrlName("num_iterations", "algo.epochs"),
    # A pass over TRL's generation batch is steps_per_generation micro-batches, with an optimizer
    # step every gradient_accumulation_steps of them: the quotient is algo.mini_batches.
    TrlName("steps_per_generation", "algo.mini_batches",
            note="= steps_per_generation / gradient_accumulation_steps: TRL's optimizer steps "
            "per pass over a generation batch", same_value=False),
    TrlName("gradient_accumulation_steps", "",
            note="rlrun accumulates over the micro-batches (learner.micro_batch_size) of each "
            "optimizer step; algo.mini_batches = steps_per_generation / "
            "gradient_accumulation_steps"),
    TrlName("vllm_importance_sampling_correction",
            "algo.is_correction=sequence algo.is_mode=mask algo.is_cap=3.0", "True",
            "TRL's default vllm_importance_sampling_mode and clip_max"),
    TrlName("vllm_importance_sampling_correction", "algo.is_correction=none", "False"),
    TrlName("vllm_importance_sampling_mode", "algo.is_correction + algo.is_mode"),
    TrlName("vllm_importance_sampling_mode", "algo.is_correction=token algo.is_mode=truncate",
            "token_truncate"),
    TrlName("vllm_importance_sampling_mode", "algo.is_correction=token algo.is_mode=mask",
            "token_mask"),
    TrlName("vllm_importance_sampling_mode",
            "algo.is_correction=sequence algo.is_mode=truncate", "sequence_truncate"),
    TrlName("vllm_importance_sampling_mode", "algo.is_correction=sequence algo.is_mode=mask",
            "sequence_mask"),
    TrlName("vllm_importance_sampling_clip_max", "algo.is_cap"),
    TrlName("vllm_importance_sampling_clip_min", "algo.is_floor"),
    TrlName("vllm_importance_sampling_cap", "algo.is_cap"),
    TrlName("mask_truncated_completions", "algo.mask_truncated"),
)

# rlrun keys whose values a TRL user fills with the values of a TRL field.
_VALUES_OF: dict[str, str] = {
    "algo.loss_agg": "loss_type",
    "algo.policy_loss": "loss_type",
    "algo.scale_rewards": "scale_rewards",
    "reward.aggregation": "multi_objective_aggregation",
    "algo.is_correction": "vllm_importance_sampling_mode",
    "algo.is_mode": "vllm_importance_sampling_mode",
}


def _row(trl: str, value: Any) -> TrlName | None:
    rows = [r for r in TRL_NAMES if r.trl == trl]
    exact = [r for r in rows if r.value is not None and r.value == str(value)]
    general = [r for r in rows if r.value is None]
    return (exact or general or [None])[0]


def _advice(row: TrlName, value: Any) -> str:
    if not row.rlrun:
        return row.note
    # A single bare key takes the user's value; settings (key=value, or several keys) are
    # written as they stand.
    bare = "=" not in row.rlrun and " " not in row.rlrun and row.same_value
    setting = f"{row.rlrun}={value}" if bare and value is not None else row.rlrun
    note = f" ({row.note})" if row.note else ""
    return f"in rlrun write {setting}{note}"


def _scalar(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else None


def key_hint(key: str, value: Any) -> str | None:
    """The message for unknown config key `key` (dotted) when its name is TRL's, else None."""
    trl = key.rsplit(".", 1)[-1]
    row = _row(trl, _scalar(value))
    if row is None:
        return None
    given = key if _scalar(value) is None else f"{key}={value}"
    return f"unknown config key {given}: that is TRL's {trl}; {_advice(row, _scalar(value))}"


def value_hint(key: str, value: Any) -> str | None:
    """The message for rlrun key `key` given a TRL value of the TRL field it stands for, else
    None (e.g. algo.loss_agg=dapo)."""
    trl = _VALUES_OF.get(key)
    row = None if trl is None else _row(trl, value)
    if row is None or row.value is None:
        return None
    return f"config key {key}={value} is TRL's {trl}={value}: {_advice(row, None)}"


def mapping_lines() -> list[str]:
    """The table as aligned text lines: TRL name (and value), then the rlrun equivalent."""
    names = [r.trl if r.value is None else f"{r.trl}={r.value}" for r in TRL_NAMES]
    width = max(map(len, names))
    lines = []
    for name, row in zip(names, TRL_NAMES, strict=True):
        rlrun = row.rlrun or "-"
        note = f"  ({row.note})" if row.note else ""
        lines.append(f"{name:<{width}}  {rlrun}{note}")
    return lines
