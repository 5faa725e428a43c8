"""The new algo keys' validation, TRL names met with one line naming the rlrun key to write,
and `rlrun config show` printing the TRL <-> rlrun table."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from rlrun.commands import config as config_command
from rlrun.config import Config, ConfigError, load_config
from rlrun.trl_names import TRL_NAMES, mapping_lines


def _error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["algo.policy_loss=ppo"], ["algo.policy_loss", "clip, cispo, sapo, vespo"]),
        (["algo.ratio_level=seq"], ["algo.ratio_level", "token, sequence"]),
        (["algo.loss_agg=seq_sum"], ["algo.loss_agg", "seq_mean_token_sum"]),
        (["algo.cispo_cap=0"], ["algo.cispo_cap", "> 0"]),
        (["algo.sapo_tau_pos=0"], ["algo.sapo_tau_pos", "> 0"]),
        (["algo.sapo_tau_neg=-1"], ["algo.sapo_tau_neg", "> 0"]),
        (["algo.vespo_k_pos=-1"], ["algo.vespo_k_pos", ">= 0"]),
        (["algo.vespo_lambda_neg=0"], ["algo.vespo_lambda_neg", "> 0"]),
        (["algo.entropy_mask_quantile=1.5"], ["algo.entropy_mask_quantile", "[0, 1]"]),
        (["algo.entropy_mask_quantile=-0.1"], ["algo.entropy_mask_quantile", "[0, 1]"]),
        (["algo.off_policy_mask_threshold=0"], ["algo.off_policy_mask_threshold", "> 0"]),
        (["algo.policy_loss=sapo", "algo.dual_clip=3"], ["algo.dual_clip", "policy_loss=sapo"]),
        (["algo.policy_loss=vespo", "algo.is_correction=sequence"],
         ["algo.is_correction", "token or none"]),
    ],
)
def test_new_keys_fail_with_one_line_naming_the_key(overrides, names) -> None:
    message = _error(overrides)
    for name in names:
        assert name in message, (name, message)


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("algo.num_generations=8", ["algo.num_generations", "algo.group_size=8"]),
        ("algo.beta=0.04", ["TRL's beta", "algo.kl_coef=0.04"]),
        ("beta=0.04", ["algo.kl_coef=0.04"]),
        ("algo.epsilon=0.1", ["algo.clip_low=0.1"]),
        ("algo.epsilon_high=0.28", ["algo.clip_high=0.28", "algo.cispo_cap"]),
        ("algo.delta=1.5", ["algo.dual_clip=1.5"]),
        ("algo.loss_type=dr_grpo", ["algo.loss_agg=seq_mean_token_sum_norm"]),
        ("algo.loss_type=whatever", ["algo.policy_loss", "algo.loss_agg"]),
        ("scale_rewards=batch", ["algo.scale_rewards=batch"]),
        ("algo.importance_sampling_level=sequence", ["algo.ratio_level=sequence"]),
        ("algo.top_entropy_quantile=0.2", ["algo.entropy_mask_quantile=0.2"]),
        ("algo.sapo_temperature_neg=1.05", ["algo.sapo_tau_neg=1.05"]),
        ("algo.num_iterations=2", ["algo.epochs=2"]),
        ("algo.vllm_importance_sampling_mode=token_mask",
         ["algo.is_correction=token algo.is_mode=mask"]),
        ("algo.mask_truncated_completions=true", ["in rlrun write algo.mask_truncated=True"]),
        ("algo.max_completion_length=256", ["rollout.sampling.max_new_tokens=256"]),
    ],
)
def test_a_trl_key_names_the_rlrun_key(override: str, names: list[str]) -> None:
    message = _error([override])
    for name in names:
        assert name in message, (name, message)


def test_steps_per_generation_is_mini_batches_times_accumulation() -> None:
    # TRL steps the optimizer once per gradient_accumulation_steps of its steps_per_generation
    # micro-batches, so its value is algo.mini_batches only when accumulation is 1: the hint
    # gives the quotient, not the value as it is.
    message = _error(["algo.steps_per_generation=8"])
    assert "algo.mini_batches=8" not in message, message
    assert "algo.mini_batches (= steps_per_generation / gradient_accumulation_steps" in message
    message = _error(["algo.gradient_accumulation_steps=4"])
    assert "TRL's gradient_accumulation_steps" in message
    assert "algo.mini_batches = steps_per_generation / gradient_accumulation_steps" in message
    [line] = [line for line in mapping_lines() if line.startswith("steps_per_generation ")]
    assert "steps_per_generation / gradient_accumulation_steps" in line


@pytest.mark.slow
def test_trl_takes_steps_per_generation_over_accumulation_optimizer_steps(tmp_path) -> None:
    """The quotient the table gives is what TRL does: one pass over a generation batch of
    steps_per_generation micro-batches takes steps_per_generation / gradient_accumulation_steps
    optimizer steps (TRL's max_steps counts optimizer steps)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path

    path = resolve_model_path(load_config(None, []).model, str(tmp_path / "models"), seed=0)
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"), num_generations=2, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, steps_per_generation=4, max_steps=2,
        max_completion_length=2, use_cpu=True, bf16=False, report_to=[], logging_steps=1,
        save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        log_completions=False, shuffle_dataset=False,
    )
    generations = []

    class Counting(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            generations.append(len(inputs))
            return super()._generate_and_score_completions(inputs)

    trainer = Counting(
        model=load_causal_lm(path), reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args, train_dataset=Dataset.from_list([{"prompt": f"{i}+1="} for i in range(8)]),
        processing_class=load_tokenizer(path),
    )
    trainer.train()
    # 2 optimizer steps = 4 micro-batches = one generation batch: algo.mini_batches = 4 / 2
    assert trainer.state.global_step == 2
    assert generations == [args.per_device_train_batch_size * args.steps_per_generation]


@pytest.mark.parametrize(
    ("override", "setting"),
    [
        ("algo.loss_agg=grpo", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_mean"),
        ("algo.loss_agg=bnpo", "algo.policy_loss=clip algo.loss_agg=token_mean"),
        ("algo.loss_agg=dapo", "algo.policy_loss=clip algo.loss_agg=token_mean"),
        ("algo.loss_agg=dr_grpo", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_sum_norm"),
        ("algo.loss_agg=cispo", "algo.policy_loss=cispo algo.loss_agg=token_mean"),
        ("algo.policy_loss=sapo_x", None),
        ("algo.policy_loss=luspo", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_sum"),
        ("algo.policy_loss=vespo_", None),
        ("algo.policy_loss=grpo", "algo.policy_loss=clip algo.loss_agg=seq_mean_token_mean"),
        ("algo.scale_rewards=true", "algo.scale_rewards=group"),
        ("algo.scale_rewards=false", "algo.scale_rewards=none"),
        ("algo.is_correction=sequence_mask", "algo.is_correction=sequence algo.is_mode=mask"),
        ("algo.is_mode=token_truncate", "algo.is_correction=token algo.is_mode=truncate"),
    ],
)
def test_a_trl_value_names_the_rlrun_setting(override: str, setting: str | None) -> None:
    message = _error([override])
    if setting is None:  # not a TRL value: the usual list of choices
        assert "choose one of" in message
    else:
        key, value = override.split("=")
        assert f"{key}={value.capitalize() if value in ('true', 'false') else value}" in message
        assert "TRL's" in message and f"in rlrun write {setting}" in message, message


def _settings(row) -> list[str]:
    return [s for s in row.rlrun.split() if s != "+"]


@pytest.mark.parametrize("row", TRL_NAMES, ids=lambda r: f"{r.trl}={r.value}")
def test_every_row_names_real_keys_and_allowed_values(row) -> None:
    schema = Config()
    for setting in _settings(row):
        key, _, value = setting.partition("=")
        node = schema
        for part in key.split("."):
            assert dataclasses.is_dataclass(node) and hasattr(node, part), (key, row)
            node = getattr(node, part)
        if value:
            load_config(None, [setting])  # an allowed value on its own
    if len(_settings(row)) > 1 and "=" in row.rlrun:
        load_config(None, _settings(row))  # and together


def test_config_show_prints_the_mapping(capsys) -> None:
    assert config_command.main(argparse.Namespace(action="show", args=[])) == 0
    out = capsys.readouterr().out
    assert "\n# TRL GRPOConfig name -> rlrun config" in out
    for line in mapping_lines():
        assert f"#   {line}\n" in out
    assert any("loss_type=dapo" in line and "algo.loss_agg=token_mean" in line
               for line in mapping_lines())
    # the printed config is still YAML: the table is comments
    import yaml

    assert yaml.safe_load(out)["algo"]["policy_loss"] == "clip"
