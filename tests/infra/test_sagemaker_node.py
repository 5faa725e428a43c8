"""A host's Ray environment and `ray start` line, and the entrypoint's pure pieces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.sagemaker import entrypoint
from infra.sagemaker.node import (
    GCS_PORT,
    NodeError,
    auth_token,
    efa_present,
    node_environment,
    object_store_bytes,
    ray_start_command,
)

GiB = 1 << 30


def test_environment_with_interface_and_token_without_efa() -> None:
    assert node_environment("eth0", efa=False, token="t0k") == {
        "NCCL_CUMEM_ENABLE": "0", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
        "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t0k",
    }


def test_efa_variables_only_with_an_efa_device(tmp_path: Path) -> None:
    assert node_environment(None, efa=False, token=None) == {"NCCL_CUMEM_ENABLE": "0"}
    env = node_environment(None, efa=True, token=None)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_FORK_SAFE"] == "1"
    ib = tmp_path / "infiniband"
    assert not efa_present(ib)
    for dev, driver in (("mlx5_0", "mlx5_core"), ("rdmap16s27", "efa")):
        (tmp_path / "drivers" / driver).mkdir(parents=True)
        (ib / dev / "device").mkdir(parents=True)
        (ib / dev / "device" / "driver").symlink_to(tmp_path / "drivers" / driver)
        assert efa_present(ib) == (driver == "efa")


def test_object_store_from_shm_capped_by_memory() -> None:
    assert object_store_bytes(10 * GiB, 100 * GiB) == 8 * GiB
    assert object_store_bytes(500 * GiB, 1000 * GiB) == 300 * GiB


def test_token_from_env_generated_for_one_host_required_for_several() -> None:
    assert auth_token({"RAY_AUTH_TOKEN": "abc"}, multi_host=True, generate="new") == "abc"
    assert auth_token({}, multi_host=False, generate="new") == "new"
    assert auth_token({"RAY_AUTH_MODE": "disabled"}, multi_host=True, generate="new") is None
    with pytest.raises(NodeError, match="no RAY_AUTH_TOKEN"):
        auth_token({}, multi_host=True, generate="new")


def test_ray_start_lines_tag_the_group() -> None:
    head = ray_start_command("ray", "10.0.0.1", "gpu-rollout", 8 * GiB, None)
    assert head[:4] == ["ray", "start", "--block", "--head"] and f"--port={GCS_PORT}" in head
    worker = ray_start_command("ray", "10.0.0.2", "cpu-judges", GiB, "10.0.0.1")
    assert f"--address=10.0.0.1:{GCS_PORT}" in worker and "--node-ip-address=10.0.0.2" in worker
    resources = next(a for a in worker if a.startswith("--resources="))
    assert json.loads(resources.split("=", 1)[1]) == {"node_group:cpu-judges": 1000}
    assert f"--object-store-memory={GiB}" in worker


def test_command_line_needs_the_trainer_after_dashes(capsys: pytest.CaptureFixture) -> None:
    args = entrypoint.parse_args(["--head-group", "cpu", "--wait-for-workers-s", "30", "--",
                                  "rlrun", "train", "conf/demo.yaml", "trainer.steps=2"])
    assert args.head_group == "cpu" and args.wait_for_workers_s == 30
    assert args.command == ["rlrun", "train", "conf/demo.yaml", "trainer.steps=2"]
    with pytest.raises(SystemExit):
        entrypoint.parse_args(["--", "python", "train.py"])
    assert "-- rlrun train CONFIG" in capsys.readouterr().err


DEMO = str(Path(__file__).parents[2] / "conf" / "demo.yaml")


def test_the_output_is_the_jobs_own_uri_else_the_synced_checkpoint_dir(tmp_path: Path) -> None:
    local = str(tmp_path / "checkpoints")
    assert entrypoint.output_dir(["rlrun", "train", DEMO], tmp_path) == local
    assert entrypoint.output_dir(["rlrun", "train", DEMO, "run.output_dir=/data/x"],
                                 tmp_path) == local
    assert entrypoint.output_dir(["rlrun", "train", DEMO, "run.output_dir=s3://b/rlrun/x"],
                                 tmp_path) == "s3://b/rlrun/x"
    # A recipe the trainer will refuse: the trainer says why, not the entrypoint.
    assert entrypoint.output_dir(["rlrun", "train", DEMO, "algo.nope=1"], tmp_path) == local


def test_trainer_overrides_resume_only_from_a_complete_checkpoint(tmp_path: Path) -> None:
    out = str(tmp_path / "checkpoints")
    fresh = entrypoint.trainer_overrides(out, "10.0.0.1")
    assert fresh == [f"run.ray_address=10.0.0.1:{GCS_PORT}", f"run.output_dir={out}"]
    learner = tmp_path / "checkpoints" / "learner"
    (learner / "step_000004").mkdir(parents=True)  # written, never recorded: not complete
    assert "run.resume=true" not in entrypoint.trainer_overrides(out, "10.0.0.1")
    (learner / "checkpoints.json").write_text(json.dumps({"checkpoints": ["step_000004"]}))
    assert entrypoint.trainer_overrides(out, "10.0.0.1")[-1] == "run.resume=true"


def test_the_trainer_prints_every_metric_for_the_regexes_unless_the_job_says_otherwise(
    tmp_path: Path,
) -> None:
    from rlrun.config import load_config

    out = str(tmp_path / "checkpoints")
    command = entrypoint.trainer_command(["rlrun", "train", "conf/demo.yaml", "trainer.steps=2"],
                                         out, "10.0.0.1")
    assert command[:5] == ["rlrun", "train", "conf/demo.yaml", "metrics.console=full",
                           "trainer.steps=2"]
    assert command[5:] == entrypoint.trainer_overrides(out, "10.0.0.1")
    assert load_config(DEMO, command[3:]).metrics.console == "full"
    mine = entrypoint.trainer_command(["rlrun", "train", "conf/demo.yaml",
                                       "metrics.console=short"], out, "10.0.0.1")
    assert load_config(DEMO, mine[3:]).metrics.console == "short"


def test_failure_file_and_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A --head-group that no instance group has: the reason lands in output/failure.
    monkeypatch.setenv("RLRUN_SM_ROOT", str(tmp_path))
    config = tmp_path / "input" / "config" / "resourceconfig.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}))
    code = entrypoint.main(["--head-group", "cpu", "--", "rlrun", "train", "x.yaml"])
    assert code == 1
    assert (tmp_path / "output" / "failure").read_text() == (
        "--head-group 'cpu' is not an instance group of this job; its groups: "
        "homogeneousCluster\n"
    )


@pytest.mark.parametrize("uri", [False, True], ids=["synced-dir", "uri"])
def test_final_model_is_the_latest_checkpoints(tmp_path: Path, uri: bool) -> None:
    out = (tmp_path / "checkpoints").as_uri() if uri else str(tmp_path / "checkpoints")
    with pytest.raises(entrypoint.BootError, match="holds no model"):
        entrypoint.export_model(tmp_path, out)
    learner = tmp_path / "checkpoints" / "learner"
    (learner / "step_000002" / "model").mkdir(parents=True)
    (learner / "step_000002" / "model" / "config.json").write_text("{}")
    (learner / "checkpoints.json").write_text(json.dumps({"checkpoints": ["step_000002"]}))
    assert entrypoint.export_model(tmp_path, out) == f"{out}/learner/step_000002/model"
    assert (tmp_path / "model" / "config.json").is_file()
