"""Locate the real vLLM 0.34.0 source for tests/engines/test_vllm_api.py, without installing or
importing it: the .py files are read straight out of the wheel.

The wheel is looked for in $RLRUN_VLLM_WHEEL_DIR, then in ~/.cache/rlrun/vllm/; if neither
holds one, `pip download vllm==0.34.0 --no-deps` fetches it (about 240 MB, once) into the
latter. Nothing is unpacked and no vLLM source is copied into the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

VERSION = "0.34.0"
WHEEL_GLOB = f"vllm-{VERSION}-*.whl"
CACHE_DIR = Path.home() / ".cache" / "rlrun" / "vllm"
WHEEL_DIR_ENV = "RLRUN_VLLM_WHEEL_DIR"
# A pure-Python read needs only the .py files, which are the same in every platform's wheel.
_PLATFORM = "manylinux_2_28_x86_64"


class VllmSourceUnavailable(RuntimeError):
    """The wheel is neither on disk nor downloadable; the message says what was tried."""


def _find(directory: Path) -> Path | None:
    wheels = sorted(directory.glob(WHEEL_GLOB)) if directory.is_dir() else []
    return wheels[0] if wheels else None


def _download(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", f"vllm=={VERSION}", "--no-deps",
        "--only-binary=:all:", "--platform", _PLATFORM, "--python-version", "3.11",
        "--disable-pip-version-check", "-q", "-d", str(directory),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise VllmSourceUnavailable(f"`{' '.join(command)}` failed: {err}") from err
    wheel = _find(directory)
    if done.returncode != 0 or wheel is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise VllmSourceUnavailable(
            f"vLLM {VERSION} wheel not found in ${WHEEL_DIR_ENV} or {directory}, and "
            f"`pip download` failed (no network?): {' / '.join(tail)}"
        )
    return wheel


def find_wheel() -> Path:
    """The vLLM 0.34.0 wheel, downloading it into the cache if it is nowhere on disk."""
    for directory in (os.environ.get(WHEEL_DIR_ENV), CACHE_DIR):
        if directory and (wheel := _find(Path(directory).expanduser())):
            return wheel
    return _download(CACHE_DIR)


class WheelSource:
    """Read-only access to the vLLM package's Python files inside the wheel."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self._zip = zipfile.ZipFile(wheel)
        self._names = set(self._zip.namelist())
        self._text: dict[str, str] = {}
        metadata = self._zip.read(f"vllm-{VERSION}.dist-info/METADATA").decode()
        if f"\nVersion: {VERSION}\n" not in metadata:
            raise VllmSourceUnavailable(f"{wheel} is not vLLM {VERSION}")

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


def vllm_source() -> WheelSource:
    """The real vLLM 0.34.0 source; raises VllmSourceUnavailable with the reason."""
    return WheelSource(find_wheel())
