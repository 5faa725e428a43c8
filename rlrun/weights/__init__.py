"""Versioned weight sync from the learner to the rollout engines: one module per backend, each
holding its sending and its receiving half (`actors.weight_sync` adds only deadlines and fault
handling around them).

- `object_store` (rlrun.weights.object_store): learner rank 0 puts the state dict, every
  rollout actor gets it. Any cluster; CPU runs and small models.
- `collective` (rlrun.weights.collective): learner rank 0 broadcasts packed buckets to every
  engine in one process group: gloo on CPU, NCCL on GPU. rlrun's HF engine receives with
  `collective.Receiver`; vLLM receives through its own weight-transfer API, with its NCCL
  engine on GPU and rlrun's gloo engine on CPU (rlrun.weights.vllm_gloo).
- `ipc` (rlrun.weights.ipc): colocated vLLM engines copy each bucket out of the learner
  ranks' GPU memory through CUDA IPC handles.
"""

from __future__ import annotations

from rlrun.config import CHOICES
from rlrun.weights.base import WeightUpdate, plain_state_dict

BACKENDS = CHOICES["weights.backend"]
# The name under which vLLM's weight-transfer factory knows rlrun's gloo engine (vLLM on CPU).
VLLM_GLOO_BACKEND = "gloo"


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


__all__ = [
    "BACKENDS",
    "VLLM_GLOO_BACKEND",
    "WeightUpdate",
    "plain_state_dict",
    "register_vllm_backends",
]
