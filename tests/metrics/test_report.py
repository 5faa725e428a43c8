"""report.html (read without a browser): references every plot, embeds the config and samples."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from rlrun.metrics.report import pick_samples, write_report


def test_report_references_every_plot_and_embeds_the_config(run_dir: Path) -> None:
    path = Path(write_report(str(run_dir)))
    assert path == run_dir / "report.html"
    page = path.read_text()
    plots = sorted((run_dir / "plots").glob("*.png"))
    assert len(plots) >= 5
    for png in plots:
        rel = f"plots/{png.name}"
        assert f'href="{rel}"' in page and f'data-file="{rel}"' in page
        embedded = base64.b64encode(png.read_bytes()).decode()
        assert f"data:image/png;base64,{embedded}" in page
    config = re.search(r'<pre id="config">(.*?)</pre>', page, re.S)
    assert config and "name: synthetic" in config.group(1) and "group_size: 8" in config.group(1)
    assert "<h3>Best (step 30)</h3>" in page and "Most improved" in page
    # No external resources: everything the page shows is inside it.
    assert not re.search(r'src="(?!data:)', page)


def test_report_includes_eval_tables_and_flips(run_dir: Path) -> None:
    summary = {
        "model": "runs/x/checkpoints/step_30", "split": "val", "samples": 4, "greedy": True,
        "overall": {"problems": 2, "greedy_accuracy": 0.5, "accuracy": 0.375, "pass@1": 0.375},
        "breakdowns": {"source": {"toy": {"problems": 2, "greedy_accuracy": 0.5,
                                          "accuracy": 0.375, "pass@1": 0.375}}},
        "flips": [{"problem_id": "toy-7", "before": 0.0, "after": 1.0, "fixed": True}],
    }
    (run_dir / "eval_val_step_30.json").write_text(json.dumps(summary))
    page = Path(write_report(str(run_dir))).read_text()
    assert "eval_val_step_30.json" in page and "source=toy" in page
    assert "<td>toy-7</td><td>fixed</td>" in page


def test_pick_samples_best_worst_and_most_improved() -> None:
    def row(step: int, pid: str, reward: float) -> dict:
        return {"step": step, "problem_id": pid, "prompt": "q", "response": f"{pid}@{step}",
                "reward": reward, "components": {}}

    rows = [row(1, "a", 0.0), row(1, "b", 0.5), row(2, "a", 1.0), row(2, "b", 0.25),
            row(2, "c", 0.75), row(2, "a", 0.0)]
    picked = pick_samples(rows)
    assert [r["response"] for r in picked["best"]] == ["a@2", "c@2", "b@2"]
    assert [r["reward"] for r in picked["worst"]] == [0.0, 0.25, 0.75]
    # a: 0.0 -> mean(1.0, 0.0) = 0.5 improved; b got worse; c seen once.
    [improved] = picked["most_improved"]
    assert improved["problem_id"] == "a" and improved["reward"] == 1.0
    assert improved["first_reward"] == 0.0 and improved["first_step"] == 1


def test_report_on_a_directory_without_metrics_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run directory"):
        write_report(str(tmp_path))


def test_report_colours_each_step_of_a_response_by_its_verdict(tmp_path: Path) -> None:
    from rlrun.config import MetricsConfig
    from rlrun.metrics import MetricsLogger

    response = "2 + 3 = 5\n5 * 2 = 11 <b>\n#### 11"
    steps = [{"text": "2 + 3 = 5", "verdict": "correct", "start": 0, "end": 9},
             {"text": "5 * 2 = 11 <b>", "verdict": "wrong", "start": 10, "end": 24},
             {"text": "#### 11", "verdict": "uncheckable", "start": 25, "end": 32}]
    with MetricsLogger(MetricsConfig(console="off", progress="off"), str(tmp_path), {},
                       total_steps=1) as logger:
        logger.log(1, {"reward/mean": 0.0, "steps/wrong_frac": 0.5})
        logger.log_samples(1, [{"problem_id": "p", "prompt": "q", "response": response,
                                "reward": 0.0, "components": {"correctness": 0.0},
                                "steps": steps}])
    page = Path(write_report(str(tmp_path))).read_text()
    assert ('<pre><span class="correct" title="correct">2 + 3 = 5</span>\n'
            '<span class="wrong" title="wrong">5 * 2 = 11 &lt;b&gt;</span>\n'
            '<span class="uncheckable" title="uncheckable">#### 11</span></pre>') in page
    assert "steps: 3, 1 correct, 1 wrong, first wrong: step 2" in page
