"""Spot capacity pools (``instance_types.<type>.zones``): format, validation, round trip."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

import dnnprov
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import dumps_instance, embedded_instance, problem_from_dict, read_instance, schema
from dnnprov.problems.interruption import Interruption
from dnnprov.problems.spot import SpotPool

THREE_ZONES = (
    {"zone": "us-east-2b", "capacity": 16},
    {
        "zone": "us-west-2a",
        "spot_price_per_h": 0.95,
        "capacity": 16,
        "interruption": {"rate_per_h": 0.02, "source": "fitted from us-west-2a_v100_16.json"},
    },
    {"zone": "us-west-2c"},
)


def _table1() -> dict[str, Any]:
    return json.loads(embedded_instance("spot/paper-table1.json").read_text())


def _with_zones(zones: Any, type_index: int = 1) -> dict[str, Any]:
    data = _table1()
    name = list(data["instance_types"])[type_index]
    data["instance_types"][name]["zones"] = zones
    return data


def test_pools_read_and_round_trip() -> None:
    """Pools are read with their fields, written back, and the file reads back equal."""
    problem = problem_from_dict(_with_zones([dict(z) for z in THREE_ZONES]))
    t = problem.instance_types[1]
    assert t.pool_names == ("us-east-2b", "us-west-2a", "us-west-2c")
    assert t.zones[1] == SpotPool(
        "us-west-2a",
        spot_price_per_h=0.95,
        capacity=16,
        interruption=Interruption(0.02, "fitted from us-west-2a_v100_16.json"),
    )
    assert t.zones[2].capacity is None and t.zones[2].spot_price_per_h is None
    data = json.loads(dumps_instance(problem))
    jsonschema.validate(data, schema("spot"), cls=jsonschema.Draft202012Validator)
    assert data["instance_types"][t.name]["zones"] == [dict(z) for z in THREE_ZONES]
    assert problem_from_dict(data) == problem
    assert "zones" not in data["instance_types"][problem.instance_types[0].name]  # no pools: field left out


@pytest.mark.parametrize(
    "zones, field, words",
    [
        ([{"zone": "US-EAST-1A"}], "zones.0.zone", "does not match"),
        ([{"zone": "us-east-1a"}, {"zone": "us-east-1a"}], "zones[1].zone", "listed twice"),
        ([{"zone": "us-east-1a", "price": 1}], "zones.0.price", "unknown field"),
        ([{"zone": "us-east-1a", "capacity": -1}], "zones.0.capacity", "minimum"),
        ([{"capacity": 3}], "zones.0.zone", "missing"),
        ({"zone": "us-east-1a"}, "zones", "not of type"),
    ],
)
def test_bad_pools_are_refused_naming_the_field(zones: Any, field: str, words: str) -> None:
    """Each bad pool gives one InvalidInputError naming the pool's field."""
    with pytest.raises(InvalidInputError) as err:
        problem_from_dict(_with_zones(zones))
    name = list(_table1()["instance_types"])[1]
    assert err.value.field == f"instance_types.{name}.{field}"
    assert words in err.value.problem


def test_pools_built_in_python_are_checked() -> None:
    """The dataclasses refuse bad zones without the schema too."""
    with pytest.raises(InvalidInputError, match="availability-zone"):
        SpotPool("zone one")
    t = read_instance(embedded_instance("spot/paper-table1.json")).instance_types[1]
    with pytest.raises(InvalidInputError) as err:
        replace(t, zones=(SpotPool("us-east-1a"), {"zone": "us-east-1a"}))
    assert err.value.field == f"instance_types.{t.name}.zones[1].zone"


def test_solver_ignores_pools() -> None:
    """Pools do not change the problem the solver sees: same columns, prices, quota, plan."""
    plain = read_instance(embedded_instance("spot/paper-table1.json"))
    pooled = problem_from_dict(_with_zones([dict(z) for z in THREE_ZONES]))
    a, b = plain.columns(), pooled.columns()
    assert a.labels == b.labels and (a.price == b.price).all() and (a.upper == b.upper).all()
    ra, rb = dnnprov.solve(plain, "enumerate"), dnnprov.solve(pooled, "enumerate")
    assert ra.plan == rb.plan and ra.cost == pytest.approx(rb.cost) and ra.status == rb.status


def test_a_regions_pool_must_be_one_of_its_zones() -> None:
    """A TYPE@REGION type's pools are zones of that region: another region's zone is one error naming it."""
    t = read_instance(embedded_instance("spot/paper-table1.json")).instance_types[1]
    named = replace(t, name=f"{t.name}@us-west-2", zones=(SpotPool("us-west-2a"), SpotPool("us-west-2-lax-1a")))
    assert named.pool_names == ("us-west-2a", "us-west-2-lax-1a")
    with pytest.raises(InvalidInputError) as err:
        replace(named, zones=(SpotPool("us-west-2b"), SpotPool("us-east-1a")))
    assert err.value.field == f"instance_types.{t.name}@us-west-2.zones[1].zone"
    assert "us-east-1a is not a zone of the type's region us-west-2" in err.value.problem
