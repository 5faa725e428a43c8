"""`rlrun data inspect` and `rlrun data convert` through the command line entry point."""

import json
from pathlib import Path

from rlrun.cli import main
from rlrun.data import load_problems
from rlrun.records import Problem

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"


def test_inspect_prints_format_counts_samples_and_bad_rows(capsys):
    assert main(["data", "inspect", str(FIXTURES / "apps.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "format: apps (detected)" in out
    assert "rows read: 6" in out and "usable problems: 4" in out and "unusable rows: 2" in out
    assert "--- sample 1 ---\nid: 10" in out and "--- sample 2 ---\nid: 11" in out
    assert "--- sample 3 ---" not in out
    assert "tests: 2 calls of add" in out
    assert "row 3: field 'input_output' is empty" in out
    assert "row 4: field 'input_output' has 2 inputs but 1 outputs" in out


def test_inspect_with_format_and_limit(capsys):
    path = str(FIXTURES / "humaneval.jsonl.gz")
    assert main(["data", "inspect", path, "--format", "humaneval", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "format: humaneval\n" in out and "usable problems: 2" in out
    assert "tests: harness on has_close_elements" in out


def test_inspect_missing_file_exits_2_with_the_path(capsys, tmp_path):
    missing = tmp_path / "missing.jsonl"
    assert main(["data", "inspect", str(missing)]) == 2
    assert f"dataset file {missing} does not exist" in capsys.readouterr().err


def test_inspect_with_nothing_usable_exits_1(capsys):
    path = str(FIXTURES / "gsm8k.jsonl")
    assert main(["data", "inspect", path, "--format", "plain"]) == 1
    assert "usable problems: 0" in capsys.readouterr().out


def test_convert_writes_records_that_read_back(tmp_path, capsys):
    out = tmp_path / "sub" / "cf.jsonl"
    source = str(FIXTURES / "codeforces_variants.json")
    assert main(["data", "convert", source, "--out", str(out)]) == 0
    assert "wrote 2 problems (codeforces format)" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    original = load_problems(source).problems
    assert [Problem.from_dict(r) for r in rows] == original
    again = load_problems(str(out), fmt="rlrun")
    assert again.problems == original
    assert main(["data", "inspect", str(out)]) == 0
    assert "format: rlrun (detected)" in capsys.readouterr().out


def test_convert_fail_mode_and_missing_out(tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    source = str(FIXTURES / "plain.jsonl")
    assert main(["data", "convert", source, "--out", str(out), "--on-bad-row", "fail"]) == 2
    assert "row 2: field 'test_cases[0]'" in capsys.readouterr().err
    assert not out.exists()
    assert main(["data", "convert", source]) == 2
    assert "needs --out" in capsys.readouterr().err


def test_convert_toy(tmp_path):
    out = tmp_path / "toy.jsonl"
    assert main(["data", "convert", "toy:code", "--toy-size", "5", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 5
