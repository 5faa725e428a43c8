import json
import socket

import pytest

from rlrun.cluster import (
    ClusterError,
    Demand,
    check_address,
    check_fits,
    check_job_output_dir,
    demands,
    node_group_resource,
    resolve_address,
    rollout_demand,
)
from rlrun.config import ConfigError, load_config

NODE = {"CPU": 2.0, "memory": 1e9}


def test_fractional_actors_fit_two_cores():
    cfg = load_config(None, ["rollout.num_cpus=0.5", "learner.num_cpus=0.5",
                             "sandbox.num_cpus=0.5"])
    check_fits(demands(cfg, needs_sandbox=True), NODE, [NODE])


def test_too_many_cpus_names_the_keys_and_what_the_cluster_has():
    cfg = load_config(None, ["rollout.num_actors=4"])
    with pytest.raises(ClusterError) as err:
        check_fits(demands(cfg, needs_sandbox=False), NODE, [NODE])
    msg = str(err.value)
    assert "rollout.num_actors=4 x rollout.num_cpus=1" in msg
    assert "learner.num_workers=1" in msg
    assert "needs 5 CPUs" in msg and "has 2" in msg


def test_gpus_on_a_cpu_cluster_fail():
    cfg = load_config(None, ["learner.num_gpus=1"])
    with pytest.raises(ClusterError, match="learner.num_workers=1 x learner.num_gpus=1.*has 0"):
        check_fits(demands(cfg, needs_sandbox=False), NODE, [NODE])


def test_an_actor_bigger_than_any_node_fails_even_if_the_total_fits():
    ds = [Demand("rollout", "rollout.num_actors", 1, 3.0, 0.0)]
    with pytest.raises(ClusterError, match="rollout.num_cpus=3 does not fit on any node"):
        check_fits(ds, {"CPU": 4.0}, [NODE, NODE])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nobody_listens_on_fails_naming_the_key():
    with pytest.raises(ClusterError, match="run.ray_address"):
        check_address(f"127.0.0.1:{_closed_port()}", timeout_s=2.0)


def test_an_address_that_accepts_but_never_speaks_fails_instead_of_waiting_in_ray_init():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(ClusterError, match=r"accepts connections but does not answer as a "
                                               r"Ray cluster within 1s"):
            check_address(f"127.0.0.1:{port}", timeout_s=1.0)


def test_a_malformed_address_is_named():
    with pytest.raises(ClusterError, match="not host:port"):
        check_address("nonsense")


def test_a_working_dir_job_needs_an_absolute_or_remote_output_dir() -> None:
    job = {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(
        {"runtime_env": {"working_dir": "gcs://_ray_pkg_0123.zip"}, "metadata": {}})}
    with pytest.raises(ClusterError, match=r"run.output_dir='runs/demo' is relative, and this "
                                           r"Ray job runs in Ray's temporary copy"):
        check_job_output_dir("runs/demo", job)
    check_job_output_dir("/shared/runs/demo", job)
    check_job_output_dir("s3://bucket/runs/demo", job)
    check_job_output_dir("runs/demo", {})  # not a job: relative to where it was started
    no_working_dir = {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {}})}
    check_job_output_dir("runs/demo", no_working_dir)


def test_auto_with_a_stale_address_file_fails_at_once_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # As on a machine with no Ray running: Ray's `auto` prefers a lone running GCS to the file.
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", frozenset)
    port = _closed_port()
    (tmp_path / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    with pytest.raises(ClusterError, match=rf"run.ray_address=auto .* points at [\d.]+:{port}, "
                                           r"where the last `ray start` on this machine ran"):
        resolve_address("auto", temp_dir=str(tmp_path))


def test_an_explicit_address_is_left_as_given():
    assert resolve_address("10.0.0.5:6379") == "10.0.0.5:6379"


@pytest.mark.parametrize(("overrides", "env", "address"), [
    ([], None, "local"),
    (["run.ray_address=10.0.0.5:6379"], None, "10.0.0.5:6379"),
    ([], "10.0.0.6:6379", "10.0.0.6:6379"),
])
def test_init_ray_starts_a_ray_of_its_own_unless_given_an_address(monkeypatch, overrides, env,
                                                                  address):
    # Without address="local", ray.init joins the cluster /tmp/ray/ray_current_cluster names
    # (running, or dead and never cleaned up) and refuses the num_cpus of a local run.
    import ray

    from actors import placement

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(placement, "check_address", lambda address: None)
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    placement.init_ray(load_config(None, [*overrides, "run.num_cpus=2", "run.namespace=ns"]))
    [(args, kwargs)] = calls
    assert not args and kwargs["address"] == address and kwargs["namespace"] == "ns"
    assert kwargs.get("num_cpus") == (2 if address == "local" else None)


def test_a_pinned_group_asks_every_bundle_for_its_node_group():
    cfg = load_config(None, ["sandbox.node_group=cpu-judges", "sandbox.num_actors=2"])
    by_role = {d.role: d for d in demands(cfg, needs_sandbox=True)}
    assert by_role["sandbox"].bundles() == [{"CPU": 1.0, "node_group:cpu-judges": 0.001}] * 2
    assert by_role["rollout"].bundles() == [{"CPU": 1.0}]
    tp = load_config(None, ["rollout.engine=vllm", "rollout.num_gpus=2",
                            "rollout.tensor_parallel_size=2", "rollout.node_group=gpu",
                            "learner.num_gpus=1", "weights.backend=collective"])
    assert rollout_demand(tp).bundles() == [{"CPU": 1.0, "GPU": 1.0, "node_group:gpu": 0.001},
                                            {"GPU": 1.0, "node_group:gpu": 0.001}]


GPU_NODE = {"CPU": 4.0, "GPU": 4.0, "node_group:gpu": 1000.0}
CPU_NODE = {"CPU": 8.0, "node_group:cpu-judges": 1000.0}


def test_a_group_no_node_is_in_is_named_with_the_groups_there_are():
    cfg = load_config(None, ["sandbox.node_group=judges"])
    nodes = [GPU_NODE, CPU_NODE]
    with pytest.raises(ClusterError, match=r"sandbox.node_group=judges: no node of the Ray cluster "
                                           r"is in that group \(its groups: cpu-judges, gpu\)"):
        check_fits(demands(cfg, needs_sandbox=True), {"CPU": 12.0, "GPU": 4.0}, nodes)


def test_actors_pinned_to_a_group_must_fit_its_nodes():
    nodes = [GPU_NODE, CPU_NODE]
    totals = {"CPU": 12.0, "GPU": 4.0}
    # 6 CPUs fit the cluster (12) but not the GPU group's one node (4).
    cfg = load_config(None, ["rollout.node_group=gpu", "learner.node_group=gpu",
                             "rollout.num_cpus=3", "learner.num_cpus=3"])
    with pytest.raises(ClusterError, match=r"rollout.node_group and learner.node_group=gpu: "
                                           r"the group's 1 node\(s\) have 4 CPUs but its actors "
                                           r"need 6"):
        check_fits(demands(cfg, needs_sandbox=False), totals, nodes)
    fits = load_config(None, ["rollout.node_group=gpu", "sandbox.node_group=cpu-judges",
                              "sandbox.num_actors=6"])
    check_fits(demands(fits, needs_sandbox=True), totals, nodes)
    one_big = load_config(None, ["sandbox.node_group=gpu", "sandbox.num_cpus=6"])
    with pytest.raises(ClusterError, match="sandbox.num_cpus=6 does not fit on any node of "
                                           "sandbox.node_group=gpu: its largest has 4 CPUs"):
        check_fits(demands(one_big, needs_sandbox=True), {"CPU": 16.0, "GPU": 8.0},
                   [GPU_NODE, GPU_NODE, CPU_NODE])


def test_colocated_roles_share_one_group():
    with pytest.raises(ConfigError, match="learner.node_group"):
        load_config(None, ["placement.mode=colocated", "rollout.node_group=gpu"])
    colocated = load_config(None, ["placement.mode=colocated", "rollout.node_group=gpu",
                                   "learner.node_group=gpu"])
    assert demands(colocated, needs_sandbox=False)[0].node_group == "gpu"


def test_node_group_resource_names_the_group():
    assert node_group_resource("cpu-judges") == "node_group:cpu-judges"
