"""TRL's `GRPOTrainer` configured to do what an rlrun config does, for `benchmarks/vs_trl.py`.

`grpo_args` maps the rlrun knobs onto `GRPOConfig` (the same table as docs/algorithms.md):
one rlrun step of `algo.prompts_per_step` prompts x `algo.group_size` completions is one TRL
generation batch, cut into `algo.mini_batches` optimizer steps of `learner.micro_batch_size`
sequences per forward/backward, repeated `algo.epochs` times (`num_iterations`).

`run_trl` trains on exactly the prompts rlrun draws, in rlrun's order (`trl_prompt_order`),
scores completions with rlrun's own reward, saves the final model in Hugging Face format and
returns its timings: wall time of the whole call, of the training loop, and of generation and
reward inside it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlrun.config import Config
from rlrun.data_order import DataOrder
from rlrun.records import Problem, Sample

LOSS_TYPES = {
    "token_mean": "dapo",
    "seq_mean_token_mean": "grpo",
    "seq_mean_token_sum_norm": "dr_grpo",
}


@dataclass
class TRLResult:
    model_path: str  # final model, Hugging Face format
    optimizer_steps: int
    samples: int  # completions generated for training
    tokens: int  # completion tokens generated for training
    wall_s: float  # model load, trainer set-up, training, saving
    train_s: float  # trainer.train(): the RL phase
    timings: dict[str, float] = field(default_factory=dict)  # generate, reward (inside train_s)
    step_s: list[float] = field(default_factory=list)  # wall time of each optimizer step
    history: list[dict[str, float]] = field(default_factory=list)  # TRL's per-step log rows


def trl_prompt_order(cfg: Config, num_problems: int) -> list[int]:
    """Indices of the problems rlrun's coordinator draws over `trainer.steps` steps."""
    order = DataOrder(num_problems, cfg.run.seed)
    return [i for _ in range(cfg.trainer.steps) for i in order.draw(cfg.algo.prompts_per_step)]


def grpo_args(cfg: Config, output_dir: str) -> Any:
    """The `GRPOConfig` that trains as `cfg` does (one process, no vLLM)."""
    from trl import GRPOConfig

    # transformers 5.23 renamed `gradient_checkpointing` to `activation_checkpointing` (the old
    # name warns); vLLM pins transformers below 5.23, so use whichever name this install has.
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    checkpointing = (
        "activation_checkpointing" if "activation_checkpointing" in fields
        else "gradient_checkpointing"
    )

    algo, learner, sampling = cfg.algo, cfg.learner, cfg.rollout.sampling
    if sampling.stop:
        raise ValueError(
            "rollout.sampling.stop is set: this benchmark passes no stop strings to TRL, so set "
            "rollout.sampling.stop=[] for a like-for-like run"
        )
    if algo.filter_equal_groups:
        raise ValueError(
            "algo.filter_equal_groups=true draws extra prompts TRL has no equivalent for; set it "
            "to false for this benchmark"
        )
    if cfg.reward.aggregation != "sum":
        raise ValueError(
            f"reward.aggregation={cfg.reward.aggregation}: this benchmark hands TRL rlrun's "
            "summed reward as one reward function, so set reward.aggregation=sum"
        )
    if algo.negative_advantage_scale != 1.0:
        raise ValueError(
            "algo.negative_advantage_scale is not 1: TRL has no equivalent, so set it to 1 for "
            "this benchmark"
        )
    per_update = algo.prompts_per_step * algo.group_size // algo.mini_batches
    micro = min(learner.micro_batch_size, per_update)
    if per_update % micro:
        micro = per_update
    accumulation = per_update // micro
    return GRPOConfig(
        output_dir=output_dir,
        num_generations=algo.group_size,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation * algo.mini_batches,
        num_iterations=algo.epochs,
        max_steps=cfg.trainer.steps * algo.mini_batches * algo.epochs,
        max_completion_length=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        beta=algo.kl_coef,
        epsilon=algo.clip_low,
        epsilon_high=algo.clip_high,
        delta=algo.dual_clip,
        entropy_coef=algo.entropy_coef,
        use_bias_correction_kl=algo.kl_bias_correction,
        loss_type=LOSS_TYPES[algo.loss_agg],
        scale_rewards=algo.scale_rewards,
        learning_rate=learner.lr,
        weight_decay=learner.weight_decay,
        max_grad_norm=learner.grad_clip,
        lr_scheduler_type="constant_with_warmup" if learner.warmup_steps else "constant",
        warmup_steps=learner.warmup_steps,
        # TRL's defaults for GPUs (bf16, gradient checkpointing) would only slow a CPU run down.
        use_cpu=learner.num_gpus == 0,
        bf16=False,
        fp16=False,
        **{checkpointing: False},
        shuffle_dataset=False,
        seed=cfg.run.seed,
        data_seed=cfg.run.seed,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )


def prompt_tokenizer(path: str) -> Any:
    """The model's tokenizer, encoding prompts as rlrun's engines do.

    `GRPOTrainer` tokenizes prompts with the tokenizer's special tokens; a tokenizer that
    appends EOS to every text (the byte tokenizer of the tiny model does) would then end every
    prompt with EOS, unlike the SFT data and unlike rlrun (`rlrun.engines.base.encode_prompts`
    keeps BOS and drops a trailing EOS). Same prompt ids on both sides, so the same rule here.
    """
    from rlrun.models import load_tokenizer

    tokenizer = load_tokenizer(path)
    with_special = tokenizer.build_inputs_with_special_tokens
    eos = tokenizer.eos_token_id

    def without_trailing_eos(ids: list[int], pair: list[int] | None = None) -> list[int]:
        out = with_special(ids, pair)
        return out[:-1] if pair is None and len(out) > len(ids) and out[-1] == eos else out

    tokenizer.build_inputs_with_special_tokens = without_trailing_eos
    return tokenizer


def rlrun_reward_fn(cfg: Config, problems: list[Problem], eos_ids: set[int], timings: dict) -> Any:
    """A TRL reward function scoring with `rlrun.rewards.build_reward(cfg, None)` (math only).

    It also adds its own time to `timings["reward"]` and the completion tokens it saw to
    `timings["tokens"]`.
    """
    from rlrun.rewards import build_reward

    reward = build_reward(cfg, None)
    limit = cfg.rollout.sampling.max_new_tokens

    def rlrun_reward(
        prompts: list[str], completions: list[str], completion_ids: list[list[int]],
        problem_index: list[int], **_: Any,
    ) -> list[float]:
        start = time.perf_counter()
        batch = [problems[i] for i in problem_index]
        samples = [
            Sample(
                prompt_ids=[], response_ids=list(ids), response_text=text, behaviour_logprobs=[],
                finish_reason="length" if len(ids) >= limit and ids[-1] not in eos_ids else "stop",
                problem_id=p.id, group_id=k // cfg.algo.group_size,
            )
            for k, (p, text, ids) in enumerate(zip(batch, completions, completion_ids, strict=True))
        ]
        scored = [s.reward for s in reward.score(batch, samples)]
        timings["reward"] = timings.get("reward", 0.0) + time.perf_counter() - start
        timings["tokens"] = timings.get("tokens", 0) + sum(len(ids) for ids in completion_ids)
        return scored

    return rlrun_reward


def run_trl(cfg: Config, model_path: str, train: list[Problem], output_dir: str) -> TRLResult:
    """Train `model_path` with TRL's GRPOTrainer as `cfg` says; save to output_dir/model."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rlrun.data.prompts import render_prompt
    from rlrun.models import load_causal_lm, load_tokenizer

    started = time.perf_counter()
    timings: dict[str, float] = {}
    step_ends: list[float] = []

    class TimedGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that adds up the time spent in generation."""

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return super()._generate_single_turn(*args, **kwargs)
            finally:
                timings["generate"] = timings.get("generate", 0.0) + time.perf_counter() - t

    class TrainClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            timings["train_begin"] = time.perf_counter()
            step_ends.append(timings["train_begin"])

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            step_ends.append(time.perf_counter())

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
            timings["train_end"] = time.perf_counter()

    tokenizer = prompt_tokenizer(model_path)
    model = load_causal_lm(model_path, cfg.model.dtype)
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    order = trl_prompt_order(cfg, len(train))
    dataset = Dataset.from_list([
        {
            "prompt": render_prompt(train[i], cfg.data, tokenizer, chat=cfg.model.chat_template),
            "problem_index": i,
        }
        for i in order
    ])
    args = grpo_args(cfg, str(Path(output_dir) / "trainer"))
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=rlrun_reward_fn(cfg, train, eos_ids, timings),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[TrainClock()],
    )
    trainer.train()
    target = Path(output_dir) / "model"
    trainer.model.save_pretrained(target)
    load_tokenizer(model_path).save_pretrained(target)
    train_s = timings.pop("train_end") - timings.pop("train_begin")
    tokens = int(timings.pop("tokens", 0))
    return TRLResult(
        model_path=str(target),
        optimizer_steps=trainer.state.global_step,
        samples=len(order) * cfg.algo.group_size,
        tokens=tokens,
        wall_s=time.perf_counter() - started,
        train_s=train_s,
        timings=timings,
        step_s=[b - a for a, b in zip(step_ends, step_ends[1:], strict=False)],
        history=[h for h in trainer.state.log_history if "reward" in h],
    )
