"""Shared fixtures: one process-backend Judge per module (it must survive every attack)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from rlrun.config import SandboxConfig
from rlrun.records import StdioTest, Submission
from rlrun.records import Tests as Cases


def can_isolate(backend: str = "process") -> str:
    """Why `backend` cannot isolate tests here ("" when it can)."""
    if backend == "docker":
        image = SandboxConfig().docker_image
        if not shutil.which("docker"):
            return "the docker backend needs the docker CLI"
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            return (f"the docker backend needs a running dockerd and the image {image} "
                    "(infra/docker/start_dockerd.sh, infra/docker/build_sandbox_image.sh)")
        return ""
    if os.geteuid() != 0:
        return f"the {backend} backend needs root for namespaces and per-slot uids"
    if backend == "process" and not shutil.which("unshare"):
        return "the process backend needs util-linux `unshare`"
    if backend == "bwrap" and not shutil.which("bwrap"):
        return "the bwrap backend needs bubblewrap (apt-get install bubblewrap)"
    return ""


@pytest.fixture(scope="module", params=["process", "bwrap", "docker"])
def judge(request):
    """A 2-slot Judge of each backend, shared by a module's tests."""
    reason = can_isolate(request.param)
    if reason:
        pytest.skip(reason)
    from rlrun.sandbox import Judge

    j = Judge(request.param, workers=2,
              cfg=SandboxConfig(time_limit_s=1.0, memory_limit_mb=256))
    yield j
    j.close()


def stdio_sub(code: str, cases: list[tuple[str, str]], language: str = "python",
              time_limit_s: float = 1.0, memory_limit_mb: int = 256, **tests_kw) -> Submission:
    return Submission("s", code, language, Cases(stdio=[StdioTest(i, o) for i, o in cases],
                                                 **tests_kw),
                      time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb)


def assert_still_works(judge) -> None:
    """The judge answers a plain submission correctly after whatever came before."""
    (res,) = judge.judge([stdio_sub("print(int(input()) * 2)", [("21\n", "42\n")])])
    assert res.status == "accepted", res
