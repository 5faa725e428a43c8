"""The base of every error that means "what you gave cannot be used": a config key, a dataset, a
model path. The command line prints its message, one line naming what to change, and exits 2;
it imports nothing heavy, so `rlrun.cli` can catch it before torch or Ray load."""

from __future__ import annotations


class InputError(ValueError):
    """Input (config, data, model, paths) a command cannot use; the message is one line."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message (a library's may run to pages), else its type."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
