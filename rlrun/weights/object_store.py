"""Weight sync through the Ray object store: learner rank 0 puts, each rollout actor gets.

The state dict is put once by the learner rank that holds it, so it is owned by that rank and
lives as long as it does; the small `WeightUpdate` that carries the reference goes through the
driver to the rollout actors, which each `ray.get` it and load it into their engine. A learner
rank that dies takes its object with it, which is safe: every rollout actor has loaded the
version already, and the restarted learner publishes the version it restores from a checkpoint
before any actor generates again. For CPU runs and small models; large ones use a collective
backend.
"""

from __future__ import annotations

import ray
from torch import Tensor

from rlrun.weights.base import WeightUpdate, plain_state_dict

BACKEND = "object_store"


class ObjectStoreSender:
    def publish(self, version: int, state_dict: dict[str, Tensor]) -> WeightUpdate:
        weights = plain_state_dict(state_dict)
        # The reference travels inside a dict, so Ray hands it on without resolving it.
        payload = {"ref": ray.put(weights)}
        nbytes = sum(t.numel() * t.element_size() for t in weights.values())
        return WeightUpdate(version=version, backend=BACKEND, nbytes=nbytes, payload=payload)


class ObjectStoreReceiver:
    def receive(self, update: WeightUpdate) -> dict[str, Tensor]:
        if update.backend != BACKEND:
            raise ValueError(f"weight update of backend {update.backend!r} sent to {BACKEND}")
        return ray.get(update.payload["ref"])
