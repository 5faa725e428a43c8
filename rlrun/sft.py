"""Supervised warm-start: TRL's `SFTTrainer` on reference solutions, inside Ray Train workers.

RL needs a policy that sometimes succeeds: a model that is never right gets all-equal groups and
no gradient. `run_sft` fine-tunes on the problems' reference solutions, in the answer format the
reward expects, until held-out *sampled* accuracy (what GRPO improves) first reaches
`sft.target_accuracy`, so RL starts with room to improve and signal to learn from; a fixed step
count would make that start depend on the learning rate, seed and model size.

The accuracy check generates with the real rollout engine and scores with the real reward, as
training will. With a multi-turn environment (`env.name`) the rows also hold a two-turn
transcript per problem (`repair_rows`), so the model has written a later turn, far from the
start of the sequence, before RL; the accuracy check stays the first turn's.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.checkpoint import absolute, is_file, join, writable
from rlrun.config import Config, from_dict, to_dict
from rlrun.records import Problem
from rlrun.scoring import regroup


@dataclass
class SFTResult:
    model_path: str  # directory of the warm-started model in Hugging Face format
    steps: int  # optimizer steps taken
    accuracy: float  # last held-out sampled accuracy
    history: list[dict[str, float]]  # one row per accuracy check: step, accuracy, loss


def reference_completion(problem: Problem) -> str:
    """The reference solution as the completion the reward expects for this problem."""
    if problem.reference is None:
        raise ValueError(f"problem {problem.id} has no reference solution to train on")
    if problem.kind == "math":
        return problem.reference
    code = problem.code_prefix + problem.reference if problem.code_prefix else problem.reference
    return f"```{problem.language}\n{code.rstrip()}\n```"


def mix_by_kind(problems: list[Problem], math_fraction: float, seed: int) -> list[Problem]:
    """As many problems as `problems`, `math_fraction` of them math and the rest code.

    A kind the model learns slowly (a tiny model reads operands out of a word problem several
    times slower than it maps a statement to one of a few programs) can get more of the
    warm-start, so both kinds reach the accuracy target together. Each kind is walked in a
    seeded shuffled order, reshuffled when used up: every problem is seen before any repeats.
    """
    if problem := mix_problem(problems, math_fraction):
        raise ValueError(problem)
    math = round(math_fraction * len(problems))
    rng = random.Random(seed)
    out: list[Problem] = []
    for kind, count in (("math", math), ("code", len(problems) - math)):
        pool = [p for p in problems if p.kind == kind]
        while count > 0:
            batch = rng.sample(pool, len(pool))[:count]
            out += batch
            count -= len(batch)
    rng.shuffle(out)
    return out


def mix_problem(problems: list[Problem], math_fraction: float) -> str | None:
    """Why `math_fraction` cannot be mixed from `problems` (a kind it asks for is absent), or
    None."""
    math = round(math_fraction * len(problems))
    for kind, count in (("math", math), ("code", len(problems) - math)):
        if count and not any(p.kind == kind for p in problems):
            return (f"sft.math_fraction={math_fraction} asks for {count} {kind} problems but "
                    f"data.train has none: set sft.math_fraction to "
                    f"{1.0 if kind == 'code' else 0.0} or null")
    return None


def sft_rows(problems: list[Problem], cfg: Config, tokenizer: Any = None) -> list[dict[str, str]]:
    """Prompt-completion rows (TRL's format) for every problem that has a reference."""
    from rlrun.data.prompts import render_prompt

    chat = cfg.model.chat_template
    return [{"prompt": render_prompt(p, cfg.data, tokenizer, chat=chat),
             "completion": reference_completion(p)} for p in problems if p.reference is not None]


def repair_rows(problems: list[Problem], cfg: Config, env_cls: Any, judge: Any, render: Any,
                frame: Any) -> list[dict[str, str]]:
    """With a multi-turn environment (`env.name`): a two-turn transcript per problem, so the
    model learns what a later turn looks like. The first attempt is another problem's reference
    (seeded pick), the observation is the environment's real answer to it (its programs run by
    `judge`, framed by `frame` as the rollout frames it), and the completion is the problem's
    own reference; a problem the borrowed attempt already solves gets no transcript."""
    rng = random.Random(f"sft-repair:{cfg.run.seed}")
    usable = [p for p in problems if p.reference is not None]
    attempts = [reference_completion(rng.choice(usable)) for _ in usable]
    envs = [env_cls(p, cfg) for p in usable]
    wanted = [env.submissions(a) for env, a in zip(envs, attempts, strict=True)]
    flat = [s for subs in wanted for s in subs]
    results = judge(flat) if flat else []
    rows = []
    for p, env, attempt, got in zip(usable, envs, attempts, regroup(results, map(len, wanted)),
                                    strict=True):
        feedback = env.observe(attempt, got)
        if not feedback.done:
            rows.append({"prompt": render(p) + attempt + frame(feedback.observation),
                         "completion": reference_completion(p)})
    return rows


def _transcripts(cfg: Config, model_path: str, problems: list[Problem]) -> list[dict[str, str]]:
    """`repair_rows` of `problems`, judged here and framed with the model's own tokenizer."""
    from rlrun.data.prompts import render_prompt
    from rlrun.environments import load_environment
    from rlrun.models import load_tokenizer, local_model
    from rlrun.multiturn import ObservationTokens
    from rlrun.sandbox import Judge

    tokenizer = load_tokenizer(local_model(model_path))
    chat = cfg.model.chat_template
    frame = ObservationTokens(tokenizer, chat).frame
    with Judge(cfg.sandbox.backend, cfg.sandbox.workers_per_actor, cfg.sandbox) as judge:
        return repair_rows(problems, cfg, load_environment(cfg.env.name or ""), judge.judge,
                           lambda p: render_prompt(p, cfg.data, tokenizer, chat=chat), frame)


def held_out_metrics(
    engine: Any, reward: Any, problems: list[Problem], cfg: Config, seed: int
) -> dict[str, float]:
    """val/* metrics of `trainer.eval_samples` sampled completions per problem (the training
    sampling settings), measured as the training run's validation measures them: val/accuracy,
    and on a mixed set val/math/accuracy and val/code/accuracy."""
    from rlrun.data.prompts import render_prompt
    from rlrun.engines import SamplingParams
    from rlrun.evaluation import evaluate

    result = evaluate(
        problems, engine.generate, reward.score,
        SamplingParams.from_config(cfg.rollout.sampling, seed=seed),
        samples=cfg.trainer.eval_samples,
        render=lambda p: render_prompt(p, cfg.data, engine.tokenizer, chat=cfg.model.chat_template),
        batch_size=max(len(problems), 1),
    )
    return result.metrics("val")


def held_out_accuracy(
    engine: Any, reward: Any, problems: list[Problem], cfg: Config, seed: int
) -> float:
    """Mean correctness of sampled completions (the training sampling settings) on `problems`."""
    return held_out_metrics(engine, reward, problems, cfg, seed)["val/accuracy"]


def _train_loop(loop_cfg: dict[str, Any]) -> None:
    """One Ray Train worker: build the SFTTrainer, train until the accuracy target, save."""
    import tempfile

    import datasets
    import ray.train
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from rlrun.engines.hf import HFEngine
    from rlrun.models import load_causal_lm, load_tokenizer, local_model
    from rlrun.rewards import build_reward

    # The rows live in memory: nothing to cache on disk.
    datasets.disable_caching()
    cfg = from_dict(loop_cfg["config"])
    base = local_model(loop_cfg["model_path"])  # a URI fetched once for every loader below
    train = [Problem.from_dict(d) for d in loop_cfg["train"]]
    val = [Problem.from_dict(d) for d in loop_cfg["val"]]
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(cfg.run.seed)

    tokenizer = load_tokenizer(base)
    tokenizer.padding_side = "right"
    model = load_causal_lm(base, cfg.model.dtype)
    dataset = Dataset.from_list(sft_rows(train, cfg, tokenizer) + loop_cfg["transcripts"])
    history: list[dict[str, float]] = []

    judge = None
    if any(p.kind == "code" for p in val):
        from rlrun.sandbox import Judge

        judge = Judge(cfg.sandbox.backend, cfg.sandbox.workers_per_actor, cfg.sandbox)
    reward = build_reward(cfg, judge.judge if judge else None)
    engine = HFEngine(base, cfg.rollout, cfg.model.dtype) if rank == 0 else None

    class AccuracyStop(TrainerCallback):
        """Every `sft.eval_every` steps: held-out sampled accuracy; stop at the target."""

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
            if state.global_step % cfg.sft.eval_every:
                return control
            stop = False
            if engine is not None:
                weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
                engine.load_weights(state.global_step, weights)
                metrics = held_out_metrics(engine, reward, val, cfg, seed=cfg.run.seed)
                acc = metrics["val/accuracy"]
                loss = next(
                    (h["loss"] for h in reversed(state.log_history) if "loss" in h), float("nan")
                )
                kinds = {k: v for k, v in metrics.items()
                         if k.count("/") == 2 and k.endswith("/accuracy")}
                history.append({"step": state.global_step, "accuracy": acc, "loss": loss} | kinds)
                split = "".join(f" {k}: {v:.3f}" for k, v in kinds.items())
                print(f"sft step={state.global_step} loss: {loss:.4f} val/accuracy: {acc:.3f}"
                      f"{split}", flush=True)
                stop = acc >= cfg.sft.target_accuracy
            if torch.distributed.is_initialized():
                flag = torch.tensor([1.0 if stop else 0.0])
                torch.distributed.broadcast(flag, src=0)
                stop = bool(flag.item())
            # Never clear a stop the Trainer itself asked for (max_steps reached).
            control.should_training_stop = control.should_training_stop or stop
            return control

    args = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="rlrun-sft-"),
        max_steps=cfg.sft.max_steps,
        learning_rate=cfg.sft.lr,
        per_device_train_batch_size=cfg.sft.batch_size,
        lr_scheduler_type="constant",
        logging_steps=max(1, cfg.sft.eval_every // 2),
        save_strategy="no",
        report_to=[],
        seed=cfg.run.seed,
        data_seed=cfg.run.seed,
        use_cpu=cfg.learner.num_gpus == 0,
        completion_only_loss=True,
        max_length=512,
        dataloader_num_workers=0,
        disable_tqdm=True,
        gradient_checkpointing=cfg.sft.gradient_checkpointing,
    )
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
        callbacks=[AccuracyStop()],
    )
    trainer.train()
    reward.close()
    if judge is not None:
        judge.close()

    metrics = {
        "steps": float(trainer.state.global_step),
        "accuracy": history[-1]["accuracy"] if history else float("nan"),
    }
    if rank == 0:
        with tempfile.TemporaryDirectory() as tmp:
            trainer.model.save_pretrained(Path(tmp) / "model")
            load_tokenizer(base).save_pretrained(Path(tmp) / "model")
            (Path(tmp) / "history.json").write_text(json.dumps(history))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))
    else:
        ray.train.report(metrics)


def warm_start(cfg: Config, model_path: str, train: list[Problem], val: list[Problem]) -> str:
    """The SFT model a training run starts RL from: trained once, reused on resume."""
    done = join(absolute(cfg.run.output_dir), "sft", "model")
    if is_file(join(done, "config.json")):
        print(f"rlrun train: starting from the warm-started model in {done}", flush=True)
        return done
    print(f"rlrun train: supervised warm-start (SFT) of {model_path}: up to {cfg.sft.max_steps} "
          f"steps, until held-out accuracy {cfg.sft.target_accuracy}", flush=True)
    result = run_sft(cfg, model_path, train, val)
    print(f"sft done: steps: {result.steps} val/accuracy: {result.accuracy:.3f} "
          f"(target {cfg.sft.target_accuracy})", flush=True)
    return result.model_path


def run_sft(cfg: Config, model_path: str, train: list[Problem], val: list[Problem]) -> SFTResult:
    """Warm-start `model_path` on `train` references; return where the result was saved.

    Ray must already be initialised (the caller owns the cluster connection).
    """
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from rlrun.cluster import TRAIN_WORKER_RUNTIME_ENV

    usable = [p for p in train if p.reference is not None]
    if not usable:
        raise ValueError(
            f"sft.enabled is true but none of the {len(train)} training problems has a reference "
            "solution to learn from (data.train must carry answers or programs)"
        )
    if cfg.sft.math_fraction is not None:
        usable = mix_by_kind(usable, cfg.sft.math_fraction, cfg.run.seed)
    transcripts = _transcripts(cfg, model_path, usable) if cfg.env.name else []
    rng = random.Random(cfg.run.seed)
    val_sample = rng.sample(val, min(len(val), 64)) if val else rng.sample(usable, 32)
    # Ray Train writes its checkpoints to storage every node reaches: a URI as it is.
    storage = absolute(cfg.run.output_dir)
    trainer = TorchTrainer(
        _train_loop,
        train_loop_config={
            "config": to_dict(cfg),
            "model_path": model_path,
            "train": [p.to_dict() for p in usable],
            "val": [p.to_dict() for p in val_sample],
            "transcripts": transcripts,
        },
        scaling_config=ScalingConfig(
            num_workers=cfg.learner.num_workers,
            use_gpu=cfg.learner.num_gpus > 0,
            resources_per_worker={"CPU": cfg.learner.num_cpus, "GPU": cfg.learner.num_gpus},
        ),
        run_config=RunConfig(
            name="sft", storage_path=storage, worker_runtime_env=TRAIN_WORKER_RUNTIME_ENV
        ),
    )
    result = trainer.fit()
    if result.checkpoint is None:
        raise RuntimeError(f"SFT finished without saving a model (see the log above): {result}")
    # The model goes to run.output_dir/sft (for a URI: uploaded there, where any node can
    # fetch it; the RL actors load it by its URI).
    target = join(storage, "sft")
    with writable(target) as local:
        result.checkpoint.to_directory(str(local))
        history = json.loads((local / "history.json").read_text())
    return SFTResult(
        model_path=join(target, "model"),
        steps=int(result.metrics.get("steps", 0)),
        accuracy=float(result.metrics.get("accuracy", float("nan"))),
        history=history,
    )
