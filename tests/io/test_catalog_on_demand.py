"""A catalog without on-demand prices refuses on-demand quotas instead of dropping them (issue 31).

The 2022 snapshot import (``dnnprov catalog import --snapshot 2022``) holds no on-demand price:
the shared data have no on-demand list of 2022. Asking such a catalog for on-demand capacity
once gave a problem without the on-demand column, silently.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprov import SpotSLO
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import build_spot_problem, embedded_path, load_catalog, load_spot_profile
from dnnprov.problems.spot import SpotConstraints

PROFILE = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
SLO = SpotSLO(loss=0.8, time_s=4000)
BOTH = SpotConstraints(markets=("spot", "on-demand"))


def _catalog(tmp_path: Path, on_demand: bool):
    data = json.loads(embedded_path("catalogs", "aws-table3-2023-01.json").read_text())
    if not on_demand:
        for entry in data["instance_types"].values():
            entry.pop("on_demand_price_per_h", None)
            entry.get("sources", {}).pop("on_demand_price_per_h", None)
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    return load_catalog(path)


def test_on_demand_quota_without_an_on_demand_price_is_refused(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, on_demand=False)
    with pytest.raises(InvalidInputError) as info:
        build_spot_problem(
            catalog, PROFILE, SLO, quotas={"g3.8xlarge": 5}, on_demand_quotas={"g3.8xlarge": 2}, constraints=BOTH
        )
    assert info.value.field == "instance_types.g3.8xlarge.on_demand_price_per_h"
    assert "has no on-demand price" in str(info.value)
    # no on-demand quota asked: the spot problem builds as before
    problem = build_spot_problem(catalog, PROFILE, SLO, quotas={"g3.8xlarge": 5}, on_demand_quotas={"g3.8xlarge": 0})
    assert problem.columns().labels == ("g3.8xlarge",)


def test_on_demand_quota_with_a_price_gives_the_column(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, on_demand=True)
    problem = build_spot_problem(
        catalog, PROFILE, SLO, quotas={"g3.8xlarge": 5}, on_demand_quotas={"g3.8xlarge": 2}, constraints=BOTH
    )
    assert "g3.8xlarge:on-demand" in problem.columns().labels
