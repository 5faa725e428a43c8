"""The hosts of a SageMaker training job, read from what SageMaker lays out on each of them.

`resourceconfig.json` names every host, the host this process runs on, the instance groups
(heterogeneous clusters) and the network interface. Without it, `SM_HOSTS` / `SM_CURRENT_HOST`
say the same; without either, the job is one node. Pure functions: no Ray, no network.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

RESOURCE_CONFIG = "input/config/resourceconfig.json"  # under $RLRUN_SM_ROOT
DEFAULT_GROUP = "homogeneousCluster"  # SageMaker's name for the one group of a plain job
_NUMBERED = re.compile(r"^algo-(\d+)(?:-|$)")  # algo-7; local mode: algo-1-x3k9z


class HostsError(ValueError):
    """The job's host layout cannot be read."""


@dataclass(frozen=True)
class Cluster:
    """The job's hosts, in order, and what this process needs to know about them."""

    hosts: tuple[str, ...]  # every host, ordered by host_order
    current: str  # the host this process runs on
    groups: Mapping[str, str] = field(default_factory=dict)  # host -> instance group
    interface: str | None = None  # the network interface between hosts (e.g. eth0)
    types: Mapping[str, str] = field(default_factory=dict)  # host -> instance type, where known

    def group_of(self, host: str) -> str:
        return self.groups.get(host, DEFAULT_GROUP)


def host_order(host: str) -> tuple[int, int, str]:
    """Sort key: algo-2 before algo-10 (string order would put algo-10 first); names SageMaker
    did not number come after, in string order."""
    match = _NUMBERED.match(host)
    return (0, int(match.group(1)), host) if match else (1, 0, host)


def parse_resource_config(data: Mapping) -> Cluster:
    """The cluster a `resourceconfig.json` describes."""
    try:
        hosts = [str(h) for h in data["hosts"]]
        current = str(data["current_host"])
    except (KeyError, TypeError):
        raise HostsError(
            f"{RESOURCE_CONFIG} lacks `hosts` or `current_host`; found keys {sorted(data)}"
        ) from None
    groups: dict[str, str] = {}
    # A homogeneous job's one type is `current_instance_type`; each group names its own.
    everyone = data.get("current_instance_type")
    types: dict[str, str] = {h: str(everyone) for h in hosts} if everyone else {}
    for group in data.get("instance_groups") or []:
        for host in group.get("hosts", []):
            groups[str(host)] = str(group["instance_group_name"])
            if group.get("instance_type"):
                types[str(host)] = str(group["instance_type"])
    return _checked(hosts, current, groups, data.get("network_interface_name"), types)


def _checked(
    hosts: list[str], current: str, groups: dict[str, str], interface: str | None,
    types: dict[str, str] | None = None,
) -> Cluster:
    if not hosts:
        raise HostsError("the job lists no hosts")
    if current not in hosts:
        raise HostsError(f"the current host {current!r} is not among the hosts {hosts}")
    return Cluster(tuple(sorted(hosts, key=host_order)), current, groups, interface or None,
                   types or {})


def load_cluster(root: Path, env: Mapping[str, str]) -> Cluster:
    """The cluster from `root/input/config/resourceconfig.json`, else from `SM_HOSTS` (a JSON
    list) and `SM_CURRENT_HOST`, else this host alone."""
    path = root / RESOURCE_CONFIG
    if path.is_file():
        try:
            return parse_resource_config(json.loads(path.read_text()))
        except json.JSONDecodeError as err:
            raise HostsError(f"{path} is not JSON ({err})") from None
    if "SM_HOSTS" in env and "SM_CURRENT_HOST" in env:
        try:
            hosts = [str(h) for h in json.loads(env["SM_HOSTS"])]
        except (json.JSONDecodeError, TypeError):
            raise HostsError(f"SM_HOSTS={env['SM_HOSTS']!r} is not a JSON list of hosts") from None
        return _checked(hosts, env["SM_CURRENT_HOST"], {}, None)
    host = os.uname().nodename
    return Cluster((host,), host)


def head_host(cluster: Cluster, head_group: str | None) -> str:
    """The host that runs the Ray head and the trainer: the first host of `head_group` (which
    may be a CPU-only group), else the first host."""
    if head_group is None:
        return cluster.hosts[0]
    members = [h for h in cluster.hosts if cluster.group_of(h) == head_group]
    if not members:
        known = sorted({cluster.group_of(h) for h in cluster.hosts})
        raise HostsError(
            f"--head-group {head_group!r} is not an instance group of this job; its groups: "
            f"{', '.join(known)}"
        )
    return members[0]
