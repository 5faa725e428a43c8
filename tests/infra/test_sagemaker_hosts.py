"""Reading a SageMaker job's hosts: resource configs of every shape, fallbacks, head choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.sagemaker.hosts import (
    RESOURCE_CONFIG,
    HostsError,
    head_host,
    host_order,
    load_cluster,
    parse_resource_config,
)

HOMOGENEOUS = {
    "current_host": "algo-2", "current_instance_type": "ml.g5.12xlarge",
    "current_group_name": "homogeneousCluster", "hosts": ["algo-2", "algo-1"],
    "instance_groups": [{"instance_group_name": "homogeneousCluster",
                         "instance_type": "ml.g5.12xlarge", "hosts": ["algo-1", "algo-2"]}],
    "network_interface_name": "eth0",
}
HETEROGENEOUS = {
    "current_host": "algo-1", "current_group_name": "gpu-rollout",
    "hosts": ["algo-1", "algo-2", "algo-3", "algo-4"],
    "instance_groups": [
        {"instance_group_name": "gpu-rollout", "instance_type": "ml.g5.12xlarge",
         "hosts": ["algo-1", "algo-2"]},
        {"instance_group_name": "cpu-judges", "instance_type": "ml.c5.9xlarge",
         "hosts": ["algo-4", "algo-3"]},
    ],
    "network_interface_name": "eth0",
}
# `sagemaker` local mode (docker compose) names hosts algo-<n>-<5 random characters>.
LOCAL_MODE = {"current_host": "algo-1-x3k9z", "hosts": ["algo-2-ab12c", "algo-1-x3k9z"]}
TWELVE = {
    "current_host": "algo-7", "hosts": [f"algo-{i}" for i in range(12, 0, -1)],
    "instance_groups": [{"instance_group_name": "homogeneousCluster",
                         "instance_type": "ml.p4d.24xlarge",
                         "hosts": [f"algo-{i}" for i in range(1, 13)]}],
    "network_interface_name": "ens5",
}


def test_homogeneous() -> None:
    c = parse_resource_config(HOMOGENEOUS)
    assert c.hosts == ("algo-1", "algo-2") and c.current == "algo-2"
    assert c.interface == "eth0"
    assert c.group_of("algo-2") == "homogeneousCluster"
    assert head_host(c, None) == "algo-1"


def test_heterogeneous_groups_and_head_group() -> None:
    c = parse_resource_config(HETEROGENEOUS)
    assert c.hosts == ("algo-1", "algo-2", "algo-3", "algo-4")
    assert [c.group_of(h) for h in c.hosts] == ["gpu-rollout"] * 2 + ["cpu-judges"] * 2
    assert head_host(c, None) == "algo-1"
    # The head may live on a CPU-only group: its first host by number, not by listing order.
    assert head_host(c, "cpu-judges") == "algo-3"
    assert c.types == {"algo-1": "ml.g5.12xlarge", "algo-2": "ml.g5.12xlarge",
                       "algo-3": "ml.c5.9xlarge", "algo-4": "ml.c5.9xlarge"}
    with pytest.raises(HostsError, match="--head-group 'gpu' is not an instance group of this "
                                         "job; its groups: cpu-judges, gpu-rollout"):
        head_host(c, "gpu")


def test_local_mode_names() -> None:
    c = parse_resource_config(LOCAL_MODE)
    assert c.hosts == ("algo-1-x3k9z", "algo-2-ab12c")
    assert head_host(c, None) == "algo-1-x3k9z"
    assert c.interface is None and c.group_of("algo-2-ab12c") == "homogeneousCluster"
    assert c.types == {}  # no type given: nothing to check GPUs against


def test_twelve_hosts_order_by_number_not_string() -> None:
    c = parse_resource_config(TWELVE)
    assert c.hosts == tuple(f"algo-{i}" for i in range(1, 13))
    assert sorted(["algo-10", "algo-2", "algo-1"]) == ["algo-1", "algo-10", "algo-2"]
    assert head_host(c, None) == "algo-1" and c.interface == "ens5"
    assert sorted(["ip-10", "algo-10", "algo-9"], key=host_order) == ["algo-9", "algo-10", "ip-10"]


def test_bad_configs_say_what_is_wrong() -> None:
    with pytest.raises(HostsError, match="lacks `hosts` or `current_host`"):
        parse_resource_config({"hosts": ["algo-1"]})
    with pytest.raises(HostsError, match="current host 'algo-3' is not among"):
        parse_resource_config({"hosts": ["algo-1"], "current_host": "algo-3"})


def test_load_prefers_resource_config_then_sm_hosts_then_one_node(tmp_path: Path) -> None:
    env = {"SM_HOSTS": json.dumps(["algo-10", "algo-9"]), "SM_CURRENT_HOST": "algo-10"}
    c = load_cluster(tmp_path, env)
    assert c.hosts == ("algo-9", "algo-10") and c.current == "algo-10"
    single = load_cluster(tmp_path, {})
    assert single.hosts == (single.current,)
    path = tmp_path / RESOURCE_CONFIG
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(HETEROGENEOUS))
    assert load_cluster(tmp_path, env).current == "algo-1"
    path.write_text("{")
    with pytest.raises(HostsError, match="is not JSON"):
        load_cluster(tmp_path, env)
