import pytest
import ray
import torch

from rlrun.config import CHOICES
from rlrun.weights import BACKENDS, WeightUpdate, plain_state_dict
from rlrun.weights.object_store import ObjectStoreReceiver, ObjectStoreSender

pytestmark = pytest.mark.slow


RAY_NAMESPACE = "rlrun-test-weights"


@ray.remote(num_cpus=0)
class Publisher:
    """Stands where learner rank 0 stands: it puts the weights it holds."""

    def publish(self, version: int) -> WeightUpdate:
        weights = {"module.w": torch.full((256, 256), float(version)), "b": torch.arange(3.0)}
        return ObjectStoreSender().publish(version, weights)


@ray.remote(num_cpus=0)
class Reader:
    """Stands where a rollout actor stands."""

    def load(self, update: WeightUpdate) -> dict[str, torch.Tensor]:
        return ObjectStoreReceiver().receive(update)


def test_the_record_the_driver_relays_is_a_reference_not_the_weights(ray_cluster):
    publisher, reader = Publisher.remote(), Reader.remote()
    update = ray.get(publisher.publish.remote(4))
    # What passes through the driver is the version and an object reference: bytes, not 256 KB.
    assert len(ray.cloudpickle.dumps(update)) < 2_000
    weights = ray.get(reader.load.remote(update))
    assert update.version == 4
    torch.testing.assert_close(weights["w"], torch.full((256, 256), 4.0))  # DDP prefix removed
    torch.testing.assert_close(weights["b"], torch.arange(3.0))


def test_plain_state_dict_strips_wrapper_prefixes():
    sd = {"module._orig_mod.x": torch.ones(1, requires_grad=True), "y": torch.zeros(1)}
    out = plain_state_dict(sd)
    assert set(out) == {"x", "y"} and not out["x"].requires_grad


def test_config_offers_the_backends_rlrun_weights_has():
    assert CHOICES["weights.backend"] == BACKENDS


def test_an_update_of_another_backend_is_refused():
    with pytest.raises(ValueError, match="weight update of backend 'collective' sent to "
                                         "object_store"):
        ObjectStoreReceiver().receive(WeightUpdate(1, "collective"))
