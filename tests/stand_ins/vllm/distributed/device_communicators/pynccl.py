"""Stand-in for vllm/distributed/device_communicators/pynccl.py: `PyNcclCommunicator` over gloo.

The real class runs `ncclCommInitRank` on a `StatelessProcessGroup` and then a one-element
float32 SUM all_reduce as warm-up; this one builds a `ProcessGroupGloo` on the same store, with
the same ranks and world size, and does the same warm-up, so a sender and receivers that
disagree on ranks or world size fail here as they would on GPUs. Two differences, both to turn
hangs into errors: a rank claimed twice is refused at once (NCCL would hang), and every
collective gives up after $RLRUN_VLLM_STAND_IN_TIMEOUT_S (NCCL has no timeout).

Bytes cross the wire as uint8 views of the tensors, so any dtype works on gloo; the stand-in
only ever talks to itself, so it need not match NCCL's element-typed broadcasts.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from vllm._stand_in import timeout_s
from vllm.distributed.utils import StatelessProcessGroup


class PyNcclCommunicator:
    """A trainer<->worker communicator: `broadcast` and `destroy` as vLLM's, on CPU."""

    def __init__(
        self,
        group: StatelessProcessGroup,
        device: int | str | torch.device,
        library_path: str | None = None,
    ) -> None:
        if not isinstance(group, StatelessProcessGroup):
            raise NotImplementedError("the stand-in communicator needs a StatelessProcessGroup")
        self.rank = group.rank
        self.world_size = group.world_size
        self.group = group
        self.device = torch.device("cpu") if isinstance(device, int) else torch.device(device)
        if self.world_size == 1:
            # vLLM disables a one-rank communicator; broadcasts are then no-ops.
            self.available = False
            self.disabled = True
            self._pg = None
            return
        claims = group.store.add(f"stand_in/rank_claims/{self.rank}", 1)
        if claims > 1:
            raise RuntimeError(
                f"rank {self.rank} of this weight-transfer group (world_size "
                f"{self.world_size}) was claimed twice: two engines were given overlapping "
                "rank_offset values. Real vLLM would hang in ncclCommInitRank; each engine "
                "needs rank_offset = 1 + the TP sizes of the engines before it."
            )
        store = dist.PrefixStore("stand_in/gloo", group.store)
        self._pg = dist.ProcessGroupGloo(
            store, self.rank, self.world_size, timedelta(seconds=timeout_s())
        )
        self.available = True
        self.disabled = False
        warmup = torch.zeros(1, dtype=torch.float32)
        self._pg.allreduce([warmup]).wait()

    def broadcast(self, tensor: torch.Tensor, src: int, stream: object | None = None) -> None:
        """Send `tensor` from group rank `src` into every other rank's `tensor`, in place."""
        if self.disabled:
            return
        assert tensor.device == self.device, (
            f"this nccl communicator is created to work on {self.device}, "
            f"but the input tensor is on {tensor.device}"
        )
        assert self._pg is not None
        if not tensor.is_contiguous():
            raise ValueError("broadcast needs a contiguous tensor (ncclBroadcast does too)")
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        self._pg.broadcast([tensor.view(-1).view(torch.uint8)], opts).wait()

    def destroy(self) -> None:
        if self.available and not self.disabled:
            self._pg = None
            self.available = False
            self.disabled = True
