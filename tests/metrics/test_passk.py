"""pass@k against values worked out by hand from 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

import math

import pytest

from rlrun.metrics.passk import pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        # n=5, c=2, k=1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4 (= c/n, as pass@1 must be)
        (5, 2, 1, 0.4),
        # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
        (5, 2, 2, 0.7),
        # n=5, c=2, k=3: 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
        (5, 2, 3, 0.9),
        # n=5, c=2, k=4: n-c=3 < k, every draw of 4 contains a pass
        (5, 2, 4, 1.0),
        # n=10, c=1, k=5: 1 - C(9,5)/C(10,5) = 1 - 126/252 = 0.5
        (10, 1, 5, 0.5),
        # n=10, c=3, k=2: 1 - C(7,2)/C(10,2) = 1 - 21/45 = 24/45
        (10, 3, 2, 24 / 45),
        # n=4, c=0, k=4: nothing passes
        (4, 0, 4, 0.0),
        # n=4, c=4, k=1
        (4, 4, 1, 1.0),
        # n=20, c=2, k=10: 1 - C(18,10)/C(20,10) = 1 - 43758/184756 = 1 - 0.236842...
        (20, 2, 10, 1 - 43758 / 184756),
    ],
)
def test_pass_at_k_matches_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_not_the_biased_estimate() -> None:
    # 1 - (1 - c/n)^k = 1 - 0.6^2 = 0.64 for n=5, c=2, k=2, whereas the unbiased value is 0.7.
    assert pass_at_k(5, 2, 2) != pytest.approx(1 - (1 - 2 / 5) ** 2)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (3, 1, 0), (3, -1, 1)])
def test_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)
