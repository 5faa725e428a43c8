"""Deterministic mini-batch plans: which samples each rank trains on, and the global normalisers.

A rollout batch of N = B*G samples is trained for `algo.epochs` passes; each pass shuffles the
samples and cuts them into `algo.mini_batches` global mini-batches (one optimizer step each),
and each mini-batch into `world_size` equal contiguous shards, one per rank. The shuffle depends
only on (seed, step, epoch), so every rank computes the same plan without communicating, and a
resumed run replays the same order. The `LossNorm` of a mini-batch is counted over all of its
shards, which is what makes `grpo_loss` shares sum to the global loss on any number of ranks.

Notation used for tensor shapes: N samples in the rollout batch, L completion positions,
M = N / mini_batches samples per mini-batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

from rlrun.algo.grpo import LossNorm


@dataclass(frozen=True)
class MiniBatch:
    """One optimizer step's samples, sharded across ranks."""

    shards: list[Tensor]  # shards[rank]: int64 indices into the rollout batch, [M / world_size]
    norm: LossNorm  # normalisers over the whole mini-batch (all shards)

    @property
    def indices(self) -> Tensor:
        """All indices of the mini-batch, [M], shards concatenated in rank order."""
        return torch.cat(self.shards)


def _generator(seed: int, step: int, epoch: int) -> torch.Generator:
    digest = hashlib.sha256(f"rlrun-minibatch:{seed}:{step}:{epoch}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def plan_minibatches(
    mask: Tensor,
    mini_batches: int,
    world_size: int,
    max_len: int,
    *,
    seed: int,
    step: int,
    epoch: int,
    shuffle: bool = True,
) -> list[MiniBatch]:
    """Split a rollout batch into `mini_batches` global mini-batches sharded over `world_size`.

    mask [N, L] is the completion mask of the whole rollout batch (it sets each mini-batch's
    token count); max_len is rollout.sampling.max_new_tokens (Dr. GRPO's constant).
    """
    n = mask.shape[0]
    if mini_batches < 1 or world_size < 1:
        raise ValueError(
            f"algo.mini_batches={mini_batches} and learner.num_workers={world_size} must be >= 1"
        )
    if n % (mini_batches * world_size):
        raise ValueError(
            f"a rollout batch of {n} samples does not split into "
            f"algo.mini_batches={mini_batches} x "
            f"learner.num_workers={world_size} equal shards: make prompts_per_step*group_size a "
            "multiple of mini_batches*num_workers"
        )
    if shuffle:
        order = torch.randperm(n, generator=_generator(seed, step, epoch))  # [N]
    else:
        order = torch.arange(n)  # [N]
    tokens_per_sample = mask.reshape(n, -1).sum(dim=-1).double()  # [N]
    plan = []
    for chunk in order.chunk(mini_batches):  # [M]
        norm = LossNorm(
            total_tokens=float(tokens_per_sample[chunk].sum().item()),
            total_seqs=float(len(chunk)),
            max_len=int(max_len),
        )
        plan.append(MiniBatch(shards=list(chunk.chunk(world_size)), norm=norm))
    return plan
