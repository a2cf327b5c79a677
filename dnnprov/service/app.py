"""The ASGI application of ``dnnprov serve`` (FastAPI).

Request bodies are read and checked here (size limit, JSON, then the same checks as the
CLI: :func:`dnnprov.service.tasks.prepare`), and the work runs in the worker processes of
:class:`~dnnprov.service.pool.WorkerPool`. Every error answer is
``{"error": {"field": ..., "message": ...}}``; no answer carries a traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from dnnprov.errors import InvalidInputError
from dnnprov.json_files import parse_json
from dnnprov.service.openapi import openapi_document
from dnnprov.service.pool import Outcome, Work, WorkerPool
from dnnprov.service.store import FINAL, STATES, JobStore
from dnnprov.service.tasks import KINDS, prepare

ACCESS_LOG = logging.getLogger("dnnprov.access")
LOG = logging.getLogger("dnnprov.service")
#: A job whose server stopped this many times while it ran is failed instead of re-queued.
MAX_ATTEMPTS = 3
_OPEN_PATHS = ("/healthz",)


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of one server (the ``dnnprov serve`` options)."""

    db_path: Path
    workers: int = 2
    token: str | None = None
    max_body_bytes: int = 1 << 20
    max_time_limit_s: float = 300.0
    max_pending: int = 32


def log_event(level: int, event: str, **fields: Any) -> None:
    """One JSON line on the service log: ``{"ts", "level", "event", ...}``."""
    LOG.log(level, json.dumps({"ts": round(time.time(), 3), "level": logging.getLevelName(level).lower(),
                               "event": event, **fields}))


class ApiError(Exception):
    """An error answer: HTTP status, the field at fault and what is wrong."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(message)
        self.status, self.field, self.message = status, field, message


def error_response(status: int, field: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error answer."""
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status, headers=headers)


class Metrics:
    """Prometheus metrics of one server (own registry: several apps may share a process)."""

    def __init__(self, pool: WorkerPool, store: JobStore) -> None:
        self.registry = CollectorRegistry()
        self.store = store
        self.solves = Counter("dnnprov_solves", "Solver runs by kind, method and outcome status",
                              ["kind", "method", "status"], registry=self.registry)
        self.solve_seconds = Histogram("dnnprov_solve_seconds", "Wall time of a solver run in its worker",
                                       ["kind"], registry=self.registry,
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.queue_depth = Gauge("dnnprov_queue_depth", "Work queued or running in the worker pool",
                                 registry=self.registry)
        self.queue_depth.set_function(pool.pending)
        self.jobs = Gauge("dnnprov_jobs", "Stored jobs by state", ["status"], registry=self.registry)
        self.requests = Counter("dnnprov_http_requests", "HTTP requests by route and status code",
                                ["method", "route", "code"], registry=self.registry)
        self.latency = Histogram("dnnprov_http_request_seconds", "HTTP request latency", ["route"],
                                 registry=self.registry)

    def record(self, kind: str, method: str, outcome: Outcome) -> None:
        """Count one finished task."""
        if outcome[0] == "ok":
            answer = outcome[1]
            status = answer.get("status") or answer.get("result", {}).get("status") or "ok"
            self.solve_seconds.labels(kind).observe(outcome[2])
        else:
            status = outcome[0]
        self.solves.labels(kind, method, str(status)).inc()

    def text(self) -> bytes:
        """The Prometheus text exposition."""
        for state, n in self.store.counts().items():
            self.jobs.labels(state).set(n)
        return generate_latest(self.registry)


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON, refusing more than ``limit`` bytes (413), text that is not
    JSON (400) and what :func:`dnnprov.json_files.parse_json` refuses in files: repeated
    keys, deep nesting, huge integer literals, lone surrogates (422 naming the field)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(413, "body", f"{int(length)} bytes; this server takes at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body", f"more than {limit} bytes; this server takes at most {limit}")
        chunks.append(chunk)
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "body", "not UTF-8 text") from None
    try:
        return parse_json(text, "body")
    except InvalidInputError as exc:  # "body": the text as a whole; else one field of it
        raise ApiError(400 if exc.field == "body" else 422, exc.field, exc.problem) from None


def create_app(config: ServiceConfig) -> FastAPI:
    """The application: open the store, start the workers, re-queue unfinished jobs."""
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = JobStore(config.db_path)
        pool = WorkerPool(config.workers, max_time_limit_s=config.max_time_limit_s)
        state.update(store=store, pool=pool, metrics=Metrics(pool, store))
        requeued = await run_in_threadpool(_recover)
        log_event(logging.INFO, "started", db=str(config.db_path), workers=config.workers, requeued=requeued)
        try:
            yield
        finally:
            pool.close()
            store.close()

    app = FastAPI(title="dnnprov", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)

    def _recover() -> int:
        store: JobStore = state["store"]
        ids = store.recover()
        for job_id in ids:
            job = store.get(job_id)
            assert job is not None
            if job.attempts >= MAX_ATTEMPTS:
                store.start(job_id)
                store.finish(job_id, "failed", error={"field": "", "message": f"the server stopped {job.attempts} "
                                                      "times while this job ran; not tried again"})
                continue
            try:
                task = prepare(job.kind, job.body, max_time_limit_s=config.max_time_limit_s)
            except InvalidInputError as exc:
                store.start(job_id)
                store.finish(job_id, "failed", error={"field": exc.field, "message": exc.problem})
                continue
            _submit_job(job_id, job.kind, job.body, task.budget_s, task.method)
        return len(ids)

    def _submit_job(job_id: str, kind: str, body: Any, budget_s: float, method: str) -> None:
        store: JobStore = state["store"]

        def done(future: Any) -> None:
            outcome = future.result()
            if outcome[0] in ("cancelled", "shutdown"):
                return  # cancelled: already recorded; shutdown: re-queued at the next start
            state["metrics"].record(kind, method, outcome)
            try:
                if outcome[0] == "ok":
                    store.finish(job_id, "done", result=outcome[1])
                elif outcome[0] == "invalid":
                    store.finish(job_id, "failed", error={"field": outcome[1], "message": outcome[2]})
                else:
                    store.finish(job_id, "failed", error={"field": "", "message": outcome[1]})
            except (TypeError, ValueError) as exc:  # an answer JSON cannot hold: the job must still end
                store.finish(job_id, "failed", error={"field": "", "message": f"the answer could not be stored: {exc}"})

        work = Work(kind, body, budget_s, job_id=job_id, before_start=lambda: store.start(job_id))
        state["pool"].submit(work).add_done_callback(done)

    # ------------------------------------------------------------------ middleware
    @app.middleware("http")
    async def access_and_auth(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        request_id = uuid.uuid4().hex[:16]
        if config.token is not None and request.url.path not in _OPEN_PATHS and not _authorized(request):
            response: Response = error_response(401, "Authorization", "a valid bearer token is required",
                                                {"WWW-Authenticate": "Bearer"})
        else:
            response = await call_next(request)
        elapsed = time.perf_counter() - started
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics: Metrics | None = state.get("metrics")
        if metrics is not None:
            metrics.requests.labels(request.method, route, str(response.status_code)).inc()
            metrics.latency.labels(route).observe(elapsed)
        response.headers["X-Request-Id"] = request_id
        ACCESS_LOG.info(json.dumps({
            "ts": round(time.time(), 3), "request_id": request_id, "client": request.client.host if request.client else None,
            "method": request.method, "path": request.url.path, "route": route,
            "status": response.status_code, "duration_ms": round(elapsed * 1000, 2)}))
        return response

    def _authorized(request: Request) -> bool:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), config.token.encode())

    # ------------------------------------------------------------------ errors
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.field, exc.message)

    @app.exception_handler(InvalidInputError)
    async def invalid_input(request: Request, exc: InvalidInputError) -> JSONResponse:
        return error_response(422, exc.field, exc.problem)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path"))
        return error_response(422, where, str(first.get("msg", "invalid request")))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "", str(exc.detail))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log_event(logging.ERROR, "internal_error", path=request.url.path, error=f"{type(exc).__name__}: {exc}")
        return error_response(500, "", "internal error (logged by the server)")

    # ------------------------------------------------------------------ endpoints
    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        pool: WorkerPool = state["pool"]
        return {"status": "ok", "workers": pool.workers, "running": pool.running(), "queue_depth": pool.pending()}

    @app.get("/openapi.json")
    async def openapi() -> dict[str, Any]:
        return openapi_document(auth=config.token is not None)

    @app.get("/metrics")
    async def metrics() -> Response:
        text = await run_in_threadpool(state["metrics"].text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    def _full() -> None:
        if state["pool"].pending() >= config.max_pending:
            raise ApiError(429, "", f"the server is full ({config.max_pending} tasks queued or running): retry later")

    async def _body(request: Request) -> Any:
        return await read_json(request, config.max_body_bytes)

    async def run_now(kind: str, request: Request) -> Any:
        body = await _body(request)
        _full()
        task = await run_in_threadpool(prepare, kind, body, max_time_limit_s=config.max_time_limit_s)
        if kind == "export":
            return task.run()
        outcome = await asyncio.wrap_future(state["pool"].submit(Work(kind, body, task.budget_s)))
        state["metrics"].record(kind, task.method, outcome)
        if outcome[0] == "ok":
            return outcome[1]
        if outcome[0] == "invalid":
            raise ApiError(422, outcome[1], outcome[2])
        if outcome[0] == "killed":
            raise ApiError(504, "time_limit_s", outcome[1])
        if outcome[0] == "error":
            raise ApiError(500, "", outcome[1])
        raise ApiError(503, "", "the server is shutting down: retry the request")

    def endpoint_of(kind: str) -> Any:
        async def endpoint(request: Request) -> Any:
            return await run_now(kind, request)
        endpoint.__name__ = f"post_{kind.replace('-', '_')}"
        return endpoint

    for kind in KINDS:
        app.add_api_route(f"/v1/{kind}", endpoint_of(kind), methods=["POST"])

    @app.post("/v1/jobs", status_code=202)
    async def submit_job(request: Request) -> dict[str, Any]:
        body = await _body(request)
        if not isinstance(body, dict):
            raise ApiError(422, "body", f"must be a JSON object, got {type(body).__name__}")
        kind = body.pop("kind", "solve")
        if kind not in KINDS or kind == "export":
            raise ApiError(422, "kind", f"must be one of {', '.join(k for k in KINDS if k != 'export')}; got {kind!r}")
        _full()
        task = await run_in_threadpool(prepare, kind, body, max_time_limit_s=config.max_time_limit_s)
        job_id = await run_in_threadpool(state["store"].add, kind, body)
        _submit_job(job_id, kind, body, task.budget_s, task.method)
        return {"id": job_id, "status": "queued", "url": f"/v1/jobs/{job_id}"}

    @app.get("/v1/jobs")
    async def list_jobs(status: str | None = None, limit: int = 100) -> dict[str, Any]:
        if status is not None and status not in STATES:
            raise ApiError(422, "status", f"must be one of {', '.join(STATES)}; got {status!r}")
        if not 1 <= limit <= 1000:
            raise ApiError(422, "limit", f"must be within 1..1000, got {limit}")
        jobs = await run_in_threadpool(state["store"].list, status, limit)
        return {"jobs": [job.to_dict() for job in jobs]}

    @app.get("/v1/jobs/{job_id}")
    async def get_job(job_id: str) -> dict[str, Any]:
        job = await run_in_threadpool(state["store"].get, job_id)
        if job is None:
            raise ApiError(404, "job_id", f"no job {job_id!r}")
        return job.to_dict()

    @app.delete("/v1/jobs/{job_id}")
    async def cancel_job(job_id: str) -> dict[str, Any]:
        store: JobStore = state["store"]
        before = await run_in_threadpool(store.cancel, job_id)
        if before is None:
            raise ApiError(404, "job_id", f"no job {job_id!r}")
        if before in FINAL:
            raise ApiError(409, "job_id", f"the job has already ended ({before})")
        if before == "running":
            state["pool"].cancel(job_id)
        job = await run_in_threadpool(store.get, job_id)
        assert job is not None
        return job.to_dict()

    return app
