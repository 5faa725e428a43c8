"""Locate the real vLLM source for tests/engines/test_vllm_api.py, without installing or
importing it: the .py files are read straight out of the wheel of each release in VERSIONS.

A release's wheel is looked for in $RLRUN_VLLM_WHEEL_DIR, then in ~/.cache/rlrun/vllm/; if
neither holds one, `pip download vllm==<version> --no-deps` fetches it (240-340 MB, once) into
the latter. Nothing is unpacked and no vLLM source is copied into the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

# 0.33.0: the release rlrun's `vllm` extra pins (0.34.0 cannot be installed from PyPI: it needs
# flashinfer-python==0.7.3, which PyPI lacks); 0.34.0: the release the stand-in mirrors.
VERSIONS = ("0.33.0", "0.34.0")
CACHE_DIR = Path.home() / ".cache" / "rlrun" / "vllm"
WHEEL_DIR_ENV = "RLRUN_VLLM_WHEEL_DIR"
# A pure-Python read needs only the .py files, which are the same in every platform's wheel.
_PLATFORM = "manylinux_2_28_x86_64"


class VllmSourceUnavailable(RuntimeError):
    """The wheel is neither on disk nor downloadable; the message says what was tried."""


def _find(directory: Path, version: str) -> Path | None:
    wheels = sorted(directory.glob(f"vllm-{version}-*.whl")) if directory.is_dir() else []
    return wheels[0] if wheels else None


def _download(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps",
        "--only-binary=:all:", "--platform", _PLATFORM, "--python-version", "3.11",
        "--disable-pip-version-check", "-q", "-d", str(directory),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise VllmSourceUnavailable(f"`{' '.join(command)}` failed: {err}") from err
    wheel = _find(directory, version)
    if done.returncode != 0 or wheel is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise VllmSourceUnavailable(
            f"vLLM {version} wheel not found in ${WHEEL_DIR_ENV} or {directory}, and "
            f"`pip download` failed (no network?): {' / '.join(tail)}"
        )
    return wheel


def find_wheel(version: str) -> Path:
    """The vLLM `version` wheel, downloading it into the cache if it is nowhere on disk."""
    for directory in (os.environ.get(WHEEL_DIR_ENV), CACHE_DIR):
        if directory and (wheel := _find(Path(directory).expanduser(), version)):
            return wheel
    return _download(CACHE_DIR, version)


class WheelSource:
    """Read-only access to the vLLM package's Python files inside one release's wheel."""

    def __init__(self, wheel: Path, version: str) -> None:
        self.wheel = wheel
        self.version = version
        self._zip = zipfile.ZipFile(wheel)
        self._names = set(self._zip.namelist())
        self._text: dict[str, str] = {}
        metadata_path = f"vllm-{version}.dist-info/METADATA"
        metadata = self._zip.read(metadata_path).decode() if metadata_path in self._names else ""
        if f"\nVersion: {version}\n" not in metadata:
            raise VllmSourceUnavailable(f"{wheel} is not vLLM {version}")

    def module_path(self, module: str) -> str | None:
        """The wheel path of a dotted module (`vllm.a.b` -> vllm/a/b.py or .../__init__.py)."""
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            if path in self._names:
                return path
        return None

    def read(self, path: str) -> str:
        if path not in self._text:
            self._text[path] = self._zip.read(path).decode("utf-8")
        return self._text[path]

    def py_files(self) -> list[str]:
        return sorted(n for n in self._names if n.startswith("vllm/") and n.endswith(".py"))


def vllm_source(version: str) -> WheelSource:
    """The real vLLM `version` source; raises VllmSourceUnavailable with the reason."""
    return WheelSource(find_wheel(version), version)
