"""Stand-in for vllm/distributed/weight_transfer/nccl_engine.py: the worker side of the dense
NCCL backend, receiving over the gloo stand-in.

`receive_weights` follows vLLM: packed (one uint8 broadcast per chunk, loaded chunk by chunk)
or one broadcast per tensor, loaded tensor by tensor, so a transfer that fails part-way leaves
a partly-updated model as vLLM's layerwise reload does. Empty name lists reuse the previous
update's metadata for the same `src`; the cache is cleared at every `init_transfer_engine`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from vllm._stand_in import load_weights
from vllm.config.weight_transfer import WeightTransferConfig
from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.nccl_common import (
    NCCLWeightTransferInitInfo,
    worker_init_process_group,
)
from vllm.distributed.weight_transfer.packed_tensor import (
    DEFAULT_PACKED_BUFFER_SIZE_BYTES,
    DEFAULT_PACKED_NUM_BUFFERS,
    packed_nccl_broadcast_consumer,
)

__all__ = [
    "NCCLWeightTransferInitInfo",
    "NCCLWeightTransferUpdateInfo",
    "NCCLWeightTransferEngine",
]


@dataclass
class NCCLWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    """Per-round update info: parameter metadata in send order, and the sender's group rank."""

    names: list[str] = field(default_factory=list)
    dtype_names: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    src: int = 0

    def __post_init__(self) -> None:
        num_params = len(self.names)
        if len(self.dtype_names) != num_params:
            raise ValueError(
                f"`dtype_names` should be of the same size as `names`: "
                f"got {len(self.dtype_names)} and {len(self.names)}"
            )
        if len(self.shapes) != num_params:
            raise ValueError(
                f"`shapes` should be of the same size as `names`: "
                f"got {len(self.shapes)} and {len(self.names)}"
            )


class NCCLWeightTransferEngine(WeightTransferEngine):
    """Receives dense checkpoint-format weights broadcast from the trainer ranks below
    `rank_offset` and loads them into the worker's model."""

    init_info_cls = NCCLWeightTransferInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def __init__(
        self,
        config: WeightTransferConfig,
        vllm_config: Any,
        device: torch.device,
        model: torch.nn.Module,
    ) -> None:
        super().__init__(config, vllm_config, device, model)
        self.model_update_group: PyNcclCommunicator | None = None
        self.rank_offset = 1
        self.packed = False
        self.packed_buffer_size_bytes = DEFAULT_PACKED_BUFFER_SIZE_BYTES
        self.packed_num_buffers = DEFAULT_PACKED_NUM_BUFFERS
        self._last_update_info: dict[int, NCCLWeightTransferUpdateInfo] = {}

    def init_transfer_engine(self, init_info: NCCLWeightTransferInitInfo) -> None:
        """Join the trainer's group and record the wire parameters it will send with."""
        if init_info.use_load_plan:
            raise NotImplementedError("the vllm stand-in does not implement use_load_plan")
        self.rank_offset = init_info.rank_offset
        self.packed = init_info.packed
        self.packed_buffer_size_bytes = init_info.packed_buffer_size_bytes
        self.packed_num_buffers = init_info.packed_num_buffers
        self._last_update_info.clear()
        self.model_update_group = worker_init_process_group(init_info, self.parallel_config)

    def start_weight_update(self) -> None:
        """vLLM starts a layerwise reload here; the stand-in loads in place, so nothing to do."""

    def finish_weight_update(self) -> None:
        """vLLM finalizes the layerwise reload here; nothing to do in place."""

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        """Receive one round's tensors from group rank `src` and load them."""
        if self.model_update_group is None:
            raise RuntimeError(
                "NCCL weight transfer not initialized. Call init_transfer_engine() first."
            )
        src = update_info.src
        if not 0 <= src < self.rank_offset:
            raise ValueError(
                f"NCCL update src must be a sender rank in [0, {self.rank_offset}), got {src!r}."
            )
        if update_info.names:
            self._last_update_info[src] = update_info
        else:
            update_info = self._last_update_info.get(src, update_info)
        write = self.parallel_config.rank == 0

        def load(weights: list[tuple[str, torch.Tensor]]) -> None:
            with self.vllm_config.shared.lock:
                load_weights(self.model, weights, write=write)

        metadata = [
            (name, getattr(torch, dtype_name), shape)
            for name, dtype_name, shape in zip(
                update_info.names, update_info.dtype_names, update_info.shapes, strict=True
            )
        ]
        if self.packed:
            packed_nccl_broadcast_consumer(
                iterator=((name, (shape, dtype)) for name, dtype, shape in metadata),
                group=self.model_update_group,
                src=src,
                post_unpack_func=load,
                buffer_size_bytes=self.packed_buffer_size_bytes,
                num_buffers=self.packed_num_buffers,
                device=self.device,
            )
        else:
            for name, dtype, shape in metadata:
                weight = torch.empty(shape, dtype=dtype, device=self.device)
                self.model_update_group.broadcast(weight, src=src)
                load([(name, weight)])

    def shutdown(self) -> None:
        if self.model_update_group is not None:
            self.model_update_group.destroy()
            self.model_update_group = None
