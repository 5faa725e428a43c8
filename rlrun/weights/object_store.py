"""Weight sync through the Ray object store: one put per step, one `ray.get` per rollout actor.

An object put by a Ray Train worker dies with that worker (every later reader gets
`OwnerDiedError`), and a learner restart must not take the rollout actors' weights with it. Ray
2.56 removed `ray.put(..., _owner=...)`, so the sender hands the state dict to a long-lived
actor (the coordinator) whose `hold` method puts it with `hold_weights`: that actor owns the
object, and the learner's temporary copy can go.
"""

from __future__ import annotations

from typing import Any

import ray
from torch import Tensor

from rlrun.weights.base import WeightUpdate, plain_state_dict

BACKEND = "object_store"


def hold_weights(state_dict: dict[str, Tensor]) -> dict[str, Any]:
    """Put `state_dict` into the object store as the calling process; the update's payload.

    The reference travels inside a dict, so Ray hands it on without resolving it.
    """
    return {"ref": ray.put(state_dict)}


class ObjectStoreSender:
    """Publishes state dicts owned by `owner`, an actor whose `hold(state_dict)` calls
    `hold_weights` (None: owned by the caller, for a caller that outlives its readers)."""

    def __init__(self, owner: Any = None) -> None:
        self.owner = owner

    def publish(self, version: int, state_dict: dict[str, Tensor]) -> WeightUpdate:
        weights = plain_state_dict(state_dict)
        if self.owner is None:
            payload = hold_weights(weights)
        else:
            payload = ray.get(self.owner.hold.remote(weights))
        return WeightUpdate(version=version, backend=BACKEND, payload=payload)


class ObjectStoreReceiver:
    def receive(self, update: WeightUpdate) -> dict[str, Tensor]:
        if update.backend != BACKEND:
            raise ValueError(f"weight update of backend {update.backend!r} sent to {BACKEND}")
        return ray.get(update.payload["ref"])
