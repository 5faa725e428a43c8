"""The collective backend over gloo, with the sender and the engines' receivers in threads: the
same code a GPU run uses with NCCL."""

import socket
import threading

import pytest
import torch

from rlrun.config import ModelConfig
from rlrun.models import load_causal_lm, resolve_model_path
from rlrun.weights.collective import (
    GroupInfo,
    Receiver,
    TorchChannel,
    WeightSyncError,
    rank_offsets,
    send,
)
from rlrun.weights.source import WeightSource


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def info(rank: int, world: int, port: int, timeout_s: float = 30.0) -> GroupInfo:
    return GroupInfo("127.0.0.1", port, rank, world, bucket_bytes=4096, timeout_s=timeout_s,
                     device="cpu")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_causal_lm(resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("m"))))


def in_threads(*fns):
    """Run `fns` at once (each one group member); their results, or the first error raised."""
    results, errors = [None] * len(fns), []

    def run(i, fn):
        try:
            results[i] = fn()
        except Exception as err:  # noqa: BLE001 - handed to the test thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a group member hung"
    if errors:
        raise errors[0]
    return results


def test_engines_take_ranks_after_the_sender_without_overlap():
    assert rank_offsets([1, 1]) == [1, 2]
    assert rank_offsets([2, 1, 4]) == [1, 3, 4]  # world = 1 + 7 = 8


def sync(model, port: int, receivers: int, dtype=torch.bfloat16, tamper=None):
    """One sync: build the group, send once, finish on every receiver; (stats, received)."""
    source = WeightSource(model, dtype)
    world = 1 + receivers

    def sender():
        channel = TorchChannel(info(0, world, port))
        stats = send(source, channel, 4096, torch.device("cpu"), with_checksums=True)
        return stats

    def receiver(rank):
        def run():
            r = Receiver(info(rank, world, port))
            r.start(version=3)
            r.update(source.metadata())
            return r
        return run

    stats, *rs = in_threads(sender, *[receiver(rank) for rank in range(1, world)])
    sums = stats.checksums if tamper is None else tamper(stats.checksums)
    return stats, [r.finish(3, sums) for r in rs]


def test_a_sync_delivers_every_tensor_cast_to_the_engine_dtype(model):
    stats, received = sync(model, free_port(), receivers=2)
    expected = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    assert stats.buckets > 10  # 4 KB buckets: the layout really was cut
    assert stats.bytes == sum(v.numel() * 2 for v in expected.values())
    for weights in received:
        assert list(weights) == list(expected)
        for name, tensor in expected.items():
            assert torch.equal(weights[name], tensor), name


def test_a_corrupted_bucket_is_refused_before_the_weights_go_live(model):
    def flip_one(sums):
        return [sums[0] + 1, *sums[1:]]

    with pytest.raises(WeightSyncError, match="bucket 0 of .* arrived corrupted"):
        sync(model, free_port(), receivers=1, tamper=flip_one)


def test_finish_must_name_the_version_that_was_opened(model):
    port = free_port()
    source = WeightSource(model, torch.float32)

    def sender():
        send(source, TorchChannel(info(0, 2, port)), 4096, torch.device("cpu"), True)

    def receiver():
        r = Receiver(info(1, 2, port))
        r.start(version=5)
        r.update(source.metadata())
        return r

    _, r = in_threads(sender, receiver)
    with pytest.raises(WeightSyncError, match="finish for weight version 6, but the update open"):
        r.finish(6, [])


def test_a_member_that_never_receives_fails_the_sender_within_the_timeout(model):
    port = free_port()
    source = WeightSource(model, torch.float32)

    def sender():
        send(source, TorchChannel(info(0, 2, port, timeout_s=2.0)), 4096, torch.device("cpu"),
             True)

    def idle_member():  # joins the group, then never enters the transfer
        return TorchChannel(info(1, 2, port, timeout_s=2.0))

    with pytest.raises(RuntimeError):
        in_threads(sender, idle_member)
