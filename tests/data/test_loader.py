"""Loading: skip and fail modes, limits, streaming, unique ids, the rlrun round trip, and the
train/val split a run gets from its config."""

import json

import pytest

from rlrun.config import load_config
from rlrun.data import DataError, iter_problems, load_from_config, load_problems
from rlrun.data.loader import source_format
from rlrun.data.toy import arithmetic_problems
from rlrun.records import Problem


def test_skip_counts_bad_rows(fixtures):
    result = load_problems(str(fixtures / "gsm8k_bad.jsonl"), on_bad_row="skip")
    assert (len(result.problems), len(result.bad_rows), result.total_rows) == (1, 6, 7)


def test_fail_stops_at_the_first_bad_row_with_its_reason(fixtures):
    with pytest.raises(DataError) as err:
        load_problems(str(fixtures / "gsm8k_bad.jsonl"), on_bad_row="fail")
    message = str(err.value)
    assert "gsm8k_bad.jsonl (gsm8k format): row 1: field 'answer or solution' is missing" in message
    assert "data.on_bad_row=skip" in message


def test_fail_mode_streaming(fixtures):
    stream = iter_problems(str(fixtures / "plain.jsonl"), on_bad_row="fail")
    assert [next(stream).id, next(stream).id] == ["p1", "p2"]
    with pytest.raises(DataError, match="row 2: field 'test_cases"):
        next(stream)


def test_iter_problems_collects_bad_rows(fixtures):
    bad = []
    ids = [p.id for p in iter_problems(str(fixtures / "plain.jsonl"), bad_rows=bad)]
    assert ids == ["p1", "p2"] and [b.index for b in bad] == [2, 3, 4]


def test_limit_counts_usable_problems(fixtures):
    result = load_problems(str(fixtures / "gsm8k_bad.jsonl"), limit=1)
    assert len(result.problems) == 1
    assert len(load_problems(str(fixtures / "gsm8k.jsonl"), limit=3).problems) == 3
    assert len(list(iter_problems(str(fixtures / "gsm8k.jsonl"), limit=2))) == 2


def test_repeated_ids_are_made_unique(tmp_path):
    row = {"problem_id": "same", "prompt": "p", "test_cases": [["1", "1"]]}
    path = tmp_path / "dup.jsonl"
    path.write_text((json.dumps(row) + "\n") * 3)
    assert [p.id for p in load_problems(str(path)).problems] == ["same", "same#1", "same#2"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"fmt": "csv"}, "data.format='csv'"), ({"on_bad_row": "ignore"}, "data.on_bad_row")],
)
def test_bad_options(fixtures, kwargs, match):
    with pytest.raises(DataError, match=match):
        load_problems(str(fixtures / "gsm8k.jsonl"), **kwargs)


def test_toy_sources():
    result = load_problems("toy:mixed", toy_size=10, seed=3)
    assert result.format == "toy" and len(result.problems) == 10
    assert {p.kind for p in result.problems} == {"math", "code"}
    assert len(load_problems("toy:code", toy_size=10, limit=4).problems) == 4
    kinds = "toy:arithmetic, toy:steps, toy:code, toy:repair, toy:mixed"
    with pytest.raises(DataError, match=kinds):
        load_problems("toy:chess")


@pytest.mark.parametrize(
    "name",
    ["gsm8k.jsonl", "math.jsonl", "humaneval.jsonl.gz", "mbpp.jsonl", "apps.jsonl",
     "code_contests.jsonl", "codeforces.json", "leetcode.json", "plain.jsonl"],
)
def test_converted_records_round_trip(fixtures, tmp_path, name):
    original = load_problems(str(fixtures / name)).problems
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in original))
    again = load_problems(str(path))
    assert again.format == "rlrun" and not again.bad_rows
    assert again.problems == original
    assert [Problem.from_dict(p.to_dict()) for p in original] == original


def load_native(tmp_path, rows: list[dict]):
    """`rows` written as a JSON-lines file in the rlrun format and loaded."""
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_problems(str(path), fmt="rlrun")


def test_rlrun_format_rejects_incomplete_records(tmp_path):
    rows = [
        {"id": "a", "prompt": "p", "kind": "math"},
        {"id": "b", "prompt": "p", "kind": "code", "tests": {"stdio": []}},
        {"id": "c", "prompt": "p", "kind": "poetry"},
        {"id": "d", "prompt": "p", "kind": "math", "answer": "1", "colour": "red"},
    ]
    result = load_native(tmp_path, rows)
    reasons = [b.reason for b in result.bad_rows]
    assert reasons[:3] == [
        "row 0: field 'answer' is missing (a math problem needs its gold answer)",
        "row 1: field 'tests' has no test cases",
        "row 2: field 'kind' is 'poetry'; use math or code",
    ]
    assert reasons[3].startswith("row 3: field 'row' does not match the Problem record")


def test_rlrun_format_checks_the_types_the_judge_reads(tmp_path):
    """A value of the wrong type is a bad row named by its field at load, not a judge crash
    during training."""
    code = {"id": "x", "prompt": "p", "kind": "code"}
    rows = [
        code | {"tests": {"stdio": [{"input": "1\n", "output": 2}]}},
        code | {"tests": {"stdio": [{"input": None, "output": "2"}]}},
        code | {"tests": {"calls": [{"args": 1, "expected": 2}], "fn_name": "f"}},
        code | {"tests": {"harness": 42}},
        code | {"tests": [["1", "2"]]},
        {"id": "y", "prompt": "p", "kind": "math", "answer": 7},
        code | {"tests": {"stdio": [{"input": "1\n", "output": "2"}]}},
    ]
    result = load_native(tmp_path, rows)
    reasons = [b.reason for b in result.bad_rows]
    assert reasons[:4] == [
        "row 0: field 'tests.stdio[0].output' must be text, got int (write it in quotes)",
        "row 1: field 'tests.stdio[0].input' must be text, got null (write it in quotes)",
        "row 2: field 'tests.calls[0].args' must be a list of arguments",
        "row 3: field 'tests.harness' must be text, got int (write it in quotes)",
    ]
    assert reasons[4].startswith("row 4: field 'row' does not match the Problem record")
    assert reasons[5] == "row 5: field 'answer' must be text, got int (write it in quotes)"
    assert [p.id for p in result.problems] == ["x"]


def test_val_carved_off_train_by_seed():
    cfg = load_config(None, ["data.toy_size=200", "data.val_size=20", "run.seed=5"])
    train, val = load_from_config(cfg)
    assert len(val) == 20
    again_train, again_val = load_from_config(cfg)
    assert [p.id for p in val] == [p.id for p in again_val]
    assert [p.id for p in train] == [p.id for p in again_train]
    other = load_from_config(load_config(None, ["data.toy_size=200", "data.val_size=20"]))[1]
    assert [p.id for p in other] != [p.id for p in val]
    # Toy prompts repeat; none that is validated may also be trained on.
    assert not {p.prompt for p in train} & {p.prompt for p in val}
    assert not {p.id for p in train} & {p.id for p in val}


def test_separate_toy_val_continues_the_sequence():
    cfg = load_config(None, ["data.toy_size=50", "data.val=toy:arithmetic", "data.val_size=8"])
    train, val = load_from_config(cfg)
    assert [p.id for p in val] == [f"toy-arith-{i}" for i in range(50, 58)]
    assert val == arithmetic_problems(58, 0)[50:]
    assert not {p.prompt for p in train} & {p.prompt for p in val}


def test_val_file(fixtures):
    cfg = load_config(None, [f"data.train={fixtures / 'gsm8k.jsonl'}",
                             f"data.val={fixtures / 'gsm8k_bad.jsonl'}"])
    train, val = load_from_config(cfg)
    assert len(train) == 5 and [p.answer for p in val] == ["5"]


def test_val_size_too_large(fixtures):
    cfg = load_config(None, [f"data.train={fixtures / 'gsm8k.jsonl'}", "data.val_size=5"])
    with pytest.raises(DataError, match="data.val_size=5 leaves no training problems"):
        load_from_config(cfg)


def test_no_usable_train_problems(fixtures):
    cfg = load_config(None, [f"data.train={fixtures / 'gsm8k.jsonl'}", "data.format=plain"])
    with pytest.raises(DataError, match="has no usable problems .5 unusable rows."):
        load_from_config(cfg)


def test_config_fail_mode_reaches_the_loader(fixtures):
    cfg = load_config(None, [f"data.train={fixtures / 'gsm8k_bad.jsonl'}", "data.on_bad_row=fail"])
    with pytest.raises(DataError, match="row 1"):
        load_from_config(cfg)


def test_source_format(fixtures):
    assert source_format(str(fixtures / "apps.jsonl")) == "apps"
    assert source_format(str(fixtures / "apps.jsonl"), fmt="plain") == "plain"


def test_code_language_sets_stdio_problems_and_leaves_harness_ones(tmp_path):
    import json

    from rlrun.config import load_config
    from rlrun.data import load_from_config

    rows = [{"id": f"s{i}", "prompt": f"echo {i}", "kind": "code",
             "tests": {"stdio": [{"input": "1\n", "output": "1\n"}]}} for i in range(4)]
    rows.append({"id": "h", "prompt": "def f(): ...", "kind": "code",
                 "tests": {"harness": "assert f() is None", "entry_point": "f"}})
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(None, [f"data.train={path}", "data.val_size=1", "data.format=rlrun",
                             "data.code_language=cpp"])
    train, val = load_from_config(cfg)
    by_id = {p.id: p.language for p in train + val}
    assert by_id.pop("h") == "python"
    assert set(by_id.values()) == {"cpp"}
