"""PNG curves of a run from its metrics.jsonl rows (matplotlib, Agg backend: no display needed).

Each plot is drawn only when the run logged at least one of its metrics, so a math-only run has
no sandbox plot and a run without validation has no validation curve.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@dataclass(frozen=True)
class PlotSpec:
    name: str  # file stem under run_dir/plots/
    title: str
    keys: Callable[[list[str]], list[str]]  # which logged metric names it draws
    ylabel: str = ""


def _exact(*names: str) -> Callable[[list[str]], list[str]]:
    return lambda logged: [n for n in names if n in logged]


def _prefix(prefix: str, exclude: tuple[str, ...] = ()) -> Callable[[list[str]], list[str]]:
    return lambda logged: sorted(n for n in logged if n.startswith(prefix) and n not in exclude)


def _val_overall(logged: list[str]) -> list[str]:
    """val/accuracy, val/pass@k, ...: one level below val/."""
    return sorted(n for n in logged if n.startswith("val/") and n.count("/") == 1)


def _val_accuracies(turns: bool) -> Callable[[list[str]], list[str]]:
    """val/turn1/accuracy, ... (`turns`: after each turn of a multi-turn run) or
    val/code/accuracy, val/math/greedy_accuracy, ... (each kind's on a mixed set)."""
    return lambda logged: sorted(
        n for n in logged if n.startswith("val/") and n.count("/") == 2
        and n.endswith("accuracy") and n.startswith("val/turn") == turns)


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("reward", "Training reward", _exact("reward/mean", "train/accuracy"), "reward"),
    PlotSpec("validation", "Validation", _val_overall, "score"),
    PlotSpec("validation_by_kind", "Validation by problem kind", _val_accuracies(turns=False),
             "accuracy"),
    PlotSpec("validation_by_turn", "Validation after each turn", _val_accuracies(turns=True),
             "accuracy"),
    PlotSpec("episodes", "Multi-turn episodes",
             _exact("env/solved_first_turn", "env/solved", "env/fix_rate", "env/visible_only"),
             "fraction"),
    PlotSpec("turns", "Turns per episode", _exact("env/turns"), "turns"),
    PlotSpec("reward_components", "Reward components",
             _prefix("reward/", ("reward/mean", "reward/std")), "reward"),
    PlotSpec("length", "Response length",
             _exact("response/len_mean", "response/len_max"), "tokens"),
    PlotSpec("truncation", "Truncated and all-equal fractions",
             _exact("response/truncated_frac", "train/all_equal_frac"), "fraction"),
    PlotSpec("kl", "KL to the reference", _exact("loss/kl"), "nats per token"),
    PlotSpec("entropy", "Policy entropy", _exact("loss/entropy"), "nats per token"),
    PlotSpec("loss", "Policy loss, clip fraction, grad norm",
             _exact("loss/policy", "loss/clip_frac", "optim/grad_norm")),
    PlotSpec("phase_times", "Time per phase", _prefix("perf/time_"), "seconds per step"),
    PlotSpec("throughput", "Throughput",
             _exact("perf/rollout_tokens_per_s", "perf/train_tokens_per_s"), "tokens/s"),
    # Verdict counts and actor restarts per step on one axis, the test rate on its own.
    PlotSpec("sandbox", "Sandbox verdicts", _prefix("sandbox/", ("sandbox/tests_per_s",)),
             "count per step"),
    PlotSpec("sandbox_rate", "Sandbox throughput", _exact("sandbox/tests_per_s"), "tests/s"),
)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines log (metrics.jsonl, samples.jsonl), in file order. A last line cut
    short (the writer was killed mid-line) is left out with a warning; a broken line anywhere
    else is an error naming it."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    rows = []
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if line_no == len(lines) and not text.endswith("\n"):
                print(f"warning: {path} line {line_no} was cut short and is left out",
                      file=sys.stderr)
                break
            raise ValueError(f"{path} line {line_no} is not JSON: {err.msg}") from None
    return rows


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric in step order, skipping rows without it and non-finite
    (null) values. A step logged twice (a resumed run re-doing steps after its last
    checkpoint) keeps its last value."""
    by_step: dict[int, float] = {}
    for row in rows:
        value = row.get(key)
        if isinstance(value, int | float):
            by_step[int(row["step"])] = float(value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def _draw(spec: PlotSpec, rows: list[dict[str, Any]], keys: list[str], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    for key in keys:
        steps, values = series(rows, key)
        marker = "o" if len(steps) < 30 else None
        ax.plot(steps, values, label=key, marker=marker, markersize=3, linewidth=1.4)
        if key == "reward/mean":
            std_steps, std = series(rows, "reward/std")
            by_step = dict(zip(std_steps, std, strict=True))
            if by_step:
                pairs = [(s, v, by_step[s]) for s, v in zip(steps, values, strict=True)
                         if s in by_step]
                ax.fill_between([p[0] for p in pairs], [p[1] - p[2] for p in pairs],
                                [p[1] + p[2] for p in pairs], alpha=0.2, label="± reward/std")
    ax.set_title(spec.title)
    ax.set_xlabel("step")
    ax.set_ylabel(spec.ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def write_plots(rows: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Draw every plot whose metrics appear in `rows` into `out_dir`; returns the PNG paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    logged = sorted({k for row in rows for k in row if k not in ("step", "time")})
    written = []
    for spec in PLOTS:
        keys = [k for k in spec.keys(logged) if series(rows, k)[0]]
        if keys:
            path = out_dir / f"{spec.name}.png"
            _draw(spec, rows, keys, path)
            written.append(path)
    return written
