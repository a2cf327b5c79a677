"""Multi-region fuzz features (issue 33): one draft's types offered in several regions.

:func:`f_regions` turns a spot draft (:class:`dnnprov.fuzz.families.spot.SpotDraft`) into the
shape of a multi-region catalog's instance: every type becomes one column per region,
named ``TYPE@REGION`` as :func:`dnnprov.io.catalogs.catalog.qualified` names them, with the
quota family ``FAMILY@REGION`` and a region's price level: half the time over many decades
(regions priced 1e-4 to 1e4 times each other), else within 30 % of each other as real regions
are (where plans that split across regions are often cheaper); a column now and then at $0. Each region gets a
vCPU quota on its family that binds: between its smallest column's vCPUs and about half of
its box. The families themselves are registered in :data:`dnnprov.fuzz.families.spot.FAMILIES`
(``multi-region``, ``multi-region-mixed``); this module imports nothing of them, so that
registry can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dnnprov.fuzz.families.ranges import PRICE_RANGE, log_uniform
from dnnprov.io.catalogs.catalog import qualified
from dnnprov.problems.spot import default_family

if TYPE_CHECKING:
    from dnnprov.fuzz.families.spot import SpotDraft

#: Region names the features draw from (real AWS names, so that exports accept the plans).
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "ap-south-1", "sa-east-1")
#: A region's price level relative to the others: log-uniform over one of these ranges.
REGION_PRICE_LEVELS = ((1e-4, 1e4), (0.7, 1.3))


def _scaled(price: float, level: float) -> float:
    """``price x level`` kept inside the accepted prices (:data:`PRICE_RANGE`; zero stays zero)."""
    return 0.0 if price == 0 else min(max(price * level, PRICE_RANGE[0]), PRICE_RANGE[1])


def f_regions(rng: np.random.Generator, d: SpotDraft) -> None:
    """Every type offered in two to four regions, per-region prices, families and binding vCPU quotas."""
    regions = sorted(rng.choice(REGIONS, size=int(rng.integers(2, 5)), replace=False).tolist())
    levels = REGION_PRICE_LEVELS[int(rng.integers(0, len(REGION_PRICE_LEVELS)))]
    level = {r: log_uniform(rng, *levels) for r in regions}
    markets = d.constraints.get("markets", ("spot",))
    columns = []
    for t in d.types:
        for r in regions:
            column = dict(t, name=qualified(t["name"], r), family=f"{default_family(t['name'])}@{r}")
            column["spot_price_per_h"] = 0.0 if rng.random() < 0.05 else _scaled(t["spot_price_per_h"], level[r])
            if "on_demand_price_per_h" in column:
                column["on_demand_price_per_h"] = _scaled(column["on_demand_price_per_h"], level[r])
            column["quota"] = int(rng.integers(0, 4))
            columns.append(column)
    d.types = columns
    quotas = []
    for r in regions:
        for family in sorted({c["family"] for c in columns if c["family"].endswith("@" + r)}):
            mine = [c for c in columns if c["family"] == family]
            box = sum(c["vcpus"] * c["quota"] for c in mine)
            least = min(c["vcpus"] for c in mine)
            if box > 0 and rng.random() < 0.8:
                vcpus = int(rng.integers(least, max(least, box // 2) + 1))
                quotas.append(dict(family=family, market=str(rng.choice(markets)), vcpus=vcpus))
    d.constraints["vcpu_quotas"] = quotas
