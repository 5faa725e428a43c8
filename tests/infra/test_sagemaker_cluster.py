"""The SageMaker entrypoint on two hosts made of network namespaces on this machine.

Each host is a network namespace with its own address on a veth pair between the two (traffic
only between them), its own /etc/netns/<ns>/hosts naming both hosts as SageMaker names them
(algo-1, algo-2), its own host name (a UTS namespace) and its own $RLRUN_SM_ROOT holding its
resource config. The entrypoint starts on every host as it would in the job's containers.

Unlike a real job, the namespaces share this machine's file system: the tiny model the driver
builds, the checkpoints that learner ranks on algo-2 write under algo-1's $RLRUN_SM_ROOT, and the
Ray logs read below are all visible to both hosts. What this proves is the bring-up, the
network (Ray, gloo across nodes) and the exits, not that a run works without a shared file
system.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.system,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None,
        reason="needs root, iproute2 and unshare to make hosts of network namespaces",
    ),
]

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "infra" / "sagemaker" / "entrypoint.py"
RLRUN = Path(sys.executable).with_name("rlrun")


def train(steps: int, checkpoint_every: int) -> list[str]:
    """The demo, short. Two learner ranks of 1.5 CPUs each cannot share a 2-CPU node, so the
    ranks (and their gloo process group) span both nodes."""
    return [
        str(RLRUN), "train", str(REPO / "conf" / "demo.yaml"), "sft.enabled=false",
        "reward.audit_before_training=false", f"trainer.steps={steps}", "trainer.eval_every=0",
        "data.toy_size=64", "data.val_size=4", "trainer.eval_samples=2", "trainer.eval_k=[1]",
        "algo.prompts_per_step=4", "rollout.sampling.max_new_tokens=16",
        "metrics.tensorboard=false", "metrics.report=false",
        f"trainer.checkpoint_every={checkpoint_every}", "learner.num_workers=2",
        "learner.num_cpus=1.5", "learner.micro_batch_size=16",
    ]


@dataclass
class Host:
    name: str  # the SageMaker host name, algo-N
    ns: str  # its network namespace
    ip: str
    root: Path  # its $RLRUN_SM_ROOT
    ray_tmp: Path  # mounted over /tmp/ray on the host: its own Ray temp dir, as on a real host


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


GROUPS = {"algo-1": "trainers", "algo-2": "judges"}


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    """Two namespaces joined by a veth pair (`eth0` in each), each a host of the job."""
    tag = secrets.token_hex(3)
    subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
    made: list[Host] = []
    names = ["algo-1", "algo-2"]
    try:
        for i, name in enumerate(names):
            host = Host(name, f"rl{tag}{i + 1}", f"{subnet}.{i + 1}", tmp_path / name,
                        Path(tempfile.mkdtemp(prefix=f"rl{tag}{i + 1}-", dir="/tmp")))
            sh("ip", "netns", "add", host.ns)
            made.append(host)
            sh("ip", "-n", host.ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", f"v{tag}a", "netns", made[0].ns, "type", "veth", "peer",
           "name", f"v{tag}b", "netns", made[1].ns)
        for host, end in zip(made, ("a", "b"), strict=True):
            # Named as SageMaker's resource config names the interface between hosts.
            sh("ip", "-n", host.ns, "link", "set", f"v{tag}{end}", "name", "eth0")
            sh("ip", "-n", host.ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            sh("ip", "-n", host.ns, "link", "set", "eth0", "up")
            etc = Path("/etc/netns", host.ns)
            etc.mkdir(parents=True)
            (etc / "hosts").write_text(
                "127.0.0.1 localhost\n" + "".join(f"{h.ip} {h.name}\n" for h in made)
            )
            # Two instance groups, one host each, so that a run can pin actors to either.
            config = {
                "current_host": host.name, "current_instance_type": "ml.c5.large",
                "current_group_name": GROUPS[host.name], "hosts": names,
                "instance_groups": [{"instance_group_name": group, "instance_type": "ml.c5.large",
                                     "hosts": [h for h in names if GROUPS[h] == group]}
                                    for group in ("trainers", "judges")],
                "network_interface_name": "eth0",
            }
            path = host.root / "input" / "config" / "resourceconfig.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(config))
        yield made
    finally:
        for host in made:
            subprocess.run(["ip", "netns", "del", host.ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns", host.ns), ignore_errors=True)
            shutil.rmtree(host.ray_tmp, ignore_errors=True)


def start(host: Host, extra: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """The entrypoint on `host`: in its namespace, under its own host name, with its own
    /tmp/ray (a worker node's Ray takes the head's temp dir path, so on one file system the
    two nodes would share it). `ip netns exec` gives the command a mount namespace of its
    own, so the mount is seen by this host's processes only."""
    Path("/tmp/ray").mkdir(exist_ok=True)
    host_env = env | {"RLRUN_SM_ROOT": str(host.root)}
    command = [sys.executable, str(ENTRYPOINT), *extra]
    with open(log, "w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            ["ip", "netns", "exec", host.ns, "unshare", "--uts", "sh", "-c",
             f'hostname {host.name} && mount --bind {host.ray_tmp} /tmp/ray && exec "$@"', "sh",
             *command],
            env=host_env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
        )


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "RAY_TMPDIR")}
    return env | {"RAY_AUTH_TOKEN": secrets.token_hex(16), "PYTHONPATH": str(REPO),
                  "RLRUN_CACHE": str(tmp_path / "models")}


def actors_on(host: Host) -> set[str]:
    """The actor classes whose workers ran on `host` in its latest Ray session, from that
    session's worker logs (session directories are named by their start time)."""
    session = sorted(host.ray_tmp.glob("session_2*"))[-1]
    found: set[str] = set()
    for log in session.glob("logs/worker-*.out"):
        found |= set(re.findall(r":actor_name:(\w+)", log.read_text(errors="replace")))
    return found


def test_a_worker_that_never_comes_up_fails_the_head_naming_it(hosts, tmp_path):
    head = hosts[0]
    proc = start(head, ["--wait-for-workers-s", "20", "--", *train(2, 1)], base_env(tmp_path),
                 tmp_path / "head.log")
    code = proc.wait(timeout=300)
    failure = (head.root / "output" / "failure").read_text()
    assert code == 1, (tmp_path / "head.log").read_text()[-3000:]
    assert failure.startswith("hosts algo-2 did not join the Ray cluster within "
                              "--wait-for-workers-s=20"), failure


def test_a_worker_that_joins_without_its_gpus_fails_the_head_at_once_naming_it(hosts, tmp_path):
    # The head reads that algo-2's group is of a 4-GPU type; its node brings none to Ray.
    path = hosts[0].root / "input" / "config" / "resourceconfig.json"
    config = json.loads(path.read_text())
    for group in config["instance_groups"]:
        if group["instance_group_name"] == GROUPS["algo-2"]:
            group["instance_type"] = "ml.g5.12xlarge"
    path.write_text(json.dumps(config))
    env, logs = base_env(tmp_path), [tmp_path / f"{h.name}.log" for h in hosts]
    procs = [start(h, ["--wait-for-workers-s", "300", "--", *train(2, 1)], env, log)
             for h, log in zip(hosts, logs, strict=True)]
    code = procs[0].wait(timeout=300)
    procs[1].wait(timeout=120)
    failure = (hosts[0].root / "output" / "failure").read_text()
    assert code == 1, logs[0].read_text()[-3000:]
    # The GPU check's reason, not the join deadline's: it failed once both had joined.
    assert failure.startswith("hosts joined Ray short of GPUs: algo-2 (ml.g5.12xlarge): 0 of 4 "
                              "GPUs"), failure


def wait_for_line(log: Path, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in {log} after {timeout_s}s"
        time.sleep(1)


def test_sigterm_to_the_head_checkpoints_and_a_second_start_trains_across_both_hosts(
    hosts, tmp_path
):
    """SIGTERM to every host checkpoints and exits 0; the next start forms the two-host cluster
    again, resumes, trains across both nodes and exits 0."""
    from rlrun.checkpoint import latest_checkpoint

    env = base_env(tmp_path)
    logs = [tmp_path / f"{h.name}.log" for h in hosts]
    # No periodic checkpoint: the one found afterwards is the one SIGTERM made.
    procs = [start(h, ["--wait-for-workers-s", "180", "--", *train(50, 100)], env, log)
             for h, log in zip(hosts, logs, strict=True)]
    wait_for_line(logs[0], "step=1 ", procs[0], 600)
    # As SageMaker stops a job: SIGTERM to every host's entrypoint at once.
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    codes = [p.wait(timeout=600) for p in procs]
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], [t[-3000:] for t in texts]
    assert "(stopped by SIGTERM)" in texts[0]
    head = hosts[0].root
    assert not (head / "output" / "failure").exists()
    assert not (head / "model").exists()  # a stopped run exports no final model
    saved = latest_checkpoint(str(head / "checkpoints"))
    assert saved is not None, texts[0][-3000:]
    step = int(Path(saved).name.removeprefix("step_"))
    assert 2 <= step < 50

    # The next job (a spot retry) finds the checkpoint and goes on from it. The worker starts
    # first: it retries until the head is up, as when its instance starts first. The rollout
    # and sandbox actors are pinned to the instance groups, one on each host.
    logs = [tmp_path / f"{h.name}-again.log" for h in hosts]
    pinned = ["rollout.node_group=trainers", "sandbox.node_group=judges"]
    procs = [start(h, ["--wait-for-workers-s", "180", "--", *train(step + 1, 100), *pinned],
                   env, log)
             for h, log in zip(reversed(hosts), reversed(logs), strict=True)]
    codes = [p.wait(timeout=900) for p in reversed(procs)]
    texts = {h.name: log.read_text() for h, log in zip(hosts, logs, strict=True)}
    for h in hosts:
        assert not (h.root / "output" / "failure").exists(), texts[h.name][-3000:]
    assert codes == [0, 0], {name: text[-3000:] for name, text in texts.items()}
    assert "all 2 hosts joined the Ray cluster" in texts["algo-1"]
    assert "run.resume=true" in texts["algo-1"]
    assert f"done: {step + 1} steps" in texts["algo-1"]
    assert "the Ray head on algo-1 has ended" in texts["algo-2"]
    assert (head / "checkpoints" / "learner" / f"step_{step + 1:06d}" / "model").is_dir()
    assert (head / "model" / "config.json").is_file()
    where = {h.name: actors_on(h) for h in hosts}
    # Two learner ranks cannot share a node; the rollout and sandbox actors go to the instance
    # groups config pinned them to.
    assert all("LearnerWorker" in on for on in where.values()), where
    assert "RolloutActor" in where["algo-1"] and "RolloutActor" not in where["algo-2"], where
    assert "SandboxActor" in where["algo-2"] and "SandboxActor" not in where["algo-1"], where


def test_a_worker_whose_ray_node_dies_fails_and_so_does_the_head(hosts, tmp_path):
    """SIGKILL of the worker's raylet mid-run: the worker's entrypoint exits 1 naming its node,
    and the run on the head fails within seconds naming the actor it lost."""
    env = base_env(tmp_path)
    logs = [tmp_path / f"{h.name}.log" for h in hosts]
    procs = [start(h, ["--wait-for-workers-s", "180", "--", *train(50, 100)], env, log)
             for h, log in zip(hosts, logs, strict=True)]
    try:
        wait_for_line(logs[0], "step=1 ", procs[0], 600)
        worker = hosts[1]
        raylet = subprocess.run(["pgrep", "-f", f"raylet.*--node_ip_address={worker.ip}"],
                                capture_output=True, text=True).stdout.split()
        assert len(raylet) == 1, raylet
        os.kill(int(raylet[0]), signal.SIGKILL)
        assert procs[1].wait(timeout=120) == 1, logs[1].read_text()[-3000:]
        failure = (worker.root / "output" / "failure").read_text()
        assert failure.startswith("the Ray node on algo-2 died"), failure
        # The head's run fails fast naming what it lost: whichever actor of the worker node it
        # next waits for (a learner rank, restarted once from its checkpoint, or a rollout
        # actor's replacement) cannot start while the node is gone.
        assert procs[0].wait(timeout=300) == 1, logs[0].read_text()[-3000:]
        failure = (hosts[0].root / "output" / "failure").read_text()
        assert failure.startswith("rlrun train exited with code 1: rlrun train: "), failure
        assert any(f"{role} " in failure for role in ("learner rank", "rollout actor",
                                                      "sandbox actor")), failure
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=600)
