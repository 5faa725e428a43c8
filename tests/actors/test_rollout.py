import pytest
import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group

from actors.rollout import RolloutGroup
from rlrun.config import load_config
from rlrun.engines import SamplingParams
from rlrun.models import load_causal_lm, resolve_model_path
from rlrun.weights.object_store import ObjectStoreSender

pytestmark = pytest.mark.slow

PROMPTS = [f"{a}+{b}=" for a in range(4) for b in range(2)]


RAY_NAMESPACE = "rlrun-test-rollout"


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, ["rollout.num_actors=2", "rollout.num_cpus=0.5",
                              "rollout.batch_size=4", "rollout.sampling.max_new_tokens=8"])


@pytest.fixture(scope="module")
def tiny_path(cfg, tmp_path_factory):
    return resolve_model_path(cfg.model, str(tmp_path_factory.mktemp("models")))


@pytest.fixture
def group(ray_cluster, cfg, tiny_path):
    pg = placement_group([{"CPU": 0.5}] * cfg.rollout.num_actors)
    ray.get(pg.ready(), timeout=60)
    group = RolloutGroup(cfg, tiny_path, pg, "test")
    yield group
    group.shutdown()
    remove_placement_group(pg)


def other_weights(cfg, tmp_path_factory) -> dict[str, torch.Tensor]:
    """A different model of the same architecture (another init seed)."""
    path = resolve_model_path(cfg.model, str(tmp_path_factory.mktemp("other")), seed=1)
    return load_causal_lm(path).state_dict()


def texts(out):
    return [[c.response_text for c in comps] for comps in out]


def test_rollout_actors_generate_with_each_new_version(group, cfg, tiny_path, tmp_path_factory):
    sampling = SamplingParams.from_config(cfg.rollout.sampling, n=2, seed=7)
    sender = ObjectStoreSender()
    initial = group.generate(PROMPTS, sampling)
    assert group.versions() == [0, 0]
    group.load_weights(sender.publish(1, other_weights(cfg, tmp_path_factory)))
    changed = group.generate(PROMPTS, sampling)
    assert group.versions() == [1, 1]
    assert {c.weight_version for comps in changed for c in comps} == {1}
    assert texts(changed) != texts(initial)
    group.load_weights(sender.publish(2, load_causal_lm(tiny_path).state_dict()))
    assert texts(group.generate(PROMPTS, sampling)) == texts(initial)


def test_killing_an_actor_mid_request_loses_and_duplicates_nothing(group, cfg, tmp_path_factory):
    sampling = SamplingParams.from_config(cfg.rollout.sampling, n=2, seed=3)
    group.load_weights(ObjectStoreSender().publish(1, other_weights(cfg, tmp_path_factory)))
    expected = group.generate(PROMPTS, sampling)
    pending = group.submit(PROMPTS, sampling)
    ray.kill(group.pool.actors[0])
    got = group.wait(pending)
    assert group.restarts == 1
    assert len(got) == len(PROMPTS) and all(len(comps) == 2 for comps in got)
    # Same seeds per chunk and the current weights in the replacement: identical samples.
    assert texts(got) == texts(expected)
    assert {c.weight_version for comps in got for c in comps} == {1}
    assert group.versions() == [1, 1]
    assert group.pool.names() == ["test.rollout-0.1", "test.rollout-1"]
