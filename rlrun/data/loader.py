"""Loading problems: read raw rows, pick the adapter (detected or `data.format`), convert,
and deal with unusable rows as `data.on_bad_row` says; then split train and validation sets.

`iter_problems` streams (for sets too large to hold); `load_problems` collects a `LoadResult`
with the bad rows and counts that `rlrun data inspect` prints; `load_from_config` is what a
training run calls.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from typing import Any

from rlrun.config import CHOICES, Config
from rlrun.data.adapters import ADAPTERS, Adapter
from rlrun.data.detect import detect_format
from rlrun.data.errors import BadRow, DataError, RowError
from rlrun.data.readers import Unparsable, iter_rows
from rlrun.data.toy import toy_problems
from rlrun.records import Problem

log = logging.getLogger(__name__)

FORMATS = CHOICES["data.format"]
BAD_ROW_MODES = CHOICES["data.on_bad_row"]
# Rows looked at to detect the format; several, because optional columns vary row to row.
DETECT_ROWS = 20


@dataclass
class LoadResult:
    """Usable problems, the format they were read as, and every unusable row."""

    problems: list[Problem]
    format: str
    bad_rows: list[BadRow] = field(default_factory=list)
    total_rows: int = 0


def check_options(fmt: str, on_bad_row: str) -> None:
    if fmt not in FORMATS:
        raise DataError(
            f"data.format={fmt!r} is not a known format; use one of {', '.join(FORMATS)}"
        )
    if on_bad_row not in BAD_ROW_MODES:
        raise DataError(f"data.on_bad_row={on_bad_row!r} is not allowed; use skip or fail")


def convert_row(adapter: Adapter, fmt: str, row: Any, index: int) -> Problem | BadRow:
    """One raw row as a `Problem`, or the `BadRow` saying why it cannot be one."""
    if isinstance(row, Unparsable):
        return BadRow(index, f"row {index}: {row.reason}")
    if not isinstance(row, dict):
        return BadRow(index, f"row {index}: is a {type(row).__name__}, not an object with fields")
    try:
        return adapter(row, index)
    except RowError as err:
        return BadRow(index, f"row {index}: {err}")
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        return BadRow(index, f"row {index}: cannot be read as {fmt} ({type(err).__name__}: {err})")


def _detect(head: list[Any], source: str) -> str:
    return detect_format([r for r in head if not isinstance(r, Unparsable)], source)


def _rows_and_format(
    source: str, fmt: str, split: str, subset: str | None
) -> tuple[str, Iterator[Any]]:
    rows = iter_rows(source, split=split, subset=subset)
    if fmt != "auto":
        return fmt, rows
    head = list(islice(rows, DETECT_ROWS))
    return _detect(head, source), chain(head, rows)


def source_format(
    source: str, fmt: str = "auto", split: str = "train", subset: str | None = None
) -> str:
    """The format `source` is read as: `fmt` itself, or the one detected from its first rows."""
    if fmt != "auto":
        return fmt
    rows = iter_rows(source, split=split, subset=subset)
    try:
        return _detect(list(islice(rows, DETECT_ROWS)), source)
    finally:
        getattr(rows, "close", lambda: None)()


def _toy(source: str, limit: int | None, toy_size: int, seed: int) -> list[Problem]:
    n = toy_size if limit is None else min(limit, toy_size)
    return toy_problems(source.removeprefix("toy:"), n, seed)


def bad_row_error(source: str, fmt: str, bad: BadRow) -> DataError:
    return DataError(
        f"{source} ({fmt} format): {bad.reason}. Fix the row, or set data.on_bad_row=skip "
        "to skip unusable rows"
    )


def iter_problems(
    source: str,
    fmt: str = "auto",
    on_bad_row: str = "skip",
    split: str = "train",
    limit: int | None = None,
    toy_size: int = 2000,
    seed: int = 0,
    subset: str | None = None,
    bad_rows: list[BadRow] | None = None,
) -> Iterator[Problem]:
    """Problems of `source`, converted lazily row by row (see `_converted` for bad rows). Ids
    are kept as the source gives them: renaming repeats needs all ids seen."""
    check_options(fmt, on_bad_row)
    if source.startswith("toy:"):
        yield from _toy(source, limit, toy_size, seed)
        return
    fmt, rows = _rows_and_format(source, fmt, split, subset)
    for _, problem in _converted(source, fmt, rows, on_bad_row, limit, bad_rows):
        yield problem


def _converted(
    source: str, fmt: str, rows: Iterator[Any], on_bad_row: str, limit: int | None,
    bad_rows: list[BadRow] | None,
) -> Iterator[tuple[int, Problem]]:
    """(row index, problem) of the first `limit` usable rows; each unusable one is added to
    `bad_rows` under `on_bad_row=skip` and raises `DataError` under `fail`."""
    adapter = ADAPTERS[fmt]
    produced = 0
    for index, row in enumerate(rows):
        if limit is not None and produced >= limit:
            return
        item = convert_row(adapter, fmt, row, index)
        if isinstance(item, BadRow):
            if on_bad_row == "fail":
                raise bad_row_error(source, fmt, item)
            if bad_rows is not None:
                bad_rows.append(item)
            continue
        produced += 1
        yield index, item


def load_problems(
    source: str,
    fmt: str = "auto",
    on_bad_row: str = "skip",
    split: str = "train",
    limit: int | None = None,
    toy_size: int = 2000,
    seed: int = 0,
    subset: str | None = None,
) -> LoadResult:
    """All usable problems of `source` (a file, folder, HF dataset id or `toy:<kind>`).

    Ids repeated within the source get a `#<row>` suffix, so every problem id is unique.
    """
    check_options(fmt, on_bad_row)
    if source.startswith("toy:"):
        problems = _toy(source, limit, toy_size, seed)
        return LoadResult(problems, "toy", [], len(problems))
    fmt, rows = _rows_and_format(source, fmt, split, subset)
    result = LoadResult([], fmt)
    seen: set[str] = set()
    for index, item in _converted(source, fmt, rows, on_bad_row, limit, result.bad_rows):
        if item.id in seen:
            item.id = f"{item.id}#{index}"
        seen.add(item.id)
        result.problems.append(item)
    result.total_rows = len(result.problems) + len(result.bad_rows)
    return result


def _report(key: str, source: str, result: LoadResult) -> None:
    if result.bad_rows:
        log.warning(
            "%s=%s: skipped %d unusable of %d rows (first: %s); `rlrun data inspect %s` lists all",
            key, source, len(result.bad_rows), result.total_rows, result.bad_rows[0].reason, source,
        )


def _split_off(
    problems: list[Problem], size: int, seed: int
) -> tuple[list[Problem], list[Problem]]:
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    held = set(order[:size])
    train = [p for i, p in enumerate(problems) if i not in held]
    val = [p for i, p in enumerate(problems) if i in held]
    return train, val


def _prompt_key(problem: Problem) -> str:
    if isinstance(problem.prompt, str):
        return problem.prompt
    return "\n".join(m.get("content", "") for m in problem.prompt)


def load_from_config(cfg: Config) -> tuple[list[Problem], list[Problem]]:
    """(train, val) problems for a run.

    With `data.val` unset, `data.val_size` problems are held out of `data.train`, chosen by
    `run.seed`. Train problems whose prompt also appears in val are dropped either way, so
    validation never scores prompts the policy trained on (toy sets repeat prompts).
    """
    d, seed = cfg.data, cfg.run.seed
    common = {"fmt": d.format, "on_bad_row": d.on_bad_row, "subset": d.subset}
    loaded = load_problems(
        d.train, split=d.split, limit=d.max_problems, toy_size=d.toy_size, seed=seed, **common
    )
    _report("data.train", d.train, loaded)
    if not loaded.problems:
        raise DataError(
            f"data.train={d.train} has no usable problems ({len(loaded.bad_rows)} unusable rows); "
            f"run `rlrun data inspect {d.train}` to see why"
        )
    if d.val is None:
        if d.val_size >= len(loaded.problems):
            raise DataError(
                f"data.val_size={d.val_size} leaves no training problems: data.train has only "
                f"{len(loaded.problems)} usable problems; lower data.val_size or set data.val"
            )
        train, val = _split_off(loaded.problems, d.val_size, seed)
    else:
        train = loaded.problems
        if d.val.startswith("toy:"):
            # Continue the toy sequence past the train set, so val ids never repeat train ids.
            val = _toy(d.val, None, d.toy_size + d.val_size, seed)[d.toy_size:]
        else:
            held = load_problems(d.val, split=d.val_split, seed=seed, **common)
            _report("data.val", d.val, held)
            val = held.problems
    val_prompts = {_prompt_key(p) for p in val}
    kept = [p for p in train if _prompt_key(p) not in val_prompts]
    if len(kept) < len(train):
        log.info("dropped %d train problems whose prompt is also in val", len(train) - len(kept))
    if not kept:
        raise DataError("every training problem also appears in the validation set; check data.val")
    if d.code_language is not None:
        kept, val = _in_language(kept, d.code_language), _in_language(val, d.code_language)
    return kept, val


def _in_language(problems: list[Problem], language: str) -> list[Problem]:
    """Stdin/stdout problems set to be solved in `language` (`data.code_language`): the prompt
    asks for it and the reward looks for its code block first. Harness and call-based tests are
    language-bound, so those problems keep theirs."""
    return [
        replace(p, language=language)  # type: ignore[arg-type]
        if p.kind == "code" and p.tests is not None and p.tests.stdio
        and not (p.tests.harness or p.tests.calls) else p
        for p in problems
    ]
