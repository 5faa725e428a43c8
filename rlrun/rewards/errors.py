"""Errors a reward raises instead of scoring a sample it could not judge."""

from __future__ import annotations


class RewardError(RuntimeError):
    """A reward could not be computed; the message names the function and the sample."""


class SandboxFailure(RewardError):
    """The sandbox failed (a `sandbox_error` verdict): retry the batch, never score it as 0."""
