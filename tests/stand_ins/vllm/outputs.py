"""Stand-in for vllm/outputs.py: what `LLM.generate` returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm.logprobs import Logprob


@dataclass
class WeightVersionSpan:
    """Output tokens `[start, end)` were sampled by weights labelled `version`."""

    version: str
    start: int
    end: int


@dataclass
class CompletionOutput:
    """One completion of a request: its tokens, text, per-token log-probs and why it ended."""

    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    routed_experts: Any | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any | None = None
    sampling_mask: Any | None = None
    spec_decode_metrics: Any | None = None
    weight_versions: list[WeightVersionSpan] | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestOutput:
    """The completions of one prompt, in the order vLLM returns them."""

    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int] | None,
        prompt_logprobs: Any | None,
        outputs: list[CompletionOutput],
        finished: bool,
        metrics: Any | None = None,
        lora_request: Any | None = None,
        encoder_prompt: str | None = None,
        encoder_prompt_token_ids: list[int] | None = None,
        num_cached_tokens: int | None = None,
        num_cache_creation_tokens: int | None = None,
        *,
        prompt_token_id_logprobs: Any | None = None,
        kv_transfer_params: dict[str, Any] | None = None,
        ec_transfer_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # vLLM ignores unknown arguments (with a warning) for forward compatibility.
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.prompt_token_id_logprobs = prompt_token_id_logprobs
        self.outputs = outputs
        self.finished = finished
        self.metrics = metrics
        self.lora_request = lora_request
        self.encoder_prompt = encoder_prompt
        self.encoder_prompt_token_ids = encoder_prompt_token_ids
        self.num_cached_tokens = num_cached_tokens
        self.num_cache_creation_tokens = num_cache_creation_tokens
        self.kv_transfer_params = kv_transfer_params
        self.ec_transfer_params = ec_transfer_params

    def __repr__(self) -> str:
        return (
            f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
            f"prompt_token_ids={self.prompt_token_ids}, outputs={self.outputs}, "
            f"finished={self.finished})"
        )
