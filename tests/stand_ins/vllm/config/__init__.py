"""Stand-in for the vllm.config package: re-exports `WeightTransferConfig` as vLLM does."""

from vllm.config.weight_transfer import WeightTransferConfig

__all__ = ["WeightTransferConfig"]
