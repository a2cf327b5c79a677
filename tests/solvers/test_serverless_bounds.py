"""The serverless pair ranges hold every plan that meets T_o (against brute force over n)."""

from __future__ import annotations

import numpy as np
from dnnprov.solvers.serverless_exact import lower_cost, pair_bounds

from dnnprov.models.serverless import ServerlessModel


def test_pair_ranges_hold_every_plan_that_meets_the_deadline(make_random_serverless):
    """Every n whose T_train meets T_o lies in [first, last] of its (memory, PS) pair."""
    narrowed = checked = 0
    for seed in range(60):
        problem = make_random_serverless(np.random.default_rng([21, seed]), max_functions=400)
        model = ServerlessModel(problem)
        low, high = problem.function_range()
        memory, ps, first, last, _ = pair_bounds(model)
        n = np.arange(low, high + 1)
        for i in range(len(memory)):
            _, train = lower_cost(model, n, np.full(len(n), memory[i]), np.full(len(n), ps[i]))
            meets = n[train <= problem.time_s * (1 + 1e-12)]
            if len(meets):
                assert first[i] <= meets.min() and meets.max() <= last[i], (seed, memory[i], ps[i])
                checked += 1
            else:
                narrowed += first[i] > last[i]
            narrowed += last[i] < high
    assert checked >= 200 and narrowed >= 100  # the ranges were tested and do cut
