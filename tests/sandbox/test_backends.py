"""Launch commands of each backend (pure: nothing is started)."""

import pytest

from rlrun.config import SandboxConfig
from rlrun.sandbox import backends
from rlrun.sandbox.backends import SandboxUnavailable, docker_argv, make_launch


def test_docker_command_locks_the_container_down() -> None:
    cfg = SandboxConfig(docker_image="img:1", max_memory_limit_mb=1000, tmpfs_mb=64)
    argv = docker_argv(cfg, name="slot0")
    joined = " ".join(argv)
    for flag in ["run -i --rm", "--network none", "--read-only", "--cap-drop ALL",
                 "--security-opt no-new-privileges", "--user 65534:65534", "--memory 1256m",
                 "--pids-limit", "--name slot0", "size=64m"]:
        assert flag in joined, flag
    assert f"{backends.EXECUTOR_PATH}:{backends.CONTAINER_EXECUTOR}:ro" in argv
    assert argv[-5:] == ["img:1", "python3", "-I", "-S", backends.CONTAINER_EXECUTOR]


def test_process_backend_without_root_refuses_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(backends.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="needs root.*allow_unisolated"):
        make_launch("process", SandboxConfig())
    launch = make_launch("process", SandboxConfig(allow_unisolated=True))
    assert launch.isolation.startswith("UNISOLATED") and not launch.init["isolate_fs"]
    assert not launch.uid_from_pid


def test_process_backend_as_root_uses_namespaces(monkeypatch) -> None:
    monkeypatch.setattr(backends.os, "geteuid", lambda: 0)
    monkeypatch.setattr(backends.shutil, "which", lambda name: f"/usr/bin/{name}")
    launch = make_launch("process", SandboxConfig())
    assert launch.argv[:6] == ["/usr/bin/unshare", "--net", "--pid", "--mount", "--fork",
                               "--kill-child"]
    assert launch.init["isolate_fs"] and launch.uid_from_pid
    assert set(launch.env) == {"PATH", "LANG", "LD_BIND_NOW"}


def test_bwrap_backend_binds_read_only_and_unshares(monkeypatch) -> None:
    monkeypatch.setattr(backends.shutil, "which", lambda name: f"/usr/bin/{name}")
    argv = make_launch("bwrap", SandboxConfig()).argv
    for flag in ["--unshare-net", "--unshare-pid", "--die-with-parent", "--as-pid-1"]:
        assert flag in argv
    assert "--bind" not in argv


def test_unknown_backend_names_the_choices() -> None:
    with pytest.raises(SandboxUnavailable, match="process, bwrap, docker"):
        make_launch("firecracker", SandboxConfig())
