"""Packed buckets: the byte layout in which the collective backend streams weights.

It is vLLM 0.34's packed format (vllm/distributed/weight_transfer/packed_tensor.py), so one
sender feeds vLLM's own NCCL receiver and rlrun's receivers alike:

- tensors travel in metadata order as their raw bytes, concatenated into uint8 buckets;
- a bucket closes right after the tensor that takes its byte total past the bucket size (so a
  bucket may overrun the size by one tensor, and a tensor larger than the size is a bucket of
  its own);
- names, dtypes and shapes never go on the wire: they travel in the control call that tells a
  receiver what is coming, and both sides cut buckets from them by the same rule.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

# The period of the GPU checksum's byte-position weights.
_MODULUS = 65_521


@dataclass(frozen=True)
class ParamMeta:
    """One tensor as it travels: its name in the Hugging Face state dict, dtype and shape."""

    name: str
    dtype: str  # torch dtype name without the prefix, e.g. "bfloat16" (vLLM's dtype_names)
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * getattr(torch, self.dtype).itemsize

    @classmethod
    def of(cls, name: str, tensor: Tensor) -> ParamMeta:
        return cls(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))


def bucket_ranges(metas: list[ParamMeta], bucket_bytes: int) -> list[range]:
    """The metadata indices of each bucket, cut by vLLM's rule (see the module docstring)."""
    out, start, total = [], 0, 0
    for i, meta in enumerate(metas):
        total += meta.nbytes
        if total > bucket_bytes:
            out.append(range(start, i + 1))
            start, total = i + 1, 0
    if start < len(metas):
        out.append(range(start, len(metas)))
    return out


def pack(tensors: Iterable[Tensor]) -> Tensor:
    """One uint8 bucket holding the tensors' bytes back to back."""
    return torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in tensors])


def unpack(bucket: Tensor, metas: list[ParamMeta]) -> list[tuple[str, Tensor]]:
    """(name, tensor) views into `bucket` for the tensors `metas` describe, in order."""
    sizes = [m.nbytes for m in metas]
    if sum(sizes) != bucket.numel():
        raise ValueError(
            f"a bucket of {bucket.numel()} bytes cannot hold {len(metas)} tensors of "
            f"{sum(sizes)} bytes ({metas[0].name} ... {metas[-1].name})"
        )
    out = []
    for m, part in zip(metas, bucket.split(sizes), strict=True):
        dtype = getattr(torch, m.dtype)
        if part.storage_offset() % dtype.itemsize:
            # The format has no padding: after a tensor of a smaller dtype the bytes may not
            # be aligned for this one (never when every tensor has one dtype, as synced ones do).
            part = part.clone()
        out.append((m.name, part.view(dtype).view(m.shape)))
    return out


def checksum(bucket: Tensor) -> int:
    """A checksum of a bucket's bytes, computed where the bucket lives (sender and receivers of
    one group keep their buckets on the same kind of device, so they compute the same one):
    CRC-32 on CPU (zlib, a few GB/s), `weighted_sum` on a GPU."""
    if bucket.device.type == "cpu":
        return zlib.crc32(bucket.contiguous().numpy())
    return weighted_sum(bucket)


def weighted_sum(bucket: Tensor, chunk: int = 1 << 24) -> int:
    """A position-weighted sum of a bucket's bytes, in slices of `chunk` bytes: it stays on the
    device and needs only a slice of int64 scratch. The weights make swapped bytes change the
    sum (a plain byte sum would not notice two tensors arriving in each other's place)."""
    total = 0
    for start in range(0, bucket.numel(), chunk):
        part = bucket[start : start + chunk].to(torch.int64)  # [C]
        weights = torch.arange(start, start + part.numel(), device=bucket.device) % _MODULUS + 1
        total += int((part * weights).sum())
    return total
