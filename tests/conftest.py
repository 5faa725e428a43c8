"""Fixtures shared across test packages."""

import os

import pytest


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
