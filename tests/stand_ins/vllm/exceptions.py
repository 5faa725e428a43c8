"""Stand-in for vllm/exceptions.py: the validation error `SamplingParams` and `generate` raise."""

from __future__ import annotations

from typing import Any


class VLLMError(Exception):
    """Base class for all vLLM-specific errors."""


class VLLMClientError(VLLMError):
    """Base class for errors caused by the client request (4xx)."""


class VLLMValidationError(VLLMClientError):
    """A request failed validation; `parameter` and `value` say which and why."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        base = super().__str__()
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        return f"{base} ({', '.join(extras)})" if extras else base
