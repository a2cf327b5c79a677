"""Plausibility warnings: unit slips are warned about (never refused), real data never is."""

from __future__ import annotations

import copy
import gzip
import json
import warnings
from pathlib import Path

import pytest

import dnnprov
from dnnprov.batch.sweep import sweep
from dnnprov.cli import main
from dnnprov.errors import PlausibilityWarning
from dnnprov.io.instances import problem_from_dict
from dnnprov.problems.validation import plausibility

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
#: Table I's proven optimum (README; spec section 6): the PS is unpriced, so the cost is
#: linear in the spot prices.
TABLE1_OPTIMUM = 5.448374


def _doc(name: str) -> dict:
    return json.loads(dnnprov.embedded_instance(name).read_text())


def _found(doc: dict) -> list[PlausibilityWarning]:
    """The plausibility warnings building ``doc`` issues (every one, in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problem_from_dict(doc)
    return [w.message for w in caught if issubclass(w.category, PlausibilityWarning)]


def _table1_in_cents() -> dict:
    doc = _doc("spot/paper-table1.json")
    for entry in doc["instance_types"].values():
        entry["spot_price_per_h"] = round(entry["spot_price_per_h"] * 100, 6)
    return doc


def test_prices_in_cents_are_warned_about_and_used_as_given() -> None:
    """The issue's slip: Table I's spot prices typed in cents. Each type is named once; the solve
    still proves the optimum, exactly 100 times Table I's, and the result lists the warnings."""
    doc = _table1_in_cents()
    found = _found(doc)
    assert [w.field for w in found] == [f"instance_types.{name}.spot_price_per_h" for name in doc["instance_types"]]
    assert "above the plausible $20 per GPU-hour" in str(found[0]) and "in cents?" in str(found[0])
    with pytest.warns(PlausibilityWarning):
        problem = problem_from_dict(doc)
    result = dnnprov.solve(problem)
    assert result.status.value == "optimal" and result.cost == pytest.approx(100 * TABLE1_OPTIMUM, rel=1e-6)
    assert [f for f, _ in result.warnings] == [w.field for w in found]
    assert result.to_dict()["warnings"][2] == {"field": found[2].field, "message": found[2].problem}


def test_cli_prints_each_warning_once_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`dnnprov solve` (and sweep, which builds the problem once per point) print one
    `dnnprov: warning: FIELD: ...` line per finding, once; --json carries them too; exit 0."""
    path = tmp_path / "cents.json"
    path.write_text(json.dumps(_table1_in_cents()))
    fields = [f"instance_types.{name}.spot_price_per_h" for name in _table1_in_cents()["instance_types"]]
    assert main(["solve", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[:3] for line in err] == [["dnnprov", "warning", f] for f in fields]
    page = (REPO / "docs" / "instance-format.md").read_text().splitlines()
    assert err[0] in page  # the line docs/instance-format.md shows
    assert main(["sweep", str(path), "--deadlines", "2600:3000:3", "--no-progress", "--no-heuristic"]) == 0
    assert len(capsys.readouterr().err.splitlines()) == len(fields)
    assert main(["solve", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert [w["field"] for w in json.loads(captured.out)["warnings"]] == fields
    assert len(captured.err.splitlines()) == len(fields)


SPOT_SLIPS = [
    # (where in the file, value, field warned about): a unit slip each
    (("instance_types", "g3.8xlarge", "spot_price_per_h"), 0.0001, "instance_types.g3.8xlarge.spot_price_per_h"),
    (
        ("instance_types", "g3.8xlarge", "on_demand_price_per_h"),
        228.0,
        "instance_types.g3.8xlarge.on_demand_price_per_h",
    ),
    (
        ("instance_types", "g4dn.4xlarge", "speed_samples_per_s"),
        1 / 750.0,
        "instance_types.g4dn.4xlarge.speed_samples_per_s",
    ),
    (("instance_types", "g4dn.4xlarge", "gpu_memory_gb"), 16384.0, "instance_types.g4dn.4xlarge.gpu_memory_gb"),
    (("workload", "param_size_mb"), 1e-4, "workload.param_size_mb"),
    (("workload", "bandwidth_req_mb_s"), 200e6, "workload.bandwidth_req_mb_s"),
    (("platform", "ps_bandwidth_mb_s"), 0.5, "platform.ps_bandwidth_mb_s"),
    (("platform", "pcie_bandwidth_mb_s"), 1e10, "platform.pcie_bandwidth_mb_s"),
    (("platform", "ps_price_per_h"), 19.2, "platform.ps_price_per_h"),
]


@pytest.mark.parametrize("where, value, field", SPOT_SLIPS, ids=[s[2] for s in SPOT_SLIPS])
def test_each_spot_slip_names_its_field(where: tuple[str, ...], value: float, field: str) -> None:
    """One slipped field gives exactly one warning, naming that field, on one line."""
    doc = _doc("spot/paper-table1.json")
    target = doc
    for key in where[:-1]:
        target = target.setdefault(key, {})
    target[where[-1]] = value
    found = _found(doc)
    assert [w.field for w in found] == [field]
    assert "\n" not in str(found[0]) and "(a warning: used as given)" in str(found[0])


def test_compute_time_in_milliseconds_is_warned_about() -> None:
    """A type given by its per-iteration compute time: 800 (ms typed as s) is warned about."""
    doc = json.loads((REPO / "data/benchmarks/large/large-016.json").read_text())
    name = next(n for n, t in doc["instance_types"].items() if "compute_time_s" in t)
    assert _found(doc) == []
    doc["instance_types"][name]["compute_time_s"] = 800.0
    assert [w.field for w in _found(doc)] == [f"instance_types.{name}.compute_time_s"]


SERVERLESS_SLIPS = [
    (("platform", "price_per_gb_s"), 0.00166667, "platform.price_per_gb_s"),
    (("platform", "price_per_request"), 0.2, "platform.price_per_request"),
    (("platform", "function_bandwidth_mb_s"), 84e6, "platform.function_bandwidth_mb_s"),
    (("platform", "storage_bandwidth_mb_s"), 0.1, "platform.storage_bandwidth_mb_s"),
    (("workload", "model_mb"), 98e6, "workload.model_mb"),
    (("workload", "dataset_mb"), 1.5e11, "workload.dataset_mb"),
]


@pytest.mark.parametrize("where, value, field", SERVERLESS_SLIPS, ids=[s[2] for s in SERVERLESS_SLIPS])
def test_each_serverless_slip_names_its_field(where: tuple[str, str], value: float, field: str) -> None:
    """The same for the serverless platform and workload."""
    doc = _doc("serverless/paper-table3-resnet50.json")
    doc.setdefault(where[0], {})[where[1]] = value
    assert [w.field for w in _found(doc)] == [field]


def test_no_shipped_instance_is_warned_about() -> None:
    """Every instance in data/ (paper tables, benchmark sets, JSON lines) is plausible."""
    docs = []
    for path in sorted((REPO / "data").rglob("*.json*")):
        lines = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
        docs += [
            d
            for d in map(json.loads, filter(str.strip, lines))
            if isinstance(d, dict) and d.get("format") in ("dnnprov/spot", "dnnprov/serverless")
        ]
    assert len(docs) > 300
    assert [(d.get("name"), str(w)) for d in docs for w in _found(copy.deepcopy(d))] == []


@pytest.mark.skipif(
    not (SHARED / "aws-gpu-instances-ondemand-2026-01-21.json").exists(),
    reason="../shared/data (the real AWS price lists) is not on this machine",
)
def test_every_real_aws_price_is_plausible() -> None:
    """Each real per-GPU price (AWS on-demand list 2026, spot price history 2022) and each
    Lambda duration price lies inside the plausible ranges: the ranges come from this data."""
    offers = json.loads((SHARED / "aws-gpu-instances-ondemand-2026-01-21.json").read_text())
    gpus = {o["name"]: o["gpuCount"] for o in offers if o["gpuCount"]}
    on_demand = [
        p["onDemand"] / gpus[o["name"]]
        for o in offers
        if o["name"] in gpus
        for p in o["pricing"].values()
        if p.get("onDemand")
    ]
    with gzip.open(SHARED / "aws-spot-price-history-2022-05-31.tsv.gz", "rt") as rows:
        spot = [
            float(price) / gpus[kind]
            for _, kind, _, price, _ in (r.rstrip("\n").split("\t") for r in rows)
            if kind in gpus
        ]
    rng = plausibility.PRICE_PER_GPU_H
    assert len(on_demand) > 1000 and len(spot) > 400
    assert rng.low <= min(spot) and max(on_demand) <= rng.high
    assert all(rng.low <= p <= rng.high for p in on_demand + spot)
    lam = json.loads((SHARED / "aws-lambda-duration-prices.json").read_text())["baseCosts"]
    per_gb_s = [per_ms * 1000 * 1024 / 128 for arch in lam.values() for per_ms in arch.values()]
    assert all(plausibility.PRICE_PER_GB_S.low <= p <= plausibility.PRICE_PER_GB_S.high for p in per_gb_s)


def test_sweep_answer_carries_the_warnings() -> None:
    """The sweep's JSON (the service's answer) lists the instance's warnings."""
    with pytest.warns(PlausibilityWarning):
        answer = sweep(problem_from_dict(_table1_in_cents()), [2600], heuristic=False).to_dict()
    assert [w["field"] for w in answer["warnings"]][:1] == ["instance_types.p3.2xlarge.spot_price_per_h"]
    assert answer["rows"][0]["cost"] == pytest.approx(100 * TABLE1_OPTIMUM, rel=1e-6)
