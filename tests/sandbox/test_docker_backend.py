"""The docker backend against hostile programs: each attack is refused and the judge carries on.

Needs a docker daemon and the rlrun-sandbox image (infra/docker/start_dockerd.sh and
infra/docker/build_sandbox_image.sh); skipped with the reason when either is missing.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from rlrun.config import SandboxConfig
from rlrun.records import CallTest, StdioTest, Submission
from rlrun.records import Tests as Cases

IMAGE = SandboxConfig().docker_image
pytestmark = pytest.mark.system


def _docker_unavailable() -> str | None:
    if shutil.which("docker") is None:
        return "docker CLI not installed"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "`docker info` fails: no docker daemon (run infra/docker/start_dockerd.sh)"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        return f"image {IMAGE} missing (run infra/docker/build_sandbox_image.sh)"
    return None


_why = _docker_unavailable()
if _why:
    pytest.skip(_why, allow_module_level=True)

from rlrun.sandbox import Judge  # noqa: E402

SECRET = "s3cr3t-7f41c2"
STDIO = Cases(stdio=[StdioTest("1 2\n", "3\n")])
SECRET_TEST = Cases(stdio=[StdioTest("go\n", SECRET + "\n")])
HARNESS = Cases(harness="def check(candidate):\n    assert candidate(1, 2) == 3\n",
                entry_point="add")
CALLS = Cases(fn_name="add", calls=[CallTest([1, 2], 3)])
GOOD = "a, b = map(int, input().split())\nprint(a + b)\n"
HOST_MARKER = "/tmp/rlrun-docker-escape-marker"


def _listener() -> socket.socket:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    return srv


ATTACKS = {
    # The harness must see every assert run; exiting first is not a pass.
    "early-exit-sys-exit": ("def add(a, b):\n    return 0\nimport sys\nsys.exit(0)\n", HARNESS),
    "early-exit-os-exit": ("def add(a, b):\n    return 0\nimport os\nos._exit(0)\n", HARNESS),
    "early-exit-raise": ("def add(a, b):\n    return 0\nraise SystemExit\n", HARNESS),
    "always-equal-harness": (
        "class Eq:\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return Eq()\n", HARNESS),
    "always-equal-call": (
        "class Eq(int):\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return Eq(0)\n", CALLS),
    "builtins-patching": (
        "import builtins\nbuiltins.AssertionError = type('Quiet', (BaseException,), {})\n"
        "builtins.isinstance = lambda *a: True\nbuiltins.check = lambda c: None\n"
        "def add(a, b):\n    return 0\n", HARNESS),
    "expected-from-memory": (textwrap.dedent("""
        import gc, sys
        found = [o for o in gc.get_objects() if isinstance(o, str) and o.startswith("s3cr3t")]
        f = sys._getframe()
        while f is not None:
            found += [v for v in f.f_locals.values() if isinstance(v, str) and "s3cr3t" in v]
            f = f.f_back
        print(found[0] if found else "nothing")
        """), SECRET_TEST),
    "expected-from-disk": (textwrap.dedent("""
        import os
        paths = ["/proc/1/cmdline", "/proc/1/environ", "/proc/self/environ"]
        for top in ("/work", "/tmp", "/opt", "/home", "/root", "/var", "/run", "/dev/shm", ".."):
            for d, _, files in os.walk(top):
                paths += [os.path.join(d, name) for name in files]
        hit = None
        for path in paths:
            try:
                with open(path, errors="ignore") as f:
                    text = f.read(1 << 16)
            except OSError:
                continue
            if "s3cr3t-" in text:
                hit = text[text.index("s3cr3t-"):][:13]
        print(hit or "nothing")
        """), SECRET_TEST),
    "fork-bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n"
                  "    except OSError:\n        pass\n", STDIO),
    "memory-bomb": ("x = []\nwhile True:\n    x.append(bytearray(1 << 24))\n", STDIO),
    "infinite-loop": ("while True:\n    pass\n", STDIO),
    "infinite-output": ("while True:\n    print('x' * 65536)\n", STDIO),
    "huge-file": ("with open('big', 'wb') as f:\n    for _ in range(1 << 14):\n"
                  "        f.write(b'0' * (1 << 20))\nprint(3)\n", STDIO),
    "background-process-answers-late": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(0.3)\n    print(3, flush=True)\n"
        "    time.sleep(30)\n", STDIO),
    "kill-the-parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                        "os.kill(1, signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\nprint(3)\n",
                        STDIO),
    "network": ("import socket\ns = socket.create_connection(('127.0.0.1', PORT), timeout=1)\n"
                "print(3)\n", STDIO),
    "write-outside-workdir": (textwrap.dedent(f"""
        import os
        wrote = []
        for path in ("/etc/pwned", "/opt/rlrun/pwned", "/usr/pwned", "/pwned", "/home/pwned",
                     "{HOST_MARKER}"):
            try:
                with open(path, "w") as f:
                    f.write("x")
                wrote.append(path)
            except OSError:
                pass
        if not wrote:
            raise SystemExit(1)
        print(3)
        """), STDIO),
}

# Places outside a test's own directory that stay inside the container, where a file would
# outlive the test and be seen by the next ones (other submissions' tests, compiled binaries).
SHARED_SPOTS = ("..", "/work", "/work/.bin", "/dev/shm", "/tmp")


@pytest.fixture(scope="module")
def judge():
    cfg = SandboxConfig(backend="docker", time_limit_s=2.0, memory_limit_mb=256)
    with Judge(backend="docker", workers=2, cfg=cfg) as j:
        yield j


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_not_accepted_and_the_judge_keeps_working(judge, name):
    code, tests = ATTACKS[name]
    srv = _listener()
    code = code.replace("PORT", str(srv.getsockname()[1]))
    try:
        attack = Submission(id=name, code=code, language="python", tests=tests,
                            time_limit_s=2.0, memory_limit_mb=256)
        good = Submission(id="good", code=GOOD, language="python", tests=STDIO)
        result, after = judge.judge([attack, good])
    finally:
        srv.close()
    assert result.status not in ("accepted", "sandbox_error"), (result.status, result.tests)
    assert after.status == "accepted", after
    assert not os.path.exists(HOST_MARKER)


def test_cpp_solution_and_compile_error(judge):
    ok = Submission(id="cpp", language="cpp", tests=STDIO, code=(
        "#include <iostream>\nint main() { int a, b; std::cin >> a >> b; "
        "std::cout << a + b << std::endl; }\n"))
    broken = Submission(id="bad", language="cpp", tests=STDIO, code="int main() { return x; }")
    res_ok, res_bad = judge.judge([ok, broken])
    assert res_ok.status == "accepted"
    assert res_bad.status == "compile_error"


def _started_by(parent_pid: int) -> set[str]:
    """Names of the containers whose `docker run` client is a child of `parent_pid` (other
    people's containers of the same image on this host are left out)."""
    names = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            argv = open(f"/proc/{pid}/cmdline").read().split("\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent_pid and os.path.basename(argv[0]) == "docker" and "--name" in argv:
            names.add(argv[argv.index("--name") + 1])
    return names


def _running(names: set[str]) -> set[str]:
    out = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True,
                         text=True, check=True).stdout
    return names & set(out.split())


def _wait_until_stopped(names: set[str]) -> None:
    """Block until each container has exited (docker wait); one already removed counts."""
    for name in names:
        subprocess.run(["docker", "wait", name], capture_output=True, check=False)


def test_containers_are_locked_down_and_removed_on_close():
    cfg = SandboxConfig(backend="docker")
    others = _started_by(os.getpid())  # the module's shared judge, if it is running
    with Judge(backend="docker", workers=1, cfg=cfg) as j:
        assert j.judge([Submission("g", GOOD, "python", STDIO)])[0].status == "accepted"
        started = _started_by(os.getpid()) - others
        assert len(_running(started)) == 1
        info = json.loads(subprocess.run(["docker", "inspect", *started], capture_output=True,
                                         text=True, check=True).stdout)[0]
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["Memory"] > 0 and host["PidsLimit"] > 0
    assert info["Config"]["User"] not in ("", "0", "root", "0:0")
    # close() returns once every container has stopped.
    assert not _running(started)


def test_a_judge_killed_outright_leaves_no_container_behind():
    script = ("import time\nfrom rlrun.config import SandboxConfig\nfrom rlrun.sandbox import "
              "Judge\nj = Judge(backend='docker', workers=1, cfg=SandboxConfig(backend='docker'))"
              "\nprint('ready', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        names = _started_by(proc.pid)
        assert len(names) == 1, f"`docker run` clients of the judge's process: {names}"
        # `docker ps` can lag the container's start on a loaded daemon.
        deadline = time.monotonic() + 30
        while not (started := _running(names)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert started == names, subprocess.run(["docker", "ps", "-a"], capture_output=True,
                                                text=True).stdout
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # Nothing of the judge is left to stop it: the container must end by itself.
        _wait_until_stopped(started)
        assert not _running(started)
    finally:
        proc.kill()


def test_rlrun_judge_command_on_the_docker_backend(tmp_path):
    from rlrun.cli import main

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"id": "ok", "code": GOOD, "tests": [{"input": "1 2\n", "output": "3\n"}]},
             {"id": "bad", "code": "print(4)\n", "tests": [{"input": "1 2\n", "output": "3\n"}]}]
    src.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert main(["judge", str(src), "--out", str(out), "--backend", "docker"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in records] == [
        ("ok", "accepted"), ("bad", "wrong_answer")]
