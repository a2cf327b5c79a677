"""Draws shared by the fuzz families: log-uniform numbers and the ranges of the magnitude families."""

from __future__ import annotations

import math

import numpy as np

#: Random plans tried when a family needs one with a finite time.
PLAN_TRIES = 30

#: The ranges the magnitude features draw from (log-uniform), inside what the instance
#: format accepts (problems/checks.py: numbers up to 1e15, positive ones from 1e-9).
PRICE_RANGE = (1e-9, 1e15)  # $/h, 24 decades (zero prices too)
COMPUTE_TIME_RANGE = (1e-6, 1e6)  # s per iteration of one worker, 12 decades of speeds
BANDWIDTH_RANGE = (1e-3, 1e9)  # MB/s: PS, PCIe and the workload's B_req, 12 decades
PARAM_SIZE_RANGE = (1e-3, 1e6)  # MB


def log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    """A number drawn log-uniformly from [low, high]."""
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))
