"""benchmarks/trl_grpo.py: TRL's GRPOTrainer set up to train as an rlrun config does."""

import sys
from pathlib import Path

import pytest

from rlrun.config import load_config
from rlrun.data_order import DataOrder
from rlrun.engines.base import encode_prompts
from rlrun.models import load_tokenizer, resolve_model_path
from rlrun.records import Problem

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trl_grpo import grpo_args, prompt_tokenizer, rlrun_reward_fn, trl_prompt_order  # noqa: E402


@pytest.mark.parametrize(("overrides", "micro", "accumulation", "steps"), [
    ([], 16, 8, 5),
    (["algo.mini_batches=2", "algo.epochs=3"], 16, 4, 30),
    (["learner.micro_batch_size=48"], 128, 1, 5),
])
def test_one_trl_generation_batch_is_one_rlrun_step(tmp_path, overrides, micro, accumulation,
                                                    steps):
    cfg = load_config(None, ["trainer.steps=5", *overrides])
    args = grpo_args(cfg, str(tmp_path))
    assert args.generation_batch_size == cfg.algo.prompts_per_step * cfg.algo.group_size
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
        micro, accumulation
    )
    assert args.num_iterations == cfg.algo.epochs
    assert args.max_steps == steps


def test_algorithm_and_sampling_knobs_carry_over(tmp_path):
    cfg = load_config(None, [
        "algo.loss_agg=seq_mean_token_sum_norm", "algo.scale_rewards=none", "algo.clip_high=0.28",
        "algo.kl_coef=0.04", "rollout.sampling.top_p=0.9", "rollout.sampling.top_k=20",
        "rollout.sampling.max_new_tokens=48", "learner.lr=3e-4",
    ])
    args = grpo_args(cfg, str(tmp_path))
    assert (args.loss_type, args.scale_rewards) == ("dr_grpo", "none")
    assert (args.epsilon, args.epsilon_high, args.beta) == (0.2, 0.28, 0.04)
    assert (args.top_p, args.top_k, args.max_completion_length) == (0.9, 20, 48)
    assert args.learning_rate == 3e-4 and args.lr_scheduler_type == "constant"
    assert not args.shuffle_dataset and args.num_generations == cfg.algo.group_size
    assert not (args.gradient_checkpointing or args.bf16 or args.use_vllm)


def test_settings_trl_cannot_follow_are_refused(tmp_path):
    with pytest.raises(ValueError, match="rollout.sampling.stop"):
        grpo_args(load_config(None, ["rollout.sampling.stop=['\\n\\n']"]), str(tmp_path))
    with pytest.raises(ValueError, match="algo.filter_equal_groups"):
        grpo_args(load_config(None, ["algo.filter_equal_groups=true"]), str(tmp_path))


def test_prompt_order_is_the_coordinators():
    cfg = load_config(None, ["trainer.steps=3", "algo.prompts_per_step=7"])
    order = DataOrder(10, cfg.run.seed)
    assert trl_prompt_order(cfg, 10) == [i for _ in range(3) for i in order.draw(7)]


def test_prompts_tokenize_as_the_engines_encode_them(tmp_path):
    cfg = load_config(None, [])
    path = resolve_model_path(cfg.model, str(tmp_path), seed=0)
    texts = ["Question: 2 + 3?\n", "x"]
    ids = prompt_tokenizer(path)(text=texts)["input_ids"]
    assert ids == encode_prompts(load_tokenizer(path), texts)
    assert all(row[-1] != load_tokenizer(path).eos_token_id for row in ids)


def test_the_reward_is_rlruns():
    cfg = load_config(None, ["algo.group_size=2"])
    problems = [Problem(id="p0", prompt="1+1?", kind="math", answer="2")]
    fn = rlrun_reward_fn(cfg, problems, {1}, timings := {})
    rewards = fn(prompts=["", ""], completions=["so #### 2", "so #### 3"],
                 completion_ids=[[50, 1], [51, 1]], problem_index=[0, 0])
    assert rewards == [1.0, 0.0] and timings["tokens"] == 4
