"""Plots: one PNG per family of logged metrics, none for families the run never logged."""

from __future__ import annotations

from pathlib import Path

from rlrun.metrics.plots import PLOTS, read_metrics, series, write_plots


def test_plots_cover_the_logged_families(run_dir: Path, tmp_path: Path) -> None:
    rows = read_metrics(run_dir / "metrics.jsonl")
    written = write_plots(rows, tmp_path / "plots")
    names = {p.stem for p in written}
    assert {"reward", "validation", "length", "kl", "phase_times"} <= names
    assert "sandbox" not in names and "sandbox_rate" not in names  # the run is math only
    assert "validation_by_kind" not in names  # and has one kind
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sandbox_counts_and_rates_get_plots_of_their_own() -> None:
    logged = ["sandbox/passed", "sandbox/time_limit", "sandbox/recreated", "sandbox/tests_per_s",
              "loss/kl", "loss/entropy"]
    keys = {spec.name: spec.keys(logged) for spec in PLOTS}
    assert keys["sandbox"] == ["sandbox/passed", "sandbox/recreated", "sandbox/time_limit"]
    assert keys["sandbox_rate"] == ["sandbox/tests_per_s"]
    assert keys["kl"] == ["loss/kl"] and keys["entropy"] == ["loss/entropy"]


def test_a_multi_turn_run_gets_its_episodes_and_validation_after_each_turn() -> None:
    logged = ["val/accuracy", "val/turn1/accuracy", "val/turn2/accuracy", "val/turn2/pass@4",
              "env/turns", "env/solved_first_turn", "env/solved", "env/fix_rate",
              "env/visible_only", "env/unjudged"]
    keys = {spec.name: spec.keys(logged) for spec in PLOTS}
    assert keys["validation"] == ["val/accuracy"]
    assert keys["validation_by_turn"] == ["val/turn1/accuracy", "val/turn2/accuracy"]
    assert keys["validation_by_kind"] == []
    assert keys["episodes"] == ["env/solved_first_turn", "env/solved", "env/fix_rate",
                                "env/visible_only"]
    assert keys["turns"] == ["env/turns"]


def test_series_skips_rows_without_the_metric_and_nulls() -> None:
    rows = [{"step": 1, "a": 1.0}, {"step": 2, "b": 3.0}, {"step": 3, "a": None},
            {"step": 4, "a": 2}]
    assert series(rows, "a") == ([1, 4], [1.0, 2.0])


def test_series_of_a_resumed_run_keeps_the_last_value_per_step() -> None:
    rows = [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0}, {"step": 3, "a": 3.0},
            {"step": 2, "a": 2.5}, {"step": 3, "a": 3.5}]
    assert series(rows, "a") == ([1, 2, 3], [1.0, 2.5, 3.5])


def test_validation_on_a_mixed_set_gets_a_plot_per_kind_beside_the_overall_one() -> None:
    logged = ["val/accuracy", "val/pass@4", "val/math/accuracy", "val/math/greedy_accuracy",
              "val/math/pass@4", "val/code/accuracy", "reward/mean"]
    specs = {spec.name: spec for spec in PLOTS}
    assert specs["validation"].keys(logged) == ["val/accuracy", "val/pass@4"]
    assert specs["validation_by_kind"].keys(logged) == [
        "val/code/accuracy", "val/math/accuracy", "val/math/greedy_accuracy"
    ]


def test_a_last_line_cut_short_is_left_out_and_a_broken_middle_line_is_an_error(
    tmp_path: Path, capsys
) -> None:
    import pytest

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 0, "a": 1.0}\n{"step": 1, "a": 2.0}\n{"step": 2, "a"')
    assert read_metrics(log) == [{"step": 0, "a": 1.0}, {"step": 1, "a": 2.0}]
    assert "line 3 was cut short" in capsys.readouterr().err
    log.write_text('{"step": 0, "a": 1.0}\n{"step": 1, "a\n{"step": 2, "a": 3.0}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_metrics(log)
