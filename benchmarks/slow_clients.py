"""Slow clients against normal ones (issue 30): 64 slow-body clients and 64 normal clients together.

Starts the real server (``dnnprov serve --quiet`` on a free 127.0.0.1 port, a fresh job
database, ``--workers 1 --short-workers 1``, room for every client: ``--max-pending``
``--normal`` + ``--long`` + 8) and runs for ``--seconds``:

- ``--slow`` clients each open a connection, send the head of a ``POST /v1/jobs`` announcing
  a 100,000-byte body and then one byte a second; when the server cuts one off (408 at the
  minimum body rate) it connects again at once;
- ``--normal`` clients each send a cheap request every ``--interval`` seconds (or as soon as
  the last one is answered, when that takes longer) on a kept-alive connection, in turn: ``POST /v1/predict``, ``POST /v1/solve`` with ``method: heuristic``
  (both served by the short lane) and ``GET /v1/jobs/{id}`` of a stored job (a status read);
- ``--long`` jobs (proven solves of ``data/benchmarks/large/large-001.json``) are queued at
  the start so the long lane is busy throughout;
- a prober reads ``/healthz`` every 50 ms.

The contract (exit 1 when missed): the normal clients' requests p99 under 1 s and
``/healthz`` p99 under 100 ms, every normal answer 200, and slow clients cut off by the
server (not by us). Prints the figures as one JSON line; CPU seconds from
``time.process_time`` (this process) and ``/proc`` (the server and every process below it).

    .venv/bin/python benchmarks/slow_clients.py              # 64 + 64 clients, 30 s

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

# sibling scripts: the same server start and CPU reading
from service_admission import server_cpu
from service_load import start_server

ROOT = Path(__file__).resolve().parents[1]
TABLE1 = "embedded:spot/paper-table1.json"
LARGE = ROOT / "data" / "benchmarks" / "large" / "large-001.json"
SLOW_HEAD = (
    b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
)


async def slow_client(host: str, port: int, stop: asyncio.Event, cut: list[int]) -> None:
    """Trickle a body a byte a second; reconnect whenever the server closes the connection."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            writer.write(SLOW_HEAD)
            closed = asyncio.ensure_future(reader.read())  # the server's answer, then EOF
            while not stop.is_set() and not closed.done():
                await asyncio.wait({closed}, timeout=1.0)
                if not closed.done():
                    writer.write(b" ")
                    await writer.drain()
            if closed.done() and not closed.cancelled():
                cut.append(1 if closed.result().startswith(b"HTTP/1.1 408") else 0)
            closed.cancel()
        except OSError:
            cut.append(0)
        finally:
            writer.close()


async def normal_client(
    client: httpx.AsyncClient,
    job_id: str,
    interval: float,
    stop: asyncio.Event,
    latency: list[tuple[str, float, float]],
    codes: dict[int, int],
) -> None:
    """Cheap requests every ``interval`` s: a prediction, a heuristic solve, a status read;
    ``latency`` gets (what, start, seconds) of each."""
    requests = [
        ("predict", "POST", "/v1/predict", {"instance": TABLE1, "counts": {"g3.8xlarge": 5}, "ps": 1}),
        ("heuristic", "POST", "/v1/solve", {"instance": TABLE1, "method": "heuristic"}),
        ("status", "GET", f"/v1/jobs/{job_id}", None),
    ]
    i = 0
    while not stop.is_set():
        what, method, path, body = requests[i % 3]
        i += 1
        started = time.perf_counter()
        answer = await client.request(method, path, json=body)
        latency.append((what, started, time.perf_counter() - started))
        codes[answer.status_code] = codes.get(answer.status_code, 0) + 1
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - started)))


async def prober(client: httpx.AsyncClient, stop: asyncio.Event, latency: list[float]) -> None:
    """/healthz every 50 ms."""
    while not stop.is_set():
        started = time.perf_counter()
        await client.get("/healthz")
        latency.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)


async def loop_lag(stop: asyncio.Event, lags: list[tuple[float, float]]) -> None:
    """This process's own event-loop lag: how late a 20 ms sleep wakes, as (when, seconds late),
    to tell the benchmark's own stalls from the server's."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.02)
        lags.append((started, time.perf_counter() - started - 0.02))


def ms(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` (seconds) in milliseconds."""
    return round(float(np.percentile(values, q)) * 1000, 1) if values else None


async def run(url: str, slow: int, normal_clients: int, long: int, seconds: float, interval: float) -> dict:
    """The load; returns the figures."""
    host, port = url.removeprefix("http://").split(":")
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        stored = (await client.post("/v1/jobs", json={"instance": TABLE1})).json()["id"]
        body = {"instance": json.loads(LARGE.read_text()), "time_limit_s": 20}
        for _ in range(long):
            await client.post("/v1/jobs", json=body)
    stop = asyncio.Event()
    cut: list[int] = []
    normal: list[tuple[str, float, float]] = []
    health_latency: list[float] = []
    lags: list[tuple[float, float]] = []
    codes: dict[int, int] = {}
    # The clients are made first, sharing one SSL context: each httpx client would load its own
    # (tens of ms of CPU), which would stall this process's event loop, and every latency measured,
    # mid-run. One client (one connection) per normal client: a single httpx pool shared by 64
    # concurrent requests spends its own CPU on assigning them to connections, which the run
    # measured as the server's latency.
    context = httpx.create_ssl_context()
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=120, verify=context))
            for _ in range(normal_clients)
        ]
        probe_client = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=30, verify=context))
        tasks = [asyncio.ensure_future(slow_client(host, int(port), stop, cut)) for _ in range(slow)]
        await asyncio.sleep(2.0)  # the slow clients are connected before the others start
        begun = time.perf_counter()
        tasks += [
            asyncio.ensure_future(normal_client(client, stored, interval, stop, normal, codes)) for client in clients
        ]
        tasks.append(asyncio.ensure_future(prober(probe_client, stop, health_latency)))
        tasks.append(asyncio.ensure_future(loop_lag(stop, lags)))
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.wait(tasks, timeout=60)
    normal_latency = [seconds for _, _, seconds in normal]
    slowest = sorted(normal, key=lambda entry: -entry[2])[: max(1, len(normal) // 100)]
    return {
        "normal_requests": len(normal_latency),
        "normal_codes": codes,
        "normal_p50_ms": ms(normal_latency, 50),
        "normal_p99_ms": ms(normal_latency, 99),
        "normal_max_ms": ms(normal_latency, 100),
        "normal_p99_ms_by_kind": {
            what: ms([seconds for kind, _, seconds in normal if kind == what], 99)
            for what in ("predict", "heuristic", "status")
        },
        # the slowest 1 %: when they were sent (seconds into the run), to tell a stall from a queue
        "slowest_sent_at_s": sorted(round(start - begun, 1) for _, start, _ in slowest),
        # the normal requests' p99 by the second they were sent in (the first 10 s): a transient or a steady state
        "normal_p99_ms_by_second": [
            ms([seconds for _, start, seconds in normal if second <= start - begun < second + 1], 99)
            for second in range(10)
        ],
        # the worst lag of this process's event loop in each of the first 10 s (ms): a stall of the benchmark
        "client_lag_max_ms_by_second": [
            round(1000 * max((lag for at, lag in lags if second <= at - begun < second + 1), default=0.0))
            for second in range(10)
        ],
        "healthz_probes": len(health_latency),
        "healthz_p50_ms": ms(health_latency, 50),
        "healthz_p99_ms": ms(health_latency, 99),
        "healthz_max_ms": ms(health_latency, 100),
        "slow_cut_by_server": sum(cut),
        "slow_ended_otherwise": len(cut) - sum(cut),
    }


def main() -> int:
    """Run the benchmark; exit 1 when the contract is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slow", type=int, default=64)
    parser.add_argument("--normal", type=int, default=64)
    parser.add_argument("--long", type=int, default=4, help="long jobs queued at the start")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a normal client's requests")
    parser.add_argument("--long-nice", type=int, default=None, help="the server's --long-nice (default: its own)")
    args = parser.parse_args()
    options = () if args.long_nice is None else ("--long-nice", str(args.long_nice))
    with tempfile.TemporaryDirectory() as folder:
        proc, url = start_server(Path(folder), workers=1, max_pending=args.normal + args.long + 8, options=options)
        try:
            cpu_before, server_before = time.process_time(), server_cpu(proc.pid)
            figures = asyncio.run(run(url, args.slow, args.normal, args.long, args.seconds, args.interval))
            figures |= {
                "client_cpu_s": round(time.process_time() - cpu_before, 1),
                "server_cpu_s": round(server_cpu(proc.pid) - server_before, 1),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except Exception:  # noqa: BLE001  the server must not outlive the benchmark
                proc.kill()
    print(json.dumps(figures))
    met = (
        figures["normal_p99_ms"] is not None
        and figures["normal_p99_ms"] < 1000
        and figures["healthz_p99_ms"] is not None
        and figures["healthz_p99_ms"] < 100
        and set(figures["normal_codes"]) == {200}
        and figures["slow_cut_by_server"] > 0
    )
    print("contract " + ("met" if met else "MISSED"))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
