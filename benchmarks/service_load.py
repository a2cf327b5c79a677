"""Bounded load test of ``dnnprov serve`` on loopback: latency percentiles under concurrency.

Starts the real server (``dnnprov serve --quiet`` on a free 127.0.0.1 port, a fresh job
database in a temporary folder), sends ``--requests`` POST /v1/solve requests (the Table I
instance, ``milp``) with ``--concurrency`` in flight at once, and probes ``/healthz``
every 50 ms meanwhile. Prints p50/p90/p99/max latency of both, throughput, and the count
of answers that were not 200. It stops by itself: after the last request, or after
``--max-seconds`` in total, whichever comes first; then the server is stopped.

    .venv/bin/python benchmarks/service_load.py                     # 200 requests, 20 concurrent, 2 workers
    .venv/bin/python benchmarks/service_load.py --requests 500 --concurrency 50 --workers 2 --method heuristic

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

INSTANCE = "embedded:spot/paper-table1.json"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    folder: Path, workers: int, max_pending: int, options: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, str]:
    """``dnnprov serve`` on a free loopback port (with more ``options``); returns the process and its base URL once ready."""
    port = free_port()
    exe = str(Path(sys.executable).with_name("dnnprov"))
    with open(folder / "serve.log", "w") as log:  # the server keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [
                exe,
                "serve",
                "--port",
                str(port),
                "--db",
                str(folder / "jobs.sqlite"),
                "--workers",
                str(workers),
                "--max-pending",
                str(max_pending),
                "--quiet",
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if (
                httpx.get(f"{url}/readyz", timeout=1).status_code == 200
                and httpx.get(f"{url}/healthz", timeout=1).json()["idle"] >= workers
            ):
                return proc, url
        except (httpx.TransportError, KeyError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"server did not start: {(folder / 'serve.log').read_text()}")


async def load(url: str, requests: int, concurrency: int, method: str, max_seconds: float) -> dict:
    """Send the requests; returns latencies (s) of solves and health probes and the status codes."""
    body = {"instance": INSTANCE, "method": method, "time_limit_s": 10}
    solve_latency: list[float] = []
    health_latency: list[float] = []
    codes: dict[int, int] = {}
    remaining = iter(range(requests))
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def user() -> None:
            for _ in remaining:
                started = time.perf_counter()
                answer = await client.post("/v1/solve", json=body)
                solve_latency.append(time.perf_counter() - started)
                codes[answer.status_code] = codes.get(answer.status_code, 0) + 1

        async def probe() -> None:
            while not done.is_set():
                started = time.perf_counter()
                await client.get("/healthz")
                health_latency.append(time.perf_counter() - started)
                await asyncio.sleep(0.05)

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
    return {
        "solve": solve_latency,
        "health": health_latency,
        "codes": codes,
        "wall_s": wall,
        "stopped_early": stopped_early,
    }


def percentiles(values: list[float]) -> str:
    """``p50 / p90 / p99 / max`` in milliseconds."""
    if not values:
        return "-"
    p = np.percentile(np.array(values) * 1000, [50, 90, 99, 100])
    return " / ".join(f"{v:.1f}" for v in p)


def main() -> None:
    """Run the load test and print the results (also as one JSON line)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--method", default="milp")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="stop sending after this long")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dnnprov-load-") as tmp:
        proc, url = start_server(Path(tmp), args.workers, max_pending=max(32, args.concurrency + 4))
        try:
            httpx.post(f"{url}/v1/solve", json={"instance": INSTANCE, "method": args.method}, timeout=60)  # warm up
            out = asyncio.run(load(url, args.requests, args.concurrency, args.method, args.max_seconds))
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    n = len(out["solve"])
    print(
        f"dnnprov serve --workers {args.workers}: {n} POST /v1/solve ({args.method}, Table I) at "
        f"{args.concurrency} concurrent in {out['wall_s']:.1f} s = {n / out['wall_s']:.1f} req/s"
        + (" (stopped at --max-seconds)" if out["stopped_early"] else "")
    )
    print(f"  solve   latency ms p50 / p90 / p99 / max: {percentiles(out['solve'])}")
    print(f"  healthz latency ms p50 / p90 / p99 / max: {percentiles(out['health'])} ({len(out['health'])} probes)")
    print(f"  status codes: {dict(sorted(out['codes'].items()))}")
    print(
        json.dumps(
            {
                "requests": n,
                "concurrency": args.concurrency,
                "workers": args.workers,
                "method": args.method,
                "wall_s": round(out["wall_s"], 3),
                "codes": out["codes"],
                "solve_ms": percentiles(out["solve"]),
                "healthz_ms": percentiles(out["health"]),
            }
        )
    )


if __name__ == "__main__":
    main()
