"""Stand-in internals with no counterpart in vLLM: the deadline that turns vLLM's silent hangs
into errors, and the per-worker view of the engine's configuration.

`RLRUN_VLLM_STAND_IN_TIMEOUT_S` caps every wait the stand-in makes on another party: the
TCPStore rendezvous (vLLM: 300 s), gloo collectives (vLLM's NCCL ones wait forever) and
placing TP workers in a Ray placement group (vLLM: `ray.get` without a timeout). Tests set it
to a few seconds so that a protocol mistake fails fast instead of hanging the suite.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_ENV = "RLRUN_VLLM_STAND_IN_TIMEOUT_S"


def timeout_s(default: float = 300.0) -> float:
    """`default`, capped by $RLRUN_VLLM_STAND_IN_TIMEOUT_S when that is set."""
    value = os.environ.get(TIMEOUT_ENV)
    return min(default, float(value)) if value else default


@dataclass
class ParallelConfig:
    """The parts of vLLM's ParallelConfig the weight-transfer rank arithmetic reads."""

    world_size: int
    rank: int
    data_parallel_index: int = 0
    placement_group: Any = None


@dataclass
class ModelConfig:
    """The parts of vLLM's ModelConfig the stand-in's workers read."""

    model: str
    dtype: Any
    max_model_len: int
    logprobs_mode: str
    max_logprobs: int
    enable_sleep_mode: bool
    seed: int


@dataclass
class SharedModel:
    """The one CPU model every TP worker of a stand-in `LLM` stands for; only rank 0 writes it."""

    model: Any
    lock: threading.RLock = field(default_factory=threading.RLock)


@dataclass
class WorkerConfig:
    """What a stand-in `Worker` gets as `vllm_config`: its own parallel view of the engine."""

    parallel_config: ParallelConfig
    model_config: ModelConfig
    weight_transfer_config: Any
    shared: SharedModel


def load_weights(model: Any, weights: Any, write: bool = True) -> set[str]:
    """Copy checkpoint-format (Hugging Face name, full tensor) pairs into `model`, as vLLM's
    `model.load_weights` does: an unknown name is a KeyError, a shape mismatch an
    AssertionError, and a tied `lm_head.weight` is skipped. `write=False` checks only (TP
    ranks above 0 receive the same tensors but share rank 0's model). Returns the names loaded.
    """
    import torch

    params = dict(model.named_parameters())
    tied = getattr(model.config, "tie_word_embeddings", False)
    loaded: set[str] = set()
    with torch.no_grad():
        for name, tensor in weights:
            if tied and name == "lm_head.weight":
                continue
            param = params[name]
            assert param.size() == tensor.size(), (
                f"Attempted to load weight ({tensor.size()}) into parameter ({param.size()})"
            )
            if write:
                param.copy_(tensor)
            loaded.add(name)
    return loaded
