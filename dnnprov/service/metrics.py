"""Prometheus metrics of ``dnnprov serve`` (an own registry: several apps may share a process)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dnnprov.execution.pool import Outcome
from dnnprov.service.store import Store


class Metrics:
    """Solves, queue depth, stored jobs and HTTP requests of one server."""

    def __init__(self, pool: Any, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.store = store
        self.solves = Counter(
            "dnnprov_solves",
            "Solver runs by kind, method and outcome status",
            ["kind", "method", "status"],
            registry=self.registry,
        )
        self.solve_seconds = Histogram(
            "dnnprov_solve_seconds",
            "Wall time of a solver run in its worker",
            ["kind"],
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self.queue_depth = Gauge(
            "dnnprov_queue_depth", "Tasks admitted (queued, running or being checked)", registry=self.registry
        )
        self.queue_depth.set_function(pool.pending)
        self.jobs = Gauge("dnnprov_jobs", "Stored jobs by state", ["status"], registry=self.registry)
        self.requests = Counter(
            "dnnprov_http_requests",
            "HTTP requests by route and status code",
            ["method", "route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "dnnprov_http_request_seconds", "HTTP request latency", ["route"], registry=self.registry
        )

    def record(self, kind: str, method: str, outcome: Outcome) -> None:
        """Count one finished task."""
        if outcome[0] == "ok":
            answer = outcome[1]
            status = answer.get("status") or answer.get("result", {}).get("status") or "ok"
            self.solve_seconds.labels(kind).observe(outcome[2])
        else:
            status = outcome[0]
        self.solves.labels(kind, method, str(status)).inc()

    def http(self, method: str, route: str, code: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(method, route, str(code)).inc()
        self.latency.labels(route).observe(seconds)

    def text(self) -> bytes:
        """The Prometheus text exposition."""
        for state, n in self.store.counts().items():
            self.jobs.labels(state).set(n)
        return generate_latest(self.registry)
