"""Reading raw rows from JSONL, gzipped JSONL, JSON, Parquet, folders, and the hub."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlrun.data import load_problems
from rlrun.data.errors import DataError
from rlrun.data.readers import Unparsable, iter_rows

ROWS = [{"question": f"q{i}", "answer": f"w\n#### {i}"} for i in range(5)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_skips_blank_lines_and_marks_bad_json(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n{oops\n" + json.dumps(ROWS[1]) + "\n")
    rows = list(iter_rows(str(path)))
    assert rows[0] == ROWS[0] and rows[2] == ROWS[1]
    assert isinstance(rows[1], Unparsable) and "a.jsonl line 3" in rows[1].reason


def test_jsonl_is_read_lazily(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", ROWS)
    rows = iter_rows(str(path))
    assert next(rows) == ROWS[0]


def test_gzipped_jsonl(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in ROWS)
    assert list(iter_rows(str(path))) == ROWS


@pytest.mark.parametrize(
    "payload",
    [
        ROWS,
        {"data": ROWS},
        {"question": [r["question"] for r in ROWS], "answer": [r["answer"] for r in ROWS]},
    ],
    ids=["list", "one-list-key", "columns"],
)
def test_json_shapes(tmp_path, payload):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(payload))
    assert list(iter_rows(str(path))) == ROWS


def test_json_file_holding_json_lines(tmp_path):
    path = write_jsonl(tmp_path / "a.json", ROWS)
    assert list(iter_rows(str(path))) == ROWS


def test_json_scalar_is_an_error(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("3")
    with pytest.raises(DataError, match="holds a JSON int"):
        list(iter_rows(str(path)))


def test_parquet_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr("rlrun.data.readers.PARQUET_BATCH_ROWS", 2)
    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=2)
    assert list(iter_rows(str(path))) == ROWS
    result = load_problems(str(path))
    assert result.format == "gsm8k" and [p.answer for p in result.problems] == list("01234")


def test_parquet_code_contests_nested_columns(fixtures, tmp_path):
    lines = (fixtures / "code_contests.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    path = tmp_path / "cc.parquet"
    pq.write_table(pa.Table.from_pylist(rows[:2]), path)
    result = load_problems(str(path))
    assert result.format == "code_contests"
    assert [len(p.tests.stdio) for p in result.problems] == [4, 1]


def test_folder_reads_files_of_the_split(tmp_path):
    write_jsonl(tmp_path / "train-0.jsonl", ROWS[:2])
    write_jsonl(tmp_path / "train-1.jsonl", ROWS[2:])
    write_jsonl(tmp_path / "test-0.jsonl", [{"question": "t", "answer": "#### 9"}])
    assert list(iter_rows(str(tmp_path), split="train")) == ROWS
    assert len(list(iter_rows(str(tmp_path), split="test"))) == 1


def test_missing_file_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        iter_rows(str(tmp_path / "nope.jsonl"))


def test_unsupported_file_type(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("a,b\n")
    with pytest.raises(DataError, match="unsupported file type"):
        iter_rows(str(path))


def test_hub_id_offline_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # The libraries read those variables once, at import: where another test imported them
    # first, the hub would be tried over the network (and time out) without these.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_DATASETS_OFFLINE", True)
    name = "rlrun-nonexistent-org/nonexistent-dataset"
    with pytest.raises(DataError) as err:
        load_problems(name)
    message = str(err.value)
    assert f"could not read Hugging Face dataset {name!r}" in message
    assert "offline" in message
