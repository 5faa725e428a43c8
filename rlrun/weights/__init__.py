"""Versioned weight sync from the learner to the rollout engines, behind one interface."""

from __future__ import annotations

from typing import Any

from rlrun.weights.base import WeightReceiver, WeightSender, WeightUpdate, plain_state_dict

BACKENDS = ("object_store",)
# The name under which vLLM's weight-transfer factory knows rlrun's gloo engine (vLLM on CPU).
VLLM_GLOO_BACKEND = "gloo"


def _unknown(backend: str) -> str:
    return f"unknown weight-sync backend {backend!r}; choose one of {', '.join(BACKENDS)}"


def register_vllm_backends() -> None:
    """vLLM's `vllm.general_plugins` hook (pyproject.toml): vLLM runs it in each of its
    processes, engine core and workers, so its factory knows the gloo weight transfer
    (`rlrun.weights.vllm_gloo`) wherever a receiver is built. Registered by module path: the
    backend's vLLM classes are imported only when an engine asks for it."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    try:
        WeightTransferEngineFactory.register_engine(
            VLLM_GLOO_BACKEND, "rlrun.weights.vllm_gloo", "GlooWeightTransferEngine"
        )
    except ValueError:
        pass  # already registered in this process


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
    "VLLM_GLOO_BACKEND",
    "WeightReceiver",
    "WeightSender",
    "WeightUpdate",
    "make_receiver",
    "make_sender",
    "plain_state_dict",
    "register_vllm_backends",
]
