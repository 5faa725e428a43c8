"""vLLM's native weight-transfer API over gloo: the CPU twin of vLLM's NCCL engine.

vLLM's stock weight-transfer backends (nccl, ipc, sparse_nccl, ...) all need CUDA. vLLM's
factory takes new backends, so rlrun registers `gloo` in every vLLM process through vLLM's
`vllm.general_plugins` entry point (pyproject.toml: `rlrun.weights.register_vllm_backends`),
and a vLLM engine on CPU receives the collective backend's buckets through exactly the calls
it uses on GPU:
`init_weight_transfer_engine`, `start_weight_update`, `update_weights`,
`finish_weight_update`. Only the data plane differs: a torch gloo group built from the learner
rank 0's TCP store (`rlrun.weights.collective.TorchChannel`, the sender the HF engine's
receiver also uses) instead of vLLM's PyNccl communicator.

What is kept from the NCCL engine: its init and update info (the same payloads), the rank
rule (`rank_offset` plus the worker's data- and tensor-parallel rank), and the layer-wise
reload around the buckets. What is added: the receiver computes each bucket's checksum, as
rlrun's own receiver does, so `rlrun.engines.vllm` can compare them with the sender's before
it reports the update finished.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)

from rlrun.weights.buckets import ParamMeta, bucket_ranges, checksum, unpack
from rlrun.weights.collective import GroupInfo, TorchChannel


@dataclass(kw_only=True)
class GlooWeightTransferInitInfo(NCCLWeightTransferInitInfo):
    """The NCCL engine's init info, plus the group's deadline (gloo's own timeout)."""

    timeout_s: float = 600.0


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """Receives packed buckets from rank 0 over a gloo group and loads them layer by layer."""

    init_info_cls = GlooWeightTransferInitInfo

    def init_transfer_engine(self, init_info: GlooWeightTransferInitInfo) -> None:
        if not init_info.packed:
            raise ValueError("the gloo weight transfer receives packed buckets only")
        parallel = self.parallel_config
        rank = (init_info.rank_offset + parallel.data_parallel_index * parallel.world_size
                + parallel.rank)
        self.bucket_bytes = init_info.packed_buffer_size_bytes
        self.checksums: list[int] = []
        self.channel: TorchChannel | None = TorchChannel(GroupInfo(
            init_info.master_address, init_info.master_port, rank, init_info.world_size,
            self.bucket_bytes, init_info.timeout_s, "cpu",
        ))

    def start_weight_update(self) -> None:
        self.checksums = []
        super().start_weight_update()

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.channel is None:
            raise RuntimeError("gloo weight transfer not initialized: call "
                               "init_weight_transfer_engine first")
        metas = [ParamMeta(name, dtype, tuple(shape)) for name, dtype, shape in zip(
            update_info.names, update_info.dtype_names, update_info.shapes, strict=True)]
        for indices in bucket_ranges(metas, self.bucket_bytes):
            part = [metas[i] for i in indices]
            bucket = torch.empty(sum(m.nbytes for m in part), dtype=torch.uint8)
            self.channel.broadcast(bucket)
            self.checksums.append(checksum(bucket))
            self.model.load_weights(unpack(bucket, part))

    def shutdown(self) -> None:
        if getattr(self, "channel", None) is not None:
            self.channel.close()
            self.channel = None


def received_checksums(worker: object) -> list[int]:
    """Run on a vLLM worker (`LLM.collective_rpc`): the checksums of the buckets it received
    in the last update."""
    return list(worker.weight_transfer_engine.checksums)
