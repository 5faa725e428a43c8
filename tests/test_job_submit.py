"""`ray job submit --working-dir .` against a `ray start --head` cluster with token
authentication, as docs/cluster.md shows it: a relative run.output_dir is refused at once (it
would land in Ray's temporary copy of the working directory), an absolute one gets the run's
checkpoints.

The cluster runs in a network namespace of its own with its own /tmp/ray, so its fixed ports
(dashboard, agents) cannot meet another Ray on this machine.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.system,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="needs root and iproute2 to make a network namespace"),
]

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SHORT = [
    "sft.enabled=false", "reward.audit_before_training=false", "trainer.steps=2",
    "trainer.eval_every=0", "data.toy_size=64", "data.val_size=4", "trainer.eval_samples=2",
    "trainer.eval_k=[1]", "algo.prompts_per_step=4", "rollout.sampling.max_new_tokens=16",
    "metrics.tensorboard=false", "metrics.report=false",
]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[str], dict[str, str]]]:
    """A token-authenticated Ray head in its own namespace, shared by the module's tests (each
    leaves nothing running on it); the prefix that runs a command there, and the environment
    that command needs."""
    ns = f"rljob{secrets.token_hex(3)}"
    ray_tmp = tempfile.mkdtemp(prefix=f"{ns}-", dir="/tmp")
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(16), PYTHONPATH=str(REPO),
               RLRUN_CACHE=str(tmp_path_factory.mktemp("models")))
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    Path("/tmp/ray").mkdir(exist_ok=True)
    head = subprocess.Popen(
        ["ip", "netns", "exec", ns, "sh", "-c",
         f'mount --bind {ray_tmp} /tmp/ray && exec "$@"', "sh", str(BIN / "ray"), "start",
         "--head", "--block", "--num-cpus=4", "--disable-usage-stats"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    run = ["ip", "netns", "exec", ns]
    try:
        deadline = time.monotonic() + 120
        probe = "import socket; socket.create_connection(('127.0.0.1', 8265), timeout=1)"
        while subprocess.run([*run, sys.executable, "-c", probe],
                             capture_output=True).returncode != 0:
            assert head.poll() is None, "ray start --head exited"
            assert time.monotonic() < deadline, "the head's dashboard did not come up"
            time.sleep(0.2)
        yield run, env
    finally:
        head.terminate()  # --block stops this node's processes
        head.wait(timeout=120)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def submit_argv(run: list[str], *args: str, submission_id: str | None = None) -> list[str]:
    """`ray job submit` of a short demo run with config overrides `args`, which follows the
    job's log until the job ends."""
    named = ["--submission-id", submission_id] if submission_id else []
    return [*run, str(BIN / "ray"), "job", "submit", "--address", "http://127.0.0.1:8265", *named,
            "--runtime-env", "infra/ray/runtime_env.yaml", "--working-dir", ".", "--",
            "rlrun", "train", "conf/demo.yaml", *SHORT, *args]


def submit(run: list[str], env: dict[str, str], *args: str,
           submission_id: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(submit_argv(run, *args, submission_id=submission_id), env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_a_relative_output_dir_is_refused_before_the_run_starts(cluster):
    """Refused before Ray or the model start; the test below shows an absolute one getting the
    run's checkpoints."""
    run, env = cluster
    refused = submit(run, env)
    assert refused.returncode != 0
    assert ("rlrun train: run.output_dir='runs/demo' is relative, and this Ray job runs in "
            "Ray's temporary copy of its --working-dir") in refused.stdout + refused.stderr


def ray_cli(run: list[str], env: dict[str, str], *args: str) -> str:
    return subprocess.run([*run, str(BIN / "ray"), *args], env=env, cwd=REPO, check=True,
                          capture_output=True, text=True, timeout=300).stdout


def test_ray_job_stop_checkpoints_leaves_nothing_behind_and_a_resubmit_resumes(
    cluster, tmp_path
):
    """With an absolute run.output_dir: the stopped run's checkpoint and the resumed run's
    final one land there."""
    from rlrun.checkpoint import latest_checkpoint

    run, env = cluster
    api = ["--address", "http://127.0.0.1:8265"]
    out = tmp_path / "out"
    # Submitted without --no-wait, `ray job submit` follows the job's log into `log` until
    # the job ends: one client for the whole wait, not one `ray job logs` (a Python start and
    # Ray import that compete with the job for the cores) per poll.
    log = tmp_path / "rl-stop.log"
    with open(log, "w") as sink:
        follow = subprocess.Popen(
            submit_argv(run, "trainer.steps=50", "trainer.checkpoint_every=100",
                        f"run.output_dir={out}", submission_id="rl-stop"),
            env=env | {"PYTHONUNBUFFERED": "1"}, cwd=REPO, stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 300
        while "step=1 " not in log.read_text(errors="replace"):
            assert follow.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the job logged no step within 300 s"
            time.sleep(0.5)
        ray_cli(run, env, "job", "stop", *api, "rl-stop")  # waits until the job has stopped
    finally:
        follow.kill()
        follow.wait()
    logs = ray_cli(run, env, "job", "logs", *api, "rl-stop")
    assert "(stopped by SIGTERM)" in logs, logs[-3000:]
    saved = latest_checkpoint(str(out))
    assert saved is not None
    step = int(Path(saved).name.removeprefix("step_"))
    # Nothing of the run is left on the cluster.
    deadline = time.monotonic() + 60
    while True:
        actors = ray_cli(run, env, "list", "actors", *api, "--filter", "state=ALIVE")
        groups = ray_cli(run, env, "list", "placement-groups", *api, "--filter",
                         "state=CREATED")
        if not any(n in actors for n in ("RolloutActor", "LearnerWorker", "SandboxActor")) \
                and "rlrun" not in groups and "demo-" not in groups:
            break
        assert time.monotonic() < deadline, (actors, groups)
        time.sleep(0.5)
    # A file of the working directory edited before the resubmit: Ray uploads a new copy of
    # it, under another name, and the run still finds its checkpoint.
    edited = REPO / f"resubmit-edit-{secrets.token_hex(3)}.txt"
    edited.write_text("edited between the two submissions\n")
    try:
        done = submit(run, env, f"run.output_dir={out}", "run.resume=true",
                      f"trainer.steps={step + 1}", submission_id="rl-resume")
    finally:
        edited.unlink()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"done: {step + 1} steps" in done.stdout
    assert (out / "learner" / f"step_{step + 1:06d}" / "model").is_dir()
    # Each job's working directory copy, from the cluster's job list (the module's other
    # submissions are in it too).
    jobs = ray_cli(run, env, "job", "list", *api)
    copies = dict(re.findall(r"submission_id='([^']+)'.*?(_ray_pkg_[0-9a-f]+)", jobs, re.S))
    assert copies["rl-stop"] != copies["rl-resume"], copies
