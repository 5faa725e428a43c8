"""The collective weight backend: learner rank 0 broadcasts packed buckets to every engine.

The learner's rank 0 and every rollout engine form one group of `1 + sum(tp)` ranks: rank 0
sends, engine i (with tensor-parallel size t_i) holds ranks `1 + sum(t_j for j < i)` onwards,
so independent engines never share a rank. One sync (driven by `actors.weight_sync`):

1. rendezvous, once and again whenever a member was replaced: rank 0 hosts a TCP store, the
   others join it (`GroupInfo`);
2. start: each engine opens an update;
3. transfer: every learner rank walks the `WeightSource` in step (under FSDP2 each whole
   parameter is a gather all ranks take part in), rank 0 packs buckets (`rlrun.weights.buckets`,
   vLLM's wire format) and broadcasts them, and every engine receives them at the same time;
4. finish: each engine checks the version and every bucket's checksum against the sender's
   before the new weights go live, and reports failure instead of serving bad weights.

Data travels on a torch process group (gloo on CPU, NCCL on GPU) built straight from the store,
separate from the learner's own group; a vLLM engine receives with vLLM's native NCCL
weight-transfer engine instead, for which rank 0 opens vLLM's trainer-side communicator
(`VLLMChannel`) and the wire format is the same. The data plane is bounded by the group's
timeout (`weights.timeout_s`); the driver bounds the control calls with Ray deadlines.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist
from torch import Tensor

from rlrun.weights.buckets import ParamMeta, bucket_ranges, checksum, pack, unpack
from rlrun.weights.source import WeightSource


class WeightSyncError(RuntimeError):
    """A transfer that must not go live: wrong version, a corrupted bucket, a broken group."""


def check_finish(version: int, open_version: int) -> None:
    """Refuse to finish an update other than the one open."""
    if version != open_version:
        raise WeightSyncError(f"finish for weight version {version}, but the update open is "
                              f"version {open_version}")


@dataclass(frozen=True)
class GroupInfo:
    """Where and as whom a member joins the weight group."""

    address: str  # learner rank 0's node, which hosts the store
    port: int
    rank: int  # the member's first rank (an engine's rank offset)
    world_size: int  # 1 + the sum of every engine's tensor-parallel size
    bucket_bytes: int
    timeout_s: float
    device: str  # "cuda" (NCCL) when learner and engines are all on GPUs, else "cpu" (gloo)


def rank_offsets(tp_sizes: list[int]) -> list[int]:
    """Each engine's first rank in the group: rank 0 is the sender, engines follow in order."""
    return [1 + sum(tp_sizes[:i]) for i in range(len(tp_sizes))]


class Channel(Protocol):
    def broadcast(self, tensor: Tensor) -> None:
        """Rank 0 sends `tensor`; every other rank receives into it."""
        ...

    def close(self) -> None: ...


class TorchChannel:
    """A gloo (CPU) or NCCL (GPU) process group of its own, built from a TCP store."""

    def __init__(self, info: GroupInfo) -> None:
        timeout = datetime.timedelta(seconds=info.timeout_s)
        self.store = dist.TCPStore(info.address, info.port, info.world_size,
                                   is_master=info.rank == 0, timeout=timeout)
        if info.device == "cuda":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.group = dist.ProcessGroupNCCL(self.store, info.rank, info.world_size, options)
        else:
            self.group = dist.ProcessGroupGloo(self.store, info.rank, info.world_size, timeout)

    def broadcast(self, tensor: Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([tensor], options).wait()

    def close(self) -> None:
        self.group = self.store = None


class VLLMChannel:
    """Rank 0's side of vLLM's native NCCL weight-transfer group (vLLM's StatelessProcessGroup
    rendezvous and PyNccl communicator: vLLM's workers cannot join a torch process group)."""

    def __init__(self, info: GroupInfo) -> None:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        self.comm = trainer_init(
            {"master_address": info.address, "master_port": info.port,
             "world_size": info.world_size},
            rank=0,
        )

    def broadcast(self, tensor: Tensor) -> None:
        stream = torch.cuda.current_stream() if tensor.is_cuda else None
        self.comm.broadcast(tensor, src=0, stream=stream)

    def close(self) -> None:
        self.comm.destroy()


def sender_channel(info: GroupInfo, to_vllm_on_gpus: bool,
                   device: torch.device) -> tuple[Channel, torch.device]:
    """Rank 0's channel into the group, and the device its buckets are packed on: vLLM's own
    NCCL communicator from the learner's GPU when the engines are vLLM on GPUs, else a torch
    group (gloo on CPU: rlrun's receiver, or rlrun's gloo engine inside vLLM on CPU)."""
    if to_vllm_on_gpus:
        return VLLMChannel(info), device
    return TorchChannel(info), torch.device(info.device)


@dataclass
class SendStats:
    bytes: int = 0
    buckets: int = 0
    checksums: list[int] = field(default_factory=list)


def send(
    source: WeightSource, channel: Channel | None, bucket_bytes: int, device: torch.device,
    with_checksums: bool,
) -> SendStats:
    """Stream `source` in packed buckets over `channel` (rank 0). Ranks without a channel walk
    the source too, because under FSDP2 making a parameter whole takes every rank."""
    metas = source.metadata()
    stats = SendStats()
    tensors = iter(source)
    for indices in bucket_ranges(metas, bucket_bytes):
        parts = []
        for i in indices:
            name, tensor = next(tensors)
            if name != metas[i].name or tuple(tensor.shape) != metas[i].shape:
                raise WeightSyncError(
                    f"the weight source yielded {name} {tuple(tensor.shape)} where its metadata "
                    f"says {metas[i].name} {metas[i].shape}: both sides would cut buckets apart"
                )
            parts.append(tensor.to(device))
        if channel is None:
            continue
        bucket = pack(parts)
        if with_checksums:
            stats.checksums.append(checksum(bucket))
        channel.broadcast(bucket)
        stats.bytes += bucket.numel()
        stats.buckets += 1
    if device.type == "cuda":
        torch.cuda.current_stream().synchronize()
    return stats


class Receiver:
    """An engine's side of the group for engines rlrun drives itself (the HF engine): receives
    buckets into staging and hands the weights over only once they check out."""

    def __init__(self, info: GroupInfo) -> None:
        self.info, self.device = info, torch.device(info.device)
        self.channel = TorchChannel(info)
        self.staged: dict[str, Tensor] | None = None
        self.version = -1  # of the update that is open
        self.checksums: list[int] = []

    def start(self, version: int) -> None:
        if self.staged is not None:
            raise WeightSyncError(
                f"the update to version {self.version} is still open: finish it first"
            )
        self.staged, self.version, self.checksums = {}, version, []

    def update(self, metas: list[ParamMeta]) -> None:
        if self.staged is None:
            raise WeightSyncError("update_weights before start_weight_update")
        for indices in bucket_ranges(metas, self.info.bucket_bytes):
            part = [metas[i] for i in indices]
            bucket = torch.empty(sum(m.nbytes for m in part), dtype=torch.uint8,
                                 device=self.device)
            self.channel.broadcast(bucket)
            self.checksums.append(checksum(bucket))
            self.staged.update(unpack(bucket, part))

    def finish(self, version: int, checksums: list[int]) -> dict[str, Tensor]:
        """The received weights, if they are of `version` and every bucket arrived as it was
        sent."""
        staged, received = self.staged, self.checksums
        self.staged, self.checksums = None, []
        if staged is None:
            raise WeightSyncError("finish_weight_update before start_weight_update")
        check_finish(version, self.version)
        if len(received) != len(checksums):
            raise WeightSyncError(
                f"received {len(received)} buckets where the sender sent {len(checksums)}"
            )
        for k, (got, sent) in enumerate(zip(received, checksums, strict=True)):
            if got != sent:
                raise WeightSyncError(
                    f"bucket {k} of {len(checksums)} arrived corrupted (checksum {got}, sent "
                    f"{sent}): the weights were not loaded"
                )
        return staged

    def close(self) -> None:
        self.channel.close()
