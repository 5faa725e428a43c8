"""Errors a reward raises instead of scoring a sample it could not judge."""

from __future__ import annotations


class RewardError(RuntimeError):
    """A reward could not be computed; the message names the function and the sample."""
