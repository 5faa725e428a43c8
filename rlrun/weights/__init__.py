"""Versioned weight sync from the learner to the rollout engines, behind one interface."""

from __future__ import annotations

from typing import Any

from rlrun.weights.base import WeightReceiver, WeightSender, WeightUpdate, plain_state_dict

BACKENDS = ("object_store",)


def _unknown(backend: str) -> str:
    return f"unknown weight-sync backend {backend!r}; choose one of {', '.join(BACKENDS)}"


def make_sender(backend: str = "object_store", **kwargs: Any) -> WeightSender:
    """The learner-side half of `backend`."""
    if backend == "object_store":
        from rlrun.weights.object_store import ObjectStoreSender

        return ObjectStoreSender(**kwargs)
    raise ValueError(_unknown(backend))


def make_receiver(backend: str = "object_store") -> WeightReceiver:
    """The rollout-side half of `backend`."""
    if backend == "object_store":
        from rlrun.weights.object_store import ObjectStoreReceiver

        return ObjectStoreReceiver()
    raise ValueError(_unknown(backend))


__all__ = [
    "BACKENDS",
    "WeightReceiver",
    "WeightSender",
    "WeightUpdate",
    "make_receiver",
    "make_sender",
    "plain_state_dict",
]
