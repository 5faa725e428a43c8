"""Stand-in for vllm/config/weight_transfer.py: which weight-transfer backend an `LLM` builds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WeightTransferConfig:
    """Configuration for weight transfer during RL training (vLLM validates `backend` only
    when the engine is built, inside `LLM(...)`)."""

    backend: str = "nccl"
