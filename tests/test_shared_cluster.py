"""Two runs of the demo recipe, started at the same time against one `ray start --head`
cluster (with token authentication, as Ray 2.60 starts it), both finish: actor and placement
group names carry each run's own tag, so same-named runs never collide."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parent.parent / "conf" / "demo.yaml"
SHORT = [
    "sft.enabled=false", "reward.audit_before_training=false", "trainer.steps=2",
    "trainer.eval_every=0", "data.toy_size=64", "data.val_size=4", "trainer.eval_samples=2",
    "trainer.eval_k=[1]", "algo.prompts_per_step=4", "rollout.sampling.max_new_tokens=16",
    "metrics.tensorboard=false", "metrics.report=false",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head(tmp_path_factory):
    """A `ray start --head` node of its own (its own temp dir and token), and the environment
    a driver needs to join it."""
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    # Ray's socket paths must stay short, so its temp dir is not under pytest's tmp_path.
    temp = tempfile.mkdtemp(prefix="rlrun-ray-")
    port = free_port()
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16),
               RLRUN_CACHE=str(tmp_path_factory.mktemp("models")))
    node = subprocess.Popen(
        [ray, "start", "--head", "--block", f"--port={port}", "--num-cpus=4",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert node.poll() is None, "ray start --head exited"
                assert time.monotonic() < deadline, "the head node did not come up"
                time.sleep(0.5)
        yield f"127.0.0.1:{port}", env
    finally:
        node.terminate()  # --block stops the node's processes when it is told to stop
        node.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)


def test_two_demo_runs_at_once_on_one_cluster_both_finish(head, tmp_path):
    address, env = head
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "rlrun", "train", str(DEMO), *SHORT,
             f"run.output_dir={tmp_path / f'run{i}'}", f"run.ray_address={address}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for i in range(2)
    ]
    outputs = [run.communicate(timeout=900)[0] for run in runs]
    for run, out in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out[-3000:]
        assert "done: 2 steps" in out
    for i in range(2):
        assert (tmp_path / f"run{i}" / "learner" / "step_000002" / "model").is_dir()
