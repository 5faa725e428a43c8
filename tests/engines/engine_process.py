"""An engine in a process of its own, driven from a test as if it were in the test's process.

vLLM takes over the process it runs in: it makes `torch.set_num_threads` a no-op and seeds the
global random generators. Tests that start the real engine build it here instead, in a spawned
child, and call it through `EngineProcess`; every call has a deadline, and an exception raised
in the child is raised again in the test.
"""

from __future__ import annotations

import multiprocessing
import traceback
from multiprocessing.connection import Connection
from typing import Any

CALL_TIMEOUT_S = 300.0


def _serve(conn: Connection, args: tuple, kwargs: dict) -> None:
    try:
        from rlrun.engines import make_engine

        engine = make_engine(*args, **kwargs)
    except BaseException as err:  # noqa: BLE001  (sent to the parent, which raises it)
        conn.send(("error", _portable(err)))
        return
    conn.send(("ok", None))
    while True:
        try:
            name, call_args, call_kwargs = conn.recv()
        except EOFError:
            return
        try:
            value = getattr(engine, name)
            conn.send(("ok", value(*call_args, **call_kwargs) if callable(value) else value))
        except BaseException as err:  # noqa: BLE001
            conn.send(("error", _portable(err)))


def _portable(err: BaseException) -> BaseException:
    """`err` if it survives pickling, else a RuntimeError carrying its traceback."""
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001
        return RuntimeError("".join(traceback.format_exception(err)))


class EngineProcess:
    """`make_engine(*args, **kwargs)` in a spawned process; methods and attributes of the
    engine are reached through calls to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        # Not a daemon: vLLM's tensor-parallel ranks are processes of its own. The child ends
        # when this end of the pipe closes, as it does when the test process ends.
        self._process = ctx.Process(target=_serve, args=(child, args, kwargs))
        self._process.start()
        child.close()
        self._receive()

    def _receive(self) -> Any:
        if not self._conn.poll(CALL_TIMEOUT_S):
            self.close()
            raise TimeoutError(f"the engine process did not answer within {CALL_TIMEOUT_S:g}s")
        status, value = self._conn.recv()
        if status == "error":
            raise value
        return value

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._conn.send((name, args, kwargs))
        return self._receive()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._call(name, *args, **kwargs)

    @property
    def version(self) -> int:
        return self._call("version")

    def close(self) -> None:
        self._conn.close()
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
