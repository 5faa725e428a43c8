"""C++ submissions: one compile per distinct source, cached by hash, shared by all slots.

The compiler runs inside an executor slot under the same isolation as a test (no network,
non-root uid, rlimits, private work directory), so hostile source (`#include "/etc/shadow"`,
template bombs) is contained too. A failed compile is cached like a binary, so the identical
completions of a GRPO group cost one compile between them.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class CompileOutcome:
    """The result of compiling one source: the binary, or the compiler's error output."""

    ok: bool
    stderr: str
    binary: bytes = b""
    timed_out: bool = False


def compile_argv(compiler: str, flags: list[str]) -> list[str]:
    """The compiler command line; the executor fills `{src}` and `{out}`."""
    return [compiler, *flags, "{src}", "-o", "{out}"]


def source_key(source: str, argv: list[str]) -> str:
    """Cache key of a compile: the source and the exact command line."""
    h = hashlib.sha256("\0".join(argv).encode())
    h.update(b"\0")
    h.update(source.encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:32]


class CompileCache:
    """Thread-safe LRU of compile outcomes, with one compile in flight per key. It keeps at most
    `capacity` outcomes and `max_bytes` of binaries (a program with a large initialised array
    compiles to tens of MB), but always the newest."""

    def __init__(self, capacity: int = 256, max_bytes: int = 1 << 30) -> None:
        self._items: OrderedDict[str, CompileOutcome] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.capacity = capacity
        self.max_bytes = max_bytes

    def get(self, key: str) -> CompileOutcome | None:
        with self._guard:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: str, outcome: CompileOutcome) -> None:
        with self._guard:
            self._items[key] = outcome
            self._items.move_to_end(key)
            size = sum(len(o.binary) for o in self._items.values())
            while len(self._items) > 1 and (len(self._items) > self.capacity
                                            or size > self.max_bytes):
                size -= len(self._items.popitem(last=False)[1].binary)

    def lock(self, key: str) -> threading.Lock:
        """The lock held while `key` is being compiled, so other slots wait for that compile."""
        with self._guard:
            if len(self._locks) > 4 * self.capacity:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            return self._locks.setdefault(key, threading.Lock())
