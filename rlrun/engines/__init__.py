"""Rollout engines behind one interface: `hf` (transformers, CPU/debug) and `vllm` (GPU)."""

from rlrun.engines.base import (
    Completion,
    Engine,
    SamplingParams,
    WeightsMismatchError,
    make_engine,
)

__all__ = ["Completion", "Engine", "SamplingParams", "WeightsMismatchError", "make_engine"]
