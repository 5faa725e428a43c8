"""Progress display: a tqdm bar on an interactive terminal, nothing extra otherwise.

Logs that are scraped (a training job's log, `ray job logs`) are not terminals; there the
per-step console lines of `MetricsLogger` are the progress, so `auto` shows a bar only when
stderr is a tty.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

from rlrun.config import CHOICES, ConfigError

MODES = CHOICES["metrics.progress"]
T = TypeVar("T")


def bar_enabled(mode: str) -> bool:
    """Whether `metrics.progress=<mode>` shows a bar in this process."""
    if mode not in MODES:
        raise ConfigError(f"config key metrics.progress={mode!r} is not allowed: choose one of "
                          + ", ".join(MODES))
    return mode == "bar" or (mode == "auto" and sys.stderr.isatty())


def make_bar(mode: str, total: int | None, desc: str) -> tqdm | None:
    """A manually updated bar, or None where `mode` shows none."""
    if not bar_enabled(mode):
        return None
    return tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr)


def track(items: Iterable[T], total: int, desc: str, mode: str = "auto") -> Iterator[T]:
    """Iterate `items` with a bar where `mode` shows one, plain `desc: i/total` lines on a
    non-terminal under `auto`, and silently under `off`."""
    if bar_enabled(mode):
        yield from tqdm(items, total=total, desc=desc, dynamic_ncols=True, file=sys.stderr)
        return
    if mode == "off":
        yield from items
        return
    for done, item in enumerate(items, 1):
        yield item
        print(f"{desc}: {done}/{total}", file=sys.stderr, flush=True)
