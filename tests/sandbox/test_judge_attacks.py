"""Hostile programs against the process-backend judge (named like DeepMind code_contests tests).

Each attack must get a non-accepted verdict, and the same Judge must keep judging correctly
afterwards. Where an attack would pass if it worked, the expected output is what a successful
attack prints, so the test fails if the defence does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rlrun.records import CallTest, Problem, Submission
from rlrun.records import Tests as Cases
from rlrun.sandbox import make_submission
from tests.sandbox.conftest import assert_still_works, stdio_sub

pytestmark = pytest.mark.system

FIXTURE = Path(__file__).parent.parent / "fixtures" / "sandbox" / "humaneval_subset.jsonl"


def humaneval(task: str) -> tuple[Problem, dict]:
    for line in FIXTURE.read_text().splitlines():
        row = json.loads(line)
        if row["task_id"] == task:
            problem = Problem(id=task, prompt=row["prompt"], kind="code",
                              tests=Cases(harness=row["test"], entry_point=row["entry_point"]),
                              code_prefix=row["prompt"])
            return problem, row
    raise KeyError(task)


def judge_harness(judge, task: str, body: str):
    problem, _ = humaneval(task)
    from rlrun.config import SandboxConfig

    (res,) = judge.judge([make_submission(problem, body, SandboxConfig(time_limit_s=2.0))])
    return res


def passes_naive_harness(task: str, body: str) -> bool:
    """Whether `body` passes the usual "prompt + completion + test, exit status 0" harness.

    Run on our own attack programs only, to show each attack is real before showing that the
    judge stops it.
    """
    problem, row = humaneval(task)
    program = (problem.code_prefix + body + "\n" + row["test"]
               + f"\ncheck({row['entry_point']})\n")
    proc = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, timeout=30)
    return proc.returncode == 0


def not_accepted(res) -> None:
    assert res.status != "accepted", res
    assert res.status != "sandbox_error", res


# -- early exit --------------------------------------------------------------------------------

@pytest.mark.parametrize("exit_stmt", [
    "import sys; sys.exit(0)", "raise SystemExit", "raise SystemExit(0)", "import os; os._exit(0)",
    "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "exit()", "quit()",
])
def test_EarlyExitInBody(judge, exit_stmt: str) -> None:
    body = f"    {exit_stmt}\n"
    if "kill" not in exit_stmt:
        assert passes_naive_harness("HumanEval/0", body)
    not_accepted(judge_harness(judge, "HumanEval/0", body))
    assert_still_works(judge)


def test_EarlyExitAtModuleLevel(judge) -> None:
    body = "    return True\nimport os\nos._exit(0)\n"
    assert passes_naive_harness("HumanEval/0", body)
    not_accepted(judge_harness(judge, "HumanEval/0", body))


def test_EarlyExitInsideCallBasedTest(judge) -> None:
    sub = Submission("s", "import sys\ndef f(x):\n    sys.exit(0)\n", "python",
                     Cases(fn_name="f", calls=[CallTest([1], 2)]))
    (res,) = judge.judge([sub])
    not_accepted(res)


# -- always-equal objects ------------------------------------------------------------------------

ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __gt__(self, other): return True
    def __sub__(self, other): return self
    def __rsub__(self, other): return self
    def __abs__(self): return self
    def __bool__(self): return True
    def __hash__(self): return 0
"""


@pytest.mark.parametrize("task", ["HumanEval/0", "HumanEval/2", "HumanEval/12", "HumanEval/53"])
def test_AlwaysEqualObjectInHarness(judge, task: str) -> None:
    body = "    return Anything()\n" + ALWAYS_EQUAL
    assert passes_naive_harness(task, body)
    not_accepted(judge_harness(judge, task, body))


def test_AlwaysEqualObjectInCallTest(judge) -> None:
    sub = Submission("s", ALWAYS_EQUAL + "def f(x):\n    return Anything()\n", "python",
                     Cases(fn_name="f", calls=[CallTest([1], 2)]))
    (res,) = judge.judge([sub])
    assert res.status == "wrong_answer" and "plain data" in res.tests[0].detail, res


def test_IntSubclassIsNotPlainData(judge) -> None:
    code = "class I(int):\n    def __eq__(self, o): return True\ndef f(x):\n    return I(7)\n"
    (res,) = judge.judge([Submission("s", code, "python",
                                     Cases(fn_name="f", calls=[CallTest([1], 2)]))])
    not_accepted(res)


# -- patching builtins and the harness's tools ------------------------------------------------

@pytest.mark.parametrize("patch", [
    "import builtins\nbuiltins.abs = lambda x: 0",
    "abs = lambda x: 0",
    "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.AssertionError = Warning",
])
def test_BuiltinsPatching(judge, patch: str) -> None:
    # HumanEval/2 checks `candidate(3.5) == 0.5` then `abs(candidate(1.33) - 0.33) < 1e-6`.
    body = "    return 0.5\n" + patch + "\n"
    assert passes_naive_harness("HumanEval/2", body)
    not_accepted(judge_harness(judge, "HumanEval/2", body))
    assert_still_works(judge)


def test_OverridesTheHarnessHelpers(judge) -> None:
    body = "    return 0.5\n__rlrun_site = lambda i, v: None\n__rlrun_plain = lambda v: v\n"
    not_accepted(judge_harness(judge, "HumanEval/2", body))


# -- forging the evidence ------------------------------------------------------------------------

FORGE = """
import json, os, struct
def frame(obj):
    data = json.dumps(obj).encode()
    os.write(3, struct.pack(">I", len(data)) + data)
"""


def test_ForgedCompletionFrame(judge) -> None:
    body = "    return []\n" + FORGE + "frame({'k': 'done', 'n': '0' * 32})\nos._exit(0)\n"
    not_accepted(judge_harness(judge, "HumanEval/0", body))


def test_ForgedCompletionWithStolenNonce(judge) -> None:
    body = ("    return []\n" + FORGE
            + "frame({'k': 'done', 'n': os.read(4, 64).decode()})\nos._exit(0)\n")
    not_accepted(judge_harness(judge, "HumanEval/0", body))


def test_ForgedSiteReports(judge) -> None:
    body = ("    return []\n" + FORGE + "for i in range(50):\n"
            "    frame({'k': 'site', 'i': i, 'v': True})\n"
            "frame({'k': 'done', 'n': os.read(4, 64).decode()})\nos._exit(0)\n")
    not_accepted(judge_harness(judge, "HumanEval/0", body))


def test_ForgedCallResult(judge) -> None:
    code = FORGE + "frame({'k': 'ret', 'v': 'guess'})\nos._exit(0)\ndef f(x):\n    return 0\n"
    (res,) = judge.judge([Submission("s", code, "python",
                                     Cases(fn_name="f", calls=[CallTest([1], 12345)]))])
    not_accepted(res)


@pytest.mark.parametrize("depth", [988, 5000])
@pytest.mark.parametrize("kind", ["stdio", "call", "harness"])
def test_DeeplyNestedResultFrame(judge, kind: str, depth: int) -> None:
    # A wrong program that turns its verdict into a sandbox error goes unscored instead of
    # failing: a result frame nested past the executor's recursion limit (5,000), or one the
    # executor can read but the judge process cannot, inside the reply that carries it (988).
    code = ("import os\n"
            f"body = b'[' * {depth} + b']' * {depth}\n"
            "os.write(3, len(body).to_bytes(4, 'big') + body)\n")
    if kind == "stdio":
        (res,) = judge.judge([stdio_sub(code + "print(0)\n", [("1\n", "2\n")])])
    elif kind == "harness":  # written to the harness process, whose reports the judge reads
        res = judge_harness(judge, "HumanEval/0", "    return []\n" + code.replace("(3,", "(5,"))
    else:
        (res,) = judge.judge([Submission("s", code + "def f(x):\n    return 0\n", "python",
                                         Cases(fn_name="f", calls=[CallTest([1], 2)]))])
    not_accepted(res)
    assert_still_works(judge)


def test_ReturnsAnIntPastFloatRange(judge) -> None:
    # Compared with a float expected value under a tolerance, 10**400 made math.isclose raise
    # OverflowError in the judge, which took the whole batch down with it.
    code = "def f(x):\n    return 10**400\n"
    (res,) = judge.judge([Submission("s", code, "python",
                                     Cases(fn_name="f", calls=[CallTest([1], 2.5)],
                                           float_tolerance=1e-6))])
    assert res.status == "wrong_answer", res
    assert_still_works(judge)


# -- reaching into the runner: HumanEval/38 computes each expected value in the harness -------
#
# decode_cyclic's check draws a random string, encodes it with the prompt's encode_cyclic and
# asserts candidate(encoded) == the string, so no expected value can be cut out of the harness.
# Each program below returns no real answer: it forges what the harness reports, reads the
# expected value where the harness keeps it, predicts the harness's random inputs or changes
# the harness's helper. All of them were accepted while the harness ran in the program's
# process; now the harness runs in a process that never runs program code.

MAIN_ENCODER = '''    return None
import __main__
_runner = getattr(__main__, "executor", __main__)
_real = _runner.encode_plain
def _forged(value, *args, **kwargs):
    if type(value) is tuple and len(value) == 2:
        return {"t": ["same", "same"]}
    return _real(value, *args, **kwargs)
_runner.encode_plain = _forged
'''

FRAME_CELLS = '''    import sys
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()):
            if callable(v) and getattr(v, "__name__", "") == "site" and v.__closure__:
                for cell in v.__closure__:
                    real = cell.cell_contents
                    if callable(real) and getattr(real, "__name__", "") in ("emit", "send"):
                        def forged(obj, real=real):
                            if obj.get("k") == "site":
                                obj = {"k": "site", "i": obj["i"], "v": {"t": ["x", "x"]}}
                            return real(obj)
                        cell.cell_contents = forged
        f = f.f_back
    return None
'''

FRAME_READS_EXPECTED = '''    import sys
    f = sys._getframe(1)
    while f is not None:
        if "str" in f.f_locals and f.f_code.co_name == "check":
            return f.f_locals["str"]
        f = f.f_back
    return None
'''

PIPE_FORGERY = '''    return None
import json, os, struct
def _frame(obj):
    data = json.dumps(obj).encode()
    os.write(3, struct.pack(">I", len(data)) + data)
import select
_frame({"k": "site", "i": 0, "v": {"t": ["x", "x"]}})
_nonce = os.read(4, 64).decode() if select.select([4], [], [], 0.5)[0] else ""
_frame({"k": "done", "n": _nonce})
os._exit(0)
'''

CTYPES_FORGERY = '''    return None
import ctypes, json, os, struct, time
_libc = ctypes.CDLL(None)
def _frame(obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    _libc.write(3, data, len(data))
_frame({"k": "site", "i": 0, "v": {"t": ["x", "x"]}})
_buf = ctypes.create_string_buffer(64)
os.set_blocking(4, False)
time.sleep(0.2)
_n = _libc.read(4, _buf, 64)
_frame({"k": "done", "n": _buf.raw[:max(_n, 0)].decode()})
_libc._exit(0)
'''

CTYPES_MEMORY = '''    import ctypes, sys
    f = sys._getframe(1)
    while f is not None:
        target = f.f_locals.get("str")
        if f.f_code.co_name == "check" and type(target) is type(s) and len(target) == len(s):
            data = s.encode()
            offset = sys.getsizeof("") - 1
            ctypes.memmove(id(target) + offset, data, len(data))
            return s
        f = f.f_back
    return None
'''

PREDICTS_RANDOM = '''    return _ANSWERS.get(s)
import random as _random
import string as _string
_rng = _random.Random()
_rng.setstate(_random.getstate())
_ANSWERS = {}
for _ in range(100):
    _plain = "".join(_rng.choice(_string.ascii_lowercase) for i in range(_rng.randint(10, 20)))
    _ANSWERS[encode_cyclic(_plain)] = _plain
'''

REDEFINES_HELPER = '''    return s
def encode_cyclic(s):
    return s
'''


# Attacks that also pass the usual "prompt + completion + test, exit status 0" harness (the
# others go after our own runner, which that harness does not have).
NAIVE = {"FRAME_READS_EXPECTED", "CTYPES_MEMORY", "PREDICTS_RANDOM", "REDEFINES_HELPER"}


@pytest.mark.parametrize("attack", [
    "MAIN_ENCODER", "FRAME_CELLS", "FRAME_READS_EXPECTED", "PIPE_FORGERY", "CTYPES_FORGERY",
    "CTYPES_MEMORY", "PREDICTS_RANDOM", "REDEFINES_HELPER",
])
def test_ReachesIntoTheRunnerOnAComputedExpectedValue(judge, attack: str) -> None:
    body = globals()[attack]
    if attack in NAIVE:
        assert passes_naive_harness("HumanEval/38", body)
    not_accepted(judge_harness(judge, "HumanEval/38", body))
    assert_still_works(judge)


def test_ReadsTheHarnessProcessMemory(judge) -> None:
    # The program's process runs beside the harness's under the same uid (docker: the same
    # user for everything): it must not be able to open that process's memory or descriptors.
    code = """
import os
def f():
    opened = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for what in ('mem', 'fd', 'environ'):
            try:
                if what == 'fd':
                    os.listdir(f'/proc/{pid}/fd')
                else:
                    open(f'/proc/{pid}/{what}', 'rb').close()
                opened.append(f'{pid}/{what}')
            except OSError:
                pass
    return opened
"""
    sub = Submission("s", code, "python",
                     Cases(harness="def check(candidate):\n    assert candidate() == []\n",
                           entry_point="f"))
    (res,) = judge.judge([sub])
    assert res.status == "accepted", res


# -- reading expected outputs ------------------------------------------------------------------

def test_ReadsExpectedOutputFromMemory(judge) -> None:
    code = """
import gc, sys
found = set()
def scan(obj):
    if isinstance(obj, str) and 'SECRET' in obj:
        found.add(obj)
    elif isinstance(obj, dict):
        for v in list(obj.values()) + list(obj.keys()):
            if isinstance(v, str) and 'SECRET' in v:
                found.add(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            if isinstance(v, str) and 'SECRET' in v:
                found.add(v)
for o in gc.get_objects():
    scan(o)
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()) + list(f.f_globals.values()):
        scan(v)
    f = f.f_back
print(max(found, key=len, default='nothing'))
"""
    (res,) = judge.judge([stdio_sub(code, [("x\n", "SECRET_EXPECTED_4242\n")])])
    not_accepted(res)
    assert "SECRET_EXPECTED" not in res.tests[0].stdout_head


def test_ReadsHarnessLiteralFromMemory(judge) -> None:
    # HumanEval/53 checks `candidate(0, 1) == 1`, ...: its literals never enter the child.
    code = ("    import gc\n    return 424242\n")
    problem, _ = humaneval("HumanEval/53")
    from rlrun.sandbox.harness import prepare_harness

    prepared = prepare_harness(problem.tests.harness, "add")
    assert "assert" not in prepared.source and "== 1" not in prepared.source
    not_accepted(judge_harness(judge, "HumanEval/53", code))


def test_ReadsExpectedOutputFromDisk(judge, tmp_path: Path) -> None:
    secret = tmp_path / "expected_outputs.txt"
    secret.write_text("SECRET_ON_DISK\n")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    code = f"print(open({str(secret)!r}).read(), end='')"
    (res,) = judge.judge([stdio_sub(code, [("", "SECRET_ON_DISK\n")])])
    not_accepted(res)
    if judge.backend != "docker":  # a container shows its image's root, never the host's
        code = "import os\nprint(sorted(os.listdir('/')))"
        (res,) = judge.judge([stdio_sub(code, [("", "")])])
        listing = res.tests[0].stdout_head
        assert "work" not in listing and "home" not in listing and "tmp" not in listing, listing


# -- resource exhaustion ---------------------------------------------------------------------------

def test_ForkBomb(judge) -> None:
    code = ("import os\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\n")
    (res,) = judge.judge([stdio_sub(code, [("", "")], time_limit_s=1.0)])
    not_accepted(res)
    assert res.status == "time_limit", res
    assert_still_works(judge)


@pytest.mark.parametrize("code", [
    "x = bytearray(10 ** 10)",
    "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",
    "s = 'x' * (10 ** 10)",
])
def test_MemoryBomb(judge, code: str) -> None:
    (res,) = judge.judge([stdio_sub(code, [("", "")], memory_limit_mb=128)])
    assert res.status == "memory_limit", res
    assert_still_works(judge)


def test_HandlesTimeout(judge) -> None:
    (res,) = judge.judge([stdio_sub("while True:\n    pass", [("", "")], time_limit_s=0.5)])
    assert res.status == "time_limit", res


def test_SleepsPastWallClock(judge) -> None:
    # A judge that only limited CPU time would wait out the hour: the suite's timeout ends it.
    (res,) = judge.judge([stdio_sub("import time\ntime.sleep(3600)", [("", "")], time_limit_s=0.5)])
    assert res.status == "time_limit", res


def test_InfiniteOutput(judge) -> None:
    (res,) = judge.judge([stdio_sub("while True:\n    print('y' * 1000)", [("", "")])])
    assert res.status == "output_limit", res
    assert_still_works(judge)


def test_LongLineToStdout(judge) -> None:
    (res,) = judge.judge([stdio_sub("print('a' * (10 ** 8))", [("", "a")], memory_limit_mb=512)])
    assert res.status == "output_limit", res


def test_HugeInput(judge) -> None:
    data = "1 " * 5_000_000 + "\n"
    code = "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))"
    (res,) = judge.judge([stdio_sub(code, [(data, "5000000\n")], time_limit_s=5.0)])
    assert res.status == "accepted", res


def test_HugeFile(judge) -> None:
    code = ("with open('big', 'wb') as f:\n    for _ in range(1000):\n"
            "        f.write(b'0' * 10**6)\nprint('wrote')")
    (res,) = judge.judge([stdio_sub(code, [("", "wrote\n")], time_limit_s=5.0)])
    not_accepted(res)
    assert_still_works(judge)


# -- escaping the test --------------------------------------------------------------------------

def _uids_alive(uids: set[int]) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if uid in uids:
            found.append(pid)
    return found


def test_BackgroundProcessOutlivesTest(judge) -> None:
    code = ("import os, time\n"
            "for _ in range(3):\n"
            "    if os.fork() == 0:\n"
            "        os.closerange(0, 3)\n"
            "        time.sleep(60)\n"
            "        os._exit(0)\n"
            "print('parent done')\n")
    (res,) = judge.judge([stdio_sub(code, [("", "parent done\n")])])
    assert res.status == "accepted", res
    uids = {info["uid"] for info in judge.slot_info if info.get("uid") is not None}
    # The executor kills and reaps every leftover before it reports the verdict.
    assert _uids_alive(uids) == []


def test_KillsTheParent(judge) -> None:
    before = judge.isolation
    code = (f"import os, signal\n"
            f"for pid in (os.getppid(), 1, {os.getpid()}):\n"
            f"    try:\n        os.kill(pid, signal.SIGKILL)\n"
            f"    except OSError as e:\n        print(type(e).__name__)\n"
            f"os.kill(-1, signal.SIGKILL)\nprint('killed them')\n")
    (res,) = judge.judge([stdio_sub(code, [("", "killed them\n")])])
    not_accepted(res)
    assert_still_works(judge)
    assert judge.isolation == before


def test_SignalsAndPeeksAtTheExecutor(judge) -> None:
    # Under docker the test and the executor share a uid: PID 1 must still be untouchable.
    code = ("import os, signal\n"
            "for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP,\n"
            "            signal.SIGSTOP, signal.SIGKILL):\n"
            "    for pid in (1, os.getppid()):\n"
            "        try:\n            os.kill(pid, sig)\n        except OSError:\n"
            "            pass\n"
            "try:\n    open('/proc/1/mem', 'rb').read(1)\n    print('read pid 1')\n"
            "except OSError:\n    pass\n"
            "print('still here')\n")
    (res,) = judge.judge([stdio_sub(code, [("", "read pid 1\nstill here\n")])])
    not_accepted(res)
    assert "still here" in res.tests[0].stdout_head
    assert_still_works(judge)


def test_NetworkAccessToLoopbackListener(judge) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(3)

    def serve() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    t = threading.Thread(target=serve)
    t.start()
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "print('connected')\n")
    try:
        (res,) = judge.judge([stdio_sub(code, [("", "connected\n")])])
    finally:
        t.join()
        server.close()
    not_accepted(res)
    assert accepted == []


def test_WritesOutsideWorkDir(judge, tmp_path: Path) -> None:
    target_dir = tmp_path / "open"
    target_dir.mkdir()
    target_dir.chmod(0o777)
    tmp_path.chmod(0o755)
    targets = [target_dir / "pwned", Path("/tmp/rlrun_pwned"), Path("/pwned")]
    code = ("import sys\n"
            f"for p in {[str(p) for p in targets]!r}:\n"
            "    try:\n        open(p, 'w').write('x')\n        print('wrote', p)\n"
            "    except OSError as e:\n        print(type(e).__name__)\n")
    (res,) = judge.judge([stdio_sub(code, [("", "\n".join(f"wrote {p}" for p in targets))])])
    not_accepted(res)
    assert not any(p.exists() for p in targets)
    assert "wrote" not in res.tests[0].stdout_head


def test_FilesDoNotLeakBetweenCases(judge) -> None:
    code = ("import os\nprint(sorted(os.listdir('.')))\nopen('note', 'w').write('x')\n")
    (res,) = judge.judge([stdio_sub(code, [("", "[]\n")] * 3)])
    assert res.status == "accepted", res


def test_ReadsAnotherSubmissionFromMemory() -> None:
    # A GRPO group's samples share slots: a later program must not find an earlier one's code
    # or output in the zygote it was forked from.
    from tests.sandbox.conftest import can_isolate

    if can_isolate():
        pytest.skip(can_isolate())
    from rlrun.config import SandboxConfig
    from rlrun.sandbox import Judge

    sibling = "# SIBLING_ANSWER_IN_SOURCE\nprint('SIBLING' + '_ANSWER_' + str(6 * 7))\n"
    thief = """
import gc, sys
needle = 'SIBLING' + '_ANSWER'
hits = set()
def look(v):
    if isinstance(v, str) and needle in v and v != needle:
        hits.add(v)
for o in gc.get_objects():
    if isinstance(o, dict):
        for v in list(o.values()):
            look(v)
    elif isinstance(o, (list, tuple)):
        for v in o:
            look(v)
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()):
        look(v)
        if isinstance(v, dict):
            for w in v.values():
                look(w)
    f = f.f_back
print(sorted(hits)[:1])
"""
    with Judge("process", 1, SandboxConfig()) as j:
        j.judge([stdio_sub(sibling, [("", "SIBLING_ANSWER_42\n")])])
        (res,) = j.judge([stdio_sub(thief, [("", "[]\n")])])
    assert res.status == "accepted", res.tests[0].stdout_head
