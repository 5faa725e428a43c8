"""The versioned weight-sync interface between the learner and the rollout engines.

A transfer is a pair of calls: the learner's rank 0 calls `WeightSender.publish(version,
state_dict)` once per step and gets back a small `WeightUpdate`; the driver hands that record
to every rollout actor, which calls `WeightReceiver.receive(update)` and loads the tensors into
its engine. Backends differ only in what travels in `WeightUpdate.payload`: an
object-store reference (`object_store`, any cluster, the CPU path) or the names, shapes and
dtypes of a collective broadcast that both sides enter (a GPU backend into vLLM workers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor


@dataclass(frozen=True)
class WeightUpdate:
    """A published set of weights: `version` counts learner steps since initialisation."""

    version: int
    backend: str
    nbytes: int = 0  # size of the weights it carries
    # Backend-specific handle. Kept inside a record so Ray does not resolve references on the
    # way through the driver: only the rollout actor that loads the weights fetches them.
    payload: dict[str, Any] = field(default_factory=dict)


class WeightSender(Protocol):
    """Learner side (rank 0)."""

    def publish(self, version: int, state_dict: dict[str, Tensor]) -> WeightUpdate: ...


class WeightReceiver(Protocol):
    """Rollout side."""

    def receive(self, update: WeightUpdate) -> dict[str, Tensor]: ...


def plain_state_dict(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Detached CPU tensors with the DDP/compile prefixes removed, as engines expect them."""
    from rlrun.weights.source import plain_name

    return {plain_name(k): v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
