"""The learner: `LearnerWorker` is one rank of the policy's data-parallel group, `LearnerGroup`
starts, places and restarts the ranks for the driver.

A rank holds the policy (and a frozen reference only when `algo.kl_coef > 0`), its optimizer
and schedule, and one rank of a `torch.distributed` group (gloo on CPU, NCCL on GPU) that the
group sets up itself: rank 0 reports a free port on its node, every rank joins it. DDP wraps
the policy when there is more than one rank. The driver calls the ranks directly:

- `train(shard)`: the GRPO updates of this rank's shard (`rlrun.policy_update.train_on_shard`);
  returns this rank's metrics;
- `publish(version)` (rank 0): the weights for the object-store sync, put by this rank;
- `save(path, state)` / `export(path)`: every rank writes its part of a checkpoint.

These are plain Ray actors rather than a Ray Train job because the driver has to call into the
ranks step by step (train, then sync weights with the rollout actors as a pair), which a
`TorchTrainer.fit()` loop does not allow; the group does what Ray Train did for it (gang
placement, the process group, restarts from the latest checkpoint up to
`learner.max_failures`, checkpoints on local disk or s3://).
"""

from __future__ import annotations

import datetime
import socket
import time
from typing import Any

import ray
import torch
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.pool import first_line
from rlrun import checkpoint
from rlrun.algo import merge_metrics
from rlrun.batching import Shard
from rlrun.cluster import torch_threads
from rlrun.config import Config
from rlrun.models import DTYPES
from rlrun.weights import WeightUpdate
from rlrun.weights.buckets import ParamMeta
from rlrun.weights.collective import Channel, GroupInfo, SendStats, send, sender_channel
from rlrun.weights.ipc import IPCSender
from rlrun.weights.object_store import ObjectStoreSender
from rlrun.weights.source import WeightSource


class LearnerFailed(RuntimeError):
    """A learner rank died or missed its deadline; the group must restart from a checkpoint."""


# `ping` has a thread of its own, so it is answered while a step runs. The rest run one at a
# time on the actor's main thread: as a threaded actor (max_concurrency > 1) every method would
# run on a pool thread, and the learner step measured ~20% slower there on CPU.
@ray.remote(concurrency_groups={"health": 1})
class LearnerWorker:
    """One learner rank; see the module docstring."""

    def __init__(self, cfg: Config, model_path: str, rank: int, world: int) -> None:
        self.cfg, self.model_path, self.rank, self.world = cfg, model_path, rank, world
        self.channel: Channel | None = None
        self.channel_device = torch.device("cpu")
        self._ipc = IPCSender(torch.device("cpu"))  # on its GPU once `setup` knows it

    @ray.method(concurrency_group="health")
    def ping(self) -> bool:
        return True

    def rendezvous(self) -> tuple[str, int]:
        """An address and a free port on this node for the process group (asked of rank 0)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def setup(self, address: str, port: int, restore: str | None) -> checkpoint.TrainState:
        """Join the process group, build the policy and optimizer, restore `restore` if given."""
        import torch.distributed as dist

        from rlrun.models import load_tokenizer, local_model
        from rlrun.policy_model import build_policy
        from rlrun.policy_update import warmup_schedule

        cfg = self.cfg
        gpu = cfg.learner.num_gpus > 0 and torch.cuda.is_available()
        dist.init_process_group(
            "nccl" if gpu else "gloo", init_method=f"tcp://{address}:{port}",
            rank=self.rank, world_size=self.world,
            timeout=datetime.timedelta(seconds=cfg.learner.timeout_s),
        )
        self.device = torch.device("cuda", 0) if gpu else torch.device("cpu")
        self._ipc = IPCSender(self.device)
        torch.set_num_threads(torch_threads(cfg.learner.num_threads, cfg.learner.num_cpus))
        torch.manual_seed(cfg.run.seed + self.rank)
        path = local_model(self.model_path)  # a URI fetched once for policy, reference, tokenizer
        self.policy = build_policy(cfg, path, self.device, self.world)
        self.model = self.policy.model
        self.tokenizer = load_tokenizer(path)
        # Built after the model is sharded and on its device, so restored optimizer state lands
        # where the parameters live.
        self.optimizer = torch.optim.AdamW(
            self.policy.trainable(), lr=cfg.learner.lr, weight_decay=cfg.learner.weight_decay
        )
        self.scheduler = warmup_schedule(self.optimizer, cfg.learner.warmup_steps)
        if restore is None:
            return checkpoint.TrainState()
        with checkpoint.readable(restore) as path:
            return checkpoint.load_shards(path, self.model, self.optimizer, self.scheduler,
                                          self.rank)

    def train(self, shard: Shard) -> dict[str, float]:
        from rlrun.policy_update import train_on_shard

        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        metrics = train_on_shard(
            self.policy.train_module, self.optimizer, self.scheduler, shard, self.cfg,
            self.tokenizer.pad_token_id, world_size=self.world, ref_model=self.policy.ref,
            device=self.device, compute_dtype=self.policy.compute_dtype,
        )
        if cuda:
            metrics["perf/learner_peak_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        return metrics

    def publish(self, version: int) -> WeightUpdate | None:
        """The current weights as object-store update `version`, put (and owned) by rank 0;
        every rank that `LearnerGroup.senders` names takes part in gathering them."""
        weights = dict(self._source())
        return ObjectStoreSender().publish(version, weights) if self.rank == 0 else None

    def weight_metadata(self) -> list[ParamMeta]:
        return self._source().metadata()

    def open_weight_group(self, info: GroupInfo | None) -> None:
        """Rank 0 (`info` given) hosts the collective weight group, which returns once every
        engine has joined; the other ranks only take part in sends (FSDP2 gathers)."""
        self.close_weight_group()
        if info is not None:
            self.channel, self.channel_device = sender_channel(info, self._vllm_on_gpus(),
                                                               self.device)

    def send_weights(self) -> SendStats:
        """Stream the current weights to the engines (rank 0 sends; every rank walks the
        source in step)."""
        return send(
            self._source(), self.channel, self.cfg.weights.bucket_mb << 20, self.channel_device,
            # vLLM's NCCL engine loads the buckets itself and cannot check them; rlrun's
            # engines and its gloo engine for vLLM on CPU do.
            with_checksums=not self._vllm_on_gpus(),
        )

    def _vllm_on_gpus(self) -> bool:
        rollout = self.cfg.rollout
        return rollout.engine == "vllm" and rollout.num_gpus > 0

    # The ipc backend (rlrun.weights.ipc), phase by phase.

    def begin_ipc(self) -> list[list[ParamMeta]]:
        return self._ipc.begin(self._source(), self.cfg.weights.bucket_mb << 20)

    def ipc_bucket(self, metas: list[ParamMeta]) -> dict[str, Any]:
        return self._ipc.bucket(metas)

    def end_ipc(self) -> None:
        self._ipc.end()

    def close_weight_group(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def _source(self) -> WeightSource:
        """The weights as the engines load them (merged, in model.dtype)."""
        return WeightSource(self.model, DTYPES[self.cfg.model.dtype])

    def save(self, path: str, state: checkpoint.TrainState) -> None:
        """Every rank: write this rank's part of the checkpoint at `path` (with LoRA, the
        adapters and their optimizer state only; else also the model in HF format)."""
        with checkpoint.writable(path) as local:
            checkpoint.save_shards(local, self.model, self.optimizer, self.rank)
            if not self.policy.lora:
                self._export(local / "model")
            if self.rank == 0:
                checkpoint.save_state(local, state, self.scheduler)

    def export(self, path: str) -> None:
        """Every rank: the current policy (LoRA merged) as a Hugging Face model at `path`."""
        with checkpoint.writable(path) as local:
            self._export(local)

    def _export(self, path: Any) -> None:
        # Whole tensors (gathered under FSDP2), LoRA merged; a LoRA base stays in model.dtype.
        dtype = self.policy.compute_dtype if self.policy.lora else self.policy.master_dtype
        weights = dict(WeightSource(self.model, dtype))
        if self.rank == 0:
            checkpoint.export_hf(path, self.model, weights, self.tokenizer)


class LearnerGroup:
    """`learner.num_workers` ranks on `placement_group` (bundle r holds rank r)."""

    def __init__(self, cfg: Config, model_path: str, placement_group: Any, prefix: str) -> None:
        self.cfg, self.model_path = cfg, model_path
        self.placement_group, self.prefix = placement_group, prefix
        self.workers: list[Any] = []  # every rank's actor, rank 0 first
        self.incarnation = 0  # how many times the group was started: a restart makes new ranks

    def start(self) -> checkpoint.TrainState:
        """Start the ranks from the latest checkpoint under `run.output_dir` (none: fresh)."""
        cfg, world = self.cfg, self.cfg.learner.num_workers
        resources = {"num_gpus": cfg.learner.num_gpus} if cfg.learner.num_gpus else {}
        suffix = f".{self.incarnation}" if self.incarnation else ""
        self.workers = [
            LearnerWorker.options(
                name=f"{self.prefix}.learner-{rank}{suffix}", num_cpus=cfg.learner.num_cpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=rank
                ),
                **resources,
            ).remote(cfg, self.model_path, rank, world)
            for rank in range(world)
        ]
        self.incarnation += 1
        address, port = self._all([self.workers[0].rendezvous.remote()], "rendezvous")[0]
        restore = checkpoint.latest_checkpoint(cfg.run.output_dir)
        return self._all([w.setup.remote(address, port, restore) for w in self.workers],
                         "setup")[0]

    def restart(self) -> checkpoint.TrainState:
        """Kill every rank and start again from the latest checkpoint."""
        self.shutdown()
        return self.start()

    def train(self, shards: list[Shard]) -> dict[str, float]:
        """Every rank trains on its shard; the step's merged metrics."""
        return merge_metrics(self._all(
            [w.train.remote(s) for w, s in zip(self.workers, shards, strict=True)], "train"))

    def publish(self, version: int) -> WeightUpdate:
        return self._all([w.publish.remote(version) for w in self.senders()], "publish")[0]

    def senders(self) -> list[Any]:
        """The ranks that take part in sending weights: every rank under FSDP2 (whole
        parameters are gathers), rank 0 alone under DDP (it holds them whole)."""
        return self.workers if self.cfg.learner.strategy == "fsdp2" else self.workers[:1]

    def save(self, state: checkpoint.TrainState) -> None:
        """Write the checkpoint of `state.step` on every rank, then record it as complete."""
        cfg = self.cfg
        path = checkpoint.join(cfg.run.output_dir, checkpoint.LEARNER_DIR,
                               checkpoint.checkpoint_dir_name(state.step))
        self._all([w.save.remote(path, state) for w in self.workers], "save")
        checkpoint.record(cfg.run.output_dir, state.step, cfg.trainer.keep_checkpoints)

    def export(self, path: str) -> None:
        self._all([w.export.remote(path) for w in self.workers], "export")

    def _all(self, refs: list[Any], phase: str) -> list[Any]:
        """The results of one call per rank, within `learner.timeout_s`. A rank that dies or
        is late becomes LearnerFailed at once: its peers may be blocked in a collective with
        it, so waiting for them would hang."""
        timeout = self.cfg.learner.timeout_s
        deadline = time.monotonic() + timeout
        pending = list(refs)
        while pending:
            wait_s = max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
            if not ready:
                late = [r for r, ref in enumerate(refs) if ref in pending]
                raise LearnerFailed(
                    f"learner rank(s) {late} did not finish {phase} within {timeout:g}s "
                    "(learner.timeout_s)"
                )
            try:
                ray.get(ready[0], timeout=0)  # ready: this only raises what the call raised
            except RayActorError as err:
                rank = refs.index(ready[0])
                raise LearnerFailed(
                    f"learner rank {rank} died during {phase}: {first_line(err)}"
                ) from None
            except RayError as err:
                # A rank's death also fails its peers' collectives: that is a fault, not a bug.
                dead = self._dead()
                if dead:
                    raise LearnerFailed(
                        f"learner rank(s) {dead} died during {phase}: {first_line(err)}"
                    ) from None
                raise
        return ray.get(refs, timeout=0)  # all ready

    def _dead(self) -> list[int]:
        """Ranks that no longer answer."""
        pings = [w.ping.remote() for w in self.workers]
        ray.wait(pings, num_returns=len(pings), timeout=10.0)
        dead = []
        for rank, ref in enumerate(pings):
            try:
                ray.get(ref, timeout=0)
            except (RayError, GetTimeoutError):
                dead.append(rank)
        return dead

    def shutdown(self) -> None:
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []

