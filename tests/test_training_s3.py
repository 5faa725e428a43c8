"""`run.output_dir=s3://...`: checkpoints, the warm-started model and the best model go to the
bucket, the RL actors load the warm-started model from there, and a resumed run continues from
what is there. Against a local S3 server (moto) on loopback; `rlrun train` runs in its own
process so that its Ray workers inherit the S3 endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_training import small_overrides

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

BUCKET = "rlrun-test"


@pytest.fixture
def s3_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    # pyarrow (rlrun's checkpoints, Ray Train's storage) and boto3 both read these.
    env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
               AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://{host}:{port}",
               RLRUN_CACHE=str(tmp_path / "models"))
    client(env).create_bucket(Bucket=BUCKET)
    try:
        yield env
    finally:
        server.stop()


def client(env: dict[str, str]):
    import boto3

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def stored(env: dict[str, str], prefix: str) -> set[str]:
    """The keys under s3://BUCKET/prefix, relative to it."""
    keys: set[str] = set()
    pages = client(env).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    for page in pages:
        keys |= {obj["Key"].removeprefix(prefix) for obj in page.get("Contents", [])}
    return keys


def train(env: dict[str, str], cwd: Path, steps: int, *extra: str) -> str:
    out = f"s3://{BUCKET}/run"
    overrides = [o for o in small_overrides(out, steps=steps) if not o.startswith("run.output")]
    proc = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", f"run.output_dir={out}", "run.name=s3run",
         *overrides, "trainer.checkpoint_every=1", "trainer.eval_k=[1]",
         "sft.enabled=true", "sft.max_steps=2", "sft.eval_every=2", "sft.batch_size=8",
         "reward.audit_before_training=false", "trainer.early_stopping.metric=val/reward_mean",
         "trainer.early_stopping.patience=100",
         *extra],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_an_s3_output_dir_holds_the_checkpoints_and_models_and_a_run_resumes_from_it(
    s3_env, tmp_path
):
    log = train(s3_env, tmp_path, 2)
    keys = stored(s3_env, "run/")
    for key in ("base/model/config.json", "learner/checkpoints.json",
                "learner/step_000002/model/config.json",
                "learner/step_000002/state.json", "sft/model/config.json",
                "sft/model/model.safetensors", "best/model/config.json"):
        assert key in keys, (key, sorted(keys))
    # Metrics stay on the driver's machine; best.json there points into the bucket.
    run_dir = tmp_path / "runs" / "s3run"
    best = json.loads((run_dir / "best.json").read_text())
    assert best["model"] == f"s3://{BUCKET}/run/best/model"
    # The tiny model built here went to the bucket, and the warm-start and the RL actors
    # loaded their models by URI: two downloads in the model cache.
    assert len(list(Path(s3_env["RLRUN_CACHE"]).glob("remote-*/config.json"))) == 2, log[-2000:]
    assert "sft done" in log

    log = train(s3_env, tmp_path, 3, "run.resume=true")
    assert f"starting from the warm-started model in s3://{BUCKET}/run/sft/model" in log
    assert "sft done" not in log
    record = json.loads(_read(s3_env, "run/learner/checkpoints.json"))["checkpoints"]
    assert record[-1] == "step_000003"
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text()
             .splitlines() if "reward/mean" in line]
    assert steps == [0, 1, 2]  # the resumed run trained step 2 only, each step once


def _read(env: dict[str, str], key: str) -> str:
    return client(env).get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
