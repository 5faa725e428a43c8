"""The unbiased pass@k estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained
on Code", https://arxiv.org/abs/2107.03374, section 2.1).

Draw n >= k samples for a problem, count the c that pass, and estimate the probability that at
least one of k samples drawn without replacement passes:

    pass@k = 1 - C(n - c, k) / C(n, k)

Averaging this over problems is unbiased, unlike 1 - (1 - c/n)^k. The product form below is
the paper's numerically stable evaluation of the binomial ratio.
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k for one problem with c correct among n samples."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n} c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n samples, got k={k} n={n}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss
