"""Stand-in for vllm/sampling_params.py: `SamplingParams` with vLLM 0.34's fields, defaults and
validation.

Every public field of the real class is declared, in the real order, with the real default, so
any keyword call rlrun makes is accepted or rejected as vLLM would. The stand-in's sampler
implements n, temperature, top_p, top_k, seed, stop, stop_token_ids, ignore_eos, max_tokens,
min_tokens, logprobs, detokenize, skip_special_tokens and include_stop_str_in_output; any other
field set away from its default raises NotImplementedError rather than being silently ignored.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from vllm.exceptions import VLLMValidationError

_log = logging.getLogger(__name__)

_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2
# envs.VLLM_MAX_N_SEQUENCES default.
_MAX_N_SEQUENCES = 16384

# Fields whose default the stand-in's sampler does not implement; see the module docstring.
_UNSUPPORTED = (
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "watermarking",
    "min_p",
    "prompt_logprobs",
    "prompt_logprob_token_ids",
    "prompt_logprob_start",
    "logprob_token_ids",
    "flat_logprobs",
    "output_kind",
    "stream_interval",
    "structured_outputs",
    "logit_bias",
    "allowed_token_ids",
    "extra_args",
    "bad_words",
    "thinking_token_budget",
    "repetition_detection",
    "routed_experts_prompt_start",
    "trace_decode_token_ids",
)


class RequestOutputKind(Enum):
    # Return entire output so far in every RequestOutput
    CUMULATIVE = 0
    # Return only deltas in each RequestOutput
    DELTA = 1
    # Do not return intermediate RequestOutput
    FINAL_ONLY = 2


@dataclass
class SamplingParams:
    """Sampling parameters for one request (construct with keywords)."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: Any | None = None
    prompt_logprob_start: int | None = None
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    structured_outputs: Any | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    repetition_detection: Any | None = None
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None
    _all_stop_token_ids: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        # The order follows vLLM's __post_init__ (sampling_params.py), so errors match.
        self._check_supported()
        if 0 < self.temperature < _MAX_TEMP:
            _log.warning(
                "temperature %s is less than %s, which may cause numerical errors nan or inf "
                "in tensors. We have maxed it out to %s.",
                self.temperature, _MAX_TEMP, _MAX_TEMP,
            )
            self.temperature = max(self.temperature, _MAX_TEMP)
        if self.seed == -1:
            self.seed = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        else:
            self.stop_token_ids = list(dict.fromkeys(self.stop_token_ids))
        if self.bad_words is None:
            self.bad_words = []
        if self.logprobs is True:
            self.logprobs = 1
        if self.stop and not self.include_stop_str_in_output:
            self.output_text_buffer_length = max(len(s) for s in self.stop) - 1
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            # Zero temperature means greedy sampling.
            self.top_p = 1.0
            self.top_k = 0
            self.min_p = 0.0
        self._all_stop_token_ids.update(self.stop_token_ids)
        if self.skip_reading_prefix_cache is None:
            self.skip_reading_prefix_cache = self.prompt_logprobs is not None

    def _check_supported(self) -> None:
        defaults = {f.name: f.default for f in fields(self) if f.name in _UNSUPPORTED}
        changed = [name for name, default in defaults.items() if getattr(self, name) != default]
        if changed:
            raise NotImplementedError(
                f"the vllm stand-in does not implement SamplingParams {', '.join(changed)}; "
                "leave them at their defaults or extend tests/stand_ins/vllm"
            )

    def _verify_args(self) -> None:
        if not isinstance(self.n, int):
            raise VLLMValidationError(f"n must be an int, but is of type {type(self.n)}")
        if self.n < 1:
            raise VLLMValidationError(f"n must be at least 1, got {self.n}.")
        if self.n > _MAX_N_SEQUENCES:
            raise VLLMValidationError(f"n must be at most {_MAX_N_SEQUENCES}, got {self.n}.")
        if not math.isfinite(self.temperature):
            raise VLLMValidationError(
                f"temperature must be a finite number, got {self.temperature}.",
                parameter="temperature", value=self.temperature,
            )
        if self.temperature < 0.0:
            raise VLLMValidationError(
                f"temperature must be non-negative, got {self.temperature}.",
                parameter="temperature", value=self.temperature,
            )
        if self.temperature > 2.0:
            raise VLLMValidationError(
                f"temperature must be in [0, 2], got {self.temperature}.",
                parameter="temperature", value=self.temperature,
            )
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(
                f"top_p must be in (0, 1], got {self.top_p}.", parameter="top_p", value=self.top_p
            )
        if self.top_k < -1:
            raise VLLMValidationError(
                f"top_k must be 0 (disable), or at least 1, got {self.top_k}."
            )
        if not isinstance(self.top_k, int):
            raise VLLMValidationError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(
                f"max_tokens must be at least 1, got {self.max_tokens}.",
                parameter="max_tokens", value=self.max_tokens,
            )
        if self.min_tokens < 0:
            raise VLLMValidationError(
                f"min_tokens must be greater than or equal to 0, got {self.min_tokens}."
            )
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise VLLMValidationError(
                f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, "
                f"got {self.min_tokens}."
            )
        if self.logprobs is not None and self.logprobs != -1 and self.logprobs < 0:
            raise VLLMValidationError(
                f"logprobs must be non-negative or -1, got {self.logprobs}.",
                parameter="logprobs", value=self.logprobs,
            )
        assert isinstance(self.stop_token_ids, list)
        if not all(isinstance(st_id, int) for st_id in self.stop_token_ids):
            raise VLLMValidationError(
                f"stop_token_ids must contain only integers, got {self.stop_token_ids}."
            )
        assert isinstance(self.stop, list)
        if any(not stop_str for stop_str in self.stop):
            raise VLLMValidationError("stop cannot contain an empty string.")
        if self.stop and not self.detokenize:
            raise VLLMValidationError(
                "stop strings are only supported when detokenize is True. "
                "Set detokenize=True to use stop."
            )
