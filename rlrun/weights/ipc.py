"""The ipc weight backend (colocated vLLM): each bucket is handed over as CUDA IPC handles of
the learner ranks' GPU memory instead of being broadcast.

Sending half (`IPCSender`, one per learner rank): per version, `begin` cuts the weights into
buckets (`rlrun.weights.buckets`' rule and wire format); per bucket, every rank packs it on its
own GPU and hands out a handle keyed by the GPU's UUID, which is how vLLM's ipc engine finds
the handle of the GPU it sits on. The bucket stays alive until the next one (or `end`), while
the engines copy out of it. Receiving half: vLLM's own ipc weight-transfer engine, driven by
`rlrun.engines.vllm` through the same calls as the collective backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from rlrun.weights.buckets import ParamMeta, bucket_ranges, pack
from rlrun.weights.source import WeightSource


class IPCSender:
    """One learner rank's side of the ipc backend."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._tensors: Iterator[tuple[str, Tensor]] = iter(())
        self._bucket: Tensor | None = None

    def begin(self, source: WeightSource, bucket_bytes: int) -> list[list[ParamMeta]]:
        """The buckets of this version, by their metadata."""
        metas = source.metadata()
        self._tensors, self._bucket = iter(source), None
        return [[metas[i] for i in r] for r in bucket_ranges(metas, bucket_bytes)]

    def bucket(self, metas: list[ParamMeta]) -> dict[str, Any]:
        """Pack the next bucket on this rank's GPU; its CUDA IPC handle by the GPU's UUID."""
        from torch.multiprocessing.reductions import reduce_tensor

        bucket = pack(next(self._tensors)[1].to(self.device) for _ in metas)
        torch.cuda.synchronize()
        self._bucket = bucket
        uuid = str(torch.cuda.get_device_properties(self.device).uuid)
        return {uuid: reduce_tensor(bucket)[1]}

    def end(self) -> None:
        self._tensors, self._bucket = iter(()), None
        torch.cuda.ipc_collect()
