"""A local endpoint that speaks AWS Lambda's API, whose function is a stand-in λDNN worker.

moto's Lambda ``Invoke`` needs docker; this test double needs nothing. It serves on
127.0.0.1, checks no signature, and answers what boto3's ``lambda`` client sends with
``endpoint_url`` (docs/control.md, "Serverless runs"):

- ``CreateFunction`` (POST /2015-03-31/functions), ``GetFunction`` (GET .../functions/NAME),
  ``UpdateFunctionConfiguration`` (PUT .../functions/NAME/configuration: ``MemorySize``,
  ``Timeout``), ``DeleteFunction``, ``ListFunctions``, ``PutFunctionConcurrency`` /
  ``DeleteFunctionConcurrency`` / ``GetFunctionConcurrency``;
- ``Invoke`` (POST /2015-03-31/functions/NAME/invocations, RequestResponse): the **stand-in
  worker** (:func:`worker`) restores the payload's checkpoint, "trains" for
  ``min(timeout - margin, remaining)`` seconds of the twin's accelerated clock by the λDNN
  model (docs/models.md) and answers the trainer protocol's report with its new checkpoint.
  A failure is HTTP 200 with ``X-Amz-Function-Error: Unhandled`` and Lambda's error object;
  an invocation that would outlive the function's timeout ends at it with
  ``Task timed out after T seconds``.
- An invocation whose payload carries a ``token`` seen before runs once: the same answer
  comes back (after the first one ends, if it is still running).
- ``GET /_twin/clock`` as the EC2 twin's (so :class:`dnnprov.control.clouds.ec2.RemoteTwinClock`
  reads it), ``GET /_twin/state`` (functions, in-flight invocations, executions per token).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import unquote

import numpy as np

from dnnprov.cloud.export.consumers.aws_calls import LAMBDA_MEMORY_MB
from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessModel
from dnnprov.problems.serverless import ServerlessProblem

DEFAULT_BASE = datetime(2023, 8, 27, tzinfo=UTC)
#: Progress within this relative distance of the whole counts as finished.
DONE_TOLERANCE = 1e-9
_FUNCTION = re.compile(r"^/(2015-03-31|2017-10-31|2019-09-30)/functions/([^/]+)(/[a-z]+)?/?$")


@dataclass
class FunctionConfig:
    """One function's configuration."""

    name: str
    memory_mb: int = 128
    timeout_s: int = 3
    runtime: str = "python3.11"
    handler: str = "worker.handler"
    role: str = "arn:aws:iam::123456789012:role/dnnprov-worker"
    reserved: int | None = None
    modified: str = ""

    def to_dict(self, region: str) -> dict[str, Any]:
        """Lambda's FunctionConfiguration."""
        return {
            "FunctionName": self.name,
            "FunctionArn": f"arn:aws:lambda:{region}:123456789012:function:{self.name}",
            "Runtime": self.runtime,
            "Role": self.role,
            "Handler": self.handler,
            "CodeSize": 0,
            "Timeout": self.timeout_s,
            "MemorySize": self.memory_mb,
            "LastModified": self.modified,
            "Version": "$LATEST",
            "State": "Active",
            "LastUpdateStatus": "Successful",
            "PackageType": "Zip",
        }


def worker(
    problem: ServerlessProblem, memory_mb: int, timeout_s: float, payload: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """The stand-in worker's segment: (seconds it runs, its answer). Raises ValueError on a bad payload.

    Payload: ``run``, ``functions`` n, ``batch`` b_l, ``ps`` (count), ``ps_address``,
    ``segment`` (0 first), ``checkpoint`` {``trained_s``, ``time_s``} (absent: the start).
    A restart (segment > 0) first restores the checkpoint (``checkpoint_overhead_s``), then
    trains ``min(timeout - checkpoint_margin_s, T_train - trained)`` seconds of eq. (1)'s
    T_train, as the model counts (docs/models.md). The answer is the trainer protocol's
    report (``loss``: the share of the work left, ``step``: iterations done) plus
    ``checkpoint`` and ``billed_s``.
    """
    if not payload.get("ps_address"):
        raise ValueError("no PS address in the payload: a worker cannot train without its PS")
    try:
        n, batch, ps = int(payload["functions"]), float(payload["batch"]), int(payload.get("ps", 1))
        segment = int(payload.get("segment", 0))
        checkpoint = payload.get("checkpoint") or {}
        trained, t0 = float(checkpoint.get("trained_s", 0.0)), float(checkpoint.get("time_s", 0.0))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad payload ({exc}): needs functions, batch, ps, segment, checkpoint") from None
    if n < 1 or batch <= 0 or ps < 1 or segment < 0:
        raise ValueError("functions, batch and ps must be positive and segment >= 0")
    p = problem.platform
    total, k, t_load, per_iteration = (
        float(x[0])
        for x in ServerlessModel(problem).training_time(
            np.array([n]), np.array([memory_mb]), np.array([ps]), local_batch=batch
        )
    )
    if not total < float("inf"):
        raise ValueError(f"{memory_mb} MB trains nothing (the rate or storage bandwidth is not positive)")
    restore = p.checkpoint_overhead_s if segment > 0 else 0.0
    trains = max(0.0, min(timeout_s - p.checkpoint_margin_s, total - trained))
    if trains <= 0 < total - trained:  # no time to train and checkpoint: it runs to the timeout
        return float("inf"), {}
    trained += trains
    finished = trained >= total * (1 - DONE_TOLERANCE)
    now = t0 + restore + trains
    step = int(min(k, max(0.0, (trained - t_load) / per_iteration))) if per_iteration > 0 else 0
    answer = {
        "run": payload.get("run", ""),
        "time_s": now,
        "loss": max(0.0, 1.0 - trained / total),
        "step": step,
        "finished_s": now if finished else None,
        "segment": segment,
        "worker": payload.get("worker"),
        "billed_s": restore + trains,
        "checkpoint": {"trained_s": trained, "time_s": now},
    }
    return restore + trains, answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class LambdaTwin:
    """The endpoint (module docstring). ``speed``: twin seconds per wall second."""

    def __init__(
        self,
        problem: ServerlessProblem,
        *,
        port: int = 0,
        speed: float = 1.0,
        region: str = "us-east-1",
        base: datetime = DEFAULT_BASE,
    ) -> None:
        if not speed > 0:
            raise InvalidInputError("speed", f"must be > 0, got {speed!r}")
        self.problem, self.port, self.speed, self.region, self.base = problem, port, float(speed), region, base
        self.functions: dict[str, FunctionConfig] = {}
        self.answers: dict[str, tuple[str | None, bytes]] = {}
        self.executions: dict[str, int] = {}
        self.in_flight: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self._wall0 = time.monotonic()
        self._server: _Server | None = None

    # ------------------------------------------------------------------ life
    def start(self) -> Self:
        """Serve on 127.0.0.1 (a thread)."""
        twin: LambdaTwin = self

        class Handler(_Handler):
            owner = twin

        try:
            self._server = _Server(("127.0.0.1", self.port), Handler)
        except OSError as exc:
            raise InvalidInputError("--port", f"cannot listen on 127.0.0.1:{self.port}: {exc.strerror}") from None
        self.port = self._server.server_address[1]
        self._wall0 = time.monotonic()
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="lambda-twin", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def now(self) -> float:
        """Twin seconds since the start."""
        return (time.monotonic() - self._wall0) * self.speed

    def clock(self) -> dict[str, Any]:
        """The ``/_twin/clock`` object."""
        t = self.now()
        now = (self.base + timedelta(seconds=t)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return {"t": t, "now": now, "mode": "accelerated", "speed": self.speed}

    def state(self) -> dict[str, Any]:
        """The ``/_twin/state`` object."""
        with self.lock:
            return {
                "clock": self.clock(),
                "functions": {n: f.to_dict(self.region) for n, f in self.functions.items()},
                "reserved": {n: f.reserved for n, f in self.functions.items() if f.reserved is not None},
                "in_flight": sorted(self.in_flight),
                "executions": dict(self.executions),
            }

    # ------------------------------------------------------------------ invoke
    def invoke(self, name: str, body: bytes) -> tuple[str | None, bytes]:
        """One invocation: (function error or None, payload)."""
        with self.lock:
            config = self.functions.get(name)
        if config is None:
            raise _ApiError(404, "ResourceNotFoundException", f"Function not found: {name}")
        try:
            payload = json.loads(body or b"{}")
        except ValueError as exc:
            raise _ApiError(400, "InvalidRequestContentException", f"Could not parse request body into json: {exc}")
        if not isinstance(payload, dict):
            raise _ApiError(
                400,
                "InvalidRequestContentException",
                "Could not parse request body into json: the payload must be a JSON object",
            )
        token = str(payload.get("token") or "")
        for _ in range(4 if token else 0):
            with self.lock:
                if token in self.answers:
                    return self.answers[token]
                waiting = self.in_flight.get(token)
                if waiting is None:
                    self.in_flight[token] = threading.Event()
                    self.executions[token] = self.executions.get(token, 0) + 1
                    break
            waiting.wait(timeout=config.timeout_s / self.speed + 5)
        else:
            if token:
                raise _ApiError(429, "TooManyRequestsException", f"invocation {token} is still running")
        answer: tuple[str | None, bytes] = ("Unhandled", b'{"errorMessage": "the worker crashed"}')
        try:
            answer = self._execute(config, payload)
        finally:
            if token:
                with self.lock:
                    self.answers[token] = answer
                    self.in_flight.pop(token).set()
        return answer

    def _execute(self, config: FunctionConfig, payload: dict[str, Any]) -> tuple[str | None, bytes]:
        try:
            seconds, answer = worker(self.problem, config.memory_mb, float(config.timeout_s), payload)
        except ValueError as exc:
            return "Unhandled", json.dumps({"errorMessage": str(exc), "errorType": "ValueError"}).encode()
        timed_out = seconds > config.timeout_s
        time.sleep(min(seconds, float(config.timeout_s)) / self.speed)
        if timed_out:
            return "Unhandled", json.dumps(
                {
                    "errorMessage": f"Task timed out after {config.timeout_s:.2f} seconds",
                    "errorType": "Sandbox.Timedout",
                }
            ).encode()
        return None, json.dumps(answer).encode()

    # ------------------------------------------------------------------ control plane
    def configure(self, name: str, params: dict[str, Any], create: bool = False) -> FunctionConfig:
        """CreateFunction / UpdateFunctionConfiguration."""
        with self.lock:
            if create and name in self.functions:
                raise _ApiError(409, "ResourceConflictException", f"Function already exist: {name}")
            if not create and name not in self.functions:
                raise _ApiError(404, "ResourceNotFoundException", f"Function not found: {name}")
            config = self.functions.get(name) or FunctionConfig(name=name)
            memory, timeout = params.get("MemorySize", config.memory_mb), params.get("Timeout", config.timeout_s)
            low, high = LAMBDA_MEMORY_MB
            if not (isinstance(memory, int) and low <= memory <= high):
                raise _ApiError(
                    400, "InvalidParameterValueException", f"MemorySize {memory!r} is not in {low}-{high} MB"
                )
            if not (isinstance(timeout, int) and 1 <= timeout <= 900):
                raise _ApiError(400, "InvalidParameterValueException", f"Timeout {timeout!r} is not in 1-900 s")
            config.memory_mb, config.timeout_s = memory, timeout
            for key, attr in (("Runtime", "runtime"), ("Handler", "handler"), ("Role", "role")):
                if key in params:
                    setattr(config, attr, str(params[key]))
            config.modified = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")
            self.functions[name] = config
            return config

    def route(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Answer one API request: (status, headers, body)."""
        if path.rstrip("/") == "/_twin/clock" and method == "GET":
            return 200, {}, json.dumps(self.clock()).encode()
        if path.rstrip("/") == "/_twin/state" and method == "GET":
            return 200, {}, json.dumps(self.state()).encode()
        params = json.loads(body) if body and method in ("POST", "PUT") else {}
        if path.rstrip("/") == "/2015-03-31/functions":
            if method == "POST":
                name = str(params.get("FunctionName", ""))
                if not name:
                    raise _ApiError(400, "InvalidParameterValueException", "FunctionName is required")
                return 201, {}, json.dumps(self.configure(name, params, create=True).to_dict(self.region)).encode()
            with self.lock:
                listed = [f.to_dict(self.region) for f in self.functions.values()]
            return 200, {}, json.dumps({"Functions": listed}).encode()
        match = _FUNCTION.match(path)
        if match is None:
            raise _ApiError(404, "UnknownOperationException", f"{method} {path}")
        _, name, tail = match.groups()
        name = unquote(name).rsplit(":", 1)[-1]
        if tail == "/invocations" and method == "POST":
            error, payload = self.invoke(name, body)
            return 200, {"X-Amz-Function-Error": error} if error else {}, payload
        if tail == "/configuration" and method == "PUT":
            return 200, {}, json.dumps(self.configure(name, params).to_dict(self.region)).encode()
        with self.lock:
            config = self.functions.get(name)
            if config is None:
                raise _ApiError(404, "ResourceNotFoundException", f"Function not found: {name}")
            if tail == "/concurrency":
                if method == "PUT":
                    value = params.get("ReservedConcurrentExecutions")
                    if not (isinstance(value, int) and value >= 0):
                        raise _ApiError(
                            400, "InvalidParameterValueException", "ReservedConcurrentExecutions must be >= 0"
                        )
                    config.reserved = value
                elif method == "DELETE":
                    config.reserved = None
                    return 204, {}, b""
                return (
                    200,
                    {},
                    json.dumps(
                        {} if config.reserved is None else {"ReservedConcurrentExecutions": config.reserved}
                    ).encode(),
                )
            if tail is None and method == "GET":
                answer = {"Configuration": config.to_dict(self.region), "Code": {"RepositoryType": "S3"}}
                if config.reserved is not None:
                    answer["Concurrency"] = {"ReservedConcurrentExecutions": config.reserved}
                return 200, {}, json.dumps(answer).encode()
            if tail is None and method == "DELETE":
                del self.functions[name]
                return 204, {}, b""
        raise _ApiError(404, "UnknownOperationException", f"{method} {path}")


class _ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _Handler(BaseHTTPRequestHandler):
    owner: LambdaTwin
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        try:
            status, headers, out = self.owner.route(self.command, path, body)
        except _ApiError as exc:
            status, out = exc.status, json.dumps({"Type": "User", "message": exc.message}).encode()
            headers = {"X-Amzn-ErrorType": exc.code}
        except ValueError as exc:
            status, out = 400, json.dumps({"Type": "User", "message": str(exc)}).encode()
            headers = {"X-Amzn-ErrorType": "InvalidRequestContentException"}
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Amzn-RequestId", f"{threading.get_ident():x}")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if out:
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = _serve
