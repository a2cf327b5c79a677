"""Catalogs of one moment from the shared real data, Lambda offers, and build's PS and serverless routes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnnprov.cli import main
from dnnprov.dispatch import solve
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import (
    Catalog,
    build_serverless_problem,
    embedded_path,
    load_catalog,
)
from dnnprov.io.catalogs.importing import default_shared_data, import_shared_data
from dnnprov.io.paper import load_serverless_workload
from dnnprov.result import Status

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not (SHARED / "MANIFEST.md").is_file(),
    reason=f"real data folder {SHARED} is absent (it lives beside the repository)",
)
RESNET50 = load_serverless_workload(embedded_path("workloads", "serverless", "resnet50.json"))


@needs_data
def test_default_shared_data_is_beside_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """<repo>/../shared/data is found from the package's own place, whatever the working folder
    (a folder of the package's tree moved deeper must not lose it)."""
    monkeypatch.chdir(tmp_path)
    found = default_shared_data()
    assert found is not None and found.resolve() == SHARED.resolve()


@needs_data
def test_2025_snapshot_prices_spot_from_the_advisor() -> None:
    """g5.xlarge: 2026 on-demand $1.006 x (1 - 59 %); every price names its file and date."""
    catalog = import_shared_data("us-east-1", SHARED)
    g5 = catalog.entry("g5.xlarge")
    assert g5.spot_price_per_h == pytest.approx(1.006 * 0.41) and g5.on_demand_price_per_h == 1.006
    assert catalog.snapshot == "2025-06-28T00:00:00Z"
    for entry in catalog.instance_types:
        for key in ("spot_price_per_h", "on_demand_price_per_h"):
            if key in entry.sources:
                assert "dated 20" in entry.sources[key], (entry.name, key)
    assert "2022" not in json.dumps({e.name: dict(e.sources) for e in catalog.instance_types})
    p2 = catalog.entry("p2.16xlarge")
    assert p2.spot_price_per_h is not None and p2.on_demand_price_per_h is not None
    assert p2.spot_price_per_h < p2.on_demand_price_per_h


@needs_data
def test_2022_snapshot_keeps_one_moment() -> None:
    """2022: history spot prices, 2021 buckets, no 2026 on-demand; --mix-dates is explicit."""
    pure = import_shared_data("us-east-1", SHARED, snapshot="2022")
    assert all(e.on_demand_price_per_h is None for e in pure.instance_types)
    assert all(
        "2025" not in s and "2026" not in s
        for e in pure.instance_types
        for s in e.sources.values()
        if not s.startswith("aws-gpu-instances")
    )
    p2 = pure.entry("p2.16xlarge")
    assert p2.spot_price_per_h == 14.4 and "AWS's cap" in p2.sources["spot_price_per_h"]
    mixed = import_shared_data("us-east-1", SHARED, snapshot="2022", mix_dates=True)
    assert mixed.entry("g5.xlarge").on_demand_price_per_h == 1.006 and "MIXED DATES" in mixed.notes
    with pytest.raises(InvalidInputError, match="mix_dates"):
        import_shared_data("us-east-1", SHARED, snapshot="2025", mix_dates=True)
    with pytest.raises(InvalidInputError, match="estimate_missing_spot"):
        import_shared_data("us-east-1", SHARED, snapshot="2022", estimate_missing_spot=True)
    with pytest.raises(InvalidInputError, match="snapshot"):
        import_shared_data("us-east-1", SHARED, snapshot="2019")


@needs_data
def test_lambda_offers_from_the_duration_prices() -> None:
    """x86_64 2.1e-9 $/ms at 128 MB = 1.68e-5 $/GB-s; arm64 1.36e-5 with no speed factor; 10,240 MB."""
    catalog = import_shared_data("us-east-1", SHARED)
    x86, arm = catalog.function("x86_64"), catalog.function("arm64")
    assert (x86.price_per_gb_s, arm.price_per_gb_s) == (1.68e-5, 1.36e-5)
    assert (x86.max_memory_mb, x86.memory_step_mb, x86.timeout_s, x86.ephemeral_storage_mb) == (
        10240,
        1,
        900.0,
        (512, 10240),
    )
    assert x86.speed_factor == 1.0 and arm.speed_factor is None
    assert Catalog.from_dict(catalog.to_dict()) == catalog
    assert import_shared_data("ap-east-1", SHARED).function("x86_64").price_per_gb_s == pytest.approx(2.9e-9 * 8000)


@needs_data
def test_serverless_build_uses_the_offer_and_refuses_unmeasured_arm64() -> None:
    """A 10,240 MB grid in 1 MB steps; arm64 needs a stated factor, which scales the rate line."""
    catalog = import_shared_data("us-east-1", SHARED)
    problem = build_serverless_problem(catalog, RESNET50, 600)
    assert problem.platform.max_memory_mb == 10240 and problem.platform.memory_step_mb == 1
    assert problem.platform.price_per_gb_s == 1.68e-5
    with pytest.raises(InvalidInputError, match="--speed-factor: .* no measured arm64 speed"):
        build_serverless_problem(catalog, RESNET50, 600, architecture="arm64")
    with pytest.raises(InvalidInputError, match="--speed-factor-source"):
        build_serverless_problem(catalog, RESNET50, 600, architecture="arm64", speed_factor=0.8)
    arm = build_serverless_problem(
        catalog, RESNET50, 600, architecture="arm64", speed_factor=0.8, speed_source="our measurement"
    )
    assert (
        arm.workload.rate_alpha == pytest.approx(0.8 * RESNET50.rate_alpha) and "rate_alpha" in arm.workload.estimated
    )
    assert "ESTIMATED from our measurement" in arm.notes
    assert solve(problem).status is Status.OPTIMAL


@needs_data
def test_catalog_import_cli_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """catalog import --snapshot 2022 writes a 2022 catalog; build on it prices the PS by default."""
    out = tmp_path / "c.json"
    assert main(["catalog", "import", "--snapshot", "2022", "--out", str(out)]) == 0
    assert load_catalog(out).snapshot.startswith("2022-05-31")
    assert main(["catalog", "import", "--snapshot", "2025", "--mix-dates", "--out", str(out)]) == 2
    assert "dnnprov: error: mix_dates" in capsys.readouterr().err


def test_build_prices_the_ps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The PS costs m5.xlarge's $0.192/h unless the catalog prices it or --ps-price-per-h says otherwise."""
    base = [
        "build",
        "--catalog",
        "aws-table3-2023-01",
        "--profile",
        "spot/resnet110-paper",
        "--target-loss",
        "0.8",
        "--deadline",
        "4000",
        "--out",
    ]
    assert main([*base, str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["platform"]["ps_price_per_h"] == 0.192
    assert main([*base, str(tmp_path / "b.json"), "--ps-price-per-h", "0"]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["platform"]["ps_price_per_h"] == 0.0
    assert main([*base, str(tmp_path / "c.json"), "--ps-type", "c5.large"]) == 2
    assert (
        "--ps-price-per-h: catalog 'aws-table3-2023-01' has no on-demand price of PS type 'c5.large'"
        in capsys.readouterr().err
    )


def test_build_serverless_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A serverless workload takes no loss target; a catalog without function offers says so."""
    base = [
        "build",
        "--catalog",
        "aws-table3-2023-01",
        "--profile",
        "serverless/resnet50",
        "--deadline",
        "600",
        "--out",
        str(tmp_path / "s.json"),
    ]
    assert main([*base, "--target-loss", "0.5"]) == 2
    assert main(base) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dnnprov: error: --target-loss: applies to spot workloads")
    assert err[1].startswith("dnnprov: error: functions.x86_64: catalog 'aws-table3-2023-01' has no function offer")


def test_list_cuts_descriptions_at_a_word(capsys: pytest.CaptureFixture[str]) -> None:
    """dnnprov list: a long description ends at a whole word with ' ...', at most 100 characters."""
    assert main(["list", "instances", "--json"]) == 0
    notes = [e["notes"] for e in json.loads(capsys.readouterr().out)["instances"]]
    long = [n for n in notes if n.endswith(" ...")]
    assert long and all(len(n) <= 100 for n in notes)
    full = {json.loads(p.read_text()).get("notes", "") for p in (REPO / "data" / "instances").rglob("*.json")}
    for n in long:
        kept = n.removesuffix(" ...")
        assert any(f.startswith(kept) and f[len(kept)] in " ,;:." for f in full), n  # the next character ends a word
