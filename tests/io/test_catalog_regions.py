"""Multi-region catalogs: TYPE@REGION pools, their file form, import of many regions, build and solve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import (
    MULTI_REGION,
    Catalog,
    embedded_path,
    split_region,
)
from dnnprov.io.catalogs.importing import default_shared_data
from dnnprov.io.catalogs.regions import import_regions, merge_regions, parse_regions

SHARED = default_shared_data()
needs_data = pytest.mark.skipif(
    SHARED is None, reason="the shared real data (../shared/data) is not beside this checkout"
)


def regions(make_region_catalog, us_east: tuple[float, float], eu_west: tuple[float, float]) -> list[Catalog]:
    """us-east-1 and eu-west-1 catalogs of p3.2xlarge (interruption bucket 1) and g4dn.4xlarge at these prices."""
    return [
        make_region_catalog(region, dict(zip(("p3.2xlarge", "g4dn.4xlarge"), prices)), {"p3.2xlarge": 1})
        for region, prices in (("us-east-1", us_east), ("eu-west-1", eu_west))
    ]


def test_split_region_keeps_the_market_on_the_type() -> None:
    assert split_region("p3.2xlarge@us-west-2") == ("p3.2xlarge", "us-west-2")
    assert split_region("p3.2xlarge@us-west-2:on-demand") == ("p3.2xlarge:on-demand", "us-west-2")
    assert split_region("p3.2xlarge") == ("p3.2xlarge", None)


def test_merged_catalog_names_each_pool_by_region_and_round_trips(make_region_catalog) -> None:
    merged = merge_regions(regions(make_region_catalog, (1.0, 0.5), (0.9, 0.6)), "two")
    assert merged.region == MULTI_REGION and merged.regions == ("eu-west-1", "us-east-1")
    entry = merged.entry("p3.2xlarge@eu-west-1")
    assert (entry.region, entry.base_name, entry.family, entry.spot_price_per_h) == (
        "eu-west-1",
        "p3.2xlarge",
        "P@eu-west-1",
        0.9,
    )
    assert Catalog.from_dict(json.loads(json.dumps(merged.to_dict()))) == merged


def test_single_region_file_reads_as_before() -> None:
    """A catalog file of one region (no ``region`` on entries) is still read unchanged."""
    data = json.loads(embedded_path("catalogs", "aws-table3-2023-01.json").read_text())
    catalog = Catalog.from_dict(data)
    assert catalog.region != MULTI_REGION and catalog.regions == (catalog.region,)
    assert all(e.region is None and e.base_name == e.name for e in catalog.instance_types)
    assert catalog.to_dict() == Catalog.from_dict(catalog.to_dict()).to_dict()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda d: d["instance_types"]["p3.2xlarge@us-east-1"].pop("region"),
            "instance_types.p3.2xlarge@us-east-1.region",
        ),
        (
            lambda d: d["instance_types"]["p3.2xlarge@us-east-1"].update(region="eu-west-1"),
            "instance_types.p3.2xlarge@us-east-1.region",
        ),
    ],
)
def test_a_pool_without_its_region_is_refused(change, field, make_region_catalog) -> None:
    data = merge_regions(regions(make_region_catalog, (1.0, 0.5), (0.9, 0.6)), "m").to_dict()
    change(data)
    with pytest.raises(InvalidInputError) as err:
        Catalog.from_dict(data)
    assert err.value.field == field


def test_parse_regions() -> None:
    assert parse_regions("all") is None
    assert parse_regions("us-east-1, eu-west-1") == ["us-east-1", "eu-west-1"]
    # an empty item dropped a region silently; 'all' in a list read as a region named 'all'
    for bad in ("", "us-east-1,us-east-1", "US East", "us-east-1,,eu-west-1", "us-east-1,", "all,us-east-1"):
        with pytest.raises(InvalidInputError) as err:
            parse_regions(bad)
        assert err.value.field == "--region"


def test_solved_plan_names_the_cheapest_region(make_region_catalog, make_region_problem) -> None:
    """The solve compares regions: the same types, cheaper in eu-west-1, are bought there."""
    merged = merge_regions(regions(make_region_catalog, (3.06, 1.2), (0.9, 0.35)), "m")
    problem = make_region_problem(merged, {e.name: 8 for e in merged.instance_types})
    result = dnnprov.solve(problem, "milp")
    assert result.status == "optimal"
    assert result.plan is not None and result.plan.counts
    assert {split_region(label)[1] for label, n in result.plan.counts.items() if n} == {"eu-west-1"}
    family = {t.name: t.family for t in problem.instance_types}
    assert family["p3.2xlarge@us-east-1"] == "P@us-east-1"


@needs_data
def test_import_of_a_region_list_prices_each_pool_in_its_region() -> None:
    catalog = import_regions(["us-east-1", "eu-west-1"], SHARED)
    assert catalog.regions == ("eu-west-1", "us-east-1")
    priced = [e for e in catalog.instance_types if e.spot_price_per_h is not None]
    assert priced
    for e in priced:
        assert e.name == f"{e.base_name}@{e.region}"
        assert f" {e.region} " in e.sources["interruption_bucket"]
    east, west = catalog.entry("p3.2xlarge@us-east-1"), catalog.entry("p3.2xlarge@eu-west-1")
    assert east.on_demand_price_per_h != west.on_demand_price_per_h


@needs_data
def test_import_all_build_and_solve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The checked interface: catalog import --region all, build on it, solve: a plan naming regions."""
    out = tmp_path / "all.json"
    assert main(["catalog", "import", "--region", "all", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["region"] == MULTI_REGION
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, json.loads(embedded_path("schema", "catalog-v1.schema.json").read_text()))
    pools = {n: e for n, e in data["instance_types"].items() if "spot_price_per_h" in e}
    # The data's figures: 682 spot-priced (type, region) pools of 55 whole-GPU types in 27 regions
    # (28 list a GPU type; 5 more of the advisor list none).
    assert len(pools) == 682
    assert len({split_region(n)[0] for n in pools}) == 55
    assert len({e["region"] for e in pools.values()}) == 27
    instance = tmp_path / "inst.json"
    argv = ["build", "--catalog", str(out), "--profile", "spot/resnet110-paper", "--target-loss", "0.8"]
    assert main([*argv, "--deadline", "3600", "--out", str(instance)]) == 0
    problem = dnnprov.read_instance(instance)
    names = {t.name for t in problem.instance_types}
    assert "p3.2xlarge@us-west-2" in names and all("@" in n for n in names)
    capsys.readouterr()
    assert main(["solve", str(instance), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "optimal"
    used = [label for label, n in result["plan"]["counts"].items() if n]
    assert used
    for label in used:
        assert label in names and split_region(label)[1] == data["instance_types"][label]["region"]
    # One region per plan by default (docs/cloud.md); --any-region lets workers span regions.
    assert len({split_region(label)[1] for label in used}) == 1
    assert result["details"]["one_region"] is True
    assert main(["solve", str(instance), "--json", "--any-region"]) == 0
    free = json.loads(capsys.readouterr().out)
    assert free["status"] == "optimal" and free["cost"] <= result["cost"]
    one = tmp_path / "one.json"
    assert main([*argv, "--deadline", "3600", "--region", "eu-west-1", "--out", str(one)]) == 0
    assert {split_region(t.name)[1] for t in dnnprov.read_instance(one).instance_types} == {"eu-west-1"}
