"""`rlrun sagemaker launch CONFIG [key=value ...]`: start a SageMaker training job that runs the
recipe on Ray across the job's instances (SageMaker Python SDK v3).

The job runs the training image (infra/docker/), whose entrypoint (`entrypoint.py`) boots Ray on
every instance and runs `rlrun train CONFIG overrides` on the head. The recipe path (inside the
image) and the overrides travel as hyperparameters; a Ray token is generated per job and set in
its environment, so every instance has the same one. Checkpoints sync to
`--output-s3/<job base name>/checkpoints`, the same prefix for every job of one run name, so a
relaunched (or spot-retried) job resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
from types import SimpleNamespace
from typing import Any

from rlrun.errors import InputError

HOURS = 3600
TOKEN_SHOWN = "<generated per job>"  # the dry run never prints the job's Ray token


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # One action for now; a positional, since `rlrun` parses options and positionals intermixed.
    p = parser
    p.add_argument("action", choices=["launch"], help="launch: start a training job for a recipe")
    p.add_argument("config", help="recipe YAML, a path inside the training image (conf/...)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.steps=20")
    p.add_argument("--image", required=True, help="training image URI in ECR (infra/docker/)")
    p.add_argument("--role", required=True, help="SageMaker execution role ARN")
    p.add_argument("--output-s3", required=True,
                   help="s3://bucket/prefix for the model, the output and the checkpoints")
    p.add_argument("--instance-type", help="e.g. ml.g5.12xlarge (one group of identical hosts)")
    p.add_argument("--instance-count", type=int, default=1)
    p.add_argument("--instance-group", action="append", default=[], metavar="NAME:TYPE:COUNT",
                   help="a group of a heterogeneous cluster; repeat per group")
    p.add_argument("--head-group", help="instance group whose first host runs the Ray head")
    p.add_argument("--spot", action="store_true", help="managed spot training")
    p.add_argument("--max-runtime-h", type=float, default=24.0,
                   help="hours before SageMaker stops the job (default 24)")
    p.add_argument("--volume-gb", type=int, default=200,
                   help="EBS volume per instance (models, checkpoints; default 200)")
    p.add_argument("--region", default=os.environ.get("AWS_REGION"),
                   help="AWS region (default $AWS_REGION)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the CreateTrainingJob request instead of calling AWS")


def _sdk() -> SimpleNamespace:
    """The SDK's classes this module uses; one line naming the install if it is missing."""
    try:
        from sagemaker.core.helper.session_helper import Session
        from sagemaker.train import ModelTrainer, configs
    except ImportError:
        raise InputError(
            "needs the SageMaker Python SDK v3: pip install 'rlrun[sagemaker]'"
        ) from None
    return SimpleNamespace(ModelTrainer=ModelTrainer, Session=Session, configs=configs)


def parse_group(text: str) -> tuple[str, str, int]:
    """`NAME:TYPE:COUNT` of --instance-group."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[2].isdigit() or int(parts[2]) < 1:
        raise InputError(f"--instance-group {text!r} is not NAME:TYPE:COUNT, e.g. "
                         "cpu-judges:ml.c5.9xlarge:2")
    return parts[0], parts[1], int(parts[2])


def job_base_name(run_name: str) -> str:
    """`rlrun-<run.name>` as SageMaker allows job names: letters, digits, hyphens; the SDK
    adds a timestamp to it, within 63 characters."""
    return ("rlrun-" + re.sub(r"[^a-zA-Z0-9-]+", "-", run_name).strip("-"))[:40].rstrip("-")


def job_overrides(args: argparse.Namespace, output_dir: str, job_output: str) -> list[str]:
    """The job's overrides: the user's, and for a job of several instances, which share no
    file system, `run.output_dir` under `job_output` in S3 unless the recipe already writes to
    a URI (checkpoints, the warm-started and the best model must reach every instance)."""
    from rlrun.checkpoint import is_uri

    hosts = args.instance_count if args.instance_type else sum(
        count for _, _, count in map(parse_group, args.instance_group))
    if hosts > 1 and not is_uri(output_dir):
        return [*args.overrides, f"run.output_dir={job_output}"]
    return list(args.overrides)


def hyperparameters(args: argparse.Namespace, overrides: list[str]) -> dict[str, str]:
    """What the image's entrypoint reads back (entrypoint.command_from_hyperparameters)."""
    out = {"config": args.config, "overrides": json.dumps(overrides)}
    if args.head_group:
        out["head_group"] = args.head_group
    return out


def build_trainer(args: argparse.Namespace, token: str) -> Any:
    """The SDK's ModelTrainer for this launch."""
    from infra.sagemaker.metrics import metric_definitions
    from rlrun.config import load_config

    sdk = _sdk()
    import boto3  # installed with the SDK
    c = sdk.configs
    cfg = load_config(args.config, list(args.overrides))  # a bad recipe fails here, not on AWS
    if not args.output_s3.startswith("s3://"):
        raise InputError(f"--output-s3 {args.output_s3!r} is not an s3:// URI")
    if bool(args.instance_type) == bool(args.instance_group):
        raise InputError("give --instance-type (with --instance-count) or --instance-group, "
                         "not both or neither")
    if args.instance_group:
        groups = [c.InstanceGroup(instance_group_name=n, instance_type=t, instance_count=k)
                  for n, t, k in map(parse_group, args.instance_group)]
        compute = c.Compute(instance_groups=groups, volume_size_in_gb=args.volume_gb,
                            enable_managed_spot_training=args.spot or None)
    else:
        compute = c.Compute(instance_type=args.instance_type,
                            instance_count=args.instance_count,
                            volume_size_in_gb=args.volume_gb,
                            enable_managed_spot_training=args.spot or None)
    if not args.region:
        raise InputError("no AWS region: pass --region or export AWS_REGION")
    base = job_base_name(cfg.run.name)
    output = args.output_s3.rstrip("/")
    bucket = output.removeprefix("s3://").split("/", 1)[0]
    runtime = int(args.max_runtime_h * HOURS)
    session = sdk.Session(boto_session=boto3.Session(region_name=args.region),
                          default_bucket=bucket)
    trainer = sdk.ModelTrainer(
        sagemaker_session=session,
        role=args.role,
        base_job_name=base,
        training_image=args.image,
        compute=compute,
        # Spot: SageMaker may wait for capacity as long again as the run itself takes.
        stopping_condition=c.StoppingCondition(
            max_runtime_in_seconds=runtime,
            max_wait_time_in_seconds=2 * runtime if args.spot else None,
        ),
        checkpoint_config=c.CheckpointConfig(s3_uri=f"{output}/{base}/checkpoints",
                                             local_path="/opt/ml/checkpoints"),
        output_data_config=c.OutputDataConfig(s3_output_path=f"{output}/{base}/output"),
        environment={"RAY_AUTH_TOKEN": token},
        hyperparameters=hyperparameters(
            args, job_overrides(args, cfg.run.output_dir, f"{output}/{base}/run")),
    )
    return trainer.with_metric_definitions(
        [c.MetricDefinition(name=d["Name"], regex=d["Regex"]) for d in metric_definitions()]
    )


def training_job_request(trainer: Any) -> dict[str, Any]:
    """The CreateTrainingJob request `trainer.train()` would send. The SDK's own dry run
    validates but returns nothing, so its request builder is called directly."""
    return trainer._create_training_job_args(boto3=True)


def main(args: argparse.Namespace) -> int:
    if args.dry_run:
        # The SDK checks the role against IAM when it builds the trainer: not in a dry run.
        os.environ["SAGEMAKER_VALIDATE_ROLE"] = "false"
    token = secrets.token_hex(32)
    trainer = build_trainer(args, token)
    if args.dry_run:
        request = training_job_request(trainer)
        request["Environment"]["RAY_AUTH_TOKEN"] = TOKEN_SHOWN
        print(json.dumps(request, indent=2, default=str))
        return 0
    trainer.train(wait=False)
    job = trainer._latest_training_job
    print(f"rlrun sagemaker: started training job {job.training_job_name}", flush=True)
    return 0
