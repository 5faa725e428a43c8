"""Rollout engines behind one interface: `hf` (transformers, CPU/debug) and `vllm` (GPU)."""

from typing import Any

from rlrun.config import CHOICES, RolloutConfig
from rlrun.engines.base import Engine, SamplingParams, WeightsMismatchError

ENGINES = CHOICES["rollout.engine"]


def make_engine(
    name: str,
    model_path: str,
    cfg: RolloutConfig,
    dtype: str,
    tokenizer_path: str | None = None,
    **vllm_options: Any,
) -> Engine:
    """The engine `rollout.engine` names, loaded from `model_path`; `vllm_options` go to the
    vLLM engine only (weights_backend, sleep_mode, seed)."""
    if name == "hf":
        from rlrun.engines.hf import HFEngine

        return HFEngine(model_path, cfg, dtype, tokenizer_path=tokenizer_path)
    if name == "vllm":
        from rlrun.engines.vllm import VLLMEngine

        return VLLMEngine(model_path, cfg, dtype, tokenizer_path=tokenizer_path, **vllm_options)
    raise ValueError(
        f"rollout.engine={name!r} is not an engine: choose one of {', '.join(ENGINES)}"
    )


__all__ = ["ENGINES", "Engine", "SamplingParams", "WeightsMismatchError", "make_engine"]
