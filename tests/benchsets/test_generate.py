"""Benchmark instance sets: seeded reproducibility, validity, sizes, the trace reader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import one_error
from dnnprov.solvers.search.enumeration import DEFAULT_MAX_PLANS, enumerate_spot, spot_space_size

import dnnprov
from dnnprov import InvalidInputError, ServerlessProblem, SpotProblem, read_instance
from dnnprov.benchsets.generate import (
    DEFAULT_COUNTS,
    INDEX_FILE,
    LARGE_MIN_SPACE,
    SMALL_SPACE_LIMIT,
    TRACE_SAMPLE_FILE,
    TRACE_TIME_RANGE_S,
    generate,
    read_instance_lines,
    resolve_shared_data,
    small_spot_instance,
    trace_jobs,
    write_instance_lines,
)
from dnnprov.cli import main
from dnnprov.io.catalogs.catalog import embedded_path

BENCHMARKS = embedded_path("benchmarks")


def shared_data_or_skip() -> Path:
    """The real-data folder, or skip the test saying why."""
    try:
        return resolve_shared_data()
    except InvalidInputError as exc:
        pytest.skip(f"../shared/data is absent (a fresh clone has no real third-party data): {exc}")


def committed(set_name: str) -> tuple[dict, dict[str, bytes]]:
    """The committed index of a set and every file of its folder (name -> bytes)."""
    folder = BENCHMARKS / set_name
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}
    return json.loads(files[INDEX_FILE]), files


def regenerate(set_name: str, out: Path, index: dict, **kwargs) -> dict[str, bytes]:
    """Generate a set again with the committed index's seed and count."""
    count = index["count"]
    if isinstance(count, dict):
        count = count["spot"]
    generate(
        set_name,
        out,
        seed=index["seed"] if index["seed"] is not None else 0,
        count=None if set_name == "paper" else count,
        **kwargs,
    )
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a folder (name -> bytes)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def index_files(set_name: str, kind: str | None = None) -> list[dict]:
    """The per-file entries of a committed index (optionally of one kind)."""
    index, _ = committed(set_name)
    return [f for f in index["files"] if kind is None or f.get("kind") == kind]


# ---------------------------------------------------------------- determinism
def test_same_seed_gives_identical_bytes(tmp_path):
    """Two runs with one seed write the same bytes; another seed writes other numbers."""
    first = folder_bytes(Path(generate("small", tmp_path / "a", seed=5, count=4)[-1]).parent)
    second = folder_bytes(Path(generate("small", tmp_path / "b", seed=5, count=4)[-1]).parent)
    other = folder_bytes(Path(generate("small", tmp_path / "c", seed=6, count=4)[-1]).parent)
    assert first == second
    assert len(first) == 9  # 4 spot + 4 serverless + index
    assert first["spot-000.json"] != other["spot-000.json"]


def test_instance_does_not_depend_on_count(tmp_path):
    """Instance i is the same whether 2 or 4 instances are asked for."""
    few = folder_bytes(Path(generate("large", tmp_path / "few", seed=3, count=2)[-1]).parent)
    more = folder_bytes(Path(generate("large", tmp_path / "more", seed=3, count=4)[-1]).parent)
    assert few["large-000.json"] == more["large-000.json"]
    assert few["large-001.json"] == more["large-001.json"]


def test_regeneration_replaces_only_listed_files(tmp_path):
    """A second run into the same folder removes files the previous index listed, nothing else."""
    out = tmp_path / "set"
    generate("large", out, count=3)
    (out / "mine.txt").write_text("keep")
    generate("large", out, count=1)
    assert sorted(p.name for p in out.iterdir()) == ["index.json", "large-000.json", "mine.txt"]


@pytest.mark.parametrize(
    "index",
    [
        b"[1, 2]",
        b'{"files": "abc"}',
        json.dumps({"files": [{"file": f} for f in ("..", "", ".", "sub", "/etc/passwd")]}).encode(),
        b"\xff\xfe not UTF-8",
    ],
)
def test_a_foreign_index_in_the_folder_is_no_error_and_removes_nothing_else(tmp_path, capsys, index):
    """An index.json that is not one of ours (a list, a wrong "files", names of folders, not
    UTF-8) was an internal error (exit 3: AttributeError, IsADirectoryError on '..', UnicodeDecodeError)."""
    out = tmp_path / "set"
    (out / "sub").mkdir(parents=True)
    (out / INDEX_FILE).write_bytes(index)
    assert main(["generate", "large", "--count", "1", "--out", str(out)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["index.json", "large-000.json", "sub"]


@pytest.mark.parametrize("count", ["100001", "100000000000", "1" + "0" * 60])
def test_a_count_beyond_the_limit_is_refused_at_once(tmp_path, capsys, count):
    """A huge --count built instances in memory until the machine gave out (no limit)."""
    one_error(capsys, ["generate", "small", "--count", count, "--out", str(tmp_path)], "count", "100,000")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("set_name", ["paper", "small", "large"])
def test_committed_set_equals_regenerated(set_name, tmp_path):
    """The committed files are exactly what the generator writes from the index's seed."""
    index, files = committed(set_name)
    assert regenerate(set_name, tmp_path, index) == files


@pytest.mark.parametrize("set_name", ["aws-2022", "aws-2025"])
def test_committed_aws_set_equals_regenerated(set_name, tmp_path):
    """The aws sets regenerate from ../shared/data to the committed bytes."""
    data = shared_data_or_skip()
    index, files = committed(set_name)
    assert regenerate(set_name, tmp_path, index, shared_data=data) == files


def test_committed_trace_sample_equals_regenerated(tmp_path):
    """The committed 200-job trace sample regenerates byte for byte."""
    data = shared_data_or_skip()
    index, files = committed("trace")
    assert sorted(files) == [INDEX_FILE, TRACE_SAMPLE_FILE]
    assert regenerate("trace", tmp_path, index, shared_data=data) == files


# ---------------------------------------------------------------- validity and sizes
def test_small_instances_validate_and_are_enumerable():
    """Every small instance reads back (schema + model checks) and fits exhaustive search."""
    entries = index_files("small")
    assert sum(e["kind"] == "spot" for e in entries) == DEFAULT_COUNTS["small"]
    assert sum(e["kind"] == "serverless" for e in entries) == DEFAULT_COUNTS["small"]
    for entry in entries:
        problem = read_instance(BENCHMARKS / "small" / entry["file"])
        assert problem.name == entry["name"]
        if isinstance(problem, SpotProblem):
            assert spot_space_size(problem) == entry["space"] <= SMALL_SPACE_LIMIT
            assert 3 <= len(problem.instance_types) <= 7
            assert all(t.quota <= 10 for t in problem.instance_types)
            assert problem.constraints.ps_count[1] <= 3
        else:
            assert isinstance(problem, ServerlessProblem)
            low, high = problem.function_range()
            space = (
                (high - low + 1)
                * len(problem.memory_grid())
                * (problem.constraints.ps_count[1] - problem.constraints.ps_count[0] + 1)
            )
            assert space == entry["space"] <= DEFAULT_MAX_PLANS
            assert problem.platform.max_memory_mb in (3008, 10240)


def test_small_covers_every_regime():
    """Both models, loss variants, gamma_4 regimes, contention levels and every side constraint occur."""
    spot = index_files("small", "spot")
    serverless = index_files("small", "serverless")
    assert {e["model"] for e in spot} == {"paper", "reference"}
    assert {e["loss_variant"] for e in spot} == {"cc", "no-cc"}
    assert {e["gamma_4"] for e in spot if e["loss_variant"] == "cc"} == {0.1, 1.0}
    assert {e["contention"] for e in spot} == {"tight", "loose"}
    for flag in ("existing", "vcpu_quota", "budget", "workers_range"):
        assert any(e[flag] for e in spot), flag
    assert any("on-demand" in e["markets"] for e in spot)
    assert {e["ps_count"][1] for e in spot} == {1, 2, 3}
    assert {e["workload"] for e in serverless} == {"espcn", "1dcnn", "mobilenet", "resnet50"}
    assert {e["max_memory_mb"] for e in serverless} == {3008, 10240}
    assert any(e["budget"] for e in serverless) and any(e["functions_range"] for e in serverless)


def test_small_sample_is_mostly_feasible_and_not_all_lone_workers():
    """Exhaustive search on every tenth small spot instance: feasible, several need clusters."""
    plans = []
    for entry in index_files("small", "spot")[::10]:
        result = enumerate_spot(read_instance(BENCHMARKS / "small" / entry["file"]))
        plans.append(result.plan)
    assert sum(p is not None for p in plans) >= 0.8 * len(plans)
    assert sum(p is not None and p.workers >= 2 for p in plans) >= 0.4 * len(plans)


def test_large_instances_validate_and_are_not_enumerable():
    """Large instances read back, have 15-40 types and quotas <= 64, and are far beyond enumeration."""
    entries = index_files("large")
    assert len(entries) == DEFAULT_COUNTS["large"]
    for entry in entries:
        problem = read_instance(BENCHMARKS / "large" / entry["file"])
        assert 15 <= len(problem.instance_types) <= 40
        assert all(t.quota <= 64 for t in problem.instance_types)
        assert 1 <= problem.constraints.ps_count[0] <= problem.constraints.ps_count[1] <= 4
        assert spot_space_size(problem) > max(LARGE_MIN_SPACE, DEFAULT_MAX_PLANS)
        assert entry["target_workers"] >= 15
    assert any(e["vcpu_quota"] for e in entries)
    result = dnnprov.solve(read_instance(BENCHMARKS / "large" / entries[0]["file"]), "enumerate")
    assert result.status is dnnprov.Status.LIMIT


def lone_workers_feasible(problem: SpotProblem) -> bool:
    """Whether any one-worker plan meets every constraint."""
    model = dnnprov.SpotModel(problem)
    cols = model.columns
    if cols.lower.sum() > 1:
        return False
    singles = cols.lower[None, :] if cols.lower.sum() else np.eye(len(cols), dtype=np.int64)[cols.upper > 0]
    low, high = problem.constraints.ps_count
    return any(model.evaluate(singles, ps).feasible.any() for ps in range(low, high + 1))


def test_deadlines_below_lone_workers_need_a_cluster():
    """No lone worker meets a large deadline, nor a small one built below the lone workers."""
    for entry in index_files("large"):
        assert not lone_workers_feasible(read_instance(BENCHMARKS / "large" / entry["file"])), entry["file"]
    below = [e for e in index_files("small", "spot") if e["deadline_rule"] == "below-lone-worker"]
    assert len(below) >= 40
    for entry in below:
        assert not lone_workers_feasible(read_instance(BENCHMARKS / "small" / entry["file"])), entry["file"]


def test_paper_set_is_the_embedded_instances():
    """The paper set holds one copy of every embedded paper instance."""
    for entry in index_files("paper"):
        copy = (BENCHMARKS / "paper" / entry["file"]).read_text()
        source = Path(str(embedded_path("instances", *entry["source"].split("/")[-2:]))).read_text()
        assert copy == source


def test_aws_sets_use_real_prices():
    """aws-2022 takes spot prices from the 2022 history; aws-2025 from advisor savings."""
    shared_data_or_skip()
    for set_name in ("aws-2022", "aws-2025"):
        for entry in index_files(set_name):
            problem = read_instance(BENCHMARKS / set_name / entry["file"])
            assert len(problem.instance_types) >= 6
            assert problem.constraints.vcpu_quotas
            assert "REAL us-east-1" in problem.notes and "DERIVED" in problem.notes
    p3 = [read_instance(BENCHMARKS / "aws-2022" / e["file"]) for e in index_files("aws-2022")]
    prices = {t.name: t.spot_price_per_h for p in p3 for t in p.instance_types}
    assert prices.get("p3.2xlarge", 0.918) == 0.918  # the 2022-05-31 history's cheapest AZ


# ---------------------------------------------------------------- trace
def test_trace_jobs_count_and_objective_times():
    """The trace generator yields the requested count, T_o in [600, 1200] s, positive epochs."""
    runtimes = np.array([0.0, 5, 60, 600, 1186, 1186, 5000, 86400, 4.6e6])
    jobs = list(trace_jobs(seed=1, count=2000, runtimes=runtimes))
    assert len(jobs) == 2000
    times = np.array([j["slo"]["time_s"] for j in jobs])
    assert times.min() >= TRACE_TIME_RANGE_S[0] and times.max() <= TRACE_TIME_RANGE_S[1]
    assert all(j["workload"]["epochs"] > 0 for j in jobs)
    assert {j["workload"]["name"] for j in jobs} == {"espcn", "1dcnn", "mobilenet", "resnet50"}
    assert len({j["name"] for j in jobs}) == 2000
    prefix = list(trace_jobs(seed=1, count=50, runtimes=runtimes))
    assert prefix == jobs[:50]


def test_trace_longer_runtime_means_more_work():
    """Within one workload and T_o, epochs grow with the trace runtime."""
    runtimes = np.array([10.0, 100.0, 1000.0, 10000.0])
    jobs = list(trace_jobs(seed=0, count=400, runtimes=runtimes))
    by_runtime: dict[float, list[float]] = {}
    for job in jobs:
        if job["workload"]["name"] == "resnet50":
            runtime = float(job["notes"].split("runtime ")[1].split(" s")[0])
            by_runtime.setdefault(runtime, []).append(job["workload"]["epochs"] / job["slo"]["time_s"])
    ratios = [np.mean(by_runtime[r]) for r in sorted(by_runtime)]
    assert ratios == sorted(ratios) and len(ratios) == 4


def test_trace_from_philly_makes_100000_jobs():
    """With the real Philly runtimes, 100,000 jobs come out, each T_o within [600, 1200] s."""
    data = shared_data_or_skip()
    n, low, high = 0, math.inf, -math.inf
    for job in trace_jobs(seed=0, count=100_000, shared_data=data):
        n += 1
        low, high = min(low, job["slo"]["time_s"]), max(high, job["slo"]["time_s"])
    assert n == 100_000 and low >= 600 and high <= 1200


def test_trace_lines_round_trip(tmp_path):
    """Jobs written as JSON lines read back as validated serverless problems."""
    jobs = list(trace_jobs(seed=2, count=30, runtimes=np.array([1.0, 1000.0, 1e5])))
    path = tmp_path / "jobs.jsonl"
    assert write_instance_lines(jobs, path) == 30
    problems = list(read_instance_lines(path))
    assert len(problems) == 30 and all(isinstance(p, ServerlessProblem) for p in problems)
    assert [p.to_dict() for p in problems] == jobs
    fast = list(read_instance_lines(path, check_schema=False))
    assert [p.to_dict() for p in fast] == jobs


def test_committed_trace_sample_reads_back():
    """The committed sample has 200 valid jobs with T_o in [600, 1200] s."""
    problems = list(read_instance_lines(BENCHMARKS / "trace" / TRACE_SAMPLE_FILE))
    assert len(problems) == DEFAULT_COUNTS["trace"]
    assert all(600 <= p.time_s <= 1200 for p in problems)


def test_instance_lines_errors_name_the_line(tmp_path):
    """A bad line is reported with the file and line number."""
    job = next(trace_jobs(seed=0, count=1, runtimes=np.array([5.0])))
    bad = dict(job, slo={"time_ms": 5})
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(job) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(InvalidInputError, match=r"bad\.jsonl:3"):
        list(read_instance_lines(path))
    path.write_text("{not json\n")
    with pytest.raises(InvalidInputError, match=r"bad\.jsonl:1.*not valid JSON"):
        list(read_instance_lines(path))


# ---------------------------------------------------------------- API and CLI
def test_bad_arguments_are_refused(tmp_path):
    """Unknown sets, negative seeds, zero counts and a count for the paper set are input errors."""
    with pytest.raises(InvalidInputError, match="unknown set"):
        generate("huge", tmp_path)
    with pytest.raises(InvalidInputError, match="seed"):
        generate("small", tmp_path, seed=-1)
    with pytest.raises(InvalidInputError, match="count"):
        generate("large", tmp_path, count=0)
    with pytest.raises(InvalidInputError, match="paper"):
        generate("paper", tmp_path, count=3)


def test_missing_shared_data_is_a_clear_error(tmp_path, capsys):
    """aws and trace sets without the real data fail with exit code 2 and a readable reason."""
    assert main(["generate", "aws-2022", "--out", str(tmp_path / "o"), "--shared-data", str(tmp_path / "nowhere")]) == 2
    assert "shared/data" in capsys.readouterr().err


def test_cli_generate(tmp_path, capsys):
    """``dnnprov generate small --count 2`` writes 4 instances and an index naming the command."""
    assert main(["generate", "small", "--count", "2", "--seed", "9", "--out", str(tmp_path)]) == 0
    assert "wrote 4 instance files" in capsys.readouterr().out
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    assert index["command"] == "dnnprov generate small --seed 9 --count 2"
    assert index["count"] == {"spot": 2, "serverless": 2}
    assert small_spot_instance(9, 1).problem == read_instance(tmp_path / "spot-001.json")
