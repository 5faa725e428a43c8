"""User reward functions given as `module:function` (or `path/to/file.py:function`) in config.

The signature is TRL's: `fn(completions, **kwargs) -> list[float]`, sync or `async def`. The
kwargs are the batch's columns, one list entry per completion: `prompts`, `completion_ids`, and
every Problem field but the prompt (`id`, `answer`, `kind`, `tests`, `language`, `reference`,
`meta`, ...). A value may be None, TRL's "this function does not score this completion". A
function that raises, returns a list of the wrong length, or returns a value that is neither a
finite number nor None (NaN, inf, a string) raises `RewardError` naming the function and the
offending sample; a failing batch is re-run one sample at a time to find which sample broke.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import threading
from collections.abc import Callable
from typing import Any

from rlrun.errors import short_repr
from rlrun.imports import import_object
from rlrun.records import Problem, Sample
from rlrun.rewards.errors import RewardError

RewardFn = Callable[..., Any]


def load_plugin(spec: str, where: str = "reward.fns") -> RewardFn:
    """Import the function named by `spec` and check it has the TRL reward signature."""
    fn = import_object(spec, where, "reward function",
                       "module:function (example: my_rewards:brevity)", RewardError)
    if not callable(fn):
        raise RewardError(f"{where}: {spec!r} is a {type(fn).__name__}, not a function")
    _check_signature(fn, spec, where)
    return fn


def _check_signature(fn: RewardFn, spec: str, where: str) -> None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    positional = [
        p for p in params.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    takes_completions = "completions" in params or bool(positional) or any(
        p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()
    )
    if not takes_completions or not takes_kwargs:
        raise RewardError(
            f"{where}: reward function {spec!r} has signature {inspect.signature(fn)}; it needs "
            "TRL's fn(completions, **kwargs) -> list[float]"
        )


def plugin_kwargs(problems: list[Problem], samples: list[Sample]) -> dict[str, list[Any]]:
    """The per-sample columns a plug-in receives as keyword arguments."""
    columns: dict[str, list[Any]] = {
        "prompts": [p.prompt for p in problems],
        "completion_ids": [s.response_ids for s in samples],
    }
    for f in dataclasses.fields(Problem):
        if f.name != "prompt":
            columns[f.name] = [getattr(p, f.name) for p in problems]
    return columns


def _run(fn: RewardFn, completions: list[str], kwargs: dict[str, list[Any]]) -> Any:
    out = fn(completions, **kwargs)
    if not inspect.isawaitable(out):
        return out
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(out))
    # Called from inside an event loop (an async actor): run the coroutine on its own loop.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_await(out))
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _describe(index: int, problems: list[Problem]) -> str:
    return f"sample {index} (problem {problems[index].id})"


def call_plugin(
    fn: RewardFn, spec: str, problems: list[Problem], samples: list[Sample]
) -> list[float | None]:
    """Call a plug-in on a batch and return one finite float or None per sample, or raise
    RewardError."""
    completions = [s.response_text for s in samples]
    kwargs = plugin_kwargs(problems, samples)
    try:
        out = _run(fn, completions, kwargs)
    except Exception as err:
        raise _locate_failure(fn, spec, problems, samples, err) from err
    if isinstance(out, (str, bytes)) or not hasattr(out, "__len__"):
        raise RewardError(
            f"reward function {spec!r} returned {type(out).__name__}; it must return a list of "
            f"{len(samples)} floats, one per completion"
        )
    values = list(out)
    if len(values) != len(samples):
        raise RewardError(
            f"reward function {spec!r} returned {len(values)} values for {len(samples)} "
            "completions; it must return one float per completion"
        )
    scores: list[float | None] = []
    for i, value in enumerate(values):
        if value is None:  # TRL's convention: the function does not score this completion
            scores.append(None)
            continue
        number = _as_float(value)
        if number is None:
            raise RewardError(
                f"reward function {spec!r} returned {short_repr(value)} for "
                f"{_describe(i, problems)}; every reward must be a finite number, or None for a "
                "completion it does not score"
            )
        scores.append(number)
    return scores


def _as_float(value: Any) -> float | None:
    if isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _locate_failure(
    fn: RewardFn, spec: str, problems: list[Problem], samples: list[Sample], err: Exception
) -> RewardError:
    kind = f"{type(err).__name__}: {err}"
    if len(samples) > 1:
        kwargs = plugin_kwargs(problems, samples)
        for i in range(len(samples)):
            one = {k: [v[i]] for k, v in kwargs.items()}
            try:
                _run(fn, [samples[i].response_text], one)
            except Exception as single:
                return RewardError(
                    f"reward function {spec!r} raised on {_describe(i, problems)}: "
                    f"{type(single).__name__}: {single}"
                )
        return RewardError(
            f"reward function {spec!r} raised on a batch of {len(samples)} samples ({kind}) but "
            "on none of them alone"
        )
    return RewardError(f"reward function {spec!r} raised on {_describe(0, problems)}: {kind}")
