"""Deterministic, resumable order in which training problems are drawn.

Epoch `e` visits every problem once in the order `permutation(seed, e)`; the whole state is one
integer `position` (problems drawn so far), so a checkpoint stores that integer and a resumed
run draws exactly the problems the uninterrupted run would have drawn.
"""

from __future__ import annotations

import numpy as np


class DataOrder:
    """An endless, seeded stream of problem indices in `[0, num_problems)`."""

    def __init__(self, num_problems: int, seed: int, position: int = 0) -> None:
        if num_problems <= 0:
            raise ValueError("the training set is empty: check data.train and data.max_problems")
        self.num_problems = num_problems
        self.seed = seed
        self.position = position
        self._epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._perm = rng.permutation(self.num_problems)
            self._epoch = epoch
        return self._perm

    def draw(self, k: int) -> list[int]:
        """The next `k` problem indices; advances `position` by `k`."""
        out = [self.index_at(pos) for pos in range(self.position, self.position + k)]
        self.position += k
        return out

    def index_at(self, position: int) -> int:
        """The problem index drawn at `position`."""
        epoch, offset = divmod(position, self.num_problems)
        return int(self._permutation(epoch)[offset])
