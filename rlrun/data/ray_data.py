"""Large local datasets through Ray Data: each shard of the source is read and converted to
`Problem` records by a Ray task, so conversion runs on the cluster in parallel and streams.

Rows of the resulting dataset carry `index` (row in the source), `id`, `kind`, `problem`
(the `Problem.to_dict()` record as JSON text: Arrow needs one type per column, and test
arguments or `meta` vary row to row) and `error` (the bad-row reason, empty for usable rows).
`problem_of(row)` turns a row back into a `Problem`. Importing this module imports Ray.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow as pa
import ray.data
from ray.data import Datasource, ReadTask
from ray.data.block import BlockMetadata
from ray.data.expressions import col

from rlrun.data.adapters import ADAPTERS
from rlrun.data.errors import BadRow, DataError
from rlrun.data.loader import bad_row_error, check_options, convert_row, source_format
from rlrun.data.readers import local_files
from rlrun.data.shards import SHARD_BYTES, Shard, plan_shards, shard_rows
from rlrun.records import Problem

SCHEMA = pa.schema(
    [("index", pa.int64()), ("id", pa.string()), ("kind", pa.string()),
     ("problem", pa.string()), ("error", pa.string())]
)
BLOCK_ROWS = 4096


def _read_shard(shard: Shard, fmt: str, source: str, on_bad_row: str) -> Iterator[pa.Table]:
    adapter = ADAPTERS[fmt]
    rows: list[dict[str, Any]] = []
    for offset, raw in enumerate(shard_rows(shard)):
        index = shard.first_index + offset
        item = convert_row(adapter, fmt, raw, index)
        if isinstance(item, BadRow):
            if on_bad_row == "fail":
                raise bad_row_error(source, fmt, item)
            rows.append({"index": index, "id": "", "kind": "", "problem": "", "error": item.reason})
        else:
            rows.append({"index": index, "id": item.id, "kind": item.kind,
                         "problem": json.dumps(item.to_dict()), "error": ""})
        if len(rows) >= BLOCK_ROWS:
            yield pa.Table.from_pylist(rows, schema=SCHEMA)
            rows = []
    if rows:
        yield pa.Table.from_pylist(rows, schema=SCHEMA)


class ProblemDatasource(Datasource):
    """One read task per shard of a local dataset, each yielding converted problems."""

    def __init__(self, shards: list[Shard], fmt: str, source: str, on_bad_row: str) -> None:
        self._shards, self._fmt, self._source, self._on_bad_row = shards, fmt, source, on_bad_row

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        return [
            ReadTask(
                partial(_read_shard, shard, self._fmt, self._source, self._on_bad_row),
                BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None,
                              input_files=(shard.path,)),
                schema=SCHEMA,
                per_task_row_limit=per_task_row_limit,
            )
            for shard in self._shards
        ]


def ray_dataset(
    source: str,
    fmt: str = "auto",
    on_bad_row: str = "skip",
    split: str = "train",
    with_bad_rows: bool = False,
    shard_bytes: int = SHARD_BYTES,
) -> ray.data.Dataset:
    """A Ray Dataset of the problems of a local file or folder (see the module docstring).

    Unusable rows are dropped unless `with_bad_rows`; under `on_bad_row=fail` the first one
    stops the read with a `DataError` naming it. Format detection reads only the first rows.
    """
    check_options(fmt, on_bad_row)
    if local_files(source, split) is None:
        raise DataError(
            f"{source} is not a local file or folder; ray_dataset reads local JSONL/JSON/Parquet "
            "(use load_problems for Hugging Face ids)"
        )
    fmt = source_format(source, fmt, split)
    datasource = ProblemDatasource(plan_shards(source, split, shard_bytes), fmt, source, on_bad_row)
    ds = ray.data.read_datasource(datasource)
    return ds if with_bad_rows else ds.filter(expr=col("error") == "")


def problem_of(row: dict[str, Any]) -> Problem:
    """The `Problem` of one usable row of a `ray_dataset`."""
    return Problem.from_dict(json.loads(row["problem"]))
