"""`rlrun check-rewards` end to end on fixture datasets: table, summary line, exit status."""

from pathlib import Path

from rlrun.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rewards"
GSM8K = str(FIXTURES / "gsm8k_test_subset.jsonl")


def test_gsm8k_references_pass_and_the_summary_is_the_last_line(capsys):
    rc = main(["check-rewards", "--data", GSM8K, "--limit", "20"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert lines[-1] == "reference: 20/20 passed, wrong: 0/20 passed"
    assert any(line.startswith("reference ") and "100.0%" in line for line in lines)


def test_overrides_without_a_config_file_and_a_failing_audit_exits_non_zero(capsys):
    rc = main(["check-rewards", "reward.math_extractor=boxed", "--data", GSM8K, "--limit", "3"])
    out = capsys.readouterr()
    assert rc == 1
    assert out.out.strip().splitlines()[-1] == "reference: 0/3 passed, wrong: 0/3 passed"
    assert "reward.audit_min_pass_rate" in out.err


def test_threshold_comes_from_the_config(capsys):
    args = ["check-rewards", "reward.math_extractor=boxed", "reward.audit_min_pass_rate=0.0"]
    assert main([*args, "--data", GSM8K, "--limit", "3"]) == 0


def test_humaneval_canonical_solutions_pass_in_the_sandbox(capsys):
    rc = main(["check-rewards", "--data", str(FIXTURES / "humaneval_subset.jsonl")])
    assert rc == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "reference: 8/8 passed, wrong: 0/8 passed")


def test_step_rewards_add_the_step_audit_line_before_the_summary(capsys):
    rc = main(["check-rewards", "reward.step_rewards=true", "--data", GSM8K, "--limit", "20"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert lines[-1] == "reference: 20/20 passed, wrong: 0/20 passed"
    assert lines[-2].startswith("steps: ") and lines[-2].endswith("caught at their step (100.00%)")
    assert any(line.startswith("step audit of 20 worked solutions") for line in lines)
