"""Batch runs (local pool and Dask), their failure handling, resume, and the report."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dnnprov
from dnnprov.batch.runner import (
    CRASH_ENV,
    HANG_ENV,
    ROW_COLUMNS,
    load_instance,
    plan_counts,
    read_results,
    run_batch,
    summarize,
)
from dnnprov.cli import main

ALL = ["milp", "heuristic", "reference-heuristic", "enumerate"]
EMBEDDED = Path(str(dnnprov.embedded_instance("spot/paper-table1.json"))).parents[1]
SLOW_ENUMERATE = "spot/paper-table3-overhead-7x10.json"  # enumerate takes ~8 s: the timeout case


def _tiny(make_resnet110, make_resnet50, folder: Path, prefix: str = "tiny") -> list[Path]:
    """Write a small spot and a small serverless instance into ``folder``."""
    spot = dataclasses.replace(make_resnet110(time_s=3000.0), name=f"{prefix}-spot")
    serverless = dataclasses.replace(make_resnet50(time_s=900.0), name=f"{prefix}-serverless")
    return [
        dnnprov.write_instance(spot, folder / f"{prefix}-spot.json"),
        dnnprov.write_instance(serverless, folder / f"{prefix}-serverless.json"),
    ]


def _drop_timing(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["solve_seconds", "cpu_seconds"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def instance_dir(tmp_path_factory, make_resnet110, make_resnet50) -> Path:
    """The paper instances (but the 8 s enumeration), two tiny ones, a workload and an index file."""
    root = tmp_path_factory.mktemp("instances")
    for src in sorted(EMBEDDED.rglob("*.json")):
        rel = src.relative_to(EMBEDDED)
        if rel.as_posix() != SLOW_ENUMERATE:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, root / rel)
    _tiny(make_resnet110, make_resnet50, root / "tiny")
    workload = Path(str(dnnprov.embedded_instance("spot/paper-table1.json"))).parents[2] / "workloads/spot/vgg19.json"
    shutil.copy(workload, root / "tiny" / "vgg19-workload.json")
    (root / "index.json").write_text(json.dumps({"set": "test", "count": 2}))
    return root


@pytest.fixture(scope="module")
def local_run(instance_dir, tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """Every method on ``instance_dir`` in a local 2-process pool, with its CSV."""
    out = tmp_path_factory.mktemp("local") / "results.csv"
    return run_batch([instance_dir], ALL, time_limit_s=30, out=out, workers=2, progress=False), out


@pytest.fixture(scope="module")
def dask_address():
    """A 2-worker dask.distributed LocalCluster on 127.0.0.1."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture
def failing_dir(tmp_path, make_resnet110, make_resnet50) -> Path:
    """Two tiny instances, an unparsable file and a file that breaks the schema."""
    _tiny(make_resnet110, make_resnet50, tmp_path)
    (tmp_path / "corrupt.json").write_text("{not json")
    (tmp_path / "wrong.json").write_text(json.dumps({"format": "dnnprov/spot", "version": 1}))
    return tmp_path


# ------------------------------------------------------------------ local runs
def test_one_row_per_instance_and_method(local_run, instance_dir):
    """Every (instance, applicable method) has exactly one row, in sorted path order."""
    df, _ = local_run
    files = sorted(
        p.as_posix() for p in instance_dir.rglob("*.json") if "workload" not in p.name and p.name != "index.json"
    )
    spot = [f for f in files if "serverless" not in f]
    assert len(df) == 4 * len(spot) + 3 * (len(files) - len(spot))
    assert not df.duplicated(["path", "method"]).any()
    assert sorted(df["path"].unique()) == files
    assert list(df["path"]) == sorted(df["path"])
    assert not ((df["kind"] == "serverless") & (df["method"] == "reference-heuristic")).any()
    assert df.attrs["skipped_files"] == [
        (instance_dir / name).as_posix() for name in ("index.json", "tiny/vgg19-workload.json")
    ]
    assert list(df.columns) == list(ROW_COLUMNS)


def test_statuses_and_costs(local_run):
    """milp is optimal, enumerate matches its cost, heuristics are never cheaper."""
    df, _ = local_run
    assert (df["error"] == "").all()
    cost = df.pivot(index="path", columns="method", values="cost")
    status = df.pivot(index="path", columns="method", values="status")
    assert (status["milp"] == "optimal").all()
    assert (status["enumerate"] == "optimal").all()
    np.testing.assert_allclose(cost["enumerate"], cost["milp"], rtol=1e-9)
    for heuristic in ("heuristic", "reference-heuristic"):
        both = cost[heuristic].notna()
        assert (cost.loc[both, heuristic] >= cost.loc[both, "milp"] * (1 - 1e-9)).all()
    plans = df.loc[df["method"] == "milp", "plan"].map(json.loads)
    assert all(isinstance(p, dict) and p for p in plans)


def test_csv_holds_the_returned_rows(local_run):
    """The CSV reads back to the DataFrame run_batch returned."""
    df, out = local_run
    pd.testing.assert_frame_equal(read_results(out), df, check_exact=True)


def test_summary(local_run):
    """The summary counts rows per method; milp has ratio 1 and no failure."""
    df, _ = local_run
    table = summarize(df)
    assert list(table.index) == ALL
    assert table.loc["milp", "instances"] == table.loc["milp", "optimal"] == df["path"].nunique()
    assert table.loc["milp", "mean_cost_ratio"] == pytest.approx(1.0)
    assert (table["failed"] == 0).all()
    assert (table["mean_cost_ratio"] >= 1 - 1e-12).all()
    assert (table["p95_solve_s"] >= table["median_solve_s"]).all()


def test_bad_files_are_failed_rows(failing_dir, tmp_path):
    """An unparsable and an invalid file give failed rows; the other instances finish."""
    out = tmp_path / "r.csv"
    assert (
        main(
            [
                "batch",
                str(failing_dir),
                "--methods",
                "milp,heuristic",
                "--out",
                str(out),
                "--workers",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    df = read_results(out)
    assert len(df) == 8
    bad = df[df["path"].str.endswith(("corrupt.json", "wrong.json"))]
    assert (bad["status"] == "error").all() and bad["error"].str.startswith("bad instance").all()
    assert "not valid JSON" in bad["error"].iloc[0]
    good = df.drop(bad.index)
    assert (good["error"] == "").all() and (good["plan"] != "").all()


def test_solver_stops_itself_at_the_time_limit(tmp_path, make_resnet110, make_resnet50):
    """A task longer than its limit ends by itself: status limit with its incumbent, no kill."""
    shutil.copy(EMBEDDED / SLOW_ENUMERATE, tmp_path / "slow.json")
    df = run_batch([tmp_path / "slow.json"], ["enumerate"], time_limit_s=1, workers=1, progress=False)
    row = df.iloc[0]
    # stopped by itself: a task past its budget is killed and its row says so in "error";
    # how close to the limit it stops is measured by benchmarks/time_limits.py, not here
    assert row["status"] == "limit" and row["error"] == "" and row["plan"] != "" and row["cost"] > 0


def test_task_that_does_not_return_is_killed(tmp_path, make_resnet110, make_resnet50, monkeypatch):
    """A task whose solver never returns is killed at --kill-after and its row says so;
    the other tasks complete."""
    _tiny(make_resnet110, make_resnet50, tmp_path)
    monkeypatch.setenv(HANG_ENV, "tiny-spot.json")
    df = run_batch([tmp_path], ["heuristic", "milp"], time_limit_s=1, kill_after_s=2, workers=2, progress=False)
    killed = df[df["error"] != ""]
    assert list(killed["method"]) == ["heuristic", "milp"] and (killed["instance"] == "tiny-spot").all()
    assert (
        killed["error"]
        .str.startswith(
            "timeout: task process killed after 2 s: the solver did not return within its time limit of 1 s"
        )
        .all()
    )
    assert (killed["status"] == "error").all() and killed["solve_seconds"].between(2, 6).all()
    assert (df.drop(killed.index)["plan"] != "").all() and len(df) == 4
    assert killed["cpu_seconds"].isna().all() and (df.drop(killed.index)["cpu_seconds"] >= 0).all()


def test_crashed_task_process(tmp_path, make_resnet110, make_resnet50, monkeypatch):
    """A task whose process dies is recorded as a crash; later tasks still run."""
    _tiny(make_resnet110, make_resnet50, tmp_path, "a")
    _tiny(make_resnet110, make_resnet50, tmp_path, "b")
    monkeypatch.setenv(CRASH_ENV, "a-spot")
    df = run_batch([tmp_path], ["milp", "heuristic"], time_limit_s=30, workers=1, progress=False)
    crashed = df[df["instance"] == "a-spot"]
    assert len(crashed) == 2 and (crashed["status"] == "error").all()
    assert crashed["error"].str.fullmatch(r"crash: task process died \(exit code 70\)").all()
    assert (df.drop(crashed.index)["plan"] != "").all() and len(df) == 8


def test_resume_runs_only_missing_rows(tmp_path, make_resnet110, make_resnet50):
    """--resume keeps the rows on disk (even edited ones) and solves only the rest."""
    folder = tmp_path / "in"
    _tiny(make_resnet110, make_resnet50, folder, "a")
    _tiny(make_resnet110, make_resnet50, folder, "b")
    out = tmp_path / "r.csv"
    full = run_batch([folder], ["milp", "heuristic"], out=out, workers=2, progress=False)
    assert full.attrs["ran"] == 8
    lines = out.read_text().splitlines()
    kept = pd.read_csv(out, dtype=str, keep_default_na=False).head(3)
    kept["message"] = "kept from the first run"
    kept.to_csv(out, index=False)  # as if the first run had stopped after three rows

    assert (
        main(
            [
                "batch",
                str(folder),
                "--methods",
                "milp,heuristic",
                "--out",
                str(out),
                "--resume",
                "--workers",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    again = read_results(out)
    assert len(again) == 8 and not again.duplicated(["path", "method"]).any()
    assert (again["message"] == "kept from the first run").sum() == 3
    pd.testing.assert_frame_equal(_drop_timing(again.assign(message="")), _drop_timing(full.assign(message="")))
    assert len(out.read_text().splitlines()) == len(lines)

    df = run_batch([folder], ["milp", "heuristic"], out=out, resume=True, progress=False)
    assert df.attrs["ran"] == 0 and df.attrs["kept"] == 8


def test_parquet_output(tmp_path, make_resnet110, make_resnet50):
    """A .parquet results file holds the same rows as the returned DataFrame."""
    pytest.importorskip("pyarrow")
    folder = tmp_path / "in"
    _tiny(make_resnet110, make_resnet50, folder)
    df = run_batch([folder], ["milp", "heuristic"], out=tmp_path / "r.parquet", workers=2, progress=False)
    pd.testing.assert_frame_equal(read_results(tmp_path / "r.parquet"), df)
    resumed = run_batch(
        [folder], ["milp", "heuristic", "enumerate"], out=tmp_path / "r.parquet", resume=True, workers=2, progress=False
    )
    assert resumed.attrs["ran"] == 2 and len(resumed) == 6


def test_jsonl_instances(tmp_path, make_resnet110, make_resnet50, monkeypatch):
    """A .jsonl file gives one instance per entry, FILE#N; a bad entry fails the rest."""
    try:
        from dnnprov.benchsets.generate import read_instance_lines
    except ImportError:  # written by another part of issue 4; the same contract in a few lines

        def read_instance_lines(path):
            for line in Path(path).read_text().splitlines():
                if line.strip():
                    yield dnnprov.problem_from_dict(json.loads(line))

        monkeypatch.setitem(
            sys.modules, "dnnprov.benchsets.generate", types.SimpleNamespace(read_instance_lines=read_instance_lines)
        )
    problems = [dnnprov.read_instance(p) for p in _tiny(make_resnet110, make_resnet50, tmp_path / "src")]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in problems) + '{"format": "dnnprov/spot"}\n')
    df = run_batch([trace], ["milp"], workers=1, progress=False)
    assert list(df["path"]) == [f"{trace.as_posix()}#{i}" for i in (1, 2, 3)]
    assert list(df["instance"]) == ["tiny-spot", "tiny-serverless", "trace"]
    assert list(df["status"]) == ["optimal", "optimal", "error"]
    assert df["error"].iloc[2].startswith("bad instance")
    assert load_instance(df["path"].iloc[1]).name == "tiny-serverless"


# ------------------------------------------------------------------ Dask
def test_dask_run_equals_local_run(local_run, instance_dir, dask_address, tmp_path):
    """The same batch on a Dask cluster gives the same rows apart from the times."""
    df, _ = local_run
    on_dask = run_batch(
        [instance_dir], ALL, time_limit_s=30, out=tmp_path / "dask.csv", dask=dask_address, progress=False
    )
    pd.testing.assert_frame_equal(_drop_timing(on_dask), _drop_timing(df), check_exact=True)


def test_dask_records_failures_like_local(failing_dir, dask_address, monkeypatch):
    """Bad files and a crashed task process give the same rows on Dask as locally."""
    monkeypatch.setenv(CRASH_ENV, "tiny-serverless")
    local = run_batch([failing_dir], ["milp", "heuristic"], workers=2, progress=False)
    on_dask = run_batch([failing_dir], ["milp", "heuristic"], dask=dask_address, progress=False)
    assert (local["status"] == "error").sum() == 6
    pd.testing.assert_frame_equal(_drop_timing(on_dask), _drop_timing(local), check_exact=True)


def test_cli_dask_local(tmp_path, make_resnet110, make_resnet50):
    """`--dask local` starts its own 2-worker cluster and writes the results."""
    pytest.importorskip("distributed")
    _tiny(make_resnet110, make_resnet50, tmp_path / "in")
    out = tmp_path / "r.csv"
    assert (
        main(
            ["batch", str(tmp_path / "in"), "--methods", "milp", "--dask", "local", "--out", str(out), "--no-progress"]
        )
        == 0
    )
    assert list(read_results(out)["status"]) == ["optimal", "optimal"]


# ------------------------------------------------------------------ report and CLI
def test_report_writes_figures_and_page(local_run, tmp_path, capsys):
    """`dnnprov report` writes the summary, PNG and SVG figures and an index.html."""
    pytest.importorskip("matplotlib")
    _, out = local_run
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    printed = capsys.readouterr().out
    assert "mean_cost_ratio" in printed and "milp" in printed
    for name in ("slo", "performance-profile", "cost-ratio"):
        assert (tmp_path / "rep" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (tmp_path / "rep" / f"{name}.svg").read_text()[:2000]
    page = (tmp_path / "rep" / "index.html").read_text()
    assert 'src="slo.svg"' in page and "mean_cost_ratio" in page
    long = pd.read_csv(tmp_path / "rep" / "summary.csv")
    assert long.set_index(["level", "method"]).loc[("method", "milp"), "solved"] > 0
    assert "sgm time (s, shift 1 s)" in (tmp_path / "rep" / "summary.md").read_text()


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("cost", "-1", "must be >= 0"),
        ("cost", "notanumber", "not a number"),
        ("time_s", "nan", "must be finite"),
        ("bound", "inf", "must be finite"),
        ("status", "weird", "must be one of"),
        ("workers", "2.5", "whole number"),
    ],
)
def test_report_refuses_a_row_no_batch_writes(local_run, tmp_path, capsys, column, value, problem):
    """A results row edited by hand (a cost of -1 was the cheapest, a status no solver gives was
    counted as solved): one error naming the row and column, exit 2, no report."""
    _, out = local_run
    edited = pd.read_csv(out, dtype=str, keep_default_na=False)
    edited.loc[1, column] = value
    bad = tmp_path / "results.csv"
    edited.to_csv(bad, index=False)
    assert main(["report", str(bad), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert f"row 3, column {column}" in err and problem in err and "Traceback" not in err
    assert not (tmp_path / "rep").exists()


def test_report_of_a_folder_says_it_is_a_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "is a folder: give the results file" in capsys.readouterr().err


def test_resume_runs_a_garbled_row_again(tmp_path, make_resnet110, make_resnet50, capsys):
    """A row cut short by a kill (or garbled by hand) is dropped with a warning line on --resume,
    and its task runs again: it is neither kept nor an error that stops the resumed batch."""
    folder = tmp_path / "in"
    _tiny(make_resnet110, make_resnet50, folder, "a")
    out = tmp_path / "r.csv"
    run_batch([folder], ["heuristic"], out=out, workers=1, progress=False)
    lines = out.read_text().splitlines()
    assert len(lines) == 3  # the header and two rows
    out.write_text("\n".join([lines[0], lines[1], lines[2][: lines[2].index(",heuristic,") + 14]]) + "\n")
    resumed = run_batch([folder], ["heuristic"], out=out, resume=True, workers=1, progress=False)
    assert "row 3, column status" in capsys.readouterr().err
    assert resumed.attrs["ran"] == 1 and len(resumed) == 2
    assert set(read_results(out)["status"]) <= {"optimal", "feasible", "limit"}


def test_report_reads_slo_from_instance_files(local_run, instance_dir, tmp_path, monkeypatch):
    """Relative row paths are found below a given root; SLOs come from the files."""
    from dnnprov.batch.reports.report import instance_info

    df, _ = local_run
    relative = df["path"].map(lambda p: Path(p).relative_to(instance_dir).as_posix())
    monkeypatch.chdir(tmp_path)
    assert instance_info(relative).slo_s.isna().all()
    info = instance_info(relative, bases=(tmp_path, instance_dir))
    assert info["slo_s"].notna().all()
    assert info.loc["spot/paper-table1.json", "slo_s"] == 2600.0
    assert info.loc["spot/paper-table1.json", "workload"] == "resnet110"


@pytest.mark.parametrize(
    "argv",
    [
        ["batch", "no/such/folder"],
        ["batch", "{data}", "--methods", "milp,simplex"],
        ["batch", "{data}", "--resume"],
        ["batch", "{data}", "--out", "results.txt"],
        ["batch", "{data}", "--time-limit", "0"],
        ["batch", "{empty}"],
        ["report", "no/such/results.csv"],
    ],
)
def test_cli_bad_arguments_exit_2(argv, tmp_path, capsys):
    """Bad options, paths and files end with exit code 2 and run nothing."""
    (tmp_path / "empty").mkdir()
    argv = [a.format(data=EMBEDDED / "serverless", empty=tmp_path / "empty") for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses
        code = exc.code
    assert code == 2
    assert "error" in capsys.readouterr().err


# ------------------------------------------------------------------ files, lock, resume (issue 14)
def _batch_cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """The real `dnnprov batch` in its own process."""
    return subprocess.Popen(
        [sys.executable, "-m", "dnnprov", "batch", *args, "--no-progress"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **(env or {})),
    )


def _data_rows(path: Path) -> int:
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def test_two_batches_on_one_output_one_is_refused(tmp_path, make_resnet110, make_resnet50):
    """Two real batches started together on the same --out: one runs, the other is refused
    at once with one line naming the holder; the file holds every row exactly once."""
    folder = tmp_path / "in"
    for prefix in "abcd":
        _tiny(make_resnet110, make_resnet50, folder, prefix)
    out = tmp_path / "r.csv"
    # a-spot's tasks hang until killed after 2 s, so the first batch surely holds the lock
    # while the second starts.
    args = (
        str(folder),
        "--methods",
        "milp,heuristic",
        "--workers",
        "2",
        "--out",
        str(out),
        "--time-limit",
        "1",
        "--kill-after",
        "2",
    )
    procs = [_batch_cli(*args, cwd=tmp_path, env={HANG_ENV: "a-spot"}) for _ in range(2)]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 2], results
    _, _, err = next(r for r in results if r[0] == 2)
    assert err.count("\n") == 1 and "another dnnprov batch (pid " in err and str(out) in err
    df = read_results(out)
    assert len(df) == 4 * 2 * 2 and not df.duplicated(["path", "method"]).any()
    assert (df["error"].str.startswith("timeout: ") == (df["instance"] == "a-spot")).all()
    assert not (tmp_path / ".r.csv.lock").exists()


def test_killed_batch_resumes_from_an_absolute_path(tmp_path, make_resnet110, make_resnet50):
    """A batch killed by SIGKILL keeps its finished rows and its lock dies with it;
    --resume given the folder as an absolute path runs only the missing tasks."""
    folder = tmp_path / "in"
    for prefix in "abcz":
        _tiny(make_resnet110, make_resnet50, folder, prefix)
    out = tmp_path / "r.csv"
    # z's tasks (last in order) never return, so the batch is surely running when killed.
    proc = _batch_cli(
        "in", "--methods", "milp,heuristic", "--workers", "1", "--out", "r.csv", cwd=tmp_path, env={HANG_ENV: "z-spot"}
    )
    deadline = time.monotonic() + 60
    while _data_rows(out) < 14 and time.monotonic() < deadline:  # all 16 tasks but z-spot's two
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    before = read_results(out)
    assert len(before) == 14 and set(before["path"].map(lambda p: Path(p).parts[0])) == {"in"}
    resumed = _batch_cli(
        str(folder.resolve()),
        "--methods",
        "milp,heuristic",
        "--workers",
        "1",
        "--out",
        str(out),
        "--resume",
        cwd=tmp_path,
    )
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert "16 rows (2 run now, 14 kept), 0 failed" in stdout
    after = read_results(out)
    identity = after["path"].map(lambda p: (tmp_path / p).resolve().as_posix() if not Path(p).is_absolute() else p)
    assert len(after) == 16 and not pd.concat([identity, after["method"]], axis=1).duplicated().any()
    new = after[after["path"].map(Path).map(Path.is_absolute)]
    assert list(zip(new["path"].map(lambda p: Path(p).name), new["method"])) == [
        ("z-spot.json", "milp"),
        ("z-spot.json", "heuristic"),
    ]
    assert (new["plan"] != "").all()


def test_every_named_file_gets_a_row(tmp_path, make_resnet110):
    """A file named on the command line always gets rows, even without `format`; in a
    folder, an index-like file is skipped but a broken instance without `format` is not."""
    folder = tmp_path / "in"
    dnnprov.write_instance(make_resnet110(time_s=3000.0), folder / "good.json")
    (folder / "index.json").write_text(json.dumps({"set": "x", "count": 1}))
    broken = json.loads((folder / "good.json").read_text())
    del broken["format"]
    (folder / "no-format.json").write_text(json.dumps(broken))
    df = run_batch([folder], ["heuristic"], workers=1, progress=False)
    assert sorted(Path(p).name for p in df["path"]) == ["good.json", "no-format.json"]
    assert df.attrs["skipped_files"] == [(folder / "index.json").as_posix()]
    named = run_batch([folder / "index.json", folder / "good.json"], ["heuristic"], workers=1, progress=False)
    row = named[named["path"].str.endswith("index.json")].iloc[0]
    assert row["status"] == "error" and row["error"].startswith("bad instance: format: ")
    assert named.attrs["skipped_files"] == []
    (folder / "empty.jsonl").write_text("\n")
    empty = run_batch([folder / "empty.jsonl"], ["heuristic"], workers=1, progress=False)
    assert list(empty["error"]) == ["bad instance: the file holds no instance (no non-blank line)"]


def test_plan_columns_can_be_filtered(local_run):
    """workers, gpus, ps and memory_mb repeat the plan as numbers; plan_counts expands it."""
    df, _ = local_run
    solved = df[df["plan"] != ""]
    plans = solved["plan"].map(json.loads)
    spot = solved["kind"] == "spot"
    assert (solved.loc[spot, "workers"] == plans[spot].map(lambda p: sum(p["counts"].values()))).all()
    assert (solved["ps"] == plans.map(lambda p: p["ps"])).all()
    assert (solved.loc[~spot, "memory_mb"] == plans[~spot].map(lambda p: p["memory_mb"])).all()
    assert solved.loc[~spot, "gpus"].isna().all() and (solved.loc[spot, "gpus"] >= solved.loc[spot, "workers"]).all()
    counts = plan_counts(df)
    assert set(counts.index) == set(solved.index[spot])
    assert (counts.sum(axis=1) == solved.loc[spot, "workers"].reindex(counts.index)).all()
    table1 = df[df["path"].str.endswith("paper-table1.json") & (df["method"] == "milp")].index[0]
    assert counts.loc[table1].to_dict() == {
        label: {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}.get(label, 0) for label in counts.columns
    }


def test_kill_is_a_last_resort():
    """Without --kill-after the task's process gets the time limit plus a generous grace."""
    from dnnprov.batch.runner import default_kill_after

    assert default_kill_after(60) == pytest.approx(96.0)
    assert default_kill_after(2) == pytest.approx(32.2)
