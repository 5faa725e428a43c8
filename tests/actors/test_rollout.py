import pytest
import ray
import torch

from actors.rollout import RolloutPool
from rlrun.config import load_config
from rlrun.engines import SamplingParams
from rlrun.models import load_causal_lm, resolve_model_path
from rlrun.weights import make_sender

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


def other_weights(cfg, tmp_path_factory) -> dict[str, torch.Tensor]:
    """A different model of the same architecture (another init seed)."""
    path = resolve_model_path(cfg.model, str(tmp_path_factory.mktemp("other")), seed=1)
    return load_causal_lm(path).state_dict()


def texts(out):
    return [[c.text for c in comps] for comps in out]


def test_rollout_actors_generate_with_each_new_version(ray_cluster, cfg, tiny_path,
                                                       tmp_path_factory):
    pool = RolloutPool(cfg, tiny_path)
    sampling = SamplingParams.from_config(cfg.rollout.sampling, n=2, seed=7)
    sender = make_sender("object_store")
    try:
        initial = pool.generate(PROMPTS, sampling)
        assert pool.versions() == [0, 0]
        pool.load_weights(1, sender.publish(1, other_weights(cfg, tmp_path_factory)))
        changed = pool.generate(PROMPTS, sampling)
        assert pool.versions() == [1, 1]
        assert {c.weight_version for comps in changed for c in comps} == {1}
        assert texts(changed) != texts(initial)
        pool.load_weights(2, sender.publish(2, load_causal_lm(tiny_path).state_dict()))
        assert texts(pool.generate(PROMPTS, sampling)) == texts(initial)
    finally:
        pool.shutdown()


def test_killing_an_actor_mid_request_loses_and_duplicates_nothing(ray_cluster, cfg, tiny_path,
                                                                   tmp_path_factory):
    pool = RolloutPool(cfg, tiny_path)
    sampling = SamplingParams.from_config(cfg.rollout.sampling, n=2, seed=3)
    try:
        pool.load_weights(1, make_sender().publish(1, other_weights(cfg, tmp_path_factory)))
        expected = pool.generate(PROMPTS, sampling)
        pending = pool.submit(PROMPTS, sampling)
        ray.kill(pool.actors[0])
        got = pool.wait(pending)
        assert pool.restarts == 1
        assert len(got) == len(PROMPTS) and all(len(comps) == 2 for comps in got)
        # Same seeds per chunk and the current weights in the replacement: identical samples.
        assert texts(got) == texts(expected)
        assert {c.weight_version for comps in got for c in comps} == {1}
        assert pool.versions() == [1, 1]
    finally:
        pool.shutdown()
