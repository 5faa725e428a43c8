import pytest
import ray
import torch

from rlrun.weights import WeightUpdate, make_receiver, make_sender, plain_state_dict
from rlrun.weights.object_store import hold_weights

pytestmark = pytest.mark.slow


RAY_NAMESPACE = "rlrun-test-weights"


@ray.remote(num_cpus=0)
class Keeper:
    """A long-lived owner, as the coordinator is in a run."""

    def hold(self, state_dict):
        return hold_weights(state_dict)


@ray.remote(num_cpus=0)
class Publisher:
    """Stands where a learner rank stands: it publishes, then may die."""

    def publish(self, owner, version: int) -> WeightUpdate:
        weights = {"module.w": torch.full((2, 3), float(version)), "b": torch.arange(3.0)}
        return make_sender("object_store", owner=owner).publish(version, weights)


def test_weights_outlive_the_worker_that_published_them(ray_cluster):
    keeper, publisher = Keeper.remote(), Publisher.remote()
    update = ray.get(publisher.publish.remote(keeper, 4))
    ray.kill(publisher)
    weights = make_receiver(update.backend).receive(update)
    assert update.version == 4
    torch.testing.assert_close(weights["w"], torch.full((2, 3), 4.0))  # DDP prefix removed
    torch.testing.assert_close(weights["b"], torch.arange(3.0))


def test_plain_state_dict_strips_wrapper_prefixes():
    sd = {"module._orig_mod.x": torch.ones(1, requires_grad=True), "y": torch.zeros(1)}
    out = plain_state_dict(sd)
    assert set(out) == {"x", "y"} and not out["x"].requires_grad


def test_an_unknown_backend_is_named():
    with pytest.raises(ValueError, match="object_store"):
        make_sender("carrier-pigeon")
