"""Stand-in for vllm/distributed/weight_transfer/packed_tensor.py: the packed wire format.

Producer and consumer cut the tensor stream into chunks by the same greedy rule: a chunk is
closed right after the tensor that takes its byte total strictly above `buffer_size_bytes`
(that tensor included, so a chunk may exceed the budget). Each chunk crosses the wire as one
uint8 broadcast, and the consumer hands each chunk's tensors, as views into the receive
buffer, to `post_unpack_func` before receiving the next. vLLM overlaps chunks on
`num_buffers` CUDA streams; on CPU there is one stream, so `num_buffers` changes nothing here
(as in vLLM, it does not change the bytes either).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

# Default values for packed tensor transfer.
DEFAULT_PACKED_BUFFER_SIZE_BYTES = 1024 * 1024 * 1024  # 1GB
DEFAULT_PACKED_NUM_BUFFERS = 2


def unpack_tensor(
    packed_tensor: torch.Tensor,
    names: list[str],
    shapes: list[list[int]],
    dtypes: list[torch.dtype],
    tensor_sizes: list[int],
) -> list[tuple[str, torch.Tensor]]:
    """Split a packed uint8 tensor into named tensors, as views into `packed_tensor`."""
    pieces = packed_tensor.split(tensor_sizes)
    return [
        (name, piece.contiguous().view(dtype).view(shape))
        for name, shape, dtype, piece in zip(names, shapes, dtypes, pieces, strict=False)
    ]


@dataclass
class PackedChunk:
    """Result of packing tensors into a single contiguous uint8 buffer."""

    packed_tensor: torch.Tensor
    names: list[str]
    shapes: list[list[int]]
    dtypes: list[torch.dtype]
    tensor_sizes: list[int]


def pack_tensors(
    iterator: Iterator[tuple[str, torch.Tensor]],
    post_iter_func: Callable[[tuple[str, torch.Tensor]], torch.Tensor],
    buffer_size_bytes: int,
    tensor_list: list[torch.Tensor] | None = None,
    current_size: int = 0,
) -> PackedChunk | None:
    """Consume `iterator` until the bytes exceed `buffer_size_bytes` or it runs out; None if
    it yielded nothing."""
    if tensor_list is None:
        tensor_list = []
    names: list[str] = []
    shapes: list[list[int]] = []
    dtypes: list[torch.dtype] = []
    tensor_sizes: list[int] = []
    total_bytes = current_size
    for item in iterator:
        name, orig_tensor = item
        tensor = post_iter_func(item).contiguous().view(-1).view(torch.uint8)
        if tensor.numel() > buffer_size_bytes:
            warnings.warn(
                f"Tensor '{name}' has size {tensor.numel()} bytes, which exceeds "
                f"buffer_size_bytes={buffer_size_bytes}.",
                stacklevel=2,
            )
        tensor_list.append(tensor)
        names.append(name)
        shapes.append(list(orig_tensor.shape))
        dtypes.append(orig_tensor.dtype)
        tensor_sizes.append(tensor.numel())
        total_bytes += tensor.numel()
        if total_bytes > buffer_size_bytes:
            break
    if not tensor_list:
        return None
    return PackedChunk(
        packed_tensor=torch.cat(tensor_list, dim=0),
        names=names,
        shapes=shapes,
        dtypes=dtypes,
        tensor_sizes=tensor_sizes,
    )


def packed_nccl_broadcast_producer(
    iterator: Iterator[tuple[str, torch.Tensor]],
    group: Any,
    src: int,
    post_iter_func: Callable[[tuple[str, torch.Tensor]], torch.Tensor],
    buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES,
    num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS,
) -> None:
    """Broadcast `iterator`'s tensors from `src`, one packed uint8 chunk per broadcast."""
    while True:
        chunk = pack_tensors(iterator, post_iter_func, buffer_size_bytes)
        if chunk is None:
            break
        group.broadcast(chunk.packed_tensor, src=src)


def packed_nccl_broadcast_consumer(
    iterator: Iterator[tuple[str, tuple[list[int], torch.dtype]]],
    group: Any,
    src: int,
    post_unpack_func: Callable[[list[tuple[str, torch.Tensor]]], None],
    buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES,
    num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS,
    device: torch.device | str = "cuda",
) -> None:
    """Receive the chunks `packed_nccl_broadcast_producer` sends for the metadata in
    `iterator` ((name, (shape, dtype)) in send order) and pass each to `post_unpack_func`."""
    meta: list[tuple[str, list[int], torch.dtype, int]] = []
    size = 0

    def receive_and_load() -> None:
        packed = torch.empty(size, dtype=torch.uint8, device=device)
        group.broadcast(packed, src=src)
        names, shapes, dtypes, sizes = zip(*meta, strict=True)
        post_unpack_func(unpack_tensor(packed, list(names), list(shapes), list(dtypes),
                                       list(sizes)))

    for name, (shape, dtype) in iterator:
        tensor_size = math.prod(shape) * dtype.itemsize
        meta.append((name, shape, dtype, tensor_size))
        size += tensor_size
        if size > buffer_size_bytes:
            receive_and_load()
            meta, size = [], 0
    if meta:
        receive_and_load()
