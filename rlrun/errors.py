"""The base of every error that means "what you gave cannot be used": a config key, a dataset, a
model path. The command line prints its message, one line naming what to change, and exits 2;
it imports nothing heavy, so `rlrun.cli` can catch it before torch or Ray load."""

from __future__ import annotations


class InputError(ValueError):
    """Input (config, data, model, paths) a command cannot use; the message is one line."""
