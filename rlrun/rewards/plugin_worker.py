"""A reward plug-in in a process of its own, where a deadline can stop it.

A user's reward function is arbitrary code: it can loop forever, wait on a socket that never
answers, or crash the interpreter. Called in the driver's process, any of these would hang or
kill the run with no line saying why. `PluginWorker` imports the function once, in a spawned
child process, and calls it there batch by batch, waiting at most `reward.timeout_s` for each
answer (and for the import). Past the deadline the child's Python stack goes to stderr
(faulthandler, every thread), the child is killed, and `RewardError` names the function and what
it was doing; a child that dies is named with its exit code. The next call starts a new child.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import sys
import time
import weakref
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from rlrun.records import Problem, Sample
from rlrun.rewards.errors import RewardError
from rlrun.rewards.plugins import call_plugin, load_plugin

# A fresh interpreter, not a fork: the driver holds Ray's and torch's threads.
_CONTEXT = multiprocessing.get_context("spawn")
# Time the child gets to write its stack after SIGUSR1, before it is killed.
STACK_DUMP_WAIT_S = 1.0


def _serve(spec: str, where: str, conn: Connection) -> None:
    """The child: import the plug-in, then answer (problems, samples) requests until EOF."""
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    try:
        fn = load_plugin(spec, where)
    except RewardError as err:
        conn.send(("error", str(err)))
        return
    conn.send(("ready", None))
    while True:
        try:
            problems, samples = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", call_plugin(fn, spec, problems, samples)))
        except RewardError as err:
            conn.send(("error", str(err)))


def _stop(process: BaseProcess, conn: Connection) -> None:
    conn.close()
    if process.is_alive():
        process.kill()
    process.join(timeout=5)


class PluginWorker:
    """`reward.fns[i].fn` = `spec` running in a child process, each call under `timeout_s`."""

    def __init__(self, spec: str, where: str, timeout_s: float) -> None:
        self.spec, self.where, self.timeout_s = spec, where, timeout_s
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._start()

    def _start(self) -> None:
        conn, child_conn = _CONTEXT.Pipe()
        process = _CONTEXT.Process(
            target=_serve, args=(self.spec, self.where, child_conn), daemon=True,
            name=f"rlrun-reward-{self.spec.rpartition(':')[2]}",
        )
        process.start()
        child_conn.close()  # so that a dead child reads as EOF here
        self._process, self._conn = process, conn
        self._finalizer = weakref.finalize(self, _stop, process, conn)
        status, payload = self._answer("importing it")
        if status == "error":
            self.close()
            raise RewardError(payload)

    def __call__(self, problems: list[Problem], samples: list[Sample]) -> list[float]:
        """One score per sample, as `call_plugin` returns them, or `RewardError`."""
        if self._process is None:
            self._start()
        assert self._conn is not None
        self._conn.send((problems, samples))
        status, payload = self._answer(f"scoring a batch of {len(samples)} samples")
        if status == "error":
            raise RewardError(payload)
        return payload

    def _answer(self, doing: str) -> tuple[str, Any]:
        assert self._conn is not None and self._process is not None
        process = self._process
        if not self._conn.poll(self.timeout_s):
            if process.pid is not None and process.is_alive():
                print(f"rlrun: reward function {self.spec!r} ({self.where}) is stuck; "
                      "its Python stack:", file=sys.stderr, flush=True)
                os.kill(process.pid, signal.SIGUSR1)
                time.sleep(STACK_DUMP_WAIT_S)
            self.close()
            raise RewardError(
                f"reward function {self.spec!r} ({self.where}) made no progress for "
                f"{self.timeout_s:g} s {doing} (reward.timeout_s); its Python stack is on stderr"
            )
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            process.join(timeout=5)
            code = process.exitcode
            self.close()
            raise RewardError(
                f"reward function {self.spec!r} ({self.where}) died {doing} "
                f"(exit code {code}); run it on one sample by hand to see why"
            ) from None

    def close(self) -> None:
        """Stop the child (a later call starts a new one)."""
        if self._process is not None:
            self._finalizer()
            self._process = self._conn = None
