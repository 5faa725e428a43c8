"""`rlrun sagemaker launch`: the request it would send, and how it fails without the SDK."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.sagemaker import entrypoint, launch
from rlrun.cli import main as rlrun

REPO = Path(__file__).resolve().parents[2]
GSM8K = [
    "sagemaker", "launch", str(REPO / "conf" / "gsm8k_qwen7b_8xa100-40.yaml"),
    "trainer.steps=3", "--image", "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlrun:0.1.0",
    "--role", "arn:aws:iam::123456789012:role/SageMakerRole", "--output-s3", "s3://bucket/rl",
    "--region", "us-east-1", "--dry-run",
]


def test_other_commands_do_not_import_infra() -> None:
    code = ("import sys; from rlrun.cli import main; main(['config', 'show', 'conf/demo.yaml']); "
            "assert not [m for m in sys.modules if m.startswith(('infra', 'sagemaker'))]")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)


def test_without_the_sdk_one_line_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sagemaker.train", None)  # import fails as if absent
    assert rlrun([*GSM8K, "--instance-type", "ml.p4d.24xlarge"]) == 2
    assert capsys.readouterr().err == (
        "rlrun sagemaker: needs the SageMaker Python SDK v3: pip install 'rlrun[sagemaker]'\n"
    )


def test_recipe_and_overrides_reach_the_entrypoint_through_hyperparameters(
    tmp_path: Path,
) -> None:
    args = argparse.Namespace(config="conf/demo.yaml", overrides=["a.b=1", "c=[1, 2]"],
                              head_group="cpu-judges")
    path = tmp_path / entrypoint.HYPERPARAMETERS
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(launch.hyperparameters(args, args.overrides)))
    argv = entrypoint.command_from_hyperparameters(tmp_path)
    parsed = entrypoint.parse_args(argv)
    assert parsed.head_group == "cpu-judges"
    assert parsed.command == ["rlrun", "train", "conf/demo.yaml", "a.b=1", "c=[1, 2]"]


def test_a_job_of_several_instances_writes_its_run_to_s3() -> None:
    one = argparse.Namespace(instance_type="ml.p4d.24xlarge", instance_count=1,
                             instance_group=None, overrides=["trainer.steps=3"])
    four = argparse.Namespace(**vars(one) | {"instance_type": "ml.g5.12xlarge",
                                             "instance_count": 4})
    mixed = argparse.Namespace(instance_type=None, instance_count=1, overrides=[],
                               instance_group=["gpu:ml.g5.12xlarge:1", "cpu:ml.c5.9xlarge:1"])
    job = "s3://b/rlrun/rlrun-x/run"
    assert launch.job_overrides(one, "runs/x", job) == ["trainer.steps=3"]
    assert launch.job_overrides(four, "runs/x", job) == ["trainer.steps=3",
                                                         f"run.output_dir={job}"]
    assert launch.job_overrides(mixed, "runs/x", job) == [f"run.output_dir={job}"]
    assert launch.job_overrides(four, "s3://mine/x", job) == ["trainer.steps=3"]


def test_group_and_job_names() -> None:
    assert launch.parse_group("cpu-judges:ml.c5.9xlarge:2") == ("cpu-judges", "ml.c5.9xlarge", 2)
    with pytest.raises(launch.InputError, match="is not NAME:TYPE:COUNT"):
        launch.parse_group("cpu:ml.c5.9xlarge")
    assert launch.job_base_name("gsm8k_qwen7b.v2") == "rlrun-gsm8k-qwen7b-v2"


@pytest.mark.parametrize("compute", [
    ["--instance-type", "ml.p4d.24xlarge", "--spot"],
    ["--instance-group", "gpu:ml.g5.12xlarge:4", "--instance-group",
     "cpu-judges:ml.c5.9xlarge:1", "--head-group", "cpu-judges"],
])
def test_dry_run_request_passes_the_sdks_validation(
    compute: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sagemaker.train", reason="the SageMaker SDK (rlrun[sagemaker]) is absent")
    from botocore.session import get_session
    from botocore.validate import validate_parameters

    assert rlrun([*GSM8K, *compute]) == 0
    request = json.loads(capsys.readouterr().out)
    shape = get_session().get_service_model("sagemaker").operation_model(
        "CreateTrainingJob").input_shape
    validate_parameters(request, shape)  # raises ParamValidationError naming any bad field
    assert request["Environment"] == {"RAY_AUTH_TOKEN": launch.TOKEN_SHOWN}
    overrides = json.loads(request["HyperParameters"]["overrides"])
    assert overrides[0] == "trainer.steps=3"
    if "--instance-group" in compute:  # five instances: the run goes to S3
        assert len(overrides) == 2 and overrides[1].startswith("run.output_dir=s3://bucket/rl/")
    else:
        assert len(overrides) == 1
    assert request["CheckpointConfig"]["S3Uri"].endswith("/checkpoints")
    names = [d["Name"] for d in request["AlgorithmSpecification"]["MetricDefinitions"]]
    assert "reward/mean" in names
