"""Splitting local dataset files into shards that workers read independently.

A shard is a byte range of a plain JSONL file (cut at line ends) or a run of Parquet row
groups; gzipped and whole-JSON files are one shard each. Every shard knows the global index
of its first row, so problem ids and bad-row reasons match what `load_problems` reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.data.errors import DataError
from rlrun.data.readers import JSONL_SUFFIXES, PARQUET_SUFFIXES, file_rows, local_files, parse_line

SHARD_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Shard:
    """Rows `first_index`... of the source, read from one part of one file."""

    path: str
    first_index: int
    # JSONL: byte range [start, stop) and the 1-based line number at `start`.
    # Parquet: row groups [start, stop). Other files: the whole file (stop == -1).
    start: int = 0
    stop: int = -1
    first_line: int = 1


def _jsonl_shards(path: Path, first_index: int, target: int) -> tuple[list[Shard], int]:
    shards = []
    start, start_line, start_index = 0, 1, first_index
    offset, line_no, index = 0, 0, first_index
    with path.open("rb") as f:
        for line in f:
            offset += len(line)
            line_no += 1
            index += bool(line.strip())
            if offset - start >= target:
                shards.append(Shard(str(path), start_index, start, offset, start_line))
                start, start_line, start_index = offset, line_no + 1, index
    if offset > start or not shards:
        shards.append(Shard(str(path), start_index, start, offset, start_line))
    return shards, index


def _parquet_shards(path: Path, first_index: int, target: int) -> tuple[list[Shard], int]:
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    shards, index, size = [], first_index, 0
    begin, begin_index = 0, first_index
    for group in range(meta.num_row_groups):
        rg = meta.row_group(group)
        index += rg.num_rows
        size += rg.total_byte_size
        if size >= target:
            shards.append(Shard(str(path), begin_index, begin, group + 1))
            begin, begin_index, size = group + 1, index, 0
    if begin < meta.num_row_groups or not shards:
        shards.append(Shard(str(path), begin_index, begin, meta.num_row_groups))
    return shards, index


def plan_shards(source: str, split: str = "train", target_bytes: int = SHARD_BYTES) -> list[Shard]:
    """Shards covering every row of a local file or folder, in source order."""
    files = local_files(source, split)
    if files is None:
        raise DataError(f"{source} is not a local file or folder; sharded reading needs one")
    shards: list[Shard] = []
    index = 0
    for path in files:
        name = path.name.lower()
        if name.endswith(JSONL_SUFFIXES) and not name.endswith(".gz"):
            more, index = _jsonl_shards(path, index, target_bytes)
        elif name.endswith(PARQUET_SUFFIXES):
            more, index = _parquet_shards(path, index, target_bytes)
        else:
            more = [Shard(str(path), index)]
            if path != files[-1]:
                index += sum(1 for _ in file_rows(path))
        shards.extend(more)
    return shards


def shard_rows(shard: Shard) -> Iterator[Any]:
    """The raw rows of one shard, as `iter_rows` would yield them."""
    path = Path(shard.path)
    name = path.name.lower()
    if shard.stop == -1:
        yield from file_rows(path)
    elif name.endswith(PARQUET_SUFFIXES):
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        for group in range(shard.start, shard.stop):
            yield from parquet.read_row_group(group).to_pylist()
    else:
        with path.open("rb") as f:
            f.seek(shard.start)
            offset, line_no = shard.start, shard.first_line
            while offset < shard.stop:
                line = f.readline()
                if not line:
                    break
                offset += len(line)
                if line.strip():
                    yield parse_line(line, path.name, line_no)
                line_no += 1
