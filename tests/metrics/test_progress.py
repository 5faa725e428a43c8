"""Progress: a bar only on a terminal (or when asked), plain lines or silence otherwise."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from rlrun.config import MetricsConfig
from rlrun.metrics import MetricsLogger
from rlrun.metrics.progress import bar_enabled, track


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_shows_a_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not bar_enabled("auto")
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert bar_enabled("auto")
    assert bar_enabled("bar") and not bar_enabled("off")


def test_track_prints_plain_lines_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(track(iter("abc"), 3, "eval batches", "auto")) == ["a", "b", "c"]
    assert capsys.readouterr().err == "eval batches: 1/3\neval batches: 2/3\neval batches: 3/3\n"
    assert list(track(iter("ab"), 2, "eval batches", "off")) == ["a", "b"]
    assert capsys.readouterr().err == ""


def test_console_lines_stay_whole_above_the_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = MetricsConfig(tensorboard=False, progress="bar")
    with MetricsLogger(cfg, str(tmp_path), total_steps=4) as logger:
        logger.log(0, {"reward/mean": 0.25})
        logger.log(1, {"reward/mean": 0.5})
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["step=0 reward: 0.25", "step=1 reward: 0.5"]
    assert "2/4" in captured.err and "reward=0.5" in captured.err
