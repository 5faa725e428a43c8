"""The record of a published weight version, and the state dict as engines load it.

The object-store backend's learner rank 0 publishes each step's weights as a small
`WeightUpdate`; the driver hands that record to every rollout actor, which fetches the tensors
it points to and loads them into its engine (`rlrun.weights.object_store`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


def plain_state_dict(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Detached CPU tensors with the DDP/compile prefixes removed, as engines expect them."""
    from rlrun.weights.source import plain_name

    return {plain_name(k): v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
