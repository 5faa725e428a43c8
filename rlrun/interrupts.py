"""How a training run answers SIGTERM, SIGINT (Ctrl-C) and SIGHUP (a closed terminal).

In the step loop the first signal asks for a clean stop: the step in flight finishes (every call
in it has a deadline), its metrics are logged, the learner checkpoints, and the run ends with
its summary; a resumed run then continues exactly where it stopped. Before the loop (the SFT
warm-start, loading, placing actors) there is nothing to checkpoint yet, so a signal ends the
run at once with `Interrupted`; so does a second signal in the loop. Either way the run ends in
a bounded time and `rlrun train` prints one line.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal that could not wait for a clean stop. A KeyboardInterrupt, so that no
    `except Exception` on the way swallows it and `ray.get` lets it through (as a plain
    KeyboardInterrupt: `run_training` turns it back into this)."""

    def __init__(self, signal_name: str, during: str) -> None:
        super().__init__(f"stopped by {signal_name} {during}")
        self.signal_name = signal_name


class StopSignals:
    """Installs the handlers (main thread only) for as long as it is entered."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name: str | None = None
        self.phase = "while starting"
        self.graceful = False  # True while a clean stop is possible (the step loop)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def take_back(self) -> None:
        """Install the handlers again: `ray.init` puts in its own for SIGTERM (it logs a stack
        and exits)."""
        if self._previous:
            for sig in SIGNALS:
                signal.signal(sig, self._handle)

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.graceful and not self.requested.is_set():
            self.signal_name = name
            self.requested.set()
            print(f"rlrun train: {name}: finishing the step in flight, then checkpointing and "
                  "stopping (send it again to stop at once, without a checkpoint)",
                  file=sys.stderr, flush=True)
            return
        self.signal_name = self.signal_name or name
        raise Interrupted(name, self.phase)


# Set in the environment of the process `run_in_own_session` starts.
OWN_SESSION = "RLRUN_OWN_SESSION"
_PR_SET_PDEATHSIG = 1


def run_in_own_session(argv: list[str]) -> int:
    """Run `python -m rlrun *argv` as the leader of a new session and wait for it.

    A local Ray's processes are children of the driver and share its process group, so a
    signal to the whole group (what `timeout`, `scancel`, a closed terminal and Ctrl-C send)
    would kill them along with the driver, before it could checkpoint. In a session of its
    own the driver and its Ray get only what this process forwards: each signal once, to the
    driver, which then stops as `StopSignals` says. Returns the driver's exit code.
    """
    import subprocess

    child = subprocess.Popen([sys.executable, "-m", "rlrun", *argv], start_new_session=True,
                             env=os.environ | {OWN_SESSION: "1"})

    def forward(signum: int, frame: FrameType | None) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in SIGNALS:
        signal.signal(sig, forward)
    code = child.wait()
    return 128 - code if code < 0 else code


def die_with_parent() -> None:
    """In the process `run_in_own_session` started: a SIGTERM when that parent dies (even by
    SIGKILL), so the run stops cleanly instead of running on unseen."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
