"""ActorPool on a small local Ray: order, retries on a replacement, deadlines, giving up."""

import os
import time

import pytest
import ray

from actors.pool import ActorPool, PoolError

pytestmark = pytest.mark.slow

RAY_NAMESPACE = "rlrun-test-pool"


@ray.remote(num_cpus=0)
class Doubler:
    """Doubles numbers; the actor named `culprit` hangs or dies on the item `bad`."""

    def __init__(self, name: str, culprit: str, bad: int | None, how: str) -> None:
        self.name, self.culprit, self.bad, self.how = name, culprit, bad, how

    def double(self, items: list[int]) -> list[int]:
        if self.bad in items and self.name == self.culprit:
            if self.how == "hang":
                time.sleep(3600)
            os._exit(1)  # the process dies
        return [2 * x for x in items]


def pool(bad: int | None = None, how: str = "die", culprit: str = "test-0",
         **options) -> ActorPool:
    def start(slot: int, name: str):
        return Doubler.options(name=name).remote(name, culprit, bad, how)

    options = {"timeout_s": 60.0, "timeout_key": "test.timeout_s"} | options
    return ActorPool(start, 2, prefix="test", role="doubler", **options)


def double(p: ActorPool, items: list[int], chunk_size: int = 2) -> list[int]:
    return p.map(items, lambda actor, chunk: actor.double.remote(chunk.items),
                 chunk_size=chunk_size, what="double")


def test_results_come_back_in_item_order(ray_cluster):
    p = pool()
    try:
        assert double(p, list(range(7))) == [2 * x for x in range(7)]
        assert p.restarts == 0 and sum(p.done_per_slot()) == 7
    finally:
        p.shutdown()


def test_a_chunk_whose_actor_died_is_redone_on_a_replacement(ray_cluster):
    restarted = []
    p = pool(bad=3, culprit="test-1", on_restart=restarted.append)
    try:
        assert double(p, list(range(6))) == [2 * x for x in range(6)]
        assert p.restarts == 1 and len(restarted) == 1
        assert p.names() == ["test-0", "test-1.1"]  # chunk [2, 3] went to slot 1 first
    finally:
        p.shutdown()


def test_an_actor_past_its_deadline_is_killed_and_replaced(ray_cluster):
    p = pool(bad=0, how="hang", timeout_s=3.0)
    try:
        assert double(p, [0, 1]) == [0, 2]
        assert p.restarts == 1
    finally:
        p.shutdown()


def test_a_stalled_actor_is_named_in_one_line_with_its_python_stack(ray_cluster, caplog):
    p = pool(bad=0, how="hang", timeout_s=3.0)
    try:
        with caplog.at_level("WARNING", logger="actors.pool"):
            assert double(p, [0, 1]) == [0, 2]
    finally:
        p.shutdown()
    (message,) = [r.getMessage() for r in caplog.records if "made no progress" in r.message]
    first, stack = message.split("\n", 1)
    assert first.startswith("doubler actor test-0 made no progress for 3s in double "
                            "(test.timeout_s): replacing it")
    # py-spy's dump of the hung call: the sleep in Doubler.double, with its file and line.
    assert "double (" in stack and "test_pool.py" in stack, stack


def test_a_chunk_that_keeps_failing_ends_the_request_naming_the_actor_and_key(ray_cluster):
    p = pool(bad=0, how="hang", timeout_s=2.0, max_attempts=1)
    try:
        with pytest.raises(PoolError, match=r"doubler actor test-0 did not finish double "
                                            r"within 2s \(test.timeout_s\)"):
            double(p, [0, 1])
    finally:
        p.shutdown()


def test_given_up_items_get_a_stand_in_and_a_split_spares_their_neighbours(ray_cluster):
    @ray.remote(num_cpus=0)
    class Picky:
        def double(self, items: list[int]) -> list[int]:
            if 13 in items:
                raise ValueError("unlucky")
            return [2 * x for x in items]

    p = ActorPool(lambda slot, name: Picky.options(name=name).remote(), 2, prefix="picky",
                  role="picky", timeout_s=60.0, timeout_key="test.timeout_s", max_attempts=3,
                  give_up=lambda item, chunk: f"gave up on {item}: {chunk.error}",
                  split_after=2)
    try:
        got = double(p, [12, 13, 14, 15], chunk_size=4)
        assert got[0] == 24 and got[2:] == [28, 30]
        assert got[1].startswith("gave up on 13: picky actor picky-") and "unlucky" in got[1]
        assert p.restarts == 0
    finally:
        p.shutdown()


def test_a_call_to_every_actor_that_fails_ends_in_one_line_naming_the_actor(ray_cluster):
    # call_all replaces an actor that dies; any other failure of the call (a weights object
    # whose owner died with its node) must name the actor and the call, not surface as Ray's.
    @ray.remote(num_cpus=0)
    class Loader:
        def load(self) -> None:
            raise ValueError("the weights' owner is gone")

    p = ActorPool(lambda slot, name: Loader.options(name=name).remote(), 2, prefix="loader",
                  role="rollout", timeout_s=60.0, timeout_key="test.timeout_s")
    try:
        with pytest.raises(PoolError, match=r"^rollout actor loader-\d failed in "
                                            r"load_weights: ValueError: the weights' owner"):
            p.call_all(lambda actor: actor.load.remote(), "load_weights")
        assert p.restarts == 0
    finally:
        p.shutdown()
