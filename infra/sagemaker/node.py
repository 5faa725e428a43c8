"""What one host of the job runs Ray with: its environment and its `ray start` command line.

Pure functions of what the host can see (the interface name, /dev/shm, EFA devices), so every
choice is unit-tested without starting Ray.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from rlrun.cluster import node_group_resource

GCS_PORT = 6379  # the head's Ray port, the address every worker and the trainer join
# A fixed raylet port: a worker knows it has joined once its own raylet listens there.
NODE_MANAGER_PORT = 6380
# A node's group resource is large so that any number of pinned bundles (each asks for rlrun's
# NODE_GROUP_UNIT of it) fit: the resource pins them to the group without limiting how many.
GROUP_RESOURCE_AMOUNT = 1000
# The share of /dev/shm given to Ray's object store; the rest stays for NCCL and torch, which
# also use shared memory. Never more than Ray's own default share of RAM.
SHM_SHARE = 0.8
MEMORY_SHARE = 0.3
INFINIBAND = Path("/sys/class/infiniband")


class NodeError(ValueError):
    """The host cannot run Ray as configured."""


def efa_present(infiniband: Path = INFINIBAND) -> bool:
    """Whether this host has an Elastic Fabric Adapter (an InfiniBand device driven by efa)."""
    if not infiniband.is_dir():
        return False
    return any(
        (dev / "device" / "driver").resolve().name == "efa" for dev in infiniband.iterdir()
    )


def object_store_bytes(shm_bytes: int, memory_bytes: int) -> int:
    """Ray's object store size: most of /dev/shm, capped at Ray's default share of RAM. Ray
    sized by default from RAM would spill to disk on a host whose /dev/shm is small."""
    return int(min(shm_bytes * SHM_SHARE, memory_bytes * MEMORY_SHARE))


def host_shm_and_memory() -> tuple[int, int]:
    """The size of /dev/shm and of RAM on this host, in bytes."""
    shm = os.statvfs("/dev/shm")
    return shm.f_frsize * shm.f_blocks, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def node_environment(
    interface: str | None, efa: bool, token: str | None
) -> dict[str, str]:
    """Variables every Ray process of the host (and so every actor) and the trainer get.

    The socket interface keeps NCCL and gloo off the loopback address the host name may
    resolve to (learner ranks on other nodes could not reach it); NCCL_CUMEM_ENABLE=0 as vLLM
    sets it in its own processes, with which the learner ranks share the weight-transfer
    communicator; the EFA variables only where an EFA device exists.
    """
    env = {"NCCL_CUMEM_ENABLE": "0"}
    if interface:
        env |= {"NCCL_SOCKET_IFNAME": interface, "GLOO_SOCKET_IFNAME": interface}
    if efa:
        env |= {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}
    if token is not None:
        env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    return env


def auth_token(env: Mapping[str, str], multi_host: bool, generate: str) -> str | None:
    """The Ray token of the job: $RAY_AUTH_TOKEN (the launcher sets one per job, so every host
    has it), `generate` for a job of one host, None where RAY_AUTH_MODE=disabled."""
    if env.get("RAY_AUTH_MODE", "token").lower() == "disabled":
        return None
    if env.get("RAY_AUTH_TOKEN"):
        return env["RAY_AUTH_TOKEN"]
    if multi_host:
        raise NodeError(
            "the job has several hosts but no RAY_AUTH_TOKEN: set one (the same on every host) "
            "in the training job's environment, as `rlrun sagemaker launch` does"
        )
    return generate


def ray_start_command(
    ray: str, ip: str, group: str, store_bytes: int, head_ip: str | None
) -> list[str]:
    """`ray start --block` for the head (`head_ip` None) or a worker joining `head_ip`."""
    where = ["--head", f"--port={GCS_PORT}"] if head_ip is None else [
        f"--address={head_ip}:{GCS_PORT}"
    ]
    return [
        ray, "start", "--block", *where, f"--node-ip-address={ip}",
        f"--node-manager-port={NODE_MANAGER_PORT}",
        f"--resources={json.dumps({node_group_resource(group): GROUP_RESOURCE_AMOUNT})}",
        f"--object-store-memory={store_bytes}", "--disable-usage-stats",
    ]
