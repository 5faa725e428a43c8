"""The data layer: dataset rows of many public formats in, `Problem` records out.

`load_problems` reads one source (file, folder, Hugging Face id, or `toy:*`) with format
detection and bad-row handling; `iter_problems` streams the same; `load_from_config` returns a
run's (train, val) split. `ray_dataset` (and `problem_of`) convert a large local set through
Ray Data; they are imported on first use, so importing `rlrun.data` does not import Ray.
"""

from typing import Any

from rlrun.data.errors import BadRow, DataError
from rlrun.data.loader import FORMATS, LoadResult, iter_problems, load_from_config, load_problems

__all__ = [
    "FORMATS",
    "BadRow",
    "DataError",
    "LoadResult",
    "iter_problems",
    "load_from_config",
    "load_problems",
    "problem_of",
    "ray_dataset",
]


def __getattr__(name: str) -> Any:
    if name in ("ray_dataset", "problem_of"):
        from rlrun.data import ray_data

        return getattr(ray_data, name)
    raise AttributeError(f"module 'rlrun.data' has no attribute {name!r}")
