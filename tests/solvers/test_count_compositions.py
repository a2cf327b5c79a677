"""``count_compositions`` (the size test that decides whether a cell is evaluated outright)
against a brute-force count, saturated at ``limit + 1`` as documented."""

from __future__ import annotations

import itertools

import numpy as np
from dnnprov.solvers.spot.cells import count_compositions


def test_count_compositions_equals_the_brute_force_count_up_to_the_limit():
    rng = np.random.default_rng(0)
    saturated = exact = 0
    for _ in range(3000):
        m = int(rng.integers(1, 5))
        lo = rng.integers(0, 3, m)
        hi = lo + rng.integers(0, 4, m)
        total, limit = int(rng.integers(0, 15)), int(rng.integers(0, 30))
        brute = sum(1 for n in itertools.product(*(range(a, b + 1) for a, b in zip(lo, hi))) if sum(n) == total)
        assert count_compositions(lo, hi, total, limit) == min(brute, limit + 1), (lo, hi, total, limit)
        saturated += brute > limit
        exact += 0 < brute <= limit
    assert saturated > 100 and exact > 100  # both branches are exercised
