"""The training image's entrypoint: boots Ray on every host of a SageMaker job and runs
`rlrun train` on the head.

    python infra/sagemaker/entrypoint.py [--head-group NAME] [--wait-for-workers-s N] \\
        -- rlrun train CONFIG [key=value ...]

Every host runs it. The head (the first host of `--head-group`, else the lowest-numbered host)
starts the Ray head, waits until every host's node has joined, then runs the trainer in the
foreground (SageMaker's metric regexes read its log) with its output under
`$RLRUN_SM_ROOT/checkpoints` (resumed when a complete checkpoint is there) and copies the final
model to `$RLRUN_SM_ROOT/model`. A worker joins the head, blocks while the head lives, exits 0
once the head's Ray ends and non-zero if its own Ray node dies. Any failure writes its reason to
`$RLRUN_SM_ROOT/output/failure` and exits non-zero. SIGTERM (a stop, a spot interruption) goes
to the trainer, which checkpoints and ends; then Ray stops. `$RLRUN_SM_ROOT` defaults to
SageMaker's /opt/ml.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import `infra` from the checkout it is in
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from infra.sagemaker.hosts import Cluster, HostsError, head_host, load_cluster
from infra.sagemaker.instances import short_of_gpus
from infra.sagemaker.node import (
    GCS_PORT,
    NODE_MANAGER_PORT,
    NodeError,
    auth_token,
    efa_present,
    host_shm_and_memory,
    node_environment,
    object_store_bytes,
    ray_start_command,
)

HYPERPARAMETERS = "input/config/hyperparameters.json"  # under $RLRUN_SM_ROOT
POLL_S = 2.0
RESOLVE_TIMEOUT_S = 300.0  # SageMaker's DNS names for the job's hosts can lag their start
HEAD_GONE_CHECKS = 3  # consecutive refused checks before a worker takes the head as ended
STOP_TIMEOUT_S = 60.0  # for a Ray node to stop once told to
TRAINER_STOP_TIMEOUT_S = 600.0  # after SIGTERM: the step in flight finishes, then a checkpoint


class BootError(RuntimeError):
    """The job cannot go on; the message is the failure reason SageMaker shows."""


class Stopped(Exception):
    """SIGTERM arrived before training started."""


def sm_root() -> Path:
    return Path(os.environ.get("RLRUN_SM_ROOT", "/opt/ml"))


def write_failure(root: Path, reason: str) -> Path:
    """SageMaker shows the content of output/failure as the job's failure reason."""
    path = root / "output" / "failure"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reason + "\n")
    return path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="entrypoint.py", description="Boot Ray on a SageMaker job's hosts; run rlrun train.",
    )
    parser.add_argument("--head-group", help="instance group whose first host is the head")
    parser.add_argument(
        "--wait-for-workers-s", type=float, default=600.0,
        help="how long the head waits for every host to join (default 600: a job's instances "
             "can start minutes apart)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- rlrun train CONFIG [key=value ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if len(command) < 3 or Path(command[0]).name != "rlrun" or command[1] != "train":
        parser.error("give the trainer after --: -- rlrun train CONFIG [key=value ...]")
    args.command = command
    return args


def command_from_hyperparameters(root: Path) -> list[str]:
    """The command line `rlrun sagemaker launch` put in the job's hyperparameters, for the
    image run as SageMaker runs it (`<entrypoint> train`)."""
    path = root / HYPERPARAMETERS
    try:
        hp = json.loads(path.read_text())
        overrides = json.loads(hp.get("overrides", "[]"))
        config = hp["config"]
    except (OSError, KeyError, json.JSONDecodeError) as err:
        raise BootError(f"{path} lacks the recipe that `rlrun sagemaker launch` sets "
                        f"(hyperparameters config and overrides): {err}") from None
    head = ["--head-group", hp["head_group"]] if hp.get("head_group") else []
    return [*head, "--", "rlrun", "train", config, *overrides]


def output_dir(command: list[str], root: Path) -> str:
    """Where the trainer writes: the job's own `run.output_dir` when it is a URI (`s3://...`,
    which every instance reaches: what a multi-instance job needs, as instances share no file
    system), else root/checkpoints (which SageMaker syncs to S3)."""
    from rlrun.checkpoint import is_uri
    from rlrun.config import ConfigError, load_config

    try:
        given = load_config(command[2], command[3:]).run.output_dir
    except ConfigError:  # the trainer says what is wrong, in its own words
        return str(root / "checkpoints")
    return given if is_uri(given) else str(root / "checkpoints")


def trainer_command(command: list[str], out: str, head_ip: str) -> list[str]:
    """`rlrun train CONFIG [key=value ...]` as the head runs it: every metric on the console
    line first (SageMaker's metric regexes read it; the job's own overrides come after, so they
    may still ask for the short line), then `trainer_overrides` last."""
    return [*command[:3], "metrics.console=full", *command[3:],
            *trainer_overrides(out, head_ip)]


def trainer_overrides(out: str, head_ip: str) -> list[str]:
    """What the entrypoint sets on the trainer's command line: the head's address, the output
    directory (`output_dir`), and resume when a complete checkpoint is there."""
    from rlrun.checkpoint import latest_checkpoint

    overrides = [f"run.ray_address={head_ip}:{GCS_PORT}", f"run.output_dir={out}"]
    if latest_checkpoint(out) is not None:
        overrides.append("run.resume=true")
    return overrides


def export_model(root: Path, out: str) -> str:
    """Copy the final model to root/model (SageMaker uploads it as model.tar.gz): the merged
    model of a LoRA run, else the latest checkpoint's; from `out`, a directory or a URI."""
    from rlrun.checkpoint import is_file, join, latest_checkpoint, readable

    latest = latest_checkpoint(out)
    candidates = [join(out, "final", "model")] + ([join(latest, "model")] if latest else [])
    for source in candidates:
        if is_file(join(source, "config.json")):
            with readable(source) as local:
                shutil.copytree(local, root / "model", dirs_exist_ok=True)
            return source
    raise BootError(f"training ended but {out} holds no model to copy to {root / 'model'}")


def resolve(host: str, deadline: float) -> str:
    """The IPv4 address of `host`, retried until `deadline` while DNS catches up."""
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError as err:
            if time.monotonic() > deadline:
                raise BootError(f"cannot resolve host {host} ({err}); DNS never answered") from None
            time.sleep(POLL_S)


def listening(ip: str, port: int) -> bool:
    try:
        socket.create_connection((ip, port), timeout=POLL_S).close()
        return True
    except OSError:
        return False


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM,
                 timeout_s: float = STOP_TIMEOUT_S) -> int:
    """Signal `proc` and wait for it, killing it past the deadline; its exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class Node:
    """This host's Ray node: `ray start --block`, stopped by terminating that process (which
    stops exactly this node's Ray processes, never another's)."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.command, self.env = command, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        print(f"entrypoint: {' '.join(self.command)}", flush=True)
        # A node is stopped only once the run is over (head) or the head is gone (worker):
        # Ray's drain on SIGTERM would wait 30 s for a GCS that is not there, then log a
        # traceback.
        env = self.env | {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        self.proc = subprocess.Popen(self.command, env=env, stdout=sys.stdout,
                                     stderr=sys.stderr)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


def wait_for(ready: Callable[[], bool], deadline: float, timed_out: Callable[[], str],
             stopped: threading.Event, failed: Callable[[], str | None]) -> None:
    """Poll `ready` until it holds; BootError with `timed_out()` at `deadline` or with the
    reason `failed()` gives, Stopped on SIGTERM."""
    while not ready():
        if stopped.is_set():
            raise Stopped
        if (reason := failed()) is not None:
            raise BootError(reason)
        if time.monotonic() > deadline:
            raise BootError(timed_out())
        time.sleep(POLL_S)


# Run in a child process: a Ray client in the entrypoint itself would take over its SIGTERM
# handling (ray.init installs its own, and a stop then killed the entrypoint at once, leaving
# the trainer without its checkpoint signal).
_LIST_NODES = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps({n["NodeManagerAddress"]: n["Resources"].get("GPU", 0)
                  for n in ray.nodes() if n.get("Alive")}))
"""


def alive_nodes(head_ip: str) -> dict[str, float]:
    """The Ray cluster's alive nodes: address -> the GPUs it brought (none if the head does
    not answer)."""
    try:
        out = subprocess.run([sys.executable, "-c", _LIST_NODES, f"{head_ip}:{GCS_PORT}"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return {str(ip): float(gpus) for ip, gpus in
                json.loads(out.strip().splitlines()[-1]).items()}
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError, AttributeError):
        return {}


def run_head(args: argparse.Namespace, root: Path, cluster: Cluster, ips: dict[str, str],
             node: Node, stopped: threading.Event) -> int:
    """Start the Ray head, wait for every host's node, run the trainer, export the model."""
    head_ip = ips[cluster.current]
    deadline = time.monotonic() + args.wait_for_workers_s
    node.start()

    def node_failed() -> str | None:
        code = node.exited()
        return None if code is None else f"the Ray head on {cluster.current} exited ({code})"

    wait_for(lambda: listening(head_ip, GCS_PORT), deadline,
             lambda: f"the Ray head on {cluster.current} did not start in time", stopped,
             node_failed)
    missing = list(cluster.hosts)

    def all_joined() -> bool:
        nonlocal missing
        alive = alive_nodes(head_ip)
        missing = [h for h in cluster.hosts if ips[h] not in alive]
        if missing:
            return False
        # A node's GPUs are fixed when it joins: one short now stays short.
        if short := short_of_gpus(cluster.types, {h: alive[ips[h]] for h in cluster.hosts}):
            raise BootError(
                f"hosts joined Ray short of GPUs: {'; '.join(short)}; placement needs every GPU "
                "of the job: check the NVIDIA driver and the container's GPU access there "
                "(nvidia-smi)"
            )
        return True

    def timed_out() -> str:
        return (f"hosts {', '.join(missing)} did not join the Ray cluster within "
                f"--wait-for-workers-s={args.wait_for_workers_s:g} "
                f"({len(cluster.hosts) - len(missing)} of {len(cluster.hosts)} hosts did)")

    wait_for(all_joined, deadline, timed_out, stopped, node_failed)
    print(f"entrypoint: all {len(cluster.hosts)} hosts joined the Ray cluster", flush=True)
    out = output_dir(args.command, root)
    command = trainer_command(args.command, out, head_ip)
    code, last_error = run_trainer(command, node.env, stopped)
    if stopped.is_set():
        print(f"entrypoint: stopped by SIGTERM; trainer exited {code}", flush=True)
        return 0
    if code != 0:
        raise BootError(f"rlrun train exited with code {code}: {last_error or 'no message'}")
    source = export_model(root, out)
    print(f"entrypoint: final model {source} copied to {root / 'model'}", flush=True)
    return 0


def run_trainer(command: list[str], env: dict[str, str],
                stopped: threading.Event) -> tuple[int, str]:
    """Run the trainer in the foreground (its stdout is the job's log); its exit code and the
    reason it gave: its last `rlrun train:` line on stderr (Ray's own lines come after it), else
    its last stderr line. SIGTERM to this process is passed on to it."""
    print(f"entrypoint: {' '.join(command)}", flush=True)
    proc = subprocess.Popen(command, env=env, stdout=sys.stdout, stderr=subprocess.PIPE,
                            text=True)
    last: dict[str, str] = {}

    def echo() -> None:  # stderr to the log as it comes, keeping the lines for the reason
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            if text := line.strip():
                last["any"] = text
                if text.startswith("rlrun train:"):
                    last["rlrun"] = text

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    forwarded = False
    try:
        while proc.poll() is None:
            if stopped.is_set() and not forwarded:
                forwarded = True
                print("entrypoint: SIGTERM: the trainer checkpoints and stops", flush=True)
                threading.Thread(target=stop_process,
                                 args=(proc, signal.SIGTERM, TRAINER_STOP_TIMEOUT_S),
                                 daemon=True).start()
            time.sleep(0.2)
    finally:  # never leave a trainer behind this process
        stop_process(proc, signal.SIGKILL)
    reader.join(timeout=10)
    return proc.returncode, last.get("rlrun", last.get("any", ""))


def run_worker(args: argparse.Namespace, cluster: Cluster, ips: dict[str, str], head: str,
               node: Node, stopped: threading.Event) -> int:
    """Join the head (retrying with backoff until the deadline), then block while it lives.

    SIGTERM reaches every host of a stopped job at once; a worker that has joined keeps its
    node up until the head has ended (or its checkpoint deadline has passed), since the
    trainer's final checkpoint needs the learner ranks on this node.
    """
    head_ip, own_ip = ips[head], ips[cluster.current]
    deadline = time.monotonic() + args.wait_for_workers_s
    backoff, joined, refused = POLL_S, False, 0
    stop_noted, stop_deadline = False, math.inf
    while True:
        head_up = listening(head_ip, GCS_PORT)
        refused = 0 if head_up else refused + 1
        code = node.exited()
        if joined and refused >= HEAD_GONE_CHECKS:
            print(f"entrypoint: the Ray head on {head} has ended; stopping", flush=True)
            return 0
        if joined and code is not None and head_up:
            raise BootError(f"the Ray node on {cluster.current} died (exit {code}) while the "
                            f"head on {head} still runs")
        if stopped.is_set() and not joined:
            raise Stopped
        if stopped.is_set() and time.monotonic() > stop_deadline:
            raise BootError(f"the head on {head} did not end within {TRAINER_STOP_TIMEOUT_S:g}s "
                            "of SIGTERM")
        if stopped.is_set() and not stop_noted:
            stop_noted, stop_deadline = True, time.monotonic() + TRAINER_STOP_TIMEOUT_S
            print(f"entrypoint: SIGTERM: staying up until the head on {head} has checkpointed "
                  "and ended", flush=True)
        if not joined:
            if time.monotonic() > deadline:
                raise BootError(
                    f"host {cluster.current} could not join the Ray head on {head} "
                    f"({head_ip}:{GCS_PORT}) within --wait-for-workers-s="
                    f"{args.wait_for_workers_s:g}"
                )
            if node.proc is None or code is not None:
                if head_up:  # `ray start` fails at once against a head not yet up
                    node.start()
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            if listening(own_ip, NODE_MANAGER_PORT):
                joined = True
                print(f"entrypoint: {cluster.current} joined the Ray head on {head}", flush=True)
        time.sleep(POLL_S)


def run(args: argparse.Namespace, root: Path, stopped: threading.Event) -> int:
    """Boot this host's part of the cluster; the exit code."""
    cluster = load_cluster(root, os.environ)
    head = head_host(cluster, args.head_group)
    deadline = time.monotonic() + RESOLVE_TIMEOUT_S
    # The head needs every host's address (to name the missing ones), a worker its own and
    # the head's.
    wanted = cluster.hosts if cluster.current == head else (cluster.current, head)
    ips = {host: resolve(host, deadline) for host in dict.fromkeys(wanted)}
    token = auth_token(os.environ, len(cluster.hosts) > 1, secrets.token_hex(32))
    # In this process too: its own Ray client (the head's wait for nodes) needs the token.
    os.environ.update(node_environment(cluster.interface, efa_present(), token))
    env = dict(os.environ)
    role = "head" if cluster.current == head else "worker"
    print(f"entrypoint: {cluster.current} ({ips[cluster.current]}, group "
          f"{cluster.group_of(cluster.current)}) is the {role}; hosts: "
          f"{', '.join(cluster.hosts)}", flush=True)
    ray = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    node = Node(ray_start_command(ray, ips[cluster.current], cluster.group_of(cluster.current),
                                  object_store_bytes(*host_shm_and_memory()),
                                  None if role == "head" else ips[head]), env)
    try:
        if role == "head":
            return run_head(args, root, cluster, ips, node, stopped)
        return run_worker(args, cluster, ips, head, node, stopped)
    finally:
        node.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = sm_root()
    if argv == ["train"]:  # how SageMaker runs the image: the recipe is in hyperparameters
        try:
            argv = command_from_hyperparameters(root)
        except BootError as err:
            write_failure(root, str(err))
            print(f"entrypoint: {err}", file=sys.stderr, flush=True)
            return 1
    args = parse_args(argv)
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    try:
        return run(args, root, stopped)
    except Stopped:
        print("entrypoint: stopped by SIGTERM before training began", flush=True)
        return 0
    except (BootError, HostsError, NodeError) as err:
        reason = str(err)
    except Exception as err:  # SageMaker must still learn why the job failed
        traceback.print_exc()
        reason = f"the entrypoint failed: {type(err).__name__}: {err}"
    finally:
        signal.signal(signal.SIGTERM, previous)
    path = write_failure(root, reason)
    print(f"entrypoint: {reason} (written to {path})", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
