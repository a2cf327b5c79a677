"""Replicas on PostgreSQL under kill -9 (issue 30): 0 jobs lost, 0 run twice, every answer the CLI's.

Starts a real PostgreSQL server (``initdb`` + ``postgres`` from the machine's binaries, on a
free 127.0.0.1 port: ``tests/service/pg_server.py``) and ``--replicas`` ``dnnprov serve
--db postgresql://...`` on one fresh database. ``--clients`` threads send ``--jobs`` mixed
jobs (``POST /v1/jobs``: ``dnnprov solve`` of the 19 embedded spot and serverless instances
with ``milp``, ``heuristic`` and ``enumerate``, and one in twenty a slow enumeration of
1-4 s), each to the next replica, each with its own ``Idempotency-Key``: a client whose
replica is down, full (429) or draining sends the same job to another (a replay, not a new
job). Meanwhile ``--kills`` times, at random moments, a random replica is killed with
SIGKILL (its worker processes die with it) and restarted on the same port.

When every job has ended, the contract:

- **0 lost**: every accepted job is ``done``;
- **0 run twice**: over all the replicas' logs (killed ones included) each job is recorded
  ended once (``job_finished``/``job_failed``), and no attempt number of a job was started
  twice; a job hit by a kill ran again only as its next attempt;
- **every answer equal to the CLI's**: each job's result, without ``solve_seconds``, equals
  what ``dnnprov solve INSTANCE --method M --json`` prints (computed once per distinct job).

Prints the figures (and one JSON line) and exits 1 when the contract is missed. CPU seconds:
this process and the replicas it reaped (``RUSAGE_CHILDREN``; the workers of killed
replicas are not reaped by anyone here and are not counted), and the PostgreSQL server's
processes (from ``/proc``, before it stops).

    nice -n 10 .venv/bin/python benchmarks/pg_replicas.py     # 1,000 jobs, 3 replicas, 10 kills

Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "service"))  # the PostgreSQL server of the tests

from pg_server import LocalPostgres, missing  # type: ignore[import-not-found]  # noqa: E402 - after sys.path
from service_helpers import free_port, slow_instance  # type: ignore[import-not-found]  # noqa: E402 - after sys.path

DNNPROV = str(Path(sys.executable).with_name("dnnprov"))
METHODS = ("milp", "heuristic", "enumerate")
#: Instances whose three methods end well within their time limit (so the answer is the CLI's, not a race).
SKIP = {("spot/paper-table3-overhead-7x10.json", "enumerate")}


def job_specs(workdir: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, CLI file, body) of each distinct job; the last is the slow enumeration."""
    specs: list[tuple[str, str, dict[str, Any]]] = []
    for folder in ("spot", "serverless"):
        for path in sorted((ROOT / "data" / "instances" / folder).glob("*.json")):
            for method in METHODS:
                if (f"{folder}/{path.name}", method) in SKIP:
                    continue
                specs.append(
                    (
                        f"{folder}/{path.stem}:{method}",
                        str(path),
                        {"instance": f"embedded:{folder}/{path.name}", "method": method},
                    )
                )
    slow = workdir / "slow.json"
    slow.write_text(json.dumps(slow_instance(6)))
    specs.append(
        (
            "slow-7x10-quota6:enumerate",
            str(slow),
            {"instance": slow_instance(6), "method": "enumerate", "max_plans": 100000000, "time_limit_s": 120},
        )
    )
    return specs


def cli_answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the CLI prints for the job, without its timing."""
    command = [DNNPROV, "solve", path, "--method", body["method"], "--json"]
    if "max_plans" in body:
        command += ["--max-plans", str(body["max_plans"]), "--time-limit", str(body["time_limit_s"])]
    out = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    out.pop("solve_seconds", None)
    return dict(out)


class Replica:
    """One `dnnprov serve` on a fixed port; each (re)start logs to a new file."""

    def __init__(self, index: int, db: str, workdir: Path, workers: int) -> None:
        self.index, self.db, self.workdir, self.workers = index, db, workdir, workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs: list[Path] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = self.workdir / f"replica{self.index}-{len(self.logs)}.log"
        self.logs.append(log)
        with open(log, "w") as err:
            self.process = subprocess.Popen(
                [
                    DNNPROV,
                    "serve",
                    "--port",
                    str(self.port),
                    "--db",
                    self.db,
                    "--workers",
                    str(self.workers),
                    "--max-pending",
                    "64",
                    "--max-time-limit",
                    "120",
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"replica {self.index} not ready: {self.logs[-1].read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def events(logs: list[Path], name: str) -> list[dict[str, Any]]:
    """The JSON events of one name over all logs."""
    found = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill -9
            if event.get("event") == name:
                found.append(event)
    return found


def proc_cpu_seconds(pids: list[int]) -> float:
    """utime + stime of live processes, from /proc."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


def postgres_pids(pg: LocalPostgres) -> list[int]:
    """The PostgreSQL server and its backends."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (
                    "dnnprov-pg-" in (entry / "cmdline").read_bytes().decode(errors="replace")
                    or int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pg.process.pid
                ):
                    pids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="dnnprov-pg-bench-"))
    specs = job_specs(workdir)
    fast, slow = specs[:-1], specs[-1]
    plan = [slow if rng.random() < 0.05 else rng.choice(fast) for _ in range(args.jobs)]
    pg = LocalPostgres()
    db = pg.new_database() + f"?lease_s={args.lease_s:g}"
    replicas = [Replica(i, db, workdir, args.workers) for i in range(args.replicas)]
    for replica in replicas:
        replica.wait_ready()
    started = time.monotonic()
    accepted: dict[int, str] = {}
    lock = threading.Lock()
    sending = threading.Event()
    sending.set()
    retries = Counter[str]()

    def client(k: int) -> None:
        http = httpx.Client(timeout=30)
        for n in range(k, args.jobs, args.clients):
            body = plan[n][2]
            turn = n
            while True:
                replica = replicas[turn % len(replicas)]
                turn += 1
                try:
                    answer = http.post(f"{replica.url}/v1/jobs", json=body, headers={"Idempotency-Key": f"job-{n}"})
                except httpx.TransportError:
                    retries["down"] += 1
                    time.sleep(0.2)
                    continue
                if answer.status_code == 202:
                    with lock:
                        accepted[n] = answer.json()["id"]
                    break
                retries[str(answer.status_code)] += 1
                time.sleep(0.5 if answer.status_code in (429, 503) else 0.1)
        http.close()

    clients = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    for thread in clients:
        thread.start()
    kills: list[dict[str, Any]] = []
    for _ in range(args.kills):
        time.sleep(rng.uniform(0.5, 2.0) * args.kill_every_s)
        victim = rng.choice(replicas)
        try:
            running = httpx.get(f"{victim.url}/healthz", timeout=5).json()["running"]
        except (httpx.TransportError, ValueError):
            running = None
        victim.kill()
        kills.append({"replica": victim.index, "at_s": round(time.monotonic() - started, 1), "running": running})
        victim.start()
        victim.wait_ready()
    for thread in clients:
        thread.join()
    final: dict[int, dict[str, Any]] = {}
    reader = httpx.Client(timeout=70)
    deadline = time.monotonic() + args.timeout_s
    for n, job_id in sorted(accepted.items()):
        while True:
            replica = replicas[n % len(replicas)]
            try:
                job = reader.get(f"{replica.url}/v1/jobs/{job_id}", params={"wait": 60}).json()
            except (httpx.TransportError, ValueError):
                time.sleep(1)
                continue
            if job["status"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
                final[n] = job
                break
    elapsed_s = time.monotonic() - started
    pg_cpu = proc_cpu_seconds(postgres_pids(pg))
    for replica in replicas:
        replica.stop()
    pg.stop()
    logs = [log for replica in replicas for log in replica.logs]
    ended = Counter(e["job_id"] for name in ("job_finished", "job_failed") for e in events(logs, name))
    attempts_started = Counter((e["job_id"], e["attempt"]) for e in events(logs, "job_started"))
    expected = {name: cli_answer(path, body) for name, path, body in {s[0]: s for s in plan}.values()}
    lost = [n for n in range(args.jobs) if n not in final or final[n]["status"] != "done"]
    twice = [n for n, job in final.items() if ended[job["id"]] != 1]
    attempt_twice = [key for key, count in attempts_started.items() if count > 1]
    wrong = [
        n
        for n, job in final.items()
        if job["status"] == "done"
        and {k: v for k, v in job["result"].items() if k != "solve_seconds"} != expected[plan[n][0]]
    ]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "jobs": args.jobs,
        "replicas": args.replicas,
        "workers_per_replica": args.workers,
        "clients": args.clients,
        "lease_s": args.lease_s,
        "distinct_jobs": len(expected),
        "slow_jobs": sum(spec is slow for spec in plan),
        "kills": len(kills),
        "kills_while_running": sum(1 for k in kills if k["running"]),
        "lost": len(lost),
        "ended_not_once": len(twice),
        "attempt_started_twice": len(attempt_twice),
        "answers_unequal_to_cli": len(wrong),
        "statuses": dict(Counter(job["status"] for job in final.values())),
        "attempts": dict(sorted(Counter(job["attempts"] for job in final.values()).items())),
        "adopted": dict(Counter(e["was"] for e in events(logs, "job_adopted"))),
        "lost_leases_stopped": len(events(logs, "job_lost")),
        "client_retries": dict(retries),
        "wall_s": round(elapsed_s, 1),
        "cpu_s_benchmark": round(own.ru_utime + own.ru_stime, 1),
        "cpu_s_replicas_reaped": round(usage.ru_utime + usage.ru_stime, 1),
        "cpu_s_postgres": round(pg_cpu, 1),
        "kill_log": kills,
        "examples": {"lost": lost[:5], "ended_not_once": twice[:5], "unequal": wrong[:5]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="worker processes per replica")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--kill-every-s", type=float, default=20.0, help="mean seconds between kills")
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="longest wait for the jobs to end")
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        print(f"pg_replicas: {reason}", file=sys.stderr)
        return 2
    figures = run(args)
    ok = (
        figures["lost"] == 0
        and figures["ended_not_once"] == 0
        and figures["attempt_started_twice"] == 0
        and figures["answers_unequal_to_cli"] == 0
        and figures["kills"] == args.kills
    )
    for key, value in figures.items():
        print(f"{key:>26}: {value}")
    print(json.dumps(figures))
    print("contract: " + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
