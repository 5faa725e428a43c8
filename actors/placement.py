"""Ray for a run: joining or starting it, checking the run fits, one placement group per actor
group, and releasing them."""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from rlrun.cluster import ClusterError, Demand, check_address, resolve_address
from rlrun.config import Config
from rlrun.preflight import check_demands, check_memory

PLACEMENT_TIMEOUT_S = 30.0


def init_ray(cfg: Config) -> None:
    """Join `run.ray_address` / $RAY_ADDRESS, or start a local Ray with `run.num_cpus` CPUs."""
    address = cfg.run.ray_address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        return
    if address:
        address = resolve_address(address)
        check_address(address)
        try:
            ray.init(address=address, namespace=cfg.run.namespace)
        except ray.exceptions.AuthenticationError as err:
            raise ClusterError(
                f"the Ray cluster at {address!r} (run.ray_address or $RAY_ADDRESS) rejected the "
                "connection: it uses token authentication, so export RAY_AUTH_MODE=token and "
                f"RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) with its token ({err.message})"
            ) from None
    else:
        # The dashboard serves the State API that Ray Train's placement-group cleaner polls;
        # without it the log fills with "Failed to query Ray Train Controller actor state".
        # "local": always a Ray of its own, never the cluster /tmp/ray/ray_current_cluster names.
        ray.init(address="local", num_cpus=cfg.run.num_cpus, namespace=cfg.run.namespace)


def check_cluster(cfg: Config, roles: list[str]) -> None:
    """A run's actor groups in `roles` fit the cluster's totals and its largest node, and each
    role's memory fits the cluster's GPU type (`ClusterError` or `ConfigError` naming the keys
    otherwise): before a warm-start that can take hours, and before any GPU is asked for."""
    _demands(cfg, roles)
    check_memory(cfg, ray.cluster_resources())


def _demands(cfg: Config, roles: list[str]) -> list[Demand]:
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    return check_demands(cfg, roles, ray.cluster_resources(), nodes)


def place(cfg: Config, roles: list[str], prefix: str) -> dict[str, Any]:
    """One ready placement group per actor group in `roles` ({role: group}), bundle i for
    actor i of the group."""
    wanted = _demands(cfg, roles)
    groups: dict[str, Any] = {}
    for d in wanted:
        # Sandbox actors spread over nodes; the rest pack, to keep their traffic local.
        strategy = "SPREAD" if d.role == "sandbox" else "PACK"
        groups[d.role] = placement_group(d.bundles(), strategy=strategy,
                                         name=f"{prefix}.{d.role}")
    refs = {groups[d.role].ready(): d for d in wanted}
    _, late = ray.wait(list(refs), num_returns=len(refs), timeout=PLACEMENT_TIMEOUT_S)
    if late:
        release(groups)
        d = refs[late[0]]
        raise ClusterError(
            f"the {d.role} placement group ({d.count} x {d.bundles()[0]}, from {d.count_key} "
            f"and {d.role}.num_cpus/num_gpus) was not placed within {PLACEMENT_TIMEOUT_S:g}s; "
            f"the cluster has {ray.available_resources()} free (other jobs may hold the rest)"
        )
    if cfg.placement.mode == "colocated":  # learner ranks and rollout actors share the bundles
        groups["learner"] = groups["rollout"] = groups.pop("colocated")
    return groups


def release(groups: dict[str, Any]) -> None:
    """Remove the placement groups `place` made (colocated roles share one)."""
    for group in {id(g): g for g in groups.values()}.values():
        remove_placement_group(group)
