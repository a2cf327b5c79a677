"""Admission under load (issue 20): ``dnnprov serve --max-pending 32`` against 50 concurrent clients.

Starts the real server (``dnnprov serve --quiet`` on a free 127.0.0.1 port, a fresh job
database), then sends ``--requests`` POST /v1/solve of ``data/benchmarks/large/large-001.json``
(the instance object in the body) with ``--concurrency`` in flight, while a prober reads
``/healthz`` every 20 ms (its latency, and ``queue_depth``: the tasks admitted). The contract:

- never more than ``--max-pending`` admitted (the server's own high-water mark,
  ``peak_admitted`` of ``/healthz``, and every ``queue_depth`` probed are at most the limit);
- every refusal is a 429 with a ``Retry-After`` of at least 1 s (no other error);
- ``/healthz`` p99 under 100 ms throughout.

Prints the figures (also as one JSON line) and exits 1 when the contract is missed. A
refused client waits its ``Retry-After`` (at most ``--max-retry-wait``) and sends again,
so the run ends with every request answered 200. CPU seconds are measured with
``time.process_time`` for this process and from ``/proc`` for the server and every process below it.

    .venv/bin/python benchmarks/service_admission.py          # 200 requests, 50 concurrent, 2 workers

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from service_load import start_server  # the same start: a free loopback port, ready with its workers warm

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = ROOT / "data" / "benchmarks" / "large" / "large-001.json"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children that have been waited for (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> float:
    """CPU seconds of the server and every live process below it (workers and their children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile: its parent counts it once waited for
        todo.extend(children.get(current, []))
    return total


async def load(
    url: str, body: dict, requests: int, concurrency: int, max_seconds: float, max_retry_wait: float
) -> dict:
    """Send the requests (retrying refusals after Retry-After); probe /healthz meanwhile."""
    solve_latency: list[float] = []
    health_latency: list[float] = []
    depth_seen: list[int] = []
    refusals: list[tuple[int, str | None]] = []
    codes: dict[int, int] = {}
    remaining = iter(range(requests))
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with (
        httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client,
        httpx.AsyncClient(base_url=url, timeout=30) as prober_client,
    ):

        async def user() -> None:
            for _ in remaining:
                while True:
                    started = time.perf_counter()
                    answer = await client.post("/v1/solve", json=body)
                    codes[answer.status_code] = codes.get(answer.status_code, 0) + 1
                    if answer.status_code != 429:
                        solve_latency.append(time.perf_counter() - started)
                        break
                    retry = answer.headers.get("retry-after")
                    refusals.append((answer.status_code, retry))
                    await asyncio.sleep(min(max_retry_wait, float(retry) if retry and retry.isdigit() else 1.0))

        async def probe() -> None:
            while not done.is_set():
                started = time.perf_counter()
                health = (await prober_client.get("/healthz")).json()
                health_latency.append(time.perf_counter() - started)
                depth_seen.append(health["queue_depth"])
                await asyncio.sleep(0.02)

        prober = asyncio.create_task(probe())
        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(user() for _ in range(concurrency))), max_seconds)
            stopped_early = False
        except TimeoutError:
            stopped_early = True
        wall = time.perf_counter() - started
        done.set()
        await prober
    peak = (await asyncio.to_thread(httpx.get, f"{url}/healthz", timeout=30)).json()["peak_admitted"]
    return {
        "peak": peak,
        "solve": solve_latency,
        "health": health_latency,
        "depth": depth_seen,
        "refusals": refusals,
        "codes": codes,
        "wall_s": wall,
        "stopped_early": stopped_early,
    }


def percentiles(values: list[float]) -> list[float]:
    """p50, p90, p99 and max in milliseconds."""
    return [round(float(v), 1) for v in np.percentile(np.array(values) * 1000, [50, 90, 99, 100])] if values else []


def main() -> int:
    """Run the benchmark, print the figures, return 1 when the contract is missed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-pending", type=int, default=32)
    parser.add_argument("--max-seconds", type=float, default=1200.0, help="stop sending after this long")
    parser.add_argument("--max-retry-wait", type=float, default=2.0, help="longest wait after a 429 (s)")
    args = parser.parse_args()
    body = {"instance": json.loads(INSTANCE.read_text()), "method": "milp", "time_limit_s": 10}
    cpu_before = time.process_time()
    with tempfile.TemporaryDirectory(prefix="dnnprov-admission-") as tmp:
        proc, url = start_server(Path(tmp), args.workers, args.max_pending)
        server_cpu_before = server_cpu(proc.pid)
        try:
            out = asyncio.run(load(url, body, args.requests, args.concurrency, args.max_seconds, args.max_retry_wait))
            server_cpu_used = server_cpu(proc.pid) - server_cpu_before
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    health = percentiles(out["health"])
    bad_refusals = [r for r in out["refusals"] if not (r[1] and r[1].isdigit() and int(r[1]) >= 1)]
    other = {c: n for c, n in out["codes"].items() if c not in (200, 429)}
    checks = {
        "admitted_within_limit": max([out["peak"], *out["depth"]]) <= args.max_pending,
        "refusals_are_429_with_retry_after": not bad_refusals and not other,
        "healthz_p99_under_100_ms": bool(health) and health[2] < 100.0,
        "all_answered": len(out["solve"]) == args.requests and not out["stopped_early"],
    }
    figures = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "workers": args.workers,
        "max_pending": args.max_pending,
        "wall_s": round(out["wall_s"], 1),
        "codes": out["codes"],
        "refusals": len(out["refusals"]),
        "peak_admitted": out["peak"],
        "max_queue_depth_probed": max(out["depth"], default=0),
        "healthz_ms_p50_p90_p99_max": health,
        "healthz_probes": len(out["health"]),
        "solve_ms_p50_p90_p99_max": percentiles(out["solve"]),
        "cpu_s_client": round(time.process_time() - cpu_before, 1),
        "cpu_s_server": round(server_cpu_used, 1),
        "checks": checks,
    }
    print(
        f"dnnprov serve --workers {args.workers} --max-pending {args.max_pending}: {len(out['solve'])} of "
        f"{args.requests} POST /v1/solve (large-001, milp) answered at {args.concurrency} concurrent in "
        f"{out['wall_s']:.1f} s; {len(out['refusals'])} refusals (429) retried"
    )
    print(
        f"  most admitted at once: {out['peak']} (server high-water mark), {figures['max_queue_depth_probed']} "
        f"(largest queue_depth probed); limit {args.max_pending}"
    )
    print(f"  healthz latency ms p50 / p90 / p99 / max: {' / '.join(map(str, health))} ({len(out['health'])} probes)")
    print(
        f"  status codes: {dict(sorted(out['codes'].items()))}; CPU s: client {figures['cpu_s_client']}, "
        f"server and workers {figures['cpu_s_server']}"
    )
    print("  contract: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in checks.items()))
    print(json.dumps(figures))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
