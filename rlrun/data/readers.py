"""Raw rows from a source: local JSONL / JSON / Parquet files (or a folder of them), or a
Hugging Face dataset id. Rows are yielded lazily: JSONL line by line, Parquet batch by batch,
hub datasets in streaming mode, so a large set never has to fit in memory at once.

A JSONL line that is not valid JSON is yielded as an `Unparsable` marker, so the loader can
report it as a bad row with its index instead of stopping the whole read.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.data.errors import DataError
from rlrun.errors import first_line

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson")
JSON_SUFFIXES = (".json", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)
SUFFIXES = JSONL_SUFFIXES + JSON_SUFFIXES + PARQUET_SUFFIXES
PARQUET_BATCH_ROWS = 1024


@dataclass
class Unparsable:
    """A row that could not even be decoded; `reason` says why."""

    reason: str


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def parse_line(line: str | bytes, name: str, line_no: int) -> Any:
    """One JSONL line as a row, or `Unparsable` naming the file and line."""
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        why = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8"
        return Unparsable(f"{name} line {line_no} is not valid JSON ({why})")


def _jsonl_rows(path: Path) -> Iterator[Any]:
    with _open_text(path) as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                yield parse_line(line, path.name, line_no)


def _json_rows(path: Path) -> Iterator[Any]:
    try:
        with _open_text(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":
            # A .json file holding one object per line (common on the hub).
            yield from _jsonl_rows(path)
            return
        raise DataError(f"{path} is not valid JSON: {err}") from None
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if len(lists) == 1:
            data = next(iter(lists.values()))
        elif lists and len(lists) == len(data) and len({len(v) for v in lists.values()}) == 1:
            columns = zip(*lists.values(), strict=True)
            data = [dict(zip(lists, values, strict=True)) for values in columns]
        else:
            raise DataError(
                f"{path} holds a JSON object; expected a list of rows, an object with one list "
                "of rows, or an object of equal-length columns"
            )
    if not isinstance(data, list):
        raise DataError(f"{path} holds a JSON {type(data).__name__}; expected a list of rows")
    yield from data


def _parquet_rows(path: Path) -> Iterator[Any]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path} is not a readable Parquet file: {err}") from None
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
        yield from batch.to_pylist()


def file_rows(path: Path) -> Iterator[Any]:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return _jsonl_rows(path)
    if name.endswith(JSON_SUFFIXES):
        return _json_rows(path)
    if name.endswith(PARQUET_SUFFIXES):
        return _parquet_rows(path)
    raise DataError(f"{path}: unsupported file type; use one of {', '.join(SUFFIXES)}")


def _hub_rows(source: str, split: str, subset: str | None) -> Iterator[Any]:
    try:
        import datasets

        yield from datasets.load_dataset(source, subset, split=split, streaming=True)
    except Exception as err:  # the hub client raises many types (HTTP, offline, not found)
        raise DataError(
            f"could not read Hugging Face dataset {source!r} (split {split!r}"
            f"{f', subset {subset!r}' if subset else ''}): {first_line(err)}. If it is a local "
            "file, check the path; if this machine is offline, download the dataset elsewhere "
            "and point data.train / data.val at a JSONL or Parquet file"
        ) from None


def iter_rows(source: str, split: str = "train", subset: str | None = None) -> Iterator[Any]:
    """Raw rows of `source`: an existing file or folder, else a Hugging Face dataset id.

    A folder is read file by file in name order; where some file names contain `split`
    (`train-00000.parquet`), only those are read.
    """
    files = local_files(source, split)
    if files is not None:
        return (row for f in files for row in file_rows(f))
    return _hub_rows(source, split, subset)


def local_files(source: str, split: str = "train") -> list[Path] | None:
    """The files a local source reads, in order; None if `source` is a hub id."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.lower().endswith(SUFFIXES))
        if not files:
            raise DataError(f"folder {source} holds no {', '.join(SUFFIXES)} files")
        return [f for f in files if split in f.name] or files
    if path.is_file():
        if not path.name.lower().endswith(SUFFIXES):
            raise DataError(f"{path}: unsupported file type; use one of {', '.join(SUFFIXES)}")
        return [path]
    if source.startswith((".", "/", "~")) or source.lower().endswith(SUFFIXES) or "\\" in source:
        raise DataError(f"dataset file {source} does not exist")  # a path, not a hub id
    return None
