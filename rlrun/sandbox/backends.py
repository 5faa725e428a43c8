"""How an executor slot is launched: the command line and the slot's init request per backend.

- `process` (default): as root, `unshare --net --pid --mount --fork --kill-child python3 -I -S
  -c BOOTSTRAP executor.py` (the executor from its cached bytecode, with `LD_BIND_NOW=1`; both
  make each test's fork cheaper). The executor is PID 1 of a fresh PID namespace with an
  unconnected network namespace; it builds a minimal read-only root with a private tmpfs
  inside its own mount namespace and runs each test as uid `uid_base + pid of the unshare
  process`, unique per slot.
  Without root it refuses with the reason, unless `sandbox.allow_unisolated` (rlimits and
  seccomp only, for trusted code on a laptop).
- `bwrap`: the same executor under bubblewrap (`--unshare-net --unshare-pid`, read-only binds
  of the system directories, tmpfs /work); as root the executor keeps the capabilities it needs
  to switch each test to the slot uid.
- `docker`: ONE long-lived container per slot, `docker run -i --rm --network none --read-only
  --tmpfs /work --memory --pids-limit --cap-drop ALL --security-opt no-new-privileges --user
  65534`, with executor.py mounted read-only at /opt/rlrun/executor.py; work goes over the
  container's stdin/stdout. The executor is PID 1 of the container.

The executor always starts with a minimal environment, so no credential in the judge's
environment (cloud keys, tokens) can reach a test.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from rlrun.config import CHOICES, SandboxConfig

EXECUTOR_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "executor.py")
CONTAINER_EXECUTOR = "/opt/rlrun/executor.py"
EXECUTOR_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
BACKENDS = CHOICES["sandbox.backend"]
# The process backend's executor binds every shared-library symbol when it starts, so its
# forked children do not each resolve (and copy the pages of) the lazily bound ones they call.
PROCESS_ENV = dict(EXECUTOR_ENV, LD_BIND_NOW="1")
# It also runs from its cached bytecode (__pycache__, written at the first import): compiling
# the script at each start leaves the compiler's garbage scattered through the heap, and every
# fork of the zygote copies the page tables of all of it.
BOOTSTRAP = ("import importlib.util, sys\n"
             "spec = importlib.util.spec_from_file_location('executor', sys.argv[1])\n"
             "executor = importlib.util.module_from_spec(spec)\n"
             "spec.loader.exec_module(executor)\n"
             "sys.exit(executor.main())\n")


class SandboxUnavailable(RuntimeError):
    """The chosen backend cannot isolate tests on this machine; the message says what to do."""


@dataclass
class Launch:
    """Everything needed to start one executor slot."""

    argv: list[str]
    init: dict[str, Any]
    # Set the slot uid to `uid_base + pid of the launched process` (unique while it lives).
    uid_from_pid: bool = False
    isolation: str = ""
    env: dict[str, str] = field(default_factory=lambda: dict(EXECUTOR_ENV))


def _base_init(cfg: SandboxConfig) -> dict[str, Any]:
    return {
        "op": "init",
        "seccomp": cfg.seccomp,
        "nproc": cfg.max_processes,
        "nofile": cfg.max_open_files,
        "fsize_mb": cfg.max_file_size_mb,
        "tmpfs_mb": cfg.tmpfs_mb,
        "output_limit_bytes": int(cfg.output_limit_mb * (1 << 20)),
    }


def _python(cfg: SandboxConfig) -> str:
    return cfg.python or sys.executable


def _executor_argv(cfg: SandboxConfig) -> list[str]:
    return [_python(cfg), "-I", "-S", "-c", BOOTSTRAP, EXECUTOR_PATH]


def process_launch(cfg: SandboxConfig) -> Launch:
    """The `process` backend: namespaces via unshare, per-slot uid, minimal read-only root."""
    unshare = shutil.which("unshare")
    if os.geteuid() == 0 and unshare:
        argv = [unshare, "--net", "--pid", "--mount", "--fork", "--kill-child",
                *_executor_argv(cfg)]
        init = dict(_base_init(cfg), isolate_fs=True)
        return Launch(argv, init, uid_from_pid=True, env=dict(PROCESS_ENV),
                      isolation="namespaces (net, pid, mount) + per-slot uid + rlimits + seccomp")
    reason = ("the process backend needs root (to create network/PID/mount namespaces and run "
              "each test under its own uid)" if os.geteuid() != 0
              else "the process backend needs `unshare` (util-linux) on PATH")
    if not cfg.allow_unisolated:
        raise SandboxUnavailable(
            f"{reason}. Run as root, use sandbox.backend=docker or bwrap, or set "
            "sandbox.allow_unisolated=true to run tests with rlimits and seccomp only "
            "(not safe against hostile code).")
    work = os.path.join("/tmp", f"rlrun-sandbox-{uuid.uuid4().hex[:12]}")
    os.makedirs(work, mode=0o700)
    init = dict(_base_init(cfg), isolate_fs=False, work_root=work)
    return Launch(_executor_argv(cfg), init, env=dict(PROCESS_ENV),
                  isolation=f"UNISOLATED ({reason}): rlimits + seccomp only")


def bwrap_launch(cfg: SandboxConfig) -> Launch:
    """The `bwrap` backend: bubblewrap namespaces and read-only binds of the system dirs."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable("sandbox.backend=bwrap needs bubblewrap on PATH "
                                 "(Debian/Ubuntu: apt-get install bubblewrap)")
    python = os.path.realpath(_python(cfg))
    argv = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--as-pid-1"]
    if os.geteuid() == 0:
        argv += ["--cap-add", "ALL"]
    for top in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    # Only the interpreter's prefix (its standard library) is added: the repository, a
    # virtualenv and the data directories stay invisible.
    for extra in sorted({os.path.realpath(sys.base_prefix), os.path.dirname(python)}):
        if not extra.startswith(("/usr/", "/etc/")):
            # Parents bwrap creates are 0700; the test uid must be able to traverse them.
            parents = [p for p in _ancestors(extra) if p not in ("/", "/usr", "/etc")]
            for parent in parents:
                argv += ["--perms", "0755", "--dir", parent]
            argv += ["--ro-bind", extra, extra]
    argv += ["--ro-bind", EXECUTOR_PATH, CONTAINER_EXECUTOR,
             "--dev", "/dev", "--proc", "/proc", "--size", str(cfg.tmpfs_mb << 20),
             "--tmpfs", "/sandbox", "--chdir", "/", python, "-I", "-S", CONTAINER_EXECUTOR]
    init = dict(_base_init(cfg), isolate_fs=False, work_root="/sandbox",
                fs_label="bubblewrap root: read-only system dirs, tmpfs /sandbox")
    as_root = os.geteuid() == 0
    return Launch(argv, init, uid_from_pid=as_root,
                  isolation="bubblewrap (net, pid, ipc, uts; read-only binds)"
                  + (" + per-slot uid" if as_root else "") + " + rlimits + seccomp")


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


def docker_argv(cfg: SandboxConfig, name: str | None = None) -> list[str]:
    """`docker run` for one long-lived executor container (one per slot)."""
    memory_mb = cfg.max_memory_limit_mb + 256
    pids = max(cfg.max_processes, 32) * 2
    return [
        "docker", "run", "-i", "--rm", "--name", name or f"rlrun-sandbox-{uuid.uuid4().hex[:12]}",
        "--network", "none", "--read-only",
        "--tmpfs", f"/work:rw,exec,nosuid,nodev,size={cfg.tmpfs_mb}m,mode=1777",
        "--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m",
        "--pids-limit", str(pids), "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--user", "65534:65534",
        "--ulimit", "core=0", "--log-driver", "none",
        "-v", f"{EXECUTOR_PATH}:{CONTAINER_EXECUTOR}:ro",
        cfg.docker_image, "python3", "-I", "-S", CONTAINER_EXECUTOR,
    ]


def docker_launch(cfg: SandboxConfig) -> Launch:
    """The `docker` backend: the executor as PID 1 of a locked-down container."""
    if not shutil.which("docker"):
        raise SandboxUnavailable("sandbox.backend=docker needs the docker CLI on PATH and a "
                                 f"running dockerd with the image {cfg.docker_image!r}")
    # All processes in the container share uid 65534, so NPROC would count other containers'
    # processes too: the container's --pids-limit bounds processes instead.
    init = dict(_base_init(cfg), isolate_fs=False, work_root="/work", nproc=0,
                fs_label="container: read-only image root, tmpfs /work")
    return Launch(docker_argv(cfg), init,
                  isolation="docker (--network none, read-only root, cap-drop ALL, uid 65534) "
                  "+ rlimits + seccomp")


def make_launch(backend: str, cfg: SandboxConfig) -> Launch:
    """The launch of one slot of `backend`; raises SandboxUnavailable with what to change."""
    if backend == "process":
        return process_launch(cfg)
    if backend == "bwrap":
        return bwrap_launch(cfg)
    if backend == "docker":
        return docker_launch(cfg)
    raise SandboxUnavailable(f"sandbox.backend={backend!r} is not one of {', '.join(BACKENDS)}")
