"""More ways to draw the scale ladder's spot types (issue 19): price-speed correlations and wide quotas.

The ladder's own generator (``independent``) draws each type's price per GPU and compute time
independently. Proof speed depends on how price and speed relate (the cells of large K are
hardest where cheap slow types and dear fast ones trade off closely), so the 40 x 16 and
80 x 16 families are also drawn with

* ``price-follows-speed``: the same per-GPU prices, handed out in order of per-GPU sample
  speed (with noise), so faster types cost more per GPU;
* ``price-against-speed``: handed out in reverse order, so faster types cost less;
* ``wide-quota``: quotas redrawn uniformly in 1-31 (mean 16) instead of all 16.

Each generator first makes exactly the ``independent`` draws, then its own extra draws, so
``independent`` reproduces the ladder's earlier instances bit for bit. None of them sets a
validity domain (the random workload has none).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

import dnnprov

GENERATORS = ("independent", "price-follows-speed", "price-against-speed", "wide-quota")
RANK_NOISE = 0.3  # standard deviation of the noise on log per-GPU speed when ranking
WIDE_QUOTA = (1, 31)


def draw_types(
    rng: np.random.Generator, count: int, quota: tuple[int, int], generator: str = "independent"
) -> list[dnnprov.InstanceType]:
    """``count`` random instance types drawn by ``generator`` (see the module doc)."""
    if generator not in GENERATORS:
        raise ValueError(f"unknown generator {generator!r}; expected one of {', '.join(GENERATORS)}")
    types = []
    for i in range(count):
        gpus = int(rng.choice([1, 2, 4, 8]))
        batch = int(rng.choice([256, 512, 1024]))
        types.append(
            dnnprov.InstanceType(
                name=f"t{i:02d}.{gpus}gpu",
                gpus=gpus,
                batch_per_gpu=batch,
                quota=int(rng.integers(quota[0], quota[1] + 1)),
                spot_price_per_h=round(gpus * float(rng.uniform(0.2, 0.9)), 4),
                compute_time_s=round(float(rng.uniform(0.2, 1.5)) / math.sqrt(gpus), 4),
            )
        )
    if generator == "wide-quota":
        quotas = rng.integers(WIDE_QUOTA[0], WIDE_QUOTA[1] + 1, size=count)
        return [replace(t, quota=int(q)) for t, q in zip(types, quotas)]
    if generator in ("price-follows-speed", "price-against-speed"):
        per_gpu_price = np.sort([t.spot_price_per_h / t.gpus for t in types])
        speed = np.array([t.batch_per_gpu / t.compute_time_s for t in types])  # samples/s per GPU
        key = np.log(speed) + rng.normal(0.0, RANK_NOISE, size=count)
        order = np.argsort(key if generator == "price-follows-speed" else -key, kind="stable")
        price = np.empty(count)
        price[order] = per_gpu_price  # the k-th slowest (fastest) gets the k-th lowest price
        return [replace(t, spot_price_per_h=round(t.gpus * float(p), 4)) for t, p in zip(types, price)]
    return types
