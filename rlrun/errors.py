"""The base of every error that means "what you gave cannot be used": a config key, a dataset, a
model path. The command line prints its message, one line naming what to change, and exits 2;
it imports nothing heavy, so `rlrun.cli` can catch it before torch or Ray load."""

from __future__ import annotations

import sys
from typing import Any


class InputError(ValueError):
    """Input (config, data, model, paths) a command cannot use; the message is one line."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message (a library's may run to pages), else its type."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def short_repr(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters for a one-line message; the type's name where
    repr fails (an int past Python's 4,300-digit string limit, a `__repr__` that raises)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any object's repr may raise
        return f"a {type(value).__name__} that has no repr"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def print_last_line(command: str, message: str) -> None:
    """`rlrun COMMAND: message` on stderr, as the command's last line. A command connected to
    Ray is disconnected first: Ray streams the actors' output to this process from a thread of
    its own, writing a line and its newline separately, so a line printed while it runs can
    land inside an actor's line (a checkpoint's progress bar, say); disconnecting stops that
    thread once it has printed what it holds. Ray is not imported here where it was not."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    sys.stdout.flush()
    print(f"rlrun {command}: {message}", file=sys.stderr, flush=True)
