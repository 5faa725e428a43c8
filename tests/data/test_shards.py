"""Shards cover every row once, in order, with the same indices a sequential read gives."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq

from rlrun.data.readers import Unparsable, iter_rows
from rlrun.data.shards import plan_shards, shard_rows

ROWS = [{"question": f"q{i} " + "x" * (i % 7), "answer": f"#### {i}"} for i in range(40)]


def rows_of(shards):
    return [(s.first_index + k, row) for s in shards for k, row in enumerate(shard_rows(s))]


def sequential(source):
    return list(enumerate(iter_rows(source)))


def same(a, b):
    def norm(pairs):
        return [(i, r.reason if isinstance(r, Unparsable) else r) for i, r in pairs]

    return norm(a) == norm(b)


def test_jsonl_byte_ranges_with_blank_and_bad_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    lines = [json.dumps(r) for r in ROWS]
    lines[5] = ""
    lines[11] = "{broken"
    path.write_text("\n".join(lines) + "\n")
    shards = plan_shards(str(path), target_bytes=200)
    assert len(shards) > 5
    assert same(rows_of(shards), sequential(str(path)))
    bad = [r for _, r in rows_of(shards) if isinstance(r, Unparsable)]
    assert [b.reason for b in bad] == ["a.jsonl line 12 is not valid JSON (Expecting property "
                                       "name enclosed in double quotes)"]


def test_one_shard_when_the_target_is_large(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert len(plan_shards(str(path))) == 1


def test_parquet_row_groups(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=6)
    shards = plan_shards(str(path), target_bytes=1)
    assert len(shards) == 7
    assert [s.first_index for s in shards] == [0, 6, 12, 18, 24, 30, 36]
    assert same(rows_of(shards), sequential(str(path)))


def test_folder_of_mixed_files_continues_indices(tmp_path):
    with gzip.open(tmp_path / "train-0.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in ROWS[:10])
    (tmp_path / "train-1.json").write_text(json.dumps(ROWS[10:20]))
    pq.write_table(pa.Table.from_pylist(ROWS[20:30]), tmp_path / "train-2.parquet")
    (tmp_path / "train-3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[30:]))
    shards = plan_shards(str(tmp_path), target_bytes=300)
    assert [s.first_index for s in shards][:3] == [0, 10, 20]
    assert rows_of(shards) == list(enumerate(ROWS))
