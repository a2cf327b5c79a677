"""Estimated profiles for unmeasured types, the profiling plan, and fit-loss's identity checks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dnnprov.benchsets.common import GPU_MEMORY_BANDWIDTH_GB_S, workload_gpu_profiles
from dnnprov.cli import main
from dnnprov.dispatch import solve
from dnnprov.errors import InvalidInputError, PlausibilityWarning, ProfileWarning
from dnnprov.io.catalogs.catalog import (
    Catalog,
    CatalogEntry,
    embedded_path,
    load_catalog,
    load_spot_profile,
)
from dnnprov.io.catalogs.gpus import GPUS, gpu_key
from dnnprov.io.instances import read_instance
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import InstanceType, SpotProblem, SpotSLO
from dnnprov.profiling.estimate import (
    estimate_types,
    held_out,
    plan_total,
    profiling_plan,
    with_estimates,
)
from dnnprov.profiling.identity import (
    Logged,
    logged_workload,
    same_workload,
    with_identity,
)

REPO = Path(__file__).resolve().parents[2]
WHISPER = REPO.parent / "shared" / "data" / "training-logs" / "whisper-large-v2-ja-trainer_state.json"
PROFILE = load_spot_profile(embedded_path("workloads", "spot", "resnet110-paper.json"))
TABLE3 = load_catalog(embedded_path("catalogs", "aws-table3-2023-01.json"))


def _catalog() -> Catalog:
    """Table III's types plus three modern ones (prices made up, hardware as AWS lists it)."""
    extra = (
        CatalogEntry("g5.xlarge", 1, vcpus=4, gpu_model="NVIDIA A10G", gpu_memory_gb=24.0, spot_price_per_h=0.4),
        CatalogEntry("p4d.24xlarge", 8, vcpus=96, gpu_model="NVIDIA A100", gpu_memory_gb=40.0, spot_price_per_h=7.0),
        CatalogEntry("inf1.xlarge", 1, vcpus=4, gpu_model="AWS Inferentia", spot_price_per_h=0.1),
    )
    return Catalog("test", "us-east-1", "2025-06-28T00:00:00Z", TABLE3.instance_types + extra)


def test_bandwidths_agree_with_the_aws_2025_generator() -> None:
    """The datasheet table gives the aws-2025 set's bandwidths, so the estimate is its derived speed."""
    for gpu, bandwidth in GPU_MEMORY_BANDWIDTH_GB_S.items():
        assert GPUS[gpu].memory_bandwidth_gb_s == bandwidth
    found = estimate_types(PROFILE, _catalog(), ["g5.xlarge"])["g5.xlarge"]
    _, derived = workload_gpu_profiles("resnet110-paper")
    assert found.batch_per_gpu == derived["A10G"].batch_per_gpu
    assert found.compute_time_s == pytest.approx(
        derived["A10G"].batch_per_gpu * derived["A10G"].seconds_per_sample, rel=1e-4
    )


def test_estimate_interval_and_source() -> None:
    """The point is the bandwidth ratio, the interval spans the FP32 ratio, the source names both."""
    est = estimate_types(PROFILE, _catalog(), ["p4d.24xlarge"])["p4d.24xlarge"]
    v100 = est.reference
    assert (v100.name, v100.gpu, est.gpu) == ("p3.2xlarge", "V100", "A100")
    per_iteration = v100.seconds_per_sample * v100.batch_per_gpu
    assert est.compute_time_s == pytest.approx(per_iteration * 900 / 1555, rel=1e-4)
    assert est.interval == pytest.approx((per_iteration * 900 / 1555, per_iteration * 15.7 / 19.5), rel=1e-4)
    assert "p3.2xlarge" in est.source and "900/1555 GB/s" in est.source and "NVIDIA datasheet A100" in est.source
    assert gpu_key("AWS Inferentia") is None
    with pytest.raises(InvalidInputError, match="instance_types.inf1.xlarge"):
        estimate_types(PROFILE, _catalog(), ["inf1.xlarge"])


def test_estimated_types_are_marked_in_instance_and_result(tmp_path: Path) -> None:
    """build --estimate-unprofiled: each estimated type carries its source; solve warns about them."""
    catalog = tmp_path / "c.json"
    catalog.write_text(json.dumps(_catalog().to_dict()))
    out = tmp_path / "i.json"
    assert (
        main(
            [
                "build",
                "--catalog",
                str(catalog),
                "--profile",
                "spot/resnet110-paper",
                "--target-loss",
                "0.8",
                "--deadline",
                "4000",
                "--estimate-unprofiled",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    marked = {n for n, t in data["instance_types"].items() if "estimate" in t}
    assert marked == {"g5.xlarge", "p4d.24xlarge"}  # Table III's other types are measured
    assert "ESTIMATED" in data["notes"] and data["platform"]["ps_price_per_h"] == 0.192
    with pytest.warns(PlausibilityWarning, match="ESTIMATED, not measured compute times of 2 types"):
        result = solve(read_instance(out))
    assert any("ESTIMATED" in w["message"] for w in result.to_dict()["warnings"])


def test_estimate_ends_change_the_instance(tmp_path: Path) -> None:
    """--estimate-at fast writes the interval's fast end."""
    fast = with_estimates(PROFILE, _catalog(), end="fast", types=["g5.xlarge"]).per_type["g5.xlarge"]
    point = with_estimates(PROFILE, _catalog(), types=["g5.xlarge"]).per_type["g5.xlarge"]
    assert fast["compute_time_s"] == fast["compute_time_s_interval"][0] < point["compute_time_s"]
    assert "fast end" in fast["estimate"]


def test_profiling_plan_prices_each_run() -> None:
    """30 iterations per type at the interval's slow end, 300 s overhead, billed at the spot price."""
    runs = profiling_plan(PROFILE, _catalog(), types=["g5.xlarge", "p4d.24xlarge"])
    est = estimate_types(PROFILE, _catalog(), ["g5.xlarge"])["g5.xlarge"]
    w = PROFILE.workload
    g5 = runs[0]
    seconds = 300 + 30 * (est.interval[1] + 2 * w.param_size_mb / w.bandwidth_req_mb_s + 2 * w.param_size_mb / 10000)
    assert (g5.type_name, g5.iterations, g5.batch_per_gpu) == ("g5.xlarge", 30, 1024)
    assert g5.expected_s == pytest.approx(seconds) and g5.cost == pytest.approx(0.4 * seconds / 3600)
    assert g5.cost is not None and runs[1].cost is not None
    assert plan_total(runs)[1] == pytest.approx(g5.cost + runs[1].cost)
    with pytest.raises(InvalidInputError, match="--iterations"):
        profiling_plan(PROFILE, _catalog(), iterations=0)


def test_profile_plan_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dnnprov profile plan --json: one object with the runs, minutes and cost."""
    catalog = tmp_path / "c.json"
    catalog.write_text(json.dumps(_catalog().to_dict()))
    assert (
        main(
            [
                "profile",
                "plan",
                "--catalog",
                str(catalog),
                "--profile",
                "spot/resnet110-paper",
                "--json",
                "--types",
                "g5.xlarge",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [r["type"] for r in out["runs"]] == ["g5.xlarge"] and out["runs"][0]["iterations"] == 30
    assert out["total_cost"] == pytest.approx(out["runs"][0]["cost"]) and out["runs"][0]["batch_size"] == 1024


def test_profiling_plan_loss_runs_follow_the_model() -> None:
    """--epoch-samples adds 3 epochs on 2, 4 and 7 workers of one type, timed by eqs. (2), (6)-(9)
    and billed with the PS; a cluster's run is its samples over the cluster's speed."""
    runs = profiling_plan(
        PROFILE, _catalog(), types=["g5.xlarge"], epoch_samples=50_000, loss_type="p3.2xlarge", ps_price_per_h=0.2
    )
    loss = [r for r in runs if r.purpose == "loss"]
    assert [(r.type_name, r.workers, r.epochs) for r in loss] == [("p3.2xlarge", k, 3) for k in (2, 4, 7)]
    measured = PROFILE.per_type["p3.2xlarge"]
    t = InstanceType(
        "p3.2xlarge",
        gpus=1,
        spot_price_per_h=1.25,
        quota=7,
        gpu_memory_gb=16.0,
        batch_per_gpu=measured.get("batch_per_gpu"),
        compute_time_s=measured.get("compute_time_s"),
        speed_samples_per_s=measured.get("speed_samples_per_s"),
    )
    w = dataclasses.replace(PROFILE.workload, domain=None)
    problem = SpotProblem(
        instance_types=(t,), workload=w, slo=SpotSLO(loss=w.gamma_5 + 1, time_s=1.0), model=PROFILE.model
    )
    batch = problem.batch_per_gpu(t)
    for r in loss:
        iteration_s = SpotModel(problem).iteration_times([r.workers], [1])[0, 0]
        seconds = 300 + 3 * 50_000 * iteration_s / (r.workers * batch)
        assert r.expected_s == pytest.approx(seconds) and r.iterations == -(-150_000 // batch)
        assert r.cost == pytest.approx((r.workers * 1.25 + 0.2) * seconds / 3600)
    assert runs[0].cost == pytest.approx((0.4 + 0.2) * runs[0].expected_s / 3600)
    default = profiling_plan(PROFILE, _catalog(), types=["g5.xlarge"], epoch_samples=50_000)
    assert {r.type_name for r in default if r.purpose == "loss"} == {"g5.xlarge"}  # the cheapest per sample here
    with pytest.raises(InvalidInputError, match="--epoch-samples"):
        profiling_plan(PROFILE, _catalog(), epoch_samples=0)
    with pytest.raises(InvalidInputError, match="--loss-type"):
        profiling_plan(PROFILE, _catalog(), epoch_samples=10, loss_type="z9.nothing")


def test_held_out_types_report_their_error() -> None:
    """Each measured K80/M60/T4 type estimated from the V100 alone: the error is what docs/reproduction.md says."""
    found = {h.type_name: h for h in held_out(PROFILE, TABLE3)}
    assert round(found["p2.8xlarge"].error_pct, 1) == -61.6 and not found["p2.8xlarge"].inside
    assert round(found["g4dn.4xlarge"].error_pct, 1) == -11.4
    assert round(found["g3.8xlarge"].error_pct, 1) == 26.9 and found["g3.8xlarge"].inside
    text = (REPO / "docs" / "reproduction.md").read_text()
    for h in found.values():
        if h.reference == "p3.2xlarge":
            assert f"| {h.type_name} ({h.gpu}) | {h.error_pct:+.1f} %" in text, h.type_name


# ------------------------------------------------------------------ fit-loss identity
def test_identity_rules() -> None:
    """Another named workload is refused without --name; --name needs a parameter size and drops timings."""
    assert same_workload("resnet110-run0", "resnet110") and not same_workload("whisper-large-v2", "resnet110")
    with pytest.raises(InvalidInputError, match="--name: the log is of workload 'whisper'"):
        with_identity(PROFILE, Logged("whisper", "here"))
    with pytest.raises(InvalidInputError, match="--param-size-mb"):
        with_identity(PROFILE, Logged("whisper", "here"), name="whisper")
    new = with_identity(PROFILE, Logged("whisper", "here"), name="whisper", param_size_mb=6000.0)
    assert new.per_type == {} and new.workload.name == "whisper" and new.workload.param_size_mb == 6000.0
    assert {"bandwidth_req_mb_s", "alpha_1", "beta_1"} <= set(new.workload.estimated)
    kept = with_identity(
        PROFILE, Logged("whisper", "here"), name="whisper", param_size_mb=6000.0, keep_base_timings=True
    )
    assert all("--keep-base-timings" in e["estimate"] for e in kept.per_type.values())
    with pytest.warns(ProfileWarning, match="does not name its workload"):
        assert with_identity(PROFILE, Logged(None, "log.csv")) == PROFILE


@pytest.mark.skipif(not WHISPER.is_file(), reason=f"real training log {WHISPER} is absent")
def test_whisper_log_refused_on_a_resnet_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Whisper log on the ResNet-110 base (an embedded name): refused naming both; with --name it is written."""
    assert logged_workload([WHISPER]).name == "whisper-large-v2-japanese-24h"
    args = [
        "profile",
        "fit-loss",
        str(WHISPER),
        "--batch-size",
        "50",
        "--base",
        "spot/resnet110-paper",
        "--out",
        str(tmp_path / "w.json"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "'whisper-large-v2-japanese-24h'" in err and "'resnet110'" in err
    assert main(args + ["--name", "whisper-large-v2", "--param-size-mb", "6200", "--measured-on", "g5.xlarge"]) == 0
    written = load_spot_profile(tmp_path / "w.json")
    assert written.workload.name == "whisper-large-v2" and written.workload.param_size_mb == 6200
    assert written.per_type == {"g5.xlarge": {"batch_per_gpu": 50, "compute_time_s": pytest.approx(50 / 3.232)}}
