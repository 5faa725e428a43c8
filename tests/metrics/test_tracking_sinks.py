"""MLflow and Weights & Biases for real: the logger's steps and config read back from an MLflow
file store and from a W&B offline run, and a store that cannot be used fails in one line."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest

from rlrun.config import ConfigError, MetricsConfig, load_config
from rlrun.metrics import MetricsLogger
from rlrun.training import run_training

CONFIG = {"run": {"name": "sinks"}, "algo": {"kl_coef": 0.1, "group_size": 4}}
STEPS = [{"reward/mean": 0.25 * s, "val/pass@1": 0.5 + 0.1 * s} for s in range(3)]


def _log(tmp_path: Path, **sinks: bool) -> None:
    cfg = MetricsConfig(console="off", progress="off", tensorboard=False, project="rlrun-test",
                        **sinks)
    with MetricsLogger(cfg, str(tmp_path / "run"), CONFIG) as logger:
        for step, metrics in enumerate(STEPS):
            logger.log(step, metrics)


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # MLflow 3 keeps the file store but asks for this before it uses one.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def test_mlflow_file_store_holds_every_step_and_the_config(tmp_path: Path, mlflow_store: str):
    _log(tmp_path, mlflow=True)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_store)
    [run] = client.search_runs([client.get_experiment_by_name("rlrun-test").experiment_id])
    assert run.info.run_name == "sinks" and run.info.status == "FINISHED"
    assert run.data.params == {"run.name": "sinks", "algo.kl_coef": "0.1", "algo.group_size": "4"}
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [(m.step, m.value) for m in history] == [(s, m["reward/mean"]) for s, m in
                                                    enumerate(STEPS)]
    # MLflow forbids "@" in names.
    passk = client.get_metric_history(run.info.run_id, "val/pass_at_1")
    assert [m.value for m in passk] == pytest.approx([m["val/pass@1"] for m in STEPS])


def test_an_mlflow_store_that_cannot_be_used_is_one_line_before_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://nowhere")
    with pytest.raises(ConfigError) as err:
        _log(tmp_path, mlflow=True)
    message = str(err.value)
    assert "\n" not in message and "MLFLOW_TRACKING_URI" in message
    assert "nosuchscheme://nowhere" in message
    cfg = load_config(None, [f"run.output_dir={tmp_path / 'out'}", "data.train=toy:arithmetic",
                             "data.toy_size=16", "data.val_size=4", "metrics.mlflow=true"])
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        run_training(cfg)
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B run file (`run-<id>.wandb`): a 7-byte header, then LevelDB's log
    format: 32 KiB blocks of chunks, each a 4-byte checksum, a 2-byte length and a 1-byte type
    (1 a whole record; 2, 3, 4 its first, middle and last pieces); a block's last bytes are
    padding when fewer than a chunk header is left. A chunk not yet whole ends the list."""
    raw, block, header = path.read_bytes(), 32768, 7
    assert raw[:4] == b":W&B"
    records, pending, pos = [], b"", header
    while pos + header <= len(raw):
        if block - pos % block < header:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + header])
        if pos + header + length > len(raw):  # still being written
            break
        pending += raw[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


def test_wandb_offline_run_holds_every_step_and_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for var, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                       "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
                       "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
                       "WANDB_DATA_DIR": str(tmp_path / "wandb-data")}.items():
        monkeypatch.setenv(var, value)
    _log(tmp_path, wandb=True)
    from wandb.proto import wandb_internal_pb2

    [path] = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    # W&B's service may still be writing the file when `finish` returns: it is whole once the
    # run's exit record, written last, is in.
    deadline = time.monotonic() + 30
    while True:
        records = []
        for data in _wandb_records(path):
            records.append(wandb_internal_pb2.Record())
            records[-1].ParseFromString(data)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"{path} has no exit record after 30 s"
        time.sleep(0.2)
    history, runs = [], []
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            # W&B writes a name as `key` or as `nested_key` (its parts), run to run.
            history.append({item.key or ".".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "run":
            runs.append(record.run)
    [run] = runs
    assert run.display_name == "sinks" and run.project == "rlrun-test"
    config = {item.key or ".".join(item.nested_key): json.loads(item.value_json)
              for item in run.config.update}
    assert config["algo"] == CONFIG["algo"] and config["run"] == CONFIG["run"]
    assert [row["_step"] for row in history] == [0, 1, 2]
    for row, metrics in zip(history, STEPS, strict=True):
        assert row["reward/mean"] == pytest.approx(metrics["reward/mean"])
        assert row["val/pass@1"] == pytest.approx(metrics["val/pass@1"])
