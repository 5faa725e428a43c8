"""Stand-in for vllm/distributed/weight_transfer/nccl_common.py: the worker init info, the rank
arithmetic and `trainer_init`, with the NCCL group replaced by the gloo stand-in.

Rank layout, as in vLLM: the trainer sender is group rank 0 and hosts the TCPStore at
(master_address, master_port); worker r (the TP rank) of an engine joins as
`rank_offset + data_parallel_index * world_size_per_dp + r`, where an offline `LLM` always has
`data_parallel_index == 0`. `world_size` must be 1 + every engine's TP size.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.utils import StatelessProcessGroup
from vllm.distributed.weight_transfer.base import WeightTransferInitInfo
from vllm.distributed.weight_transfer.packed_tensor import (
    DEFAULT_PACKED_BUFFER_SIZE_BYTES,
    DEFAULT_PACKED_NUM_BUFFERS,
)

# vllm.distributed.device_communicators.pynccl_wrapper.NCCL_UNIQUE_ID_BYTES
_NCCL_UNIQUE_ID_BYTES = 128


def decode_nccl_unique_id(
    *,
    master_address: str | None,
    master_port: int | None,
    nccl_unique_id_b64: str | None,
    ctx: str,
) -> bytes | None:
    """Validate the rendezvous mode and decode a pre-shared unique id."""
    has_uid = bool(nccl_unique_id_b64)
    has_addr = master_address is not None
    has_port = master_port is not None
    if has_uid and (has_addr or has_port):
        raise ValueError(f"{ctx}: pass nccl_unique_id_b64 OR master_address/master_port, not both")
    if not has_uid:
        if not (has_addr and has_port):
            raise ValueError(
                f"{ctx}: need nccl_unique_id_b64, or both master_address and master_port "
                f"(got master_address={master_address!r}, master_port={master_port!r})"
            )
        return None
    try:
        decoded = base64.b64decode(nccl_unique_id_b64, validate=True)
    except (ValueError, TypeError, binascii.Error) as e:
        raise ValueError(
            f"{ctx}: nccl_unique_id_b64 is not valid standard base64 "
            "(URL-safe base64 is not accepted)"
        ) from e
    if len(decoded) != _NCCL_UNIQUE_ID_BYTES:
        raise ValueError(
            f"{ctx}: nccl_unique_id_b64 must decode to {_NCCL_UNIQUE_ID_BYTES} bytes, "
            f"got {len(decoded)}"
        )
    return decoded


@dataclass(kw_only=True)
class NCCLWeightTransferInitInfo(WeightTransferInitInfo):
    """Worker-side initialization info for NCCL weight transfer (keyword-only, as in vLLM)."""

    master_address: str | None = None
    master_port: int | None = None
    rank_offset: int
    world_size: int
    nccl_unique_id_b64: str | None = field(default=None, repr=False)
    packed: bool = False
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    packed_num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS
    use_load_plan: bool = False
    metadata: list[tuple[str, str, list[int]]] | None = None

    def __post_init__(self) -> None:
        _ = self.nccl_unique_id_bytes

    @property
    def nccl_unique_id_bytes(self) -> bytes | None:
        return decode_nccl_unique_id(
            master_address=self.master_address,
            master_port=self.master_port,
            nccl_unique_id_b64=self.nccl_unique_id_b64,
            ctx="NCCLWeightTransferInitInfo",
        )


class NCCLRendezvous(Protocol):
    """The TCP rendezvous fields `trainer_init` reads."""

    master_address: str
    master_port: int
    world_size: int


def _require_usable_communicator(comm: PyNcclCommunicator) -> PyNcclCommunicator:
    """A disabled communicator makes every broadcast a no-op (stale weights)."""
    if comm.disabled:
        raise RuntimeError(
            "PyNccl communicator is disabled on cuda; NCCL weight transfer would be a no-op."
        )
    return comm


def stateless_init_process_group(
    master_address: str,
    master_port: int,
    rank: int,
    world_size: int,
    device: Any,
) -> PyNcclCommunicator:
    """Rendezvous at (master_address, master_port) and build the group's communicator."""
    pg = StatelessProcessGroup.create(
        host=master_address, port=master_port, rank=rank, world_size=world_size
    )
    return _require_usable_communicator(PyNcclCommunicator(pg, device=device))


def _worker_group_rank(rank_offset: int, parallel_config: Any) -> int:
    """Return this worker's rank in a trainer-to-worker process group."""
    dp_rank = parallel_config.data_parallel_index
    world_size_per_dp = parallel_config.world_size  # TP * PP
    rank_within_dp = parallel_config.rank
    return rank_offset + dp_rank * world_size_per_dp + rank_within_dp


def worker_init_process_group(
    init_info: NCCLWeightTransferInitInfo,
    parallel_config: Any,
) -> PyNcclCommunicator:
    """Join the trainer's group as this worker's rank."""
    rank = _worker_group_rank(init_info.rank_offset, parallel_config)
    if init_info.nccl_unique_id_bytes is not None:
        raise NotImplementedError(
            "the vllm stand-in cannot join by nccl_unique_id_b64 (that path is NCCL-only); "
            "use master_address and master_port"
        )
    assert init_info.master_address is not None
    assert init_info.master_port is not None
    return stateless_init_process_group(
        init_info.master_address,
        init_info.master_port,
        rank,
        init_info.world_size,
        device="cpu",
    )


def trainer_init(
    init_info: NCCLRendezvous | dict,
    rank: int = 0,
) -> PyNcclCommunicator:
    """Open the trainer's end of the weight-transfer group (rank 0 hosts the store).

    Blocks until every rank has joined, so call it concurrently with every engine's
    `init_weight_transfer_engine`.
    """
    if isinstance(init_info, dict):
        master_address = init_info["master_address"]
        master_port = init_info["master_port"]
        world_size = init_info["world_size"]
    else:
        master_address = init_info.master_address
        master_port = init_info.master_port
        world_size = init_info.world_size
    return stateless_init_process_group(master_address, master_port, rank, world_size, "cpu")
