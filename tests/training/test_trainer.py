"""The reference trainer (dnnprov.training): real ASP training on local processes, its logs
read by the profiler, and the local cloud under the control loop through a revocation."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="the reference trainer needs torch: pip install 'dnnprov[train]'")

from dnnprov.control.cloud import LaunchRequest
from dnnprov.control.clouds.capacity import CapacityBook, PoolSpec
from dnnprov.control.loop import RunSettings
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import problem_from_dict
from dnnprov.models.predict import predict
from dnnprov.problems.interruption import Trace
from dnnprov.profiling.profiler import read_loss_logs
from dnnprov.result import SpotPlan
from dnnprov.revocation.availability import fit_availability
from dnnprov.revocation.policies import make_policy
from dnnprov.training import reference as ref
from dnnprov.training.cluster import Launcher, run_cluster
from dnnprov.training.job import Job, WorkerType, dataset
from dnnprov.training.local_cloud import LocalCloud, LocalConfig, run_local

#: A short job: faster emulated GPUs (so runs take a few wall seconds) and a near target.
JOB = Job(speed=100.0)
FAST, SLOW = WorkerType("p3.2xlarge", 32, 3.0), WorkerType("p2.xlarge", 16, 5.0)
#: eq. (3) coefficients of the order the profiled reference job gives (the loop needs a model
#: for its give-up rule and policies; the run itself is real training)
COEFFS = {"gamma_1": 60.0, "gamma_2": -0.5, "gamma_3": 60.0, "gamma_4": 1.0, "gamma_5": 0.3}


@pytest.fixture(scope="module")
def launcher() -> Launcher:
    return Launcher()


def instance(target: float = 0.5, deadline: float = 6000.0) -> dict:
    prof = ref.Profile(
        loss_fit={
            "coefficients": {k: {"value": v} for k, v in COEFFS.items()},
            "variant": "cc",
            "domain": {"batch_wa": [16.0, 32.0], "workers": [1, 7]},
        },
        compute_s={"p3.2xlarge": 3.5, "p2.xlarge": 5.5},
        comm_s=0.5,
        runs=(),
    )
    return ref.instance_dict(prof, JOB, target_loss=target, deadline_s=deadline, quota=4)


def test_the_dataset_is_seeded():
    x1, y1 = dataset(JOB)
    x2, y2 = dataset(JOB)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert not np.array_equal(dataset(Job(seed=1))[1], y1)
    assert set(np.unique(y1)) == set(range(JOB.classes))


def test_a_static_cluster_trains_and_the_profiler_reads_its_logs(tmp_path, launcher):
    run = run_cluster([FAST, SLOW], JOB, tmp_path / "run", target_loss=0.6, max_steps=400, launcher=launcher)
    assert run.finished_s is not None and run.time_to_target_s is not None and run.time_to_target_s > 0
    assert run.loss <= 0.6 and run.steps > 0
    assert run.images > run.steps * 16 - 1  # every update carried a batch of 16 or 32
    logs = sorted(p.name for p in (tmp_path / "run").glob("worker*"))
    assert logs == ["worker0_b32_p3.2xlarge.log", "worker1_b16_p2.xlarge.log"]
    log = read_loss_logs([tmp_path / "run"])
    assert set(log.workers) == {2}
    b_w, cc = float(log.batch_wa[0]), float(log.cc[0])
    assert 16 < b_w < 32 and 0 < cc < 1  # eq. (4) between the batches, eq. (5)
    assert log.loss[np.argmax(log.step)] < log.loss[np.argmin(log.step)]  # real training: the loss fell
    by_type = {t["type"]: t for t in run.timings}
    assert by_type["p3.2xlarge"]["iteration_s"] >= 3.0 and by_type["p2.xlarge"]["iteration_s"] >= 5.0
    assert by_type["p3.2xlarge"]["iteration_s"] < by_type["p2.xlarge"]["iteration_s"]


def test_a_run_rejects_a_folder_with_logs(tmp_path, launcher):
    (tmp_path / "worker0_b32_x.log").write_text("")
    with pytest.raises(InvalidInputError, match="already holds worker logs"):
        run_cluster([FAST], JOB, tmp_path, target_loss=0.6, launcher=launcher)


def test_the_local_cloud_revokes_by_killing_the_process(tmp_path, launcher):
    """Capacity 2, then 1 from 1,200 s: the newest worker gets the notice at 1,200 s and its
    process is killed at 1,320 s, while the other keeps training with the PS."""
    trace = Trace("us-west-2a_test_1.json", 300.0, np.array([2] * 4 + [1] * 200))
    book = CapacityBook([PoolSpec("p3.2xlarge", "us-west-2a", trace, 0, 0.9)])
    with LocalCloud(
        book, JOB, {"p3.2xlarge": FAST}, tmp_path, run_id="t", join_s=0.0, target_loss=None, launcher=launcher
    ) as cloud:
        ps = cloud.launch(LaunchRequest("t", 0, "ps", "m5.xlarge", None, "on-demand", 1, "t-0")).instances[0]
        got = cloud.launch(LaunchRequest("t", 1, "worker", "p3.2xlarge", "us-west-2a", "spot", 3, "t-1", ps.ps_address))
        if cloud.now() >= 1200.0:
            pytest.skip(
                f"the machine took {cloud.now() / JOB.speed:.0f} wall s to start 3 processes: the capacity "
                "drop came before the launches"
            )
        assert len(got.instances) == 2  # min(asked, free)
        refused = cloud.launch(
            LaunchRequest("t", 2, "worker", "p3.2xlarge", "us-west-2a", "spot", 1, "t-2", ps.ps_address)
        )
        assert refused.error_code == "InsufficientInstanceCapacity"
        cloud.sleep(1400.0 - cloud.now())
        workers = {i.instance_id: i for i in cloud.instances("t") if i.role == "worker"}
        old, newest = got.instances[0].instance_id, got.instances[1].instance_id
        assert workers[newest].notice_s == pytest.approx(1200.0) and workers[newest].ended_s == pytest.approx(1320.0)
        assert not cloud._processes[newest].is_alive()
        assert cloud._processes[old].is_alive() and workers[old].ended_s is None and workers[old].notice_s is None
        report = json.loads((tmp_path / "progress.json").read_text())
        assert report["step"] > 0 and report["time_s"] > 1300.0


def test_the_loop_trains_the_reference_job_through_a_revocation(tmp_path, launcher):
    """`dnnprov run`'s loop on the local cloud: a plan of 2 p3.2xlarge in a pool that loses one
    instance at 100 s (well before the ~300 s this training takes, even on a fast machine); under failover the loop replaces it from the second pool and the real
    training reaches the target loss."""
    problem = problem_from_dict(instance(deadline=3000.0))
    traces = {
        "p3.2xlarge": [
            Trace("us-west-2a_t_1.json", 100.0, np.array([2] + [1] * 60)),
            Trace("us-west-2c_t_1.json", 100.0, np.array([2] * 61)),
        ]
    }
    config = LocalConfig(
        job=JOB, types={"p3.2xlarge": FAST, "p2.xlarge": SLOW}, traces=traces, workdir=str(tmp_path / "work")
    )
    _, outcome, details = run_local(
        problem,
        SpotPlan(counts={"p3.2xlarge": 2}, ps=1),
        make_policy("failover"),
        RunSettings(poll_s=15.0, join_s=30.0, horizon=1.0),
        config,
        launcher=launcher,
    )
    assert outcome.state == "met", outcome
    assert outcome.revocations >= 1 and outcome.finish_s is not None
    kinds = [e["kind"] for e in details["events"]]
    # the noticed instance ends at its reclaim, or earlier when the loop stops it once its
    # replacement has joined (it no longer adds anything the plan needs)
    assert "notice" in kinds and ("reclaim" in kinds or "terminate" in kinds)
    pools = {e.get("pool") for e in details["events"] if e["kind"] == "launch"}
    notice_s = min(e["time_s"] for e in details["events"] if e["kind"] == "notice")
    assert notice_s == pytest.approx(100.0, abs=1.0) and outcome.finish_s > notice_s  # revoked mid-training
    # real training on a loaded machine may reach the target before a replacement is due
    # (the reclaim, 120 s after the notice); one still training then must have replaced it
    if outcome.finish_s > notice_s + 120.0 + 2 * 15.0:
        assert "p3.2xlarge@us-west-2c" in pools, details["events"]  # the replacement came from the other zone
    assert all(i["ended_s"] is not None for i in details["instances"])  # everything torn down
    assert outcome.cost > 0


def test_dnnprov_run_cloud_local(tmp_path):
    """The command: `dnnprov run INSTANCE --plan PLAN --policy none --cloud local:CONFIG --json`."""
    (tmp_path / "instance.json").write_text(json.dumps(instance()))
    (tmp_path / "plan.json").write_text(
        json.dumps(
            {"status": "feasible", "kind": "spot", "plan": {"counts": {"p3.2xlarge": 1, "p2.xlarge": 1}, "ps": 1}}
        )
    )
    (tmp_path / "local.json").write_text(
        json.dumps(
            {
                "speed": 100,
                "workdir": str(tmp_path / "work"),
                "types": {"p3.2xlarge": {"batch": 32, "compute_s": 3.0}, "p2.xlarge": {"batch": 16, "compute_s": 5.0}},
            }
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dnnprov",
            "run",
            str(tmp_path / "instance.json"),
            "--plan",
            str(tmp_path / "plan.json"),
            "--policy",
            "none",
            "--cloud",
            f"local:{tmp_path / 'local.json'}",
            "--json",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["state"] == "met" and out["finish_s"] > 0 and out["launches"] == 3
    assert sorted(p.name for p in (tmp_path / "work").glob("worker*")) == [
        "worker1_b32_p3.2xlarge.log",
        "worker2_b16_p2.xlarge.log",
    ]


@pytest.mark.parametrize(
    "value,message", [("nowhere", "ec2, local or local:CONFIG.json"), ("local:{dir}/bad.json", "unknown field")]
)
def test_a_bad_cloud_option_is_one_error(tmp_path, value, message):
    (tmp_path / "instance.json").write_text(json.dumps(instance()))
    (tmp_path / "plan.json").write_text(
        json.dumps({"status": "feasible", "kind": "spot", "plan": {"counts": {"p3.2xlarge": 1}, "ps": 1}})
    )
    (tmp_path / "bad.json").write_text(json.dumps({"speedd": 3}))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dnnprov",
            "run",
            str(tmp_path / "instance.json"),
            "--plan",
            str(tmp_path / "plan.json"),
            "--cloud",
            value.format(dir=tmp_path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_the_profiled_instance_predicts_the_reference_clusters():
    """instance_dict makes a valid spot instance of the reference types: the model's time of a
    cluster is eq. (3)'s iterations over its rate, with the profiled T_comp + communication."""
    problem = problem_from_dict(instance())
    fast = ref.predicted_time_s(problem, {"p3.2xlarge": 2})
    mixed = ref.predicted_time_s(problem, {"p3.2xlarge": 2, "p2.xlarge": 2})
    assert 0 < mixed < fast < float("inf")  # more workers, faster
    types = {t.name: t for t in problem.instance_types}
    assert types["p3.2xlarge"].compute_time_s == 3.5 and types["p2.xlarge"].batch_per_gpu == 16


def test_a_config_reads_traces_beside_it_and_a_short_trace_is_refused(tmp_path):
    (tmp_path / "us-west-2a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": [2, 2, 1]}))
    (tmp_path / "local.json").write_text(
        json.dumps({"speed": 50, "offset": 1, "traces": {"p3.2xlarge": ["us-west-2a_v100_1.json"]}})
    )
    config = LocalConfig.read(str(tmp_path / "local.json"))
    assert config.job.speed == 50 and config.traces["p3.2xlarge"][0].zone == "us-west-2a"
    problem = problem_from_dict(instance(deadline=3000.0))
    with pytest.raises(InvalidInputError, match="end before the run's horizon"):
        run_local(problem, SpotPlan(counts={"p3.2xlarge": 1}, ps=1), make_policy("none"), RunSettings(), config)


def test_an_emulated_ps_link_is_shared(tmp_path, launcher):
    """With S_parm 10 MB and a 20 MB/s PS link, each push and pull holds the link 1 s: two
    workers' communication takes at least that, and they queue for it."""
    job = Job(speed=100.0, param_size_mb=10.0, ps_bandwidth_mb_s=20.0)
    run = run_cluster([FAST, FAST], job, tmp_path / "run", target_loss=0.0, max_steps=40, launcher=launcher)
    assert run.steps >= 40 and run.finished_s is None  # stopped by the step budget, target not reached
    comm = [t["comm_s"] for t in run.timings]
    assert len(comm) == 2 and min(comm) >= 1.0
    for t in run.timings:  # the emulated time: the PS's link time (queue + hold) inside the measured one
        assert 1.0 <= t["emulated_comm_s"] <= t["comm_s"]
        assert t["emulated_iteration_s"] == pytest.approx(FAST.compute_s + t["emulated_comm_s"])


def test_the_contention_of_eq_9_is_fitted_from_profiling_runs(tmp_path, launcher):
    """A lone worker and clusters of 2, 3 and 4 on a PS link held 2 s per answer: profile
    fit-timing's B_req, alpha_1 > 0 (the more workers, the more they queue) and beta_1 go into
    the instance with the job's PS bandwidth, and the model's iteration time grows with |N|."""
    job = Job(speed=100.0, **ref.LINKED)
    runs = [
        run_cluster([FAST] * n, job, tmp_path / f"n{n}", target_loss=0.0, max_steps=12 * n, launcher=launcher)
        for n in (1, 2, 3, 4)
    ]
    fit = ref.fit_timing(runs, job, tmp_path / "timing.csv")
    assert (tmp_path / "timing.csv").read_text().startswith("run,type,gpus,workers")
    assert 0 < fit["bandwidth_req_mb_s"]["value"] <= job.ps_bandwidth_mb_s and fit["alpha_1"]["value"] > 0
    prof = ref.Profile(
        loss_fit={
            "coefficients": {k: {"value": v} for k, v in COEFFS.items()},
            "variant": "cc",
            "domain": {"batch_wa": [16.0, 32.0], "workers": [1, 7]},
        },
        compute_s={},
        comm_s=0.0,
        runs=(),
        timing=fit,
    )
    problem = problem_from_dict(ref.instance_dict(prof, job, target_loss=0.5, deadline_s=6000.0, quota=4))
    assert problem.platform.ps_bandwidth_mb_s == job.ps_bandwidth_mb_s
    assert problem.workload.alpha_1 == fit["alpha_1"]["value"]
    one, four = (predict(problem, counts={"p3.2xlarge": n})["iteration_time_s"]["p3.2xlarge"] for n in (1, 4))
    assert four > one > FAST.compute_s


def test_dnnprov_run_cloud_local_mpc_takes_the_model(tmp_path):
    """`run --cloud local --policy mpc --model M` plans mpc's table on M and trains to the
    target (it used to refuse: the local path dropped --model); a model that does not cover
    the plan is refused in one line, as on EC2."""
    (tmp_path / "instance.json").write_text(json.dumps(instance()))
    plan = {"status": "feasible", "kind": "spot", "plan": {"counts": {"p3.2xlarge": 1}, "ps": 1}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "local.json").write_text(json.dumps({"speed": 100, "workdir": str(tmp_path / "work")}))
    always = Trace("t/us-east-1a_v100_1.json", 600.0, np.array([1] * 40, dtype=np.int64))
    (tmp_path / "model.json").write_text(json.dumps(fit_availability([always], cap=1).to_dict()))
    argv = [sys.executable, "-m", "dnnprov", "run", str(tmp_path / "instance.json"), "--plan"]
    argv += [str(tmp_path / "plan.json"), "--policy", "mpc", "--cloud", f"local:{tmp_path / 'local.json'}"]
    done = subprocess.run(
        [*argv, "--model", str(tmp_path / "model.json"), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["state"] == "met" and out["launches"] >= 2
    missing = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "--model" in missing.stderr and "Traceback" not in missing.stderr
