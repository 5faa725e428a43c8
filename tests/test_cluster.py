import json
import socket
import time

import pytest

from rlrun.cluster import (
    ClusterError,
    Demand,
    check_address,
    check_fits,
    check_job_output_dir,
    demands,
    resolve_address,
)
from rlrun.config import load_config

NODE = {"CPU": 2.0, "memory": 1e9}


def test_fractional_actors_fit_two_cores():
    cfg = load_config(None, ["rollout.num_cpus=0.5", "learner.num_cpus=0.5",
                             "sandbox.num_cpus=0.5"])
    check_fits(demands(cfg, needs_sandbox=True), NODE, [NODE])


def test_too_many_cpus_names_the_keys_and_what_the_cluster_has():
    cfg = load_config(None, ["rollout.num_actors=4"])
    with pytest.raises(ClusterError) as err:
        check_fits(demands(cfg, needs_sandbox=False), NODE, [NODE])
    msg = str(err.value)
    assert "rollout.num_actors=4 x rollout.num_cpus=1" in msg
    assert "learner.num_workers=1" in msg
    assert "needs 5 CPUs" in msg and "has 2" in msg


def test_gpus_on_a_cpu_cluster_fail():
    cfg = load_config(None, ["learner.num_gpus=1"])
    with pytest.raises(ClusterError, match="learner.num_workers=1 x learner.num_gpus=1.*has 0"):
        check_fits(demands(cfg, needs_sandbox=False), NODE, [NODE])


def test_an_actor_bigger_than_any_node_fails_even_if_the_total_fits():
    ds = [Demand("rollout", "rollout.num_actors", 1, 3.0, 0.0)]
    with pytest.raises(ClusterError, match="rollout.num_cpus=3 does not fit on any node"):
        check_fits(ds, {"CPU": 4.0}, [NODE, NODE])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nobody_listens_on_fails_naming_the_key():
    with pytest.raises(ClusterError, match="run.ray_address"):
        check_address(f"127.0.0.1:{_closed_port()}", timeout_s=2.0)


def test_a_malformed_address_is_named():
    with pytest.raises(ClusterError, match="not host:port"):
        check_address("nonsense")


def test_a_working_dir_job_needs_an_absolute_or_remote_output_dir() -> None:
    job = {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(
        {"runtime_env": {"working_dir": "gcs://_ray_pkg_0123.zip"}, "metadata": {}})}
    with pytest.raises(ClusterError, match=r"run.output_dir='runs/demo' is relative, and this "
                                           r"Ray job runs in Ray's temporary copy"):
        check_job_output_dir("runs/demo", job)
    check_job_output_dir("/shared/runs/demo", job)
    check_job_output_dir("s3://bucket/runs/demo", job)
    check_job_output_dir("runs/demo", {})  # not a job: relative to where it was started
    no_working_dir = {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {}})}
    check_job_output_dir("runs/demo", no_working_dir)


def test_auto_with_a_stale_address_file_fails_at_once_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = _closed_port()
    (tmp_path / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    started = time.monotonic()
    with pytest.raises(ClusterError, match=rf"run.ray_address=auto .* points at [\d.]+:{port}, "
                                           r"where the last `ray start` on this machine ran"):
        resolve_address("auto", temp_dir=str(tmp_path))
    assert time.monotonic() - started < 10


def test_an_explicit_address_is_left_as_given():
    assert resolve_address("10.0.0.5:6379") == "10.0.0.5:6379"
