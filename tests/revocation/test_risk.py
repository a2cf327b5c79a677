"""Interruption models: Spot Advisor mapping, trace fits, instance format, catalogs, CLI."""

from __future__ import annotations

import glob
import json
import math
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import dnnprov
from dnnprov.cli import main
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import (
    Catalog,
    CatalogEntry,
    build_spot_problem,
    embedded_path,
    load_spot_profile,
)
from dnnprov.io.catalogs.importing import default_shared_data
from dnnprov.problems.interruption import (
    BUCKET_SHARE,
    HOURS_PER_MONTH,
    Interruption,
    fit_trace,
    fit_traces,
    from_advisor_bucket,
    load_trace,
)


def write_trace(folder: Path, name: str, data: list, gap: object = 60) -> Path:
    path = folder / name
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


@pytest.mark.parametrize("bucket", range(5))
def test_advisor_bucket_mapping(bucket: int) -> None:
    """Bucket midpoint (25 % for >20 %) a month -> the Poisson rate that interrupts that share."""
    model = from_advisor_bucket(bucket, source="advisor 2025-06-28")
    assert 1 - math.exp(-model.rate_per_h * HOURS_PER_MONTH) == pytest.approx(BUCKET_SHARE[bucket], rel=1e-12)
    assert f"bucket {bucket}" in model.source and "advisor 2025-06-28" in model.source
    assert [BUCKET_SHARE[b] for b in range(5)] == [0.025, 0.075, 0.125, 0.175, 0.25]


def test_fit_one_node_trace(tmp_path: Path) -> None:
    """Two losses over 4 alive minutes; regained after 180 s and 120 s."""
    fit = fit_trace(load_trace(write_trace(tmp_path, "us-west-2a_v100_1.json", [1, 1, 0, 0, 1, 1, 0, 1])))
    assert fit.losses == 2 and fit.instance_hours == pytest.approx(4 / 60)
    assert fit.interruption.rate_per_h == pytest.approx(30.0)
    assert fit.interruption.mean_regain_s == pytest.approx(150.0)
    assert fit.interruption.zone == "us-west-2a" and "2 instances lost" in fit.interruption.source


def test_fit_multi_node_trace_and_pooling(tmp_path: Path) -> None:
    """A 4-node trace: a drop of 2 regains when the count is back at 4; a drop never regained is censored."""
    a = load_trace(write_trace(tmp_path, "a.json", [4, 4, 2, 3, 4], gap=300))
    b = load_trace(write_trace(tmp_path, "b.json", [2, 1, 1], gap=300))
    fa, fb = fit_trace(a), fit_trace(b)
    assert fa.losses == 2 and fa.interruption.mean_regain_s == pytest.approx(900.0)
    assert fb.losses == 1 and fb.interruption.mean_regain_s is None and fb.regains == 0
    pooled = fit_traces([a, b])
    assert pooled.losses == 3
    assert pooled.interruption.rate_per_h == pytest.approx(3 / (fa.instance_hours + fb.instance_hours))
    assert pooled.interruption.mean_regain_s == pytest.approx(900.0)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"data": [1, 1]}', "metadata"),
        ('{"metadata": {"gap_seconds": 0}, "data": [1, 1]}', "metadata.gap_seconds"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1, -1]}', "data[1]"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1]}', "data"),
        ("not json", "t.json"),
    ],
)
def test_bad_traces_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    """A malformed trace is one error naming the file and the field."""
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(InvalidInputError) as info:
        load_trace(path)
    assert field in info.value.field and str(path) in info.value.field


def test_instance_format_carries_the_interruption(resnet110_paper) -> None:
    """The optional field round-trips through the instance format and validates against spot-v1."""
    model = Interruption(0.48, "fitted from 3 traces", mean_regain_s=11000.0, zone="us-west-2a")
    types = tuple(
        replace(t, interruption=model) if t.name == "p3.2xlarge" else t for t in resnet110_paper.instance_types
    )
    problem = resnet110_paper.replace(instance_types=types)
    data = problem.to_dict()
    assert data["instance_types"]["p3.2xlarge"]["interruption"] == {
        "rate_per_h": 0.48,
        "source": "fitted from 3 traces",
        "mean_regain_s": 11000.0,
        "zone": "us-west-2a",
    }
    assert "interruption" not in data["instance_types"]["g3.8xlarge"]
    again = dnnprov.problem_from_dict(json.loads(json.dumps(data)))
    assert again.instance_types[0].interruption == model
    schema = json.loads(embedded_path("schema", "spot-v1.schema.json").read_text())
    jsonschema.validate(data, schema)
    data["instance_types"]["p3.2xlarge"]["interruption"]["rate_per_h"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"rate_per_h": -0.1, "source": "x"}, "instance_types.p3.2xlarge.interruption.rate_per_h"),
        ({"rate_per_h": 0.1}, "instance_types.p3.2xlarge.interruption.source"),
        ({"rate_per_h": 0.1, "source": "x", "color": 1}, "instance_types.p3.2xlarge.interruption.color"),
        ("often", "instance_types.p3.2xlarge.interruption"),
    ],
)
def test_bad_interruption_names_the_field(resnet110_paper, value, field: str) -> None:
    """Bad interruption fields in an instance file give one error naming the field."""
    data = resnet110_paper.to_dict()
    data["instance_types"]["p3.2xlarge"]["interruption"] = value
    with pytest.raises(InvalidInputError) as info:
        dnnprov.problem_from_dict(data)
    assert info.value.field == field


def test_catalog_bucket_or_own_model_reaches_the_problem() -> None:
    """build_spot_problem: the entry's own model wins, else its Spot Advisor bucket, else none."""
    own = Interruption(0.2, "fitted")
    catalog = Catalog(
        name="c",
        region="us-east-1",
        snapshot="2025-06-28T00:00:00Z",
        instance_types=(
            CatalogEntry(
                name="p3.2xlarge",
                gpus=1,
                spot_price_per_h=1.0,
                interruption_bucket=3,
                sources={"interruption_bucket": "advisor us-east-1 Linux r=3"},
            ),
            CatalogEntry(name="g3.8xlarge", gpus=2, spot_price_per_h=0.7, interruption_bucket=1, interruption=own),
            CatalogEntry(name="g4dn.4xlarge", gpus=1, spot_price_per_h=0.4),
        ),
    )
    again = Catalog.from_dict(json.loads(json.dumps(catalog.to_dict())))
    assert again.entry("g3.8xlarge").interruption == own
    jsonschema.validate(catalog.to_dict(), json.loads(embedded_path("schema", "catalog-v1.schema.json").read_text()))
    profile = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
    problem = build_spot_problem(
        again, profile, dnnprov.SpotSLO(0.8, 3000.0), quotas={"p3.2xlarge": 2, "g3.8xlarge": 2, "g4dn.4xlarge": 2}
    )
    by = {t.name: t.interruption for t in problem.instance_types}
    assert by["p3.2xlarge"].rate_per_h == pytest.approx(from_advisor_bucket(3).rate_per_h)
    assert "advisor us-east-1 Linux r=3" in by["p3.2xlarge"].source
    assert by["g3.8xlarge"] == own and by["g4dn.4xlarge"] is None


def test_cli_risk_fit_and_attach(tmp_path: Path, capsys: pytest.CaptureFixture, resnet110_paper) -> None:
    """`risk fit --json` and `risk attach` write what the API computes; bad input exits 2."""
    trace = write_trace(tmp_path, "us-east-1f_v100_1.json", [1, 1, 0, 1, 1, 1, 0, 0])
    assert main(["risk", "fit", str(trace), "--json"]) == 0
    (fit,) = json.loads(capsys.readouterr().out)
    assert fit["losses"] == 2 and fit["interruption"] == fit_trace(load_trace(trace)).interruption.to_dict()
    instance = tmp_path / "i.json"
    dnnprov.write_instance(resnet110_paper, instance)
    out = tmp_path / "with-risk.json"
    assert (
        main(
            [
                "risk",
                "attach",
                str(instance),
                "--fit",
                f"p3.2xlarge={trace}",
                "--bucket",
                "g3.8xlarge=2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    types = {t.name: t for t in dnnprov.read_instance(out).instance_types}
    assert types["p3.2xlarge"].interruption.rate_per_h == pytest.approx(fit["interruption"]["rate_per_h"])
    assert types["g3.8xlarge"].interruption.rate_per_h == pytest.approx(from_advisor_bucket(2).rate_per_h)
    capsys.readouterr()
    assert main(["risk", "attach", str(instance), "--bucket", "g3.8xlarge=7", "--out", str(out)]) == 2
    assert "--bucket g3.8xlarge" in capsys.readouterr().err
    assert main(["risk", "solve", str(instance), "--robust", "1", "--risk"]) == 2
    assert "exactly one" in capsys.readouterr().err


def test_cli_risk_solve(tmp_path: Path, capsys: pytest.CaptureFixture, resnet110_paper) -> None:
    """`risk solve --robust 1 --json` and `--risk --json` print results with the documented details."""
    problem = resnet110_paper.replace(
        slo=dnnprov.SpotSLO(0.8, 3000.0),
        instance_types=tuple(
            replace(t, interruption=from_advisor_bucket(4), on_demand_price_per_h=3 * t.spot_price_per_h)
            for t in resnet110_paper.instance_types
        ),
    )
    instance = tmp_path / "i.json"
    dnnprov.write_instance(problem, instance)
    assert main(["risk", "solve", str(instance), "--robust", "1", "--json"]) == 0
    robust = json.loads(capsys.readouterr().out)
    assert robust["status"] == "optimal" and robust["details"]["worst_case_time_s"] <= 3000.0
    assert main(["risk", "solve", str(instance), "--risk", "--deadline-probability", "0.95", "--json"]) == 0
    risk = json.loads(capsys.readouterr().out)
    assert risk["status"] == "optimal" and risk["details"]["deadline_probability_lower_bound"] >= 0.95
    assert risk["cost"] >= risk["details"]["nominal_cost"]


SHARED = default_shared_data()


@pytest.mark.skipif(
    SHARED is None or not (SHARED / "spot-traces").is_dir(),
    reason="../shared/data/spot-traces is absent (real spot traces)",
)
def test_real_traces_fit() -> None:
    """Every real AWS trace fits; the V100 16-node pool loses about half an instance per hour."""
    files = sorted(glob.glob(str(SHARED / "spot-traces/**/*.json"), recursive=True))
    assert len(files) >= 30
    for path in files:
        fit = fit_trace(load_trace(path))
        assert fit.instance_hours > 0 and fit.interruption.rate_per_h >= 0
    pool = fit_traces([load_trace(f) for f in files if "/16-node/" in f])
    assert 0.3 < pool.interruption.rate_per_h < 0.7
    assert pool.interruption.mean_regain_s > 3600  # capacity stays away for hours


# ------------------------------------------------------------- issue 18 defects
@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "gap_seconds": 30}, "gap_seconds"),
        ({"metadata": {"gap_seconds": 60, "zone": "us-east-1a"}, "data": [1, 1]}, "metadata.zone"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [0.9]}, "prices"),
        # the prices were checked for their count only: text, null, negative and huge ones passed
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [0.9, "x"]}, "prices[1]"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [None, 0.9]}, "prices[0]"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [-1, 0.9]}, "prices[0]"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [0.9, 1e300]}, "prices[1]"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 1], "prices": [0.9, True]}, "prices[1]"),
    ],
)
def test_unknown_or_bad_trace_fields_are_refused(tmp_path: Path, doc: dict, field: str) -> None:
    """A trace field dnnprov does not know is refused, naming it (it was silently ignored)."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInputError) as err:
        load_trace(path)
    assert err.value.field == f"{path}: {field}"


def test_trace_prices_are_accepted(tmp_path: Path) -> None:
    """The real preemption traces carry a price per tick: read, not refused."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [1, 0, 1.0], "prices": [0.9, 0.9, 0.9]}))
    assert load_trace(path).alive.tolist() == [1, 0, 1]


def _regains_by_brute_force(alive: list[int], gap: float) -> list[float]:
    """The definition, read literally: for each drop the first later tick back at the level before it."""
    out = []
    for i in range(len(alive) - 1):
        if alive[i + 1] < alive[i]:
            later = [j for j in range(i + 1, len(alive)) if alive[j] >= alive[i]]
            if later:
                out.append((later[0] - i) * gap)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_linear_regain_times_match_the_definition(seed: int) -> None:
    """The one-pass regain times equal the quadratic definition on random multi-node traces."""
    from dnnprov.problems.interruption import Trace, regain_times

    rng = np.random.default_rng(seed)
    alive = rng.integers(0, 5, size=400).tolist()
    _, times = regain_times(Trace("r.json", 30.0, np.array(alive)))
    assert times == _regains_by_brute_force(alive, 30.0)


def test_risk_fit_of_a_two_million_tick_trace_is_linear(tmp_path: Path) -> None:
    """The 2M-tick trace of repro/turn3/make-trace.py: the fit takes CPU seconds, not hours."""
    import time

    from dnnprov.problems.interruption import Trace

    trace = Trace("long.json", 32.0, np.array([1, 0] * 1_000_000))
    started = time.process_time()
    fit = fit_trace(trace)
    assert fit.losses == 1_000_000 and fit.regains == 999_999
    assert fit.interruption.mean_regain_s == pytest.approx(64.0)
    assert time.process_time() - started < 60  # quadratic: ~10^12 steps; linear: ~1 s


@pytest.mark.parametrize("bucket", ["\u00b2", "\u0663", "5", "x", "00000000000000000000000000000000009"])
def test_risk_attach_refuses_a_bucket_that_is_not_0_to_4(capsys: pytest.CaptureFixture, tmp_path: Path, bucket) -> None:
    """'²' passed str.isdigit() and then crashed int() (exit 3); 5 and above were refused naming
    interruption_bucket, a catalog field, not the option given."""
    from conftest import one_error

    out = tmp_path / "out.json"
    argv = ["risk", "attach", "embedded:spot/paper-table1.json", "--bucket", f"p3.2xlarge={bucket}", "--out", str(out)]
    one_error(capsys, argv, "--bucket p3.2xlarge", "0-4")
    assert not out.exists()


def test_risk_fit_zones_names_its_traces_when_their_ticks_differ(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Pools of 60 s and 120 s ticks cannot be aligned: the error names risk fit's TRACE
    arguments (it has no --trace option)."""
    files = [str(write_trace(tmp_path, f"z{gap}.json", [1, 0, 1, 1] * 10, gap)) for gap in (60, 120)]
    assert main(["risk", "fit", "--zones", *files]) == 2
    assert capsys.readouterr().err.startswith("dnnprov: error: TRACE: pools are aligned tick by tick")
