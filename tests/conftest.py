"""Fixtures shared across test packages."""

import os

import pytest

# Ray Train's controller looks at its workers every 2 s by default, so each SFT warm-start in a
# test waited up to 2 s to notice it had started and again that it had ended; a quarter second
# is as correct and the suite runs a dozen of them. Set here, before any test starts Ray or a
# subprocess, so both inherit it.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")

# Modules whose tests start multi-node clusters (network-namespace hosts, `ray start --head`):
# under pytest-xdist they share one worker, so two of them never compete for the cores.
CLUSTER_MODULES = {
    "tests/infra/test_sagemaker_cluster.py",
    "tests/test_job_submit.py",
    "tests/test_shared_cluster.py",
}
# Modules whose tests are independent processes of their own: each test may run on either
# worker.
SPREAD_MODULES = {"tests/benchmarks/test_smoke.py"}


def pytest_collection_modifyitems(config, items):
    """`make test` runs two pytest-xdist workers with `--dist loadgroup`. A module's tests stay
    on one worker, in order, so its module-scoped fixtures (a Ray cluster, an engine) start
    once; the multi-node modules share one worker (CLUSTER_MODULES)."""
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in CLUSTER_MODULES:
            group = "clusters"
        elif module in SPREAD_MODULES:
            group = item.nodeid
        else:
            group = module
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="module")
def ray_cluster(request, tmp_path_factory):
    """A local 2-CPU Ray for one test module, in the module's RAY_NAMESPACE (default
    rlrun-test), with a model cache of its own so tiny models are built afresh."""
    import ray

    os.environ["RLRUN_CACHE"] = str(tmp_path_factory.mktemp("models"))
    namespace = getattr(request.module, "RAY_NAMESPACE", "rlrun-test")
    # "local": a Ray of its own, never one another test process started.
    ray.init(address="local", num_cpus=2, namespace=namespace, include_dashboard=False,
             log_to_driver=False)
    yield
    ray.shutdown()
