"""The training image: one description of what goes into it, read the same way by both builds.

`infra/docker/training/Dockerfile` installs only through `infra/docker/training/install.sh`, and
`infra/docker/build_training_image.sh` (the build without a registry) carries out the
Dockerfile's own instructions; these tests check both in milliseconds.

Building the image and checking it (`build_training_image.sh` then `check_training_image.sh`:
the GPU dependency set, `pip check`, imports without a GPU, every recipe's `rlrun plan`, the
SageMaker entrypoint without a GPU, and the demo through it) takes about ten minutes, downloads
several GB and needs root and a Docker daemon, so it runs only when asked:

    RLRUN_IMAGE_CHECK=1 .venv/bin/python -m pytest tests/infra/test_training_image.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "infra" / "docker"
DOCKERFILE = DOCKER / "training" / "Dockerfile"
INSTALL = DOCKER / "training" / "install.sh"
BUILD = DOCKER / "build_training_image.sh"
CHECK = DOCKER / "check_training_image.sh"


def instructions(text: str) -> list[str]:
    """A Dockerfile's instructions, comments dropped and continuation lines joined."""
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(" ".join((buf + line).split()))
        buf = ""
    return out


def test_the_dockerfile_installs_only_through_install_sh():
    runs = [i for i in instructions(DOCKERFILE.read_text()) if i.startswith("RUN ")]
    steps = []
    for run in runs:
        match = re.fullmatch(r"RUN bash infra/docker/training/install\.sh((?: [a-z]+)+)", run)
        assert match, f"the Dockerfile installs outside install.sh: {run}"
        steps += match.group(1).split()
    # Dependencies before the code, so that a code change does not reinstall them.
    assert [s for s in steps if s != "clean"] == ["system", "deps", "rlrun"]
    known = set(re.findall(r"^\s+([a-z| ]+)\) \"step_\$step\"", INSTALL.read_text(), re.M)[0]
                .replace(" ", "").split("|"))
    assert set(steps) <= known


@pytest.mark.parametrize("script", [BUILD, CHECK, INSTALL], ids=lambda p: p.name)
def test_scripts_parse(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_the_offline_build_reads_the_dockerfiles_instructions():
    out = subprocess.run(["bash", str(BUILD), "--print"], capture_output=True, text=True,
                         check=True).stdout
    assert [" ".join(line.split()) for line in out.splitlines()] == instructions(
        DOCKERFILE.read_text())


def copy_layout(tmp_path: Path, dockerfile: str) -> Path:
    """The build script in a repository of its own, with `dockerfile` as the training one."""
    (tmp_path / "infra" / "docker" / "training").mkdir(parents=True)
    shutil.copy(BUILD, tmp_path / "infra" / "docker" / BUILD.name)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "infra" / "docker" / "training" / "Dockerfile").write_text(dockerfile)
    return tmp_path / "infra" / "docker" / BUILD.name


@pytest.mark.parametrize(("line", "says"), [
    ("USER 1000", "USER instruction is not one this script carries out"),
    ('ENV A="b c"', "one KEY=VALUE per ENV line"),
    ("COPY --chown=1 a b", "options are not supported"),
])
def test_the_offline_build_refuses_what_it_cannot_carry_out(tmp_path, line, says):
    script = copy_layout(tmp_path, f"FROM debian:bookworm-slim\n{line}\nCMD [\"x\"]\n")
    done = subprocess.run(["bash", str(script), "--print"], capture_output=True, text=True)
    assert done.returncode == 1
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_offline_build_makes_only_the_dockerfiles_base(tmp_path):
    script = copy_layout(tmp_path, "FROM python:3.11-slim-bookworm\n")
    done = subprocess.run(["bash", str(script), "--print"], capture_output=True, text=True)
    assert done.returncode == 1 and "only debian:bookworm-slim" in done.stderr


def _image_check_possible() -> str | None:
    if os.environ.get("RLRUN_IMAGE_CHECK") != "1":
        return "set RLRUN_IMAGE_CHECK=1 to build the training image and check it (~10 min)"
    if os.geteuid() != 0:
        return "building the image needs root (debootstrap, chroot)"
    if shutil.which("docker") is None:
        return "needs docker (infra/docker/start_dockerd.sh)"
    return None


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.timeout(3600)
@pytest.mark.skipif(_image_check_possible() is not None,
                    reason=_image_check_possible() or "")
def test_build_and_check_the_training_image():
    """Builds the image unless an up-to-date one exists, then runs every check in it."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=3500)
    lines = [line for line in done.stdout.splitlines() if line.startswith("check_training_image:")]
    assert done.returncode == 0, "\n".join(lines) or done.stderr[-3000:]
    assert not [line for line in lines if " FAIL " in line]
    assert "checks passed" in lines[-1]
