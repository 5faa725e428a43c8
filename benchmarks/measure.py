"""What several benchmarks measure the same way: this process's memory and this machine's CPU."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path


def rss() -> int:
    """Bytes this process has resident now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """The most bytes this process has had resident at once, over its life."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    """CPU, cores and the torch and transformers versions, for a benchmark's section."""
    import torch
    import transformers

    return (f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, transformers "
            f"{transformers.__version__}")
