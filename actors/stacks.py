"""The Python stack of a stalled actor, for the log line that names it.

An actor that misses its deadline is killed and replaced; before that, what it was doing is
the one clue to why. `actor_stack(handle)` finds the actor's process in Ray's actor table and
reads its stack with py-spy (installed with `ray[default]`), without pausing it. It answers
only for actors on this node (py-spy reads local processes) and gives a reason instead of a
stack when it cannot.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ray

# A dump must not hold up the replacement for long.
DUMP_TIMEOUT_S = 15.0


def py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this interpreter (a venv not activated)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.is_file() else None)


def actor_stack(actor: Any) -> str:
    """The stack of the live actor behind the handle `actor` (every thread), or why there is
    none."""
    exe = py_spy()
    if exe is None:
        return "(no stack: py-spy is not installed)"
    # The GCS's actor table, not the dashboard's state API, which a cluster may run without.
    info = ray._private.state.actors(actor_id=actor._actor_id.hex())
    if not info or info["State"] != "ALIVE":
        return "(no stack: the actor is not alive)"
    node = info["Address"]["NodeID"]
    if node != ray.get_runtime_context().get_node_id():
        return f"(no stack: the actor runs on node {node}; py-spy reads this node only)"
    try:
        dump = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(info["Pid"])],
                              capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"(no stack: py-spy did not answer within {DUMP_TIMEOUT_S:g}s)"
    return (dump.stdout or dump.stderr).rstrip()
