"""The ASGI application of ``dnnprov serve`` (FastAPI).

A request that does work first has its body read (at the middleware's minimum rate),
parsed in a thread (never on the event loop) and checked as the CLI checks it
(:func:`dnnprov.service.kinds.tasks.prepare`); only then does it take a place of its lane
(atomically, before any ``await``: :meth:`~dnnprov.execution.pool.WorkerPool.try_reserve`),
else it gets 429 with ``Retry-After``, so a slow client holds no place. The work runs in
the executor. Every error answer is ``{"error": {"field": ..., "message": ...}}``; no answer
carries a traceback.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from dnnprov.errors import InvalidInputError
from dnnprov.execution.pool import Outcome, Work
from dnnprov.json_files import parse_json
from dnnprov.problems.validation.checks import short
from dnnprov.service.events import log_event
from dnnprov.service.http.middleware import ServiceMiddleware
from dnnprov.service.http.openapi import openapi_document
from dnnprov.service.jobs import JobRunner
from dnnprov.service.kinds.run_jobs import RunJobs, runs_folder
from dnnprov.service.kinds.tasks import JOB_ONLY_KINDS, KINDS, body_field, prepare
from dnnprov.service.metrics import Metrics
from dnnprov.service.pool import LONG_NICE, lane_of, make_executor
from dnnprov.service.store import (
    FINAL,
    STATES,
    Store,
    StoreBusy,
    StoreFailed,
    StoreOwner,
    is_database_url,
    open_store,
)

__all__ = ["ServiceConfig", "create_app", "log_event"]
AUDIT_LOG = logging.getLogger("dnnprov.audit")
#: Bodies parsed at once (each in a thread): more would starve the event loop of the GIL.
PARSERS = 2
JOB_KINDS = tuple(k for k in KINDS if k != "export") + JOB_ONLY_KINDS
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
#: A page cursor (a job's sequence number), ASCII digits only: ``str.isdigit`` takes "²".
_CURSOR = re.compile(r"[0-9]{1,18}")
#: Longest ``?wait=`` of a job lookup (seconds).
MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of one server (the ``dnnprov serve`` options).

    ``tokens`` maps each bearer token to its tenant (``None``: no token needed, one tenant).
    """

    db_path: Path | str  # a SQLite file, or a postgresql:// URL (kept a str: a Path would fold its //)
    workers: int = 2
    tokens: dict[str, str] | None = None
    max_body_bytes: int = 1 << 20
    max_time_limit_s: float = 300.0
    max_pending: int = 32
    drain_timeout_s: float = 20.0
    job_ttl_s: float = 7 * 86400.0
    dask_address: str | None = None
    max_auth_failures: int = 10
    short_workers: int = 1
    long_nice: int = LONG_NICE
    tenant_max_pending: int | None = None
    head_timeout_s: float = 10.0
    body_grace_s: float = 10.0
    min_body_rate: float = 1024.0
    rate_limit: float = 100.0
    admin_tenant: str = "admin"

    def tenant_cap(self) -> int:
        """Places of a lane one tenant may hold: the option, else half of ``max_pending`` when
        the token file names several tenants, else all of them."""
        if self.tenant_max_pending is not None:
            return self.tenant_max_pending
        several = self.tokens is not None and len(set(self.tokens.values())) > 1
        return max(1, self.max_pending // 2) if several else self.max_pending


class ApiError(Exception):
    """An error answer: HTTP status, the field at fault and what is wrong."""

    def __init__(self, status: int, field: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.field, self.message, self.headers = status, field, message, headers


def error_response(status: int, field: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error answer."""
    return JSONResponse({"error": {"field": field, "message": message}}, status_code=status, headers=headers)


def audit(request: Request, action: str, job_id: str, **fields: Any) -> None:
    """One line of the audit log (logger ``dnnprov.audit``, kept with ``--quiet``): who did ``action`` to which job.

    ``{"ts", "level": "info", "event": "audit", "action": "create" | "cancel" | "delete", "job_id",
    "tenant", "client", "request_id", ...}``.
    """
    client = request.client.host if request.client else "?"
    AUDIT_LOG.info(
        json.dumps(
            {
                "ts": round(time.time(), 3),
                "level": "info",
                "event": "audit",
                "action": action,
                "job_id": job_id,
                "tenant": request.state.tenant,
                "client": client,
                "request_id": request.state.request_id,
                **fields,
            }
        )
    )


def _parse_body(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "body", "not UTF-8 text") from None
    try:
        return parse_json(text, "body")
    except InvalidInputError as exc:  # "body": the text as a whole, or nested too deep (at any depth); else a field
        status = 400 if exc.field == "body" or exc.problem.startswith("nested more than") else 422
        raise ApiError(status, exc.field, exc.problem) from None


def create_app(config: ServiceConfig, owner: StoreOwner | None = None) -> FastAPI:
    """The application: own and open the store, start the executor, re-queue unfinished jobs.

    ``owner``: the store's lock when the caller already holds it (``dnnprov serve``).
    """
    state: dict[str, Any] = {"draining": False, "task_s": 1.0}
    parsers = anyio.CapacityLimiter(PARSERS)
    app = FastAPI(
        title="dnnprov", lifespan=_lifespan(config, owner, state), openapi_url=None, docs_url=None, redoc_url=None
    )
    app.router.redirect_slashes = False  # a redirect would name the client's Host header
    app.add_middleware(
        ServiceMiddleware,
        tokens=config.tokens,
        draining=lambda: state["draining"],
        max_auth_failures=config.max_auth_failures,
        body_paths=frozenset({"/v1/jobs", *(f"/v1/{kind}" for kind in KINDS)}),
        on_response=lambda *a: state["metrics"].http(*a) if "metrics" in state else None,
        body_grace_s=config.body_grace_s,
        min_body_rate=config.min_body_rate,
        rate_limit=config.rate_limit if config.tokens is not None else 0.0,
    )

    _error_handlers(app)
    _health_routes(app, config, state)
    admit, checked = _request_checks(config, state, parsers)
    _solve_routes(app, state, admit, checked)
    _job_routes(app, config, state, admit, checked)
    _job_state_routes(app, config, state)
    return app


#: Admits a checked request's work (``kind``, ``method``) or answers 429.
Admit = Callable[[str, str, Request], Work]
#: Reads and checks a request's body for a kind (``"jobs"``: the kind is in the body): ``(body, request)``.
Checked = Callable[[str, Request], Awaitable[tuple[Any, Any]]]


def _lifespan(
    config: ServiceConfig, owner: StoreOwner | None, state: dict[str, Any]
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The server's start (store, executor, recovered jobs) and stop, sharing ``state`` with the routes."""
    drain = _drainer(config, state)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db_url = is_database_url(config.db_path)  # PostgreSQL: replicas share it, leases instead of the file lock
        held = owner or (None if db_url else StoreOwner(Path(config.db_path)))
        store = open_store(config.db_path)
        pool: Any = make_executor(
            workers=config.workers,
            max_time_limit_s=config.max_time_limit_s,
            max_pending=config.max_pending,
            short_workers=config.short_workers,
            long_nice=config.long_nice,
            tenant_max_pending=config.tenant_cap(),
            dask_address=config.dask_address,
        )
        metrics = Metrics(pool, store)
        # run jobs keep their records beside a SQLite store; replicas on PostgreSQL do not take them
        runs = None if db_url else RunJobs(store, runs_folder(config.db_path))
        runner = JobRunner(store, pool, max_time_limit_s=config.max_time_limit_s, record=metrics.record, runs=runs)
        state.update(store=store, pool=pool, metrics=metrics, runner=runner, runs=runs)
        app.state.drain = drain
        requeued = await run_in_threadpool(runner.recover)
        # The start-up heap (FastAPI, pydantic, numpy, the kinds' modules) out of the collector's
        # reach: a full collection scanned it all and stalled the event loop 150-190 ms, for
        # about 50 objects collected (measured under the slow-clients benchmark).
        gc.freeze()
        if db_url:
            store.attach(runner, pool, lambda: state["draining"])  # type: ignore[attr-defined]
        purger = asyncio.create_task(_purge_forever(store, config))
        log_event(
            logging.INFO,
            "started",
            db=str(store.path),
            workers=pool.workers,
            requeued=requeued,
            executor="dask" if config.dask_address else "processes",
        )
        try:
            yield
        finally:
            purger.cancel()
            state["draining"] = True
            await run_in_threadpool(pool.close)
            if runs is not None:
                await run_in_threadpool(runs.close)
            store.close()
            if owner is None and held is not None:
                held.release()
            log_event(logging.INFO, "stopped")

    return lifespan


async def _purge_forever(store: Store, config: ServiceConfig) -> None:
    """Remove ended jobs older than the jobs' time to live, every while, for the server's life."""
    while True:
        try:
            removed = await run_in_threadpool(store.purge, config.job_ttl_s)
            if removed:
                log_event(logging.INFO, "jobs_purged", count=removed, ttl_s=config.job_ttl_s)
        except (StoreBusy, StoreFailed) as exc:
            log_event(logging.WARNING, "store_busy" if isinstance(exc, StoreBusy) else "store_failed", error=str(exc))
        await asyncio.sleep(min(60.0, max(1.0, config.job_ttl_s / 10)))


def _drainer(config: ServiceConfig, state: dict[str, Any]) -> Callable[[], None]:
    """The server's drain (SIGTERM), as ``app.state.drain``."""

    def drain() -> None:
        """Stop taking work; let running work end within the drain timeout, then stop and re-queue it.

        Called from a thread when the server gets SIGTERM, before uvicorn stops.
        """
        state["draining"] = True
        pool = state["pool"]
        log_event(logging.INFO, "draining", running=pool.running(), timeout_s=config.drain_timeout_s)
        pool.drain()
        deadline = time.monotonic() + config.drain_timeout_s
        while pool.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        if pool.running():
            pool.stop_running()
            stop_by = time.monotonic() + 10
            while pool.running() and time.monotonic() < stop_by:
                time.sleep(0.05)
        log_event(logging.INFO, "drained")

    return drain


def _error_handlers(app: FastAPI) -> None:
    """Every error as one JSON answer ``{"error": {"field", "message"}}`` (never a traceback)."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.field, exc.message, exc.headers)

    @app.exception_handler(InvalidInputError)
    async def invalid_input(request: Request, exc: InvalidInputError) -> JSONResponse:
        return error_response(422, body_field(exc.field), exc.problem)

    @app.exception_handler(StoreBusy)
    async def store_busy(request: Request, exc: StoreBusy) -> JSONResponse:
        log_event(logging.WARNING, "store_busy", error=str(exc), request_id=request.state.request_id)
        return error_response(503, "", "the job store is busy: retry the request", {"Retry-After": "2"})

    @app.exception_handler(StoreFailed)
    async def store_failed(request: Request, exc: StoreFailed) -> JSONResponse:
        log_event(logging.ERROR, "store_failed", reason=exc.reason, error=str(exc), request_id=request.state.request_id)
        return error_response(
            503, "", f"{exc.reason}: {exc}; retry the request on another server or later", {"Retry-After": "30"}
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header"))
        return error_response(422, where, str(first.get("msg", "invalid request")))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:  # every route of the path, not only the first
            allowed = {
                m
                for route in app.routes
                if (regex := getattr(route, "path_regex", None)) is not None and regex.match(request.url.path)
                for m in getattr(route, "methods", None) or ()
            }
            headers["Allow"] = ", ".join(sorted(allowed))
            return error_response(405, "", f"{request.method} is not one of {headers['Allow']} on this path", headers)
        return error_response(exc.status_code, "", str(exc.detail), headers)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        """A client that hung up while sending its body: logged as such, not as a server error
        (the answer reaches no one; handled here, it is not re-raised to the ASGI server)."""
        log_event(logging.INFO, "client_disconnected", path=request.url.path[:200], request_id=request.state.request_id)
        return error_response(400, "body", "the client closed the connection before its body ended")

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log_event(
            logging.ERROR,
            "internal_error",
            path=request.url.path[:200],
            error=f"{type(exc).__name__}: {exc}",
            request_id=request.state.request_id,
        )
        return error_response(500, "", "internal error (logged by the server)")


def _health_routes(app: FastAPI, config: ServiceConfig, state: dict[str, Any]) -> None:
    """``/healthz``, ``/livez``, ``/readyz``, ``/openapi.json`` and ``/metrics``."""

    def _health() -> dict[str, Any]:
        pool = state["pool"]
        return {
            "workers": pool.workers,
            "running": pool.running(),
            "idle": pool.idle(),
            "queue_depth": pool.pending(),
            "peak_admitted": pool.peak,
            "max_pending": config.max_pending,
        }

    @app.api_route("/healthz", methods=["GET", "HEAD"])
    async def healthz() -> dict[str, Any]:
        return {"status": "draining" if state["draining"] else "ok", **_health()}

    @app.api_route("/livez", methods=["GET", "HEAD"])
    async def livez() -> dict[str, Any]:
        return {"status": "ok"}

    @app.api_route("/readyz", methods=["GET", "HEAD"])
    async def readyz() -> JSONResponse:
        pool, store = state["pool"], state["store"]
        reasons = []
        if state["draining"]:
            reasons.append("draining")
        if pool.full("long"):
            reasons.append("full")
        probe = getattr(store, "probe", None)
        if probe is not None:
            problem = await run_in_threadpool(probe)
        else:  # a store with only ping() (PostgreSQL: the database answers, the leases are renewed)
            problem = None if await run_in_threadpool(store.ping) else "store unavailable"
        if problem is not None:
            reasons.append(problem)
        reasons += [f"worker slot {i} died" for i in pool.dead_slots()]
        reasons += executor_problems(pool)  # the Dask executor's: its scheduler, its workers
        if not pool.warm():
            reasons.append("no worker ready yet")
        failure = getattr(store, "failure", None)
        detail = {"store_error": failure[1]} if problem is not None and failure else {}
        return JSONResponse(
            {"status": "not ready" if reasons else "ready", "reasons": reasons, **detail, **_health()},
            status_code=503 if reasons else 200,
        )

    @app.get("/openapi.json")
    async def openapi() -> dict[str, Any]:
        return openapi_document(auth=config.tokens is not None, max_time_limit_s=config.max_time_limit_s)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        several = config.tokens is not None and len(set(config.tokens.values())) > 1
        if several and request.state.tenant != config.admin_tenant:
            raise ApiError(
                403,
                "Authorization",
                f"the metrics count every tenant's work: only tokens of tenant {config.admin_tenant!r} may read them",
            )
        text = await run_in_threadpool(state["metrics"].text)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")


def _request_checks(
    config: ServiceConfig, state: dict[str, Any], parsers: anyio.CapacityLimiter
) -> tuple[Admit, Checked]:
    """How a request is read and checked (body size, JSON, the kind's checks) and then admitted."""

    def _admit(kind: str, method: str, request: Request) -> Work:
        """A place for the checked work of ``request`` in its lane, else 429 (the lane or the tenant is full)."""
        work = Work((kind, None), 0.0, lane=lane_of(kind, method), tenant=request.state.tenant)
        refused = state["pool"].try_reserve(work)
        if refused is not None:
            wait = max(1, min(60, math.ceil(state["task_s"] * config.max_pending / max(1, state["pool"].workers))))
            message = (
                f"the server is full ({config.max_pending} {work.lane} tasks admitted): retry later"
                if refused == "full"
                else f"this tenant has {state['pool'].tenant_max_pending} {work.lane} tasks admitted: retry later"
            )
            raise ApiError(429, "", message, {"Retry-After": str(wait)})
        return work

    async def _checked(kind: str, request: Request) -> tuple[Any, Any]:
        length = request.headers.get("content-length")
        limit = config.max_body_bytes
        if length is not None and _CURSOR.fullmatch(length[:18]) and int(length[:18]) > limit:
            raise ApiError(413, "body", f"{int(length)} bytes; this server takes at most {limit}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "body", f"more than {limit} bytes; this server takes at most {limit}")
            chunks.append(chunk)
        body = await anyio.to_thread.run_sync(_parse_body, b"".join(chunks), limiter=parsers)
        if kind == "jobs":
            if not isinstance(body, dict):
                raise ApiError(422, "body", f"must be a JSON object, got {type(body).__name__}")
            kind = body.pop("kind", "solve")
            if kind not in JOB_KINDS:
                raise ApiError(422, "kind", f"must be one of {', '.join(JOB_KINDS)}; got {short(kind)}")
            if kind == "run" and state["runs"] is None:
                raise ApiError(
                    422,
                    "kind",
                    "run jobs need the SQLite store (their records live beside it); "
                    "this server keeps its jobs on PostgreSQL",
                )
        task = await anyio.to_thread.run_sync(
            lambda: prepare(kind, body, max_time_limit_s=config.max_time_limit_s), limiter=parsers
        )
        return body, task

    return _admit, _checked


def _solve_routes(app: FastAPI, state: dict[str, Any], admit: Admit, checked: Checked) -> None:
    """``POST /v1/{kind}``: one synchronous endpoint per kind, run now in a worker."""

    async def _outcome(work: Work, request: Request) -> Outcome:
        """The work's outcome; the work is cancelled when the client goes away first, or when
        the executor cannot run work (its Dask scheduler lost): then ``("unavailable", reason)``."""
        pool = state["pool"]
        future = asyncio.wrap_future(pool.submit(work))
        gone = asyncio.ensure_future(_disconnected(request))
        lost = asyncio.ensure_future(_unavailable(pool))
        try:
            await asyncio.wait({future, gone, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            lost.cancel()
        if future.done():
            outcome = future.result()
            problems = executor_problems(pool)
            # a work cut off by the lost scheduler ends ("crashed", ...): a job retries it, a request is told to
            return ("unavailable", problems[0]) if outcome[0] == "crashed" and problems else outcome
        pool.cancel(work)
        if lost.done() and not lost.cancelled():
            return ("unavailable", lost.result())
        log_event(logging.INFO, "request_abandoned", kind=work.args[0], request_id=request.state.request_id)
        return ("cancelled",)

    async def run_now(kind: str, request: Request) -> Any:
        body, task = await checked(kind, request)  # read before admission: a slow client holds no place
        if kind == "export":
            return task.run()
        problems = executor_problems(state["pool"])
        if problems:
            raise ApiError(
                503, "", f"this server cannot run work now ({problems[0]}): retry later", {"Retry-After": "10"}
            )
        work = admit(kind, task.method, request)
        try:
            work.args, work.budget_s = (kind, body), task.budget_s
            started = time.monotonic()
            outcome = await _outcome(work, request)
        finally:
            state["pool"].release(work)
        state["task_s"] = 0.8 * state["task_s"] + 0.2 * (time.monotonic() - started)
        if outcome[0] != "cancelled":
            state["metrics"].record(kind, task.method, outcome)
        if outcome[0] == "ok":
            return outcome[1]
        if outcome[0] == "invalid":
            raise ApiError(422, outcome[1], outcome[2])
        if outcome[0] == "killed":
            raise ApiError(504, "time_limit_s", outcome[1])
        if outcome[0] in ("error", "crashed"):
            raise ApiError(500, "", outcome[1])
        if outcome[0] == "cancelled":
            return Response(status_code=499)  # nobody is left to read it
        if outcome[0] == "unavailable":
            raise ApiError(
                503, "", f"this server cannot run work now ({outcome[1]}): retry later", {"Retry-After": "10"}
            )
        raise ApiError(503, "", "the server is shutting down: retry the request", {"Retry-After": "5"})

    def endpoint_of(kind: str) -> Any:
        async def endpoint(request: Request) -> Any:
            return await run_now(kind, request)

        endpoint.__name__ = f"post_{kind.replace('-', '_')}"
        return endpoint

    for kind in KINDS:
        app.add_api_route(f"/v1/{kind}", endpoint_of(kind), methods=["POST"])


def _job_routes(app: FastAPI, config: ServiceConfig, state: dict[str, Any], admit: Admit, checked: Checked) -> None:
    """``POST /v1/jobs`` (a stored job) and ``GET /v1/jobs`` (the newest jobs, by pages)."""

    @app.post("/v1/jobs", status_code=202)
    async def submit_job(request: Request) -> JSONResponse:
        keys = request.headers.getlist("idempotency-key")
        if len(keys) > 1:  # which one would count? a retry may send the other
            raise ApiError(422, "Idempotency-Key", f"sent {len(keys)} times; send one")
        key = keys[0] if keys else None
        if key is not None and not 1 <= len(key) <= 200:
            raise ApiError(422, "Idempotency-Key", "must be 1 to 200 characters")
        body, task = await checked("jobs", request)
        try:
            work = admit(task.kind, task.method, request)
        except ApiError as exc:  # full: a replay of an accepted job needs no place, its answer is that job
            if exc.status != 429 or key is None:
                raise
            tenant = request.state.tenant
            found = await run_in_threadpool(
                lambda: state["store"].replayed(task.kind, body, tenant=tenant, idempotency_key=key)
            )
            if found is None:
                raise
            return await _accepted(found, created=False)
        try:
            job_id, created = await run_in_threadpool(
                lambda: state["store"].add(
                    task.kind,
                    body,
                    tenant=request.state.tenant,
                    idempotency_key=key,
                    request_id=request.state.request_id,
                )
            )
        except BaseException:
            state["pool"].release(work)
            raise
        if created:
            state["runner"].submit(
                job_id, task.kind, body, task.budget_s, task.method, work=work, request_id=request.state.request_id
            )
            audit(request, "create", job_id, kind=task.kind, idempotency_key=key)
            log_event(
                logging.INFO,
                "job_queued",
                job_id=job_id,
                kind=task.kind,
                tenant=request.state.tenant,
                request_id=request.state.request_id,
            )
        else:
            state["pool"].release(work)
        return await _accepted(job_id, created)

    async def _accepted(job_id: str, created: bool) -> JSONResponse:
        """The 202 of ``POST /v1/jobs``: a new job, or the replayed one under its key (with its status)."""
        job = None if created else await run_in_threadpool(state["store"].get, job_id)
        url = f"/v1/jobs/{job_id}"
        headers = {"Location": url} | ({} if created else {"Idempotent-Replayed": "true"})
        return JSONResponse(
            {"id": job_id, "status": job.status if job else "queued", "url": url}, status_code=202, headers=headers
        )

    @app.get("/v1/jobs")
    async def list_jobs(
        request: Request, status: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        if status is not None and status not in STATES:
            raise ApiError(422, "status", f"must be one of {', '.join(STATES)}; got {short(status)}")
        if not 1 <= limit <= 1000:
            raise ApiError(422, "limit", f"must be within 1..1000, got {limit}")
        before = None
        if cursor is not None:
            if not _CURSOR.fullmatch(cursor):
                raise ApiError(422, "cursor", "not a cursor this server gave (use next_cursor of an answer)")
            before = int(cursor)
        jobs = await run_in_threadpool(
            lambda: state["store"].list(status, limit + 1, tenant=_tenant(config, request), before_seq=before)
        )
        more = len(jobs) > limit
        jobs = jobs[:limit]
        return {"jobs": [job.to_dict() for job in jobs], "next_cursor": str(jobs[-1].seq) if more else None}


def _job_state_routes(app: FastAPI, config: ServiceConfig, state: dict[str, Any]) -> None:
    """``GET``, ``cancel`` and ``DELETE`` of one job."""

    @app.get("/v1/jobs/{job_id}")
    async def get_job(request: Request, job_id: str, wait: float = 0.0) -> dict[str, Any]:
        _job_id(job_id)
        if not 0 <= wait <= MAX_WAIT_S:
            raise ApiError(422, "wait", f"must be within 0..{MAX_WAIT_S:g} seconds, got {wait:g}")
        deadline = time.monotonic() + wait
        while True:
            job = await run_in_threadpool(state["store"].get, job_id, _tenant(config, request))
            if job is None:
                raise ApiError(404, "job_id", f"no job {short(job_id, 40)}")
            if job.status in FINAL or time.monotonic() >= deadline or state["draining"]:
                return await _answer(job)
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    async def _answer(job: Any) -> dict[str, Any]:
        """A job as answered; a run job with its run's status (``"run"``)."""
        answer: dict[str, Any] = job.to_dict()
        if job.kind == "run":
            answer["run"] = await run_in_threadpool(state["runs"].status, job.id)
        return answer

    @app.post("/v1/jobs/{job_id}/cancel")
    async def cancel_job(request: Request, job_id: str) -> dict[str, Any]:
        _job_id(job_id)
        store: Store = state["store"]
        before = await run_in_threadpool(store.cancel, job_id, _tenant(config, request))
        if before is None:
            raise ApiError(404, "job_id", f"no job {short(job_id, 40)}")
        if before in FINAL:
            raise ApiError(409, "job_id", f"the job has already ended ({before})")
        await run_in_threadpool(state["runner"].cancel, job_id)
        audit(request, "cancel", job_id, was=before)
        log_event(logging.INFO, "job_cancelled", job_id=job_id, was=before, request_id=request.state.request_id)
        job = await run_in_threadpool(store.get, job_id)
        if job is None:  # deleted meanwhile
            raise ApiError(404, "job_id", f"no job {short(job_id, 40)}")
        return await _answer(job)

    @app.delete("/v1/jobs/{job_id}", status_code=204)
    async def delete_job(request: Request, job_id: str) -> Response:
        _job_id(job_id)
        store: Store = state["store"]
        before = await run_in_threadpool(store.cancel, job_id, _tenant(config, request))
        if before is None:
            raise ApiError(404, "job_id", f"no job {short(job_id, 40)}")
        if before not in FINAL:
            await run_in_threadpool(state["runner"].cancel, job_id)
        await run_in_threadpool(store.delete, job_id, _tenant(config, request))
        audit(request, "delete", job_id, was=before)
        log_event(logging.INFO, "job_deleted", job_id=job_id, was=before, request_id=request.state.request_id)
        return Response(status_code=204)


def _job_id(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise ApiError(404, "job_id", f"no job {short(job_id, 40)}")
    return job_id


def _tenant(config: ServiceConfig, request: Request) -> str | None:
    """The tenant whose jobs a request sees (``None``: all, on a server without tokens)."""
    return request.state.tenant if config.tokens is not None else None


def executor_problems(pool: Any) -> list[str]:
    """What keeps the executor from running work now (the Dask executor's scheduler and workers;
    a local pool has none): ``/readyz`` reasons, and a synchronous request's 503."""
    return list(getattr(pool, "problems", list)())


async def _unavailable(pool: Any) -> str:
    """Return the first problem of the executor once it has one (looked at every half second)."""
    while True:
        problems = executor_problems(pool)
        if problems:
            return problems[0]
        await asyncio.sleep(0.5)


async def _disconnected(request: Request) -> None:
    """Return when the client has closed the connection (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
