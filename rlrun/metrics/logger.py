"""MetricsLogger: one call per step fans metrics out to every enabled sink.

Always `run_dir/metrics.jsonl` (the report and tests read it) and a `key: value` line per step
in `run_dir/train.log` (`rlrun train` adds its summary at the end), which stdout shows as
`metrics.console` says (`full`: that line, which log scrapers such as SageMaker's read; `short`:
the few numbers that tell a run's health); TensorBoard under `run_dir/tensorboard/`, MLflow and
Weights & Biases when enabled. Sample completions go to `run_dir/samples.jsonl` for the report.
Metric names are the flat namespace of docs/metrics.md.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from omegaconf import OmegaConf
from tqdm import tqdm

from rlrun.config import ConfigError, MetricsConfig
from rlrun.errors import first_line
from rlrun.metrics.progress import bar_enabled, make_bar
from rlrun.records import VERDICT_STATUSES

# The documented namespace (docs/metrics.md), with one example of each templated name.
STANDARD_METRICS: tuple[str, ...] = (
    "reward/mean", "reward/std", "reward/correctness", "train/accuracy", "train/all_equal_frac",
    "response/len_mean", "response/len_max", "response/truncated_frac", "loss/policy",
    "loss/kl", "loss/entropy", "loss/clip_frac", "loss/is_weight_mean", "loss/is_weight_max",
    "optim/grad_norm", "optim/lr", "async/staleness_mean", "async/staleness_max",
    "perf/time_generate", "perf/time_reward", "perf/time_train", "perf/time_sync",
    "perf/time_step", "perf/samples_per_s",
    "perf/rollout_tokens_per_s", "perf/train_tokens_per_s", "sandbox/tests_per_s",
    *(f"sandbox/{status}" for status in VERDICT_STATUSES), "val/accuracy", "val/pass@1",
)
# Console order: the headline numbers first, then each namespace in this order, names sorted
# within a namespace. An entry ending in "/" or "@" is a prefix.
_ORDER = (
    "reward/mean", "val/pass@", "val/accuracy", "train/accuracy", "reward/std", "reward/",
    "train/", "steps/", "val/", "response/", "loss/", "optim/", "async/", "perf/", "sandbox/",
)
# Short console names: `reward: 0.43 pass@1: 0.41` read better than the full names.
_ALIASES = {"reward/mean": "reward"}
SAMPLE_KEYS = ("problem_id", "prompt", "response", "reward", "components")
# The short console line (`metrics.console: short`): is it learning, how fast...
SHORT_METRICS = (
    "reward/mean", "val/accuracy", "train/accuracy", "loss/kl", "perf/time_step",
    "perf/samples_per_s",
)
# ... and, on the steps that have any, work that was lost or left out (prefixes end in "@").
SHORT_PREFIXES = ("val/pass@",)
SHORT_IF_NONZERO = (
    "train/unscored", "val/unscored", "train/bad_steps", "train/stopped_bad_steps",
    "async/dropped_samples", "sandbox/sandbox_error",
)


def console_name(name: str) -> str:
    """The name a metric carries on the console line."""
    return name.removeprefix("val/") if name.startswith("val/pass@") else _ALIASES.get(name, name)


def _rank(name: str) -> tuple[int, str]:
    for i, entry in enumerate(_ORDER):
        if name == entry or (entry[-1] in "/@" and name.startswith(entry)):
            return i, name
    return len(_ORDER), name


def _fmt(value: float) -> str:
    return str(value) if isinstance(value, int) else format(value, ".4g")  # nan, inf, -inf too


def format_console_line(step: int, metrics: dict[str, float]) -> str:
    """`step=12 reward: 0.43 pass@1: 0.41 loss/kl: 0.001 ...` in a fixed order."""
    parts = [f"step={step}"]
    parts += [f"{console_name(k)}: {_fmt(metrics[k])}" for k in sorted(metrics, key=_rank)]
    return " ".join(parts)


def short_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics of the short console line, in the full line's names and order: so a
    scraper of the full line reads the short one too."""
    return {
        k: v for k, v in metrics.items()
        if k in SHORT_METRICS or k.startswith(SHORT_PREFIXES) or (k in SHORT_IF_NONZERO and v)
    }


def _number(step: int, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(name, str):
        raise TypeError(f"metric {name!r} at step {step} is {value!r}: log numbers under str names")
    if isinstance(value, int):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"metric {name!r} at step {step} is {type(value).__name__} {value!r}: log numbers only"
        ) from None


def _require(module: str, key: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"{key}=true but the {module} package is not installed: "
            f"pip install {module} (or set {key}=false)"
        ) from None


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, int | float | str | bool) else str(v)
    return out


def _step_of(line: str) -> int | None:
    """The step of a JSON-lines row; None for a line cut short by a killed writer."""
    try:
        return int(json.loads(line)["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _keep_rows_before(path: Path, step: int) -> bool:
    """Rewrite the JSON-lines file `path` with only its rows of steps before `step`; whether
    any row went (if none, the file is left as it is)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if (s := _step_of(line)) is not None and s < step]
    if len(kept) == len(lines):
        return False
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text("".join(kept), encoding="utf-8")
    scratch.replace(path)
    return True


class _TensorBoard:
    def __init__(self, log_dir: Path, config_yaml: str | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir=str(log_dir))
        if config_yaml is not None:
            # Indented so TensorBoard's markdown renders it as a code block.
            self.writer.add_text("config", "    " + config_yaml.replace("\n", "\n    "), 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def rewind(self, step: int) -> None:
        """TensorBoard hides the events of `step` and later written before this."""
        self.writer.close()
        self.writer = type(self.writer)(log_dir=str(self.log_dir), purge_step=step)

    def close(self) -> None:
        self.writer.close()


class _MLflow:
    def __init__(self, project: str, run_name: str, config: dict[str, Any] | None) -> None:
        self.mlflow = _require("mlflow", "metrics.mlflow")
        try:
            self.mlflow.set_experiment(project)
            self.mlflow.start_run(run_name=run_name)
        except Exception as err:
            raise ConfigError(
                f"metrics.mlflow=true but MLflow cannot use its tracking store "
                f"{self.mlflow.get_tracking_uri()!r} ({first_line(err)}): set "
                "MLFLOW_TRACKING_URI to your server (http://...) or a local store "
                "(sqlite:///mlflow.db with the full mlflow package; file:/path with "
                "MLFLOW_ALLOW_FILE_STORE=true)"
            ) from None
        if config:
            self.mlflow.log_params(_flatten(config))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        # MLflow metric names may not contain "@".
        self.mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class _Wandb:
    def __init__(
        self, project: str, run_name: str, config: dict[str, Any] | None, run_dir: Path
    ) -> None:
        self.wandb = _require("wandb", "metrics.wandb")
        try:
            self.run = self.wandb.init(project=project, name=run_name, config=config,
                                       dir=str(run_dir))
        except Exception as err:
            raise ConfigError(
                f"metrics.wandb=true but W&B could not start a run ({first_line(err)}): run "
                "`wandb login`, or set WANDB_MODE=offline and `wandb sync` the run later"
            ) from None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MetricsLogger:
    """Writes each step's metrics to metrics.jsonl and every sink `cfg` enables.

    `config` (the resolved run config as a dict) is saved as run_dir/config.yaml, shown in
    TensorBoard and logged as MLflow params / W&B config. `total_steps` sizes the progress bar
    (steps count from 0, as `rlrun train` numbers them).
    """

    def __init__(
        self,
        cfg: MetricsConfig,
        run_dir: str,
        config: dict[str, Any] | None = None,
        total_steps: int | None = None,
    ) -> None:
        self.cfg = cfg
        # Fail on a missing optional package before any sink has started.
        for enabled, module in ((cfg.mlflow, "mlflow"), (cfg.wandb, "wandb")):
            if enabled:
                _require(module, f"metrics.{module}")
        # The bar starts with the first step: the logger opens before Ray and any warm-start,
        # whose own output it would otherwise sit under.
        self._bar: tqdm | None = None
        self._bar_wanted = bar_enabled(cfg.progress)
        self._total_steps = total_steps
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_yaml = None
        if config is not None:
            config_yaml = OmegaConf.to_yaml(OmegaConf.create(config))
            (self.run_dir / "config.yaml").write_text(config_yaml)
        run_name = str((config or {}).get("run", {}).get("name", self.run_dir.name))
        self._sinks: list[_TensorBoard | _MLflow | _Wandb] = []
        try:
            if cfg.tensorboard:
                self._sinks.append(_TensorBoard(self.run_dir / "tensorboard", config_yaml))
            if cfg.mlflow:
                self._sinks.append(_MLflow(cfg.project, run_name, config))
            if cfg.wandb:
                self._sinks.append(_Wandb(cfg.project, run_name, config, self.run_dir))
        except BaseException:
            for sink in self._sinks:  # no MLflow run left open when W&B cannot start
                sink.close()
            raise
        self._metrics = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        self._samples = open(self.run_dir / "samples.jsonl", "a", encoding="utf-8")
        self._text = open(self.run_dir / "train.log", "a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record one step. Non-finite values are written to JSONL as null."""
        clean = {k: _number(step, k, v) for k, v in metrics.items()}
        row = {"step": step, "time": round(time.time(), 3)}
        row |= {k: (v if math.isfinite(v) else None) for k, v in clean.items()}
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()
        for sink in self._sinks:
            sink.log(step, clean)
        if self._bar is None and self._bar_wanted:
            self._bar = make_bar(self.cfg.progress, self._total_steps, "train")
        line = format_console_line(step, clean)
        self._text.write(line + "\n")
        self._text.flush()
        if self.cfg.console != "off":
            if self.cfg.console == "short":
                line = format_console_line(step, short_metrics(clean))
            if self._bar is not None:
                tqdm.write(line, file=sys.stdout)
            else:
                print(line, flush=True)
        if self._bar is not None:
            # Steps count from 0, so step s means s + 1 done (also right after a resume).
            if "reward/mean" in clean:
                self._bar.set_postfix(reward=_fmt(clean["reward/mean"]), refresh=False)
            self._bar.update(max(step + 1 - self._bar.n, 0))

    def rewind(self, step: int) -> None:
        """Forget what was logged for `step` and later: a resumed run, or one whose learner
        restarted from a checkpoint, trains those steps again and logs them anew, so that each
        step is in the logs once. metrics.jsonl and samples.jsonl are rewritten without those
        rows, TensorBoard hides them; train.log keeps its lines (it is the run's history), and
        MLflow and W&B keep what they were sent."""
        self._metrics.close()
        self._samples.close()
        logged = _keep_rows_before(self.run_dir / "metrics.jsonl", step)
        _keep_rows_before(self.run_dir / "samples.jsonl", step)
        self._metrics = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        self._samples = open(self.run_dir / "samples.jsonl", "a", encoding="utf-8")
        # A fresh run has nothing to hide: no second TensorBoard writer (and events file).
        for sink in self._sinks:
            if logged and isinstance(sink, _TensorBoard):
                sink.rewind(step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Append completions with their rewards to samples.jsonl, keeping every completion of
        the first `metrics.sample_problems` problems seen in `rows`."""
        keep: list[str] = []
        for row in rows:
            missing = [k for k in SAMPLE_KEYS if k not in row]
            if missing:
                raise ValueError(
                    f"log_samples row at step {step} lacks {', '.join(missing)}; "
                    f"each row needs {', '.join(SAMPLE_KEYS)}"
                )
            pid = str(row["problem_id"])
            if pid not in keep:
                if self.cfg.sample_problems and len(keep) >= self.cfg.sample_problems:
                    continue
                keep.append(pid)
            self._samples.write(json.dumps({"step": step, **row}, default=str) + "\n")
        self._samples.flush()

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()
        self._metrics.close()
        self._samples.close()
        self._text.close()
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
