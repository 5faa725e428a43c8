"""Checks that a run fits the Ray cluster, done before anything waits on the cluster.

A placement group that asks for more than the cluster has waits forever, and a Ray address
that does not answer can hang `ray.init` for minutes; both are checked here first, so the user
gets one message naming the config key and what the cluster has, within seconds.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from rlrun.config import Config

# Ray Train reroutes print() in its workers through the root logger and, since a Ray worker's
# stdout is already wrapped, prints it as well: every line reaches the driver twice, and text a
# library captures by swapping sys.stdout (dill disassembles functions that way while `datasets`
# fingerprints TRL's map functions) leaks into the log as pages of bytecode.
TRAIN_WORKER_RUNTIME_ENV = {"env_vars": {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}}


def torch_threads(num_threads: int | None, num_cpus: float) -> int:
    """Intra-op threads for an actor: `num_threads`, else its CPU reservation (at least 1), as
    Ray's own OMP_NUM_THREADS would be."""
    return num_threads if num_threads is not None else max(1, int(num_cpus))


class ClusterError(RuntimeError):
    """The configured run cannot be placed on (or cannot reach) the Ray cluster."""


# Every bundle of a pinned actor group asks for this much of its group's resource: a token
# amount, so that the resource (which nodes carry in large amounts) pins without limiting.
NODE_GROUP_UNIT = 0.001


def node_group_resource(group: str) -> str:
    """The Ray custom resource that marks a node of node group `group` (what
    `rollout.node_group` and its siblings ask for; the SageMaker entrypoint tags each instance
    group with it, a KubeRay worker group with `rayStartParams.resources`)."""
    return f"node_group:{group}"


@dataclass(frozen=True)
class Demand:
    """`count` actors of one role, each needing `cpus` CPUs and `gpus` GPUs."""

    role: str  # config section: rollout | learner | sandbox
    count_key: str  # the config key that sets `count`
    count: int
    cpus: float
    gpus: float
    # One {GPU: 1} bundle per GPU of an actor, the first also holding its CPUs: how vLLM's Ray
    # executor places tensor-parallel workers (it refuses a bundle with more than one GPU).
    gpu_per_bundle: bool = False
    node_group: str | None = None  # only nodes of this group (`<role>.node_group`)

    def bundles(self) -> list[dict[str, float]]:
        """The placement-group bundles of all `count` actors; actor i's start at index
        `i * bundles_per_actor`."""
        if self.gpu_per_bundle:
            first = {"CPU": self.cpus, "GPU": 1.0}
            per_actor = [first] + [{"GPU": 1.0}] * (self.bundles_per_actor - 1)
        else:
            per_actor = [{"CPU": self.cpus} | ({"GPU": self.gpus} if self.gpus else {})]
        pin = {node_group_resource(self.node_group): NODE_GROUP_UNIT} if self.node_group else {}
        return [dict(b) | pin for _ in range(self.count) for b in per_actor]

    @property
    def bundles_per_actor(self) -> int:
        return int(self.gpus) if self.gpu_per_bundle else 1


def rollout_demand(cfg: Config) -> Demand:
    """The rollout actors' needs; vLLM with tensor parallelism on GPUs gets a bundle per GPU
    (on CPU its ranks share the actor's CPUs)."""
    tp, rollout = cfg.rollout.tensor_parallel_size, cfg.rollout
    per_gpu = rollout.engine == "vllm" and tp > 1 and rollout.num_gpus > 0
    return Demand("rollout", "rollout.num_actors", rollout.num_actors, rollout.num_cpus,
                  rollout.num_gpus, gpu_per_bundle=per_gpu,
                  node_group=cfg.rollout.node_group)


def colocated_demand(cfg: Config) -> Demand:
    """`placement.mode=colocated`: one bundle per learner rank, holding that rank and the
    rollout rank that shares its GPU (learner rank r and bundle r; rollout actor i from bundle
    i * tensor_parallel_size)."""
    gpus = 1.0 if cfg.learner.num_gpus > 0 else 0.0
    return Demand("colocated", "learner.num_workers", cfg.learner.num_workers,
                  cfg.learner.num_cpus + cfg.rollout.num_cpus, gpus,
                  node_group=cfg.learner.node_group)


def demands(cfg: Config, needs_sandbox: bool) -> list[Demand]:
    """What each role asks for, from config."""
    if cfg.placement.mode == "colocated":
        out = [colocated_demand(cfg)]
    else:
        out = [
            rollout_demand(cfg),
            Demand("learner", "learner.num_workers", cfg.learner.num_workers,
                   cfg.learner.num_cpus, cfg.learner.num_gpus, node_group=cfg.learner.node_group),
        ]
    if needs_sandbox:
        out.append(Demand("sandbox", "sandbox.num_actors", cfg.sandbox.num_actors,
                          cfg.sandbox.num_cpus, 0.0, node_group=cfg.sandbox.node_group))
    return out


def _breakdown(ds: list[Demand], attr: str) -> str:
    return " + ".join(
        f"{d.count_key}={d.count} x {d.role}.num_{attr}={getattr(d, attr):g}"
        for d in ds
        if getattr(d, attr)
    )


@dataclass(frozen=True)
class _Shortfall:
    """The first thing `ds` needs that some nodes lack: the total of a resource, or (`actor`
    set) one actor's share, larger than the largest node's."""

    resource: str  # "CPU" or "GPU"
    attr: str  # the Demand field: "cpus" or "gpus"
    need: float
    have: float  # the nodes' total, or for `actor` the largest node's
    actor: Demand | None = None


def _shortfall(ds: list[Demand], nodes: list[dict[str, float]],
               totals: dict[str, float]) -> _Shortfall | None:
    """What `ds` lacks on `nodes` (whose resources add up to `totals`), CPUs before GPUs."""
    for resource, attr in (("CPU", "cpus"), ("GPU", "gpus")):
        need = sum(d.count * getattr(d, attr) for d in ds)
        have = float(totals.get(resource, 0.0))
        if need > have + 1e-9:
            return _Shortfall(resource, attr, need, have)
        biggest = max((float(n.get(resource, 0.0)) for n in nodes), default=0.0)
        for d in ds:
            if getattr(d, attr) > biggest + 1e-9:
                return _Shortfall(resource, attr, getattr(d, attr), biggest, d)
    return None


def check_fits(
    ds: list[Demand], cluster: dict[str, float], nodes: list[dict[str, float]]
) -> None:
    """Raise ClusterError unless the cluster's totals and some node per actor can hold `ds`.

    cluster: `ray.cluster_resources()`; nodes: the `Resources` of each alive node.
    """
    if short := _shortfall(ds, nodes, cluster):
        if short.actor is None:
            raise ClusterError(
                f"the run needs {short.need:g} {short.resource}s ({_breakdown(ds, short.attr)}) "
                f"but the Ray cluster has {short.have:g}: lower these config keys or add nodes"
            )
        raise ClusterError(
            f"{short.actor.role}.num_{short.attr}={short.need:g} does not fit on any node: the "
            f"largest node has {short.have:g} {short.resource}s"
        )
    for group in sorted({d.node_group for d in ds if d.node_group}):
        _check_group_fits(group, [d for d in ds if d.node_group == group], nodes)


def _check_group_fits(group: str, ds: list[Demand], nodes: list[dict[str, float]]) -> None:
    """The nodes of `group` can hold the actor groups pinned to it."""
    members = [n for n in nodes if node_group_resource(group) in n]
    keys = " and ".join(f"{d.role}.node_group" for d in ds) + f"={group}"
    if not members:
        prefix = node_group_resource("")
        known = sorted({r.removeprefix(prefix) for n in nodes for r in n if r.startswith(prefix)})
        raise ClusterError(
            f"{keys}: no node of the Ray cluster is in that group (its groups: "
            f"{', '.join(known) or 'none'}); tag nodes with the resource "
            f"{node_group_resource(group)!r} or change the key"
        )
    totals = {r: sum(float(n.get(r, 0.0)) for n in members) for r in ("CPU", "GPU")}
    if short := _shortfall(ds, members, totals):
        if short.actor is None:
            raise ClusterError(
                f"{keys}: the group's {len(members)} node(s) have {short.have:g} "
                f"{short.resource}s but its actors need {short.need:g} "
                f"({_breakdown(ds, short.attr)}): lower these keys or add nodes to the group"
            )
        raise ClusterError(
            f"{short.actor.role}.num_{short.attr}={short.need:g} does not fit on any node of "
            f"{short.actor.role}.node_group={group}: its largest has {short.have:g} "
            f"{short.resource}s"
        )


def resolve_address(address: str, temp_dir: str | None = None) -> str:
    """The `host:port` that `ray.init(address="auto")` would join, found as Ray finds it (the
    address file of the last `ray start` under `temp_dir`, else a running GCS on this machine);
    other addresses are returned as given. Resolved here so that `check_address` can test it:
    `ray.init` itself waits minutes on a stale address file."""
    if address != "auto":
        return address
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address(address, temp_dir)
    except ConnectionError:
        found = None
    if not found:
        raise ClusterError(
            "run.ray_address=auto (or $RAY_ADDRESS=auto) found no Ray cluster started on this "
            "machine: start one with `ray start --head`, give its host:port, or set "
            "run.ray_address=null for a local Ray"
        )
    try:
        check_address(found)
    except ClusterError:
        raise ClusterError(
            f"run.ray_address=auto (or $RAY_ADDRESS=auto) points at {found}, where the last "
            "`ray start` on this machine ran, but nothing answers there: start the cluster "
            "again, give its host:port, or set run.ray_address=null for a local Ray"
        ) from None
    return found


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """Raise ClusterError unless a gRPC server (a Ray GCS or Ray Client server) answers at a
    `host:port` address within `timeout_s`. Accepting TCP is not enough: `ray.init` against a
    port that accepts connections but never speaks gRPC (another service, a wedged head)
    retries for over ten minutes.

    "local" is left to `ray.init`; resolve "auto" with `resolve_address` first.
    """
    if address == "local":
        return
    parsed = urlsplit(address if "://" in address else f"ray://{address}")
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise ClusterError(
            f"Ray address {address!r} (run.ray_address or $RAY_ADDRESS) is not host:port, "
            "ray://host:port, auto or null"
        )
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as err:
        raise ClusterError(
            f"Ray address {address!r} (run.ray_address or $RAY_ADDRESS) does not answer within "
            f"{timeout_s:g}s ({err}): start the cluster, fix the address, or set "
            "run.ray_address=null for a local Ray"
        ) from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return  # a TLS handshake needs the cluster's certificates: left to ray.init
    import grpc

    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise ClusterError(
            f"Ray address {address!r} (run.ray_address or $RAY_ADDRESS) accepts connections "
            f"but does not answer as a Ray cluster within {timeout_s:g}s: give the head's GCS "
            "port (6379 unless `ray start --port` changed it) or ray://host:10001"
        ) from None
    finally:
        channel.close()


def check_job_output_dir(output_dir: str, env: Mapping[str, str]) -> None:
    """Raise ClusterError for a relative `run.output_dir` in a `ray job submit --working-dir`
    job: its driver runs in Ray's temporary copy of the working directory, so the outputs
    would land in that copy and go with it (and a resubmitted job, whose copy differs, would
    not find its checkpoints)."""
    if "://" in output_dir or os.path.isabs(output_dir):
        return
    try:  # Ray gives a job's driver its runtime env in this variable
        job = json.loads(env.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    except json.JSONDecodeError:
        return
    if (job.get("runtime_env") or {}).get("working_dir"):
        raise ClusterError(
            f"run.output_dir={output_dir!r} is relative, and this Ray job runs in Ray's "
            "temporary copy of its --working-dir, which goes away with it: give an absolute "
            "path on storage every node shares, or an s3:// URI"
        )
