"""The run report: PNG curves in run_dir/plots/ and one self-contained run_dir/report.html.

The page embeds everything it shows (plots as base64 images, each also linked by file name, so
the page works when mailed alone and the PNGs can be reused), the run's config, sample
completions with their rewards (best and worst of the last logged step, and the most improved
problems; with step rewards each step of a response is coloured by its verdict: green correct,
red wrong, grey uncheckable), and the tables of any eval*.json summaries `rlrun eval` left in
the run directory.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from statistics import fmean
from typing import Any

from rlrun.evaluation import format_table
from rlrun.metrics.plots import read_metrics, write_plots

SHOWN = 3  # completions per sample table
MAX_CHARS = 3000  # of a prompt or response shown in the page
_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
figure{display:inline-block;margin:.5em;vertical-align:top}figcaption{font-size:.85em}
img{max-width:520px;border:1px solid #eee}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top;font-size:.9em}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:.85em;white-space:pre-wrap}
.num{text-align:right;font-variant-numeric:tabular-nums}
.correct{background:#e6f4ea}.wrong{background:#fce8e6;text-decoration:underline wavy #c5221f}
.uncheckable{color:#555}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else _esc(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="num">{_fmt(c)}</td>' if isinstance(c, int | float) else f"<td>{c}</td>"
            for c in row
        ) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _plots_html(plots: list[Path], run_dir: Path) -> str:
    figures = []
    for path in plots:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        rel = path.relative_to(run_dir).as_posix()
        figures.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{_esc(path.stem)}" '
            f'data-file="{_esc(rel)}"><figcaption><a href="{_esc(rel)}">{_esc(rel)}</a>'
            "</figcaption></figure>"
        )
    return "\n".join(figures) or "<p>No metrics logged yet.</p>"


def _final_metrics(rows: list[dict[str, Any]]) -> str:
    last: dict[str, Any] = {}
    for row in rows:
        last |= {k: (row["step"], v) for k, v in row.items() if k not in ("step", "time")}
    table_rows = [[_esc(k), step, v if v is not None else "nan/inf"]
                  for k, (step, v) in sorted(last.items())]
    return _table(["metric", "step", "last value"], table_rows)


def _clip(text: Any) -> str:
    text = str(text)
    if len(text) <= MAX_CHARS:
        return text
    return text[:MAX_CHARS] + f"\n... ({len(text) - MAX_CHARS} more characters in samples.jsonl)"


def _sample_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [r["step"], _esc(r["problem_id"]), float(r["reward"]),
         f"<pre>{_esc(_clip(r['prompt']))}</pre>", f"<pre>{_response_html(r)}</pre>",
         _esc(", ".join(f"{k}={'none' if v is None else format(v, '.3g')}"
                        for k, v in (r.get("components") or {}).items()))
         + _steps_summary(r.get("steps"))]
        for r in rows
    ]


def _response_html(row: dict[str, Any]) -> str:
    """The response, escaped, each checked step in a span of its verdict's class."""
    text, steps = _clip(row["response"]), row.get("steps") or []
    out, pos = [], 0
    for s in steps:
        start, end = s["start"], min(s["end"], len(text))
        if start < pos or start >= end:
            continue
        out.append(_esc(text[pos:start]))
        out.append(f'<span class="{_esc(s["verdict"])}" title="{_esc(s["verdict"])}">'
                   f"{_esc(text[start:end])}</span>")
        pos = end
    out.append(_esc(text[pos:]))
    return "".join(out)


def _steps_summary(steps: list[dict[str, Any]] | None) -> str:
    if not steps:
        return ""
    counts = {v: sum(s["verdict"] == v for s in steps) for v in ("correct", "wrong")}
    first = next((k for k, s in enumerate(steps) if s["verdict"] == "wrong"), None)
    where = f", first wrong: step {first + 1}" if first is not None else ""
    return (f"<br>steps: {len(steps)}, {counts['correct']} correct, {counts['wrong']} "
            f"wrong{where}")


def pick_samples(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Best and worst completions of the last logged step, and per most-improved problem the
    best completion of its last step (with `first_reward`: its mean reward when first seen).
    Completions the reward could not score (reward null) are not ranked."""
    rows = [r for r in rows if r["reward"] is not None]
    if not rows:
        return {"best": [], "worst": [], "most_improved": []}
    last_step = max(r["step"] for r in rows)
    last = sorted((r for r in rows if r["step"] == last_step), key=lambda r: -float(r["reward"]))
    by_problem: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for r in rows:
        by_problem.setdefault(str(r["problem_id"]), {}).setdefault(r["step"], []).append(r)
    improved = []
    for steps in by_problem.values():
        if len(steps) < 2:
            continue
        first, latest = steps[min(steps)], steps[max(steps)]
        before = fmean(float(r["reward"]) for r in first)
        gain = fmean(float(r["reward"]) for r in latest) - before
        if gain > 0:
            best = max(latest, key=lambda r: float(r["reward"]))
            improved.append((gain, best | {"first_reward": before, "first_step": min(steps)}))
    improved.sort(key=lambda pair: -pair[0])
    return {
        "best": last[:SHOWN],
        "worst": last[::-1][:SHOWN],
        "most_improved": [r for _, r in improved[:SHOWN]],
    }


def _samples_html(rows: list[dict[str, Any]]) -> str:
    picked = pick_samples(rows)
    if not rows:
        return "<p>No samples.jsonl in this run.</p>"
    if not picked["best"]:
        return "<p>No scored sample in samples.jsonl.</p>"
    header = ["step", "problem", "reward", "prompt", "response", "components"]
    parts = [f"<h3>Best (step {picked['best'][0]['step']})</h3>",
             _table(header, _sample_rows(picked["best"])),
             f"<h3>Worst (step {picked['worst'][0]['step']})</h3>",
             _table(header, _sample_rows(picked["worst"])), "<h3>Most improved</h3>"]
    if picked["most_improved"]:
        rows_html = _sample_rows(picked["most_improved"])
        for row, r in zip(rows_html, picked["most_improved"], strict=True):
            row.insert(3, f"{r['first_reward']:.3g} at step {r['first_step']}")
        parts.append(_table(header[:3] + ["first seen"] + header[3:], rows_html))
    else:
        parts.append("<p>No problem was sampled at two steps with a higher reward later.</p>")
    return "\n".join(parts)


def _evals_html(run_dir: Path) -> str:
    parts = []
    for path in sorted(run_dir.glob("eval*.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))
        info = ", ".join(f"{k}={summary[k]}" for k in ("model", "split", "samples", "greedy")
                         if k in summary)
        parts.append(f"<h3>{_esc(path.name)}</h3><p>{_esc(info)}</p>"
                     f"<pre>{_esc(format_table(summary))}</pre>")
        flips = summary.get("flips")
        if flips:
            parts.append(_table(
                ["problem", "change", "before", "after"],
                [[_esc(f["problem_id"]), "fixed" if f["fixed"] else "broken",
                  float(f["before"]), float(f["after"])] for f in flips],
            ))
    return "\n".join(parts) or "<p>No eval*.json in this run directory.</p>"


def write_report(run_dir: str) -> str:
    """Write run_dir/plots/*.png and run_dir/report.html; returns the report's path."""
    root = Path(run_dir)
    metrics_path = root / "metrics.jsonl"
    if not metrics_path.is_file():
        raise FileNotFoundError(
            f"{metrics_path} not found: pass a run directory (the run.output_dir of a training run)"
        )
    rows = read_metrics(metrics_path)
    plots = write_plots(rows, root / "plots")
    config_path, samples_path = root / "config.yaml", root / "samples.jsonl"
    config = (config_path.read_text(encoding="utf-8") if config_path.is_file()
              else "(no config.yaml)")
    samples = read_metrics(samples_path) if samples_path.is_file() else []
    steps = [r["step"] for r in rows]
    title = f"rlrun report: {root.resolve().name}"
    span = f"steps {min(steps)}–{max(steps)}, {len(rows)} metric rows" if rows else "no steps"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{_esc(title)}</h1><p>{_esc(span)}</p>
<h2>Curves</h2>
{_plots_html(plots, root)}
<h2>Evaluations</h2>
{_evals_html(root)}
<h2>Sample completions</h2>
{_samples_html(samples)}
<h2>Last value of every metric</h2>
{_final_metrics(rows)}
<h2>Config</h2>
<pre id="config">{_esc(config)}</pre>
</body></html>
"""
    out = root / "report.html"
    out.write_text(page, encoding="utf-8")
    return str(out)
