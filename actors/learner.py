"""The learner: a Ray Train `TorchTrainer` whose ranks pull their shards from the coordinator.

Each rank runs `train_loop`: load the policy (and a frozen reference only when
`algo.kl_coef > 0`), restore the latest checkpoint Ray Train hands it, attach to the
coordinator (rank 0), then per step: pull its shard, run the GRPO updates
(`rlrun.policy_update.train_on_shard`), have rank 0 publish the new weights with the
coordinator as their owner (objects owned by a Ray Train worker die with it), and report a
checkpoint to Ray Train when the shard asks for one and once more when training ends.
DDP runs on gloo on CPU and NCCL on GPU; `learner.max_failures` restarts of the worker group
are absorbed by restoring the latest checkpoint.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict
from typing import Any

import ray
import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from actors.coordinator import NAME as COORDINATOR
from rlrun import checkpoint
from rlrun.cluster import TRAIN_WORKER_RUNTIME_ENV
from rlrun.config import Config, from_dict, to_dict
from rlrun.weights import make_sender


def train_loop(config: dict[str, Any]) -> None:
    from rlrun.models import load_causal_lm, load_tokenizer
    from rlrun.policy_update import train_on_shard, warmup_schedule

    cfg = from_dict(config["cfg"])
    model_path = config["model_path"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    coordinator = ray.get_actor(COORDINATOR, namespace=cfg.run.namespace)
    torch.manual_seed(cfg.run.seed + rank)

    model = load_causal_lm(model_path, cfg.model.dtype)
    tokenizer = load_tokenizer(model_path)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.learner.lr, weight_decay=cfg.learner.weight_decay
    )
    scheduler = warmup_schedule(optimizer, cfg.learner.warmup_steps)
    state = checkpoint.TrainState()
    restored = ray.train.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as path:
            state = checkpoint.load_into(path, model, optimizer, scheduler)
    ref_model = load_causal_lm(model_path, cfg.model.dtype) if cfg.algo.kl_coef > 0 else None
    device = ray.train.torch.get_device()
    if ref_model is not None:
        ref_model.to(device).requires_grad_(False)
    policy = ray.train.torch.prepare_model(model)  # DDP when world > 1; `model` stays unwrapped
    sender = make_sender("object_store", owner=coordinator)
    if rank == 0:
        # Publish even on a fresh start: after a worker failure that came before any checkpoint
        # was recorded, the rollout actors hold newer weights than the ones this rank restarts
        # from.
        update = sender.publish(state.version, model.state_dict())
        ray.get(coordinator.attach.remote(asdict(state), update))

    step, saved = state.step, True
    while (shard := ray.get(coordinator.get_shard.remote(rank, step))) is not None:
        metrics = train_on_shard(
            policy, optimizer, scheduler, shard, cfg, tokenizer.pad_token_id,
            world_size=world, ref_model=ref_model, device=device,
        )
        state = checkpoint.TrainState(
            step=step + 1, version=step + 1, data_position=shard.data_position,
            bad_steps=state.bad_steps + int(metrics["train/bad_steps"]),
        )
        update = sender.publish(state.version, model.state_dict()) if rank == 0 else None
        ray.get(coordinator.finish.remote(rank, step, metrics, update))
        if shard.checkpoint:
            _save(metrics, state, model, tokenizer, optimizer, scheduler)
        saved, step = shard.checkpoint, step + 1
    if not saved:
        # The final (or SIGTERM-requested) stop: every rank sees None at the same step.
        _save({}, state, model, tokenizer, optimizer, scheduler)


def _save(
    metrics: dict[str, float], state: checkpoint.TrainState, model: torch.nn.Module,
    tokenizer: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
) -> None:
    """Report a checkpoint to Ray Train from rank 0; every rank calls this (it is a barrier).

    Only checkpoint steps report: each report waits for Ray Train's controller poll (2 s by
    default), and metrics reach the driver through the coordinator anyway.
    """
    if ray.train.get_context().get_world_rank() != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as path:
        checkpoint.save(path, model, tokenizer, optimizer, scheduler, state)
        ray.train.report(
            metrics,
            checkpoint=Checkpoint.from_directory(path),
            checkpoint_dir_name=checkpoint.checkpoint_dir_name(state.step),
        )


def make_trainer(cfg: Config, model_path: str) -> TorchTrainer:
    """The learner job for `cfg`, storing checkpoints under `run.output_dir`."""
    learner = cfg.learner
    use_gpu = learner.num_gpus > 0
    resources = {"CPU": learner.num_cpus} | ({"GPU": learner.num_gpus} if use_gpu else {})
    return TorchTrainer(
        train_loop,
        train_loop_config={"cfg": to_dict(cfg), "model_path": model_path},
        scaling_config=ScalingConfig(
            num_workers=learner.num_workers, use_gpu=use_gpu, resources_per_worker=resources
        ),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        run_config=RunConfig(
            name=checkpoint.LEARNER_DIR,
            storage_path=storage_path(cfg.run.output_dir),
            failure_config=FailureConfig(max_failures=learner.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.trainer.keep_checkpoints),
            worker_runtime_env=TRAIN_WORKER_RUNTIME_ENV,
        ),
    )


def storage_path(output_dir: str) -> str:
    """Ray Train needs an absolute local path or a URI (s3://...)."""
    return output_dir if "://" in output_dir else os.path.abspath(output_dir)
