"""Stand-in for vllm/logprobs.py: one token's log-probability as `CompletionOutput` reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprob:
    """The log-probability of one token, its vocabulary rank (1 = most likely) and its text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None
