"""The packed bucket layout (vLLM's) and its checksum, by hand."""

import pytest
import torch

from rlrun.weights.buckets import (
    ParamMeta,
    bucket_ranges,
    checksum,
    pack,
    unpack,
    weighted_sum,
)


def metas(*sizes: int) -> list[ParamMeta]:
    return [ParamMeta(f"w{i}", "float32", (n,)) for i, n in enumerate(sizes)]


def test_a_bucket_closes_right_after_the_tensor_that_overruns_it():
    # float32: 4 bytes per element. Budget 40 bytes.
    # w0 16 B (total 16), w1 16 B (32), w2 16 B (48 > 40: close after w2) | w3 8 B, w4 80 B
    # (88 > 40: close after w4, a bucket may overrun by one tensor) | w5 4 B (the rest).
    assert bucket_ranges(metas(4, 4, 4, 2, 20, 1), 40) == [range(0, 3), range(3, 5), range(5, 6)]
    # Exactly the budget does not close a bucket (vLLM cuts on "greater than").
    assert bucket_ranges(metas(5, 5, 1), 40) == [range(0, 3)]
    assert bucket_ranges([], 40) == []


def test_pack_and_unpack_round_trip_mixed_dtypes():
    tensors = {"a": torch.arange(6, dtype=torch.float32).view(2, 3),
               "b": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
               "c": torch.tensor([7], dtype=torch.int64)}
    ms = [ParamMeta.of(k, v) for k, v in tensors.items()]
    assert [m.nbytes for m in ms] == [24, 4, 8]
    bucket = pack(tensors.values())
    assert bucket.dtype == torch.uint8 and bucket.numel() == 36
    for (name, got), (want_name, want) in zip(unpack(bucket, ms), tensors.items(), strict=True):
        assert name == want_name and torch.equal(got, want)


def test_unpack_refuses_a_bucket_of_the_wrong_size():
    with pytest.raises(ValueError, match="cannot hold 2 tensors of 8 bytes"):
        unpack(torch.zeros(12, dtype=torch.uint8), metas(1, 1))


@pytest.mark.parametrize("check", [checksum, weighted_sum])
def test_the_checksum_sees_corruption_and_swapped_tensors(check):
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    bucket = pack([a, b])
    assert check(bucket) == check(bucket.clone())
    flipped = bucket.clone()
    flipped[5] ^= 1
    assert check(flipped) != check(bucket)
    assert check(pack([b, a])) != check(bucket)  # same bytes, other order


def test_slicing_the_gpu_checksum_changes_nothing():
    bucket = pack([torch.arange(10.0)])
    assert weighted_sum(bucket, chunk=3) == weighted_sum(bucket)
