"""`rlrun judge` on a small JSONL file: every test kind, both languages, malformed lines."""

import json

import pytest

from rlrun.cli import main

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
CPP_ADD = "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; " \
          "std::cout << a + b << '\\n'; }\n"
STDIO = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7\n", "output": "12\n"}]

LINES = [
    {"id": "ok", "code": ADD, "tests": STDIO},
    {"id": "wrong-second", "code": "input()\nprint(3)\n", "tests": STDIO},
    "",
    {"id": "cpp", "language": "cpp", "code": CPP_ADD, "tests": STDIO},
    {"id": "harness", "code": "def add(a, b):\n    return a + b\n", "entry_point": "add",
     "functional": "def check(candidate):\n    assert candidate(2, 3) == 5\n"},
    {"id": "calls", "code": "def add(a, b):\n    return a + b\n", "fn_name": "add",
     "tests": [{"input": [1, 2], "output": 3}, {"input": [-1, 1], "output": 0}]},
    "{this is not json",
    {"id": "no-code", "tests": STDIO},
    {"id": "bad-lang", "language": "rust", "code": "fn main() {}", "tests": STDIO},
    {"id": "slow", "code": "while True:\n    pass\n", "tests": STDIO[:1], "time_limit_s": 0.5},
]


def _write(path, lines):
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")


def test_judges_every_line_and_reports_malformed_ones_by_line_number(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write(src, LINES)
    rc = main(["judge", str(src), "--out", str(out), "--all-tests"])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    by_id = {r["id"]: r for r in records if r["id"]}

    assert rc == 1  # some lines were malformed
    assert len(records) == 9  # the blank line is skipped, every other line has a record
    assert (by_id["ok"]["status"], by_id["ok"]["passed"], by_id["ok"]["total"]) == (
        "accepted", 2, 2)
    wrong = by_id["wrong-second"]
    assert (wrong["status"], wrong["passed"], wrong["total"]) == ("wrong_answer", 1, 2)
    assert [t["status"] for t in wrong["tests"]] == ["accepted", "wrong_answer"]
    assert by_id["cpp"]["status"] == "accepted"
    assert by_id["harness"]["status"] == "accepted"
    assert (by_id["calls"]["status"], by_id["calls"]["passed"]) == ("accepted", 2)
    assert by_id["slow"]["status"] == "time_limit"

    invalid = [r for r in records if r["status"] == "invalid_input"]
    assert [r["line"] for r in invalid] == [7, 8, 9]
    assert "line 7" in invalid[0]["error"] and "JSON" in invalid[0]["error"]
    assert invalid[1]["id"] == "no-code" and "'code'" in invalid[1]["error"]
    assert "'language'" in invalid[2]["error"] and "rust" in invalid[2]["error"]

    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("judged 9 submissions")
    assert "accepted=4" in summary and "invalid_input=3" in summary
    assert "time_limit=1" in summary and "wrong_answer=1" in summary and "tests/s" in summary


def test_stops_at_the_first_failing_test_by_default(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    failing_first = [{"input": "1 1\n", "output": "3\n"}, *STDIO]
    _write(src, [{"id": "w", "code": ADD, "tests": failing_first}])
    assert main(["judge", str(src), "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["status"] == "wrong_answer" and rec["passed"] == 0 and rec["total"] == 3
    assert rec["tests"][0]["status"] == "wrong_answer"


@pytest.mark.parametrize("field, value, message", [
    ("tests", [{"input": "1"}], "tests[0]"),
    ("time_limit_s", "fast", "'time_limit_s'"),
    ("tests", [], "no tests"),
])
def test_each_malformed_field_is_named(tmp_path, field, value, message):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write(src, [{"id": "x", "code": ADD, "tests": STDIO, field: value}])
    assert main(["judge", str(src), "--out", str(out)]) == 1
    rec = json.loads(out.read_text())
    assert rec["status"] == "invalid_input" and message in rec["error"]


def test_bad_flags_and_missing_input_fail_with_exit_2(tmp_path, capsys):
    assert main(["judge", str(tmp_path / "absent.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["judge", str(tmp_path / "absent.jsonl"), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "env", "address"), [
    ([], None, "local"),
    (["--address", "10.0.0.5:6379"], "10.0.0.6:6379", "10.0.0.5:6379"),
    ([], "10.0.0.6:6379", "10.0.0.6:6379"),
])
def test_actors_start_a_ray_of_their_own_unless_given_an_address(tmp_path, monkeypatch, flags,
                                                                 env, address):
    # Without address="local", ray.init joins whatever cluster /tmp/ray/ray_current_cluster
    # names: another user's, or a dead one left behind.
    import ray

    class Started(Exception):
        pass

    def init(*args, **kwargs):
        raise Started(kwargs.get("address"))

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    src = tmp_path / "in.jsonl"
    _write(src, LINES[:1])
    with pytest.raises(Started) as started:
        main(["judge", str(src), "--out", str(tmp_path / "out.jsonl"), "--actors", "1", *flags])
    assert started.value.args == (address,)


@pytest.mark.slow
def test_ray_pool_gives_the_same_records_as_the_local_judge(tmp_path):
    import ray

    src = tmp_path / "in.jsonl"
    _write(src, LINES)
    outs = {}
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        for actors in ("0", "2"):
            out = tmp_path / f"out{actors}.jsonl"
            assert main(["judge", str(src), "--out", str(out), "--actors", actors,
                         "--workers", "1", "--all-tests"]) == 1
            outs[actors] = [json.loads(line) for line in out.read_text().splitlines()]
    finally:
        ray.shutdown()

    def shape(records):
        return [(r["id"], r["status"], r["passed"], r["total"]) for r in records]

    assert shape(outs["0"]) == shape(outs["2"])
