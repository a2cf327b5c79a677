"""A digital twin of EC2: moto's server behind a capacity proxy that follows aligned spot traces.

:class:`Twin` listens on 127.0.0.1 and forwards every request to an upstream moto server
(one it starts itself when none is given), except:

- **RunInstances**: idempotent by ``ClientToken`` (a repeated token gets the first successful
  answer; other parameters changed: ``IdempotentParameterMismatch``). A spot launch
  (``InstanceMarketOptions.MarketType=spot``) goes to its pool ``type@zone`` (no zone: the
  type's first pool in the request's region) and gets what
  :meth:`dnnprov.control.clouds.capacity.CapacityBook.grant` gives, ``MinCount``/``MaxCount``
  rewritten to it, or EC2's ``InsufficientInstanceCapacity`` (HTTP 500) when it gives none or
  the twin has no such pool. On-demand launches always succeed, with ``MaxCount`` instances
  (moto would launch ``MinCount``).
- **TerminateInstances**: forwarded; the instances leave their pools.
- **DescribeSpotInstanceRequests**: answered by the twin, one request per spot instance it
  launched (moto keeps none for RunInstances spot launches), its status following the
  notice and the reclaim (``notice_status``).
- **RequestSpotInstances**, **RequestSpotFleet** and a spot **CreateFleet**: refused
  (``UnsupportedOperation``): moto would grant them beyond the traces' capacity.
- ``/_twin/...``: the twin's own clock and state (:data:`PREFIX`).

The twin has its own clock, seconds from its start: ``accelerated`` (``speed`` twin seconds
per wall second) or ``stepped`` (moved only by ``POST /_twin/advance``). Whenever it moves (at
every request, and every :data:`TICK_S` of wall time when accelerated) the capacity book
advances: a notice marks the spot request ``marked-for-termination``, a reclaim terminates the
instance in moto. Capacity follows the book, so the twin and
:class:`dnnprov.control.clouds.trace.TraceCloud` over the same pools agree by construction.
Requests are served one at a time under one lock. The pools and the clock are in
:mod:`dnnprov.control.twin.setup`, the protocol in :mod:`dnnprov.control.twin.ec2_protocol`.
docs/control.md ("The EC2 twin").
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit

from dnnprov.control.clouds.capacity import NOTICE_S, CapacityBook, CapacityEvent, PoolSpec
from dnnprov.control.twin import ec2_protocol as ec2
from dnnprov.control.twin.setup import DEFAULT_BASE, MODES, TwinClock, trace_pools
from dnnprov.errors import InvalidInputError

__all__ = ["DEFAULT_BASE", "MODES", "NOTICE_STATUSES", "Twin", "TwinClock", "TwinInstance", "trace_pools"]

#: The spot request status a notice sets (:class:`Twin`'s ``notice_status``).
NOTICE_STATUSES = (ec2.MARKED, ec2.RECLAIMED)
PREFIX = "/_twin/"
TICK_S = 0.05  # wall seconds between clock checks of an accelerated twin
UPSTREAM_TIMEOUT_S = 30.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")
HOP_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "expect",
}
Answer = tuple[int, list[tuple[str, str]], bytes]
LOG = logging.getLogger("dnnprov.twin")


@dataclass(frozen=True)
class TwinInstance:
    """What the twin knows of one instance launched through it (times are twin seconds)."""

    instance_id: str
    type_name: str
    zone: str | None
    market: str  # "spot" | "on-demand"
    tags: Mapping[str, str]
    launched_s: float
    notice_s: float | None = None
    ended_s: float | None = None
    ended_by: str | None = None  # "user" | "no-capacity"
    pool: str | None = None  # type@zone of a spot instance
    region: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``GET /_twin/instances``)."""
        return {
            "instance_id": self.instance_id,
            "type": self.type_name,
            "zone": self.zone,
            "market": self.market,
            "tags": dict(self.tags),
            "launched_s": self.launched_s,
            "notice_s": self.notice_s,
            "ended_s": self.ended_s,
            "ended_by": self.ended_by,
            "pool": self.pool,
            "region": self.region,
        }


@dataclass
class _Record:
    instance: TwinInstance
    request_tags: dict[str, str]
    auth: dict[str, str]  # the launch's credential headers, reused to terminate it upstream
    spot_price: str
    state: str = "active"
    status: str = ec2.FULFILLED
    status_s: float = 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    twin: Twin

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer: logged, not printed as a traceback (socketserver
        calls this inside its ``except``, so ``sys.exc_info()`` is that failure)."""
        LOG.debug("twin: connection from %s failed", client_address, exc_info=sys.exc_info())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s " + format, self.address_string(), *args)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        status, headers, out = self.server.twin.handle(self.command, self.path, list(self.headers.items()), body)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _serve


def _json(status: int, data: object) -> Answer:
    return status, [("Content-Type", "application/json")], json.dumps(data).encode()


def _spot_elsewhere(action: str | None, params: ec2.Params) -> bool:
    """A spot launch by another call than RunInstances (refused: moto would grant it unbounded)."""
    if action in ("RequestSpotInstances", "RequestSpotFleet"):
        return True
    if action != "CreateFleet":
        return False
    spot_target = ec2.first(params, "TargetCapacitySpecification.SpotTargetCapacity") or "0"
    return ec2.first(params, "TargetCapacitySpecification.DefaultTargetCapacityType") == "spot" or (
        spot_target.isdigit() and int(spot_target) > 0
    )


def _zone_region(zone: str) -> str:
    return re.sub(r"[a-z]+$", "", zone)


class Twin:
    """The EC2 twin (module docstring): ``with Twin(pools, mode="stepped") as twin: twin.url``.

    Parameters
    ----------
    pools
        The spot pools (:func:`trace_pools`); a spot launch outside them is refused.
    upstream
        A moto server's URL on loopback; ``None``: the twin starts its own.
    port
        Port on 127.0.0.1 (0: a free one).
    mode, speed, base
        The clock (:class:`TwinClock`); ``base`` is the UTC instant of twin time 0.
    region
        The region of requests that carry no SigV4 credential scope.
    notice_s
        Seconds from a notice to its reclaim (EC2's 120).
    notice_status
        The spot request's status from the notice: ``marked-for-termination`` (state active,
        then ``instance-terminated-no-capacity``, closed, at the reclaim), or
        ``instance-terminated-no-capacity`` (closed) at once, as EC2's user guide documents
        for instances that terminate on interruption ("Spot request status").
    """

    def __init__(
        self,
        pools: Sequence[PoolSpec] = (),
        *,
        upstream: str | None = None,
        port: int = 0,
        mode: str = "accelerated",
        speed: float = 1.0,
        base: datetime = DEFAULT_BASE,
        region: str = "us-east-1",
        notice_s: float = NOTICE_S,
        notice_status: str = ec2.MARKED,
    ) -> None:
        self.pools = list(pools)
        self.book = CapacityBook(self.pools, notice_s=notice_s) if self.pools else None
        self.clock = TwinClock(mode, speed, base)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidInputError("port", f"must be 0 (a free port) or 1..65535, got {port!r}")
        if upstream is not None:
            parts = urlsplit(upstream)
            if parts.scheme != "http" or parts.hostname not in LOOPBACK or parts.port is None:
                raise InvalidInputError(
                    "upstream", f"must be http://127.0.0.1:PORT (a moto server on loopback), got {upstream!r}"
                )
        if notice_status not in NOTICE_STATUSES:
            raise InvalidInputError("notice_status", f"one of {', '.join(NOTICE_STATUSES)}, got {notice_status!r}")
        self.upstream, self.port, self.region, self.notice_status = upstream, port, region, notice_status
        #: twin seconds past which the traces say nothing: spot launches are refused from then on
        self.end_s = min(((len(p.trace.alive) - p.offset) * p.trace.gap_s for p in self.pools), default=math.inf)
        self._lock = threading.RLock()
        self._records: dict[str, _Record] = {}
        self._tokens: dict[tuple[str, str], tuple[tuple, Answer]] = {}
        self._events: list[CapacityEvent] = []
        self._errors: list[str] = []
        self._t = 0.0
        self._server: _Server | None = None
        self._moto: Any = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ life cycle
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the started twin."""
        if self._server is None:
            raise InvalidInputError("twin", "not started: call start() or use it as a context manager")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        """Start moto (when no upstream was given), the proxy and the clock."""
        if self._server is not None:
            return self
        if self.upstream is None:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request lines
            self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._moto.start()
            host, port = self._moto.get_host_and_port()
            self.upstream = f"http://{host}:{port}"
        try:
            self._server = _Server(("127.0.0.1", self.port), _Handler)
        except OSError as exc:
            self._stop_moto()
            raise InvalidInputError("port", f"cannot listen on 127.0.0.1:{self.port}: {exc.strerror or exc}") from None
        self._server.twin = self
        self._stopping.clear()
        self.clock.start()
        self._threads = [
            threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="twin-http", daemon=True
            )
        ]
        if self.clock.mode == "accelerated":
            self._threads.append(threading.Thread(target=self._tick, name="twin-clock", daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop the proxy, the clock and the moto server the twin started (idempotent)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []
        self._stop_moto()

    def _stop_moto(self) -> None:
        if self._moto is not None:
            self._moto.stop()
            self._moto, self.upstream = None, None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tick(self) -> None:
        while not self._stopping.wait(TICK_S):
            try:
                with self._lock:
                    self._sync()
            except Exception as exc:  # noqa: BLE001 - the clock thread must outlive one bad step (recorded by _error)
                self._error(f"clock: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ the Python API
    def now(self) -> float:
        """Twin seconds since the start."""
        return self.clock.now()

    def advance(self, seconds: float) -> list[CapacityEvent]:
        """Move the clock ``seconds`` ahead; the notices and reclaims on the way."""
        with self._lock:
            self.clock.advance(seconds)
            return self._sync()

    def instances(self) -> list[TwinInstance]:
        """Every instance launched through the twin, in launch order."""
        with self._lock:
            self._sync()
            return [r.instance for r in self._records.values()]

    def capacity_events(self) -> list[CapacityEvent]:
        """Every notice and reclaim so far, in time order."""
        with self._lock:
            self._sync()
            return list(self._events)

    def state(self) -> dict[str, Any]:
        """The clock, each pool's capacity now, live and notified counts, and each instance."""
        with self._lock:
            self._sync()
            past = self._t >= self.end_s
            pools = []
            for p in self.pools:
                mine = [r.instance for r in self._records.values() if r.instance.pool == p.name]
                pools.append(
                    {
                        "name": p.name,
                        "type": p.type_name,
                        "zone": p.zone,
                        "trace": p.trace.path,
                        "offset": p.offset,
                        "price_per_h": p.price_per_h,
                        "capacity": None if past or self.book is None else p.capacity_at(self.book.now_s),
                        "live": sum(1 for i in mine if i.notice_s is None and i.ended_s is None),
                        "notified": sum(1 for i in mine if i.notice_s is not None and i.ended_s is None),
                    }
                )
            notice = self.book.notice_s if self.book is not None else NOTICE_S
            instances = [
                {**i.to_dict(), "reclaim_s": None if i.notice_s is None else i.notice_s + notice}
                for i in (r.instance for r in self._records.values())
            ]
            return {
                "clock": self.clock.to_dict(self._t),
                "end_s": None if math.isinf(self.end_s) else self.end_s,
                "pools": pools,
                "instances": instances,
                "errors": list(self._errors),
            }

    def describe(self) -> dict[str, Any]:
        """``{"url", "clock", "pools"}``: what ``dnnprov twin`` prints when ready."""
        state = self.state()
        return {"url": self.url, "clock": state["clock"], "pools": state["pools"]}

    # ------------------------------------------------------------------ time
    def _sync(self) -> list[CapacityEvent]:
        """Bring the book to the clock (the lock is held); apply what happened on the way."""
        self._t = self.clock.now()
        if self.book is None:
            return []
        to = min(self._t, self.end_s - 1e-6)
        if to <= self.book.now_s:
            return []
        events = self.book.advance(to)
        for event in events:
            record = self._records[event.instance_id]
            self._events.append(event)
            if event.kind == "notice":
                record.instance = replace(record.instance, notice_s=event.time_s)
                record.status, record.status_s = self.notice_status, event.time_s
                record.state = "active" if self.notice_status == ec2.MARKED else "closed"
            elif record.instance.ended_s is None:
                record.instance = replace(record.instance, ended_s=event.time_s, ended_by="no-capacity")
                if record.status != ec2.RECLAIMED:
                    record.state, record.status, record.status_s = "closed", ec2.RECLAIMED, event.time_s
                self._terminate_upstream(record)
        return events

    def _terminate_upstream(self, record: _Record) -> None:
        body = ec2.encode_params(
            [("Action", "TerminateInstances"), ("Version", "2016-11-15"), ("InstanceId.1", record.instance.instance_id)]
        )
        headers = [*record.auth.items(), ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")]
        try:
            status, _, out = self._forward("POST", "/", headers, body)
        except OSError as exc:
            status, out = 0, str(exc).encode()
        if status != 200:
            self._error(f"reclaim of {record.instance.instance_id}: moto answered {status}: {out[:200]!r}")

    def _error(self, text: str) -> None:
        LOG.warning("%s", text)
        self._errors = [*self._errors[-19:], text]

    # ------------------------------------------------------------------ requests
    def handle(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> Answer:
        """Answer one request (``(status, headers, body)``), in order under the twin's lock."""
        with self._lock:
            try:
                self._sync()
                split = urlsplit(path)
                if split.path.startswith(PREFIX):
                    return self._own(method, split.path, body)
                head = {k.lower(): v for k, v in headers}
                params: ec2.Params = []
                if "x-www-form-urlencoded" in head.get("content-type", "") or (method == "GET" and split.query):
                    params = ec2.parse_params(body if method == "POST" else b"", split.query)
                action = ec2.first(params, "Action")
                region, service = ec2.credential_scope(head)
                if service in (None, "ec2") and action in (
                    "RunInstances",
                    "TerminateInstances",
                    "DescribeSpotInstanceRequests",
                ):
                    form = [(k, v) for k, v in headers if k.lower() != "content-type"]
                    form.append(("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"))
                    return getattr(self, f"_{action}")(split.path or "/", form, params, region or self.region)
                if service in (None, "ec2") and action == "DescribeInstances":
                    return self._with_twin_times(self._forward(method, path, headers, body))
                if service in (None, "ec2") and _spot_elsewhere(action, params):
                    return ec2.error(
                        "UnsupportedOperation",
                        f"the EC2 twin models spot capacity for RunInstances "
                        f"only; a spot {action} would bypass the traces' capacity",
                    )
                return self._forward(method, path, headers, body)
            except InvalidInputError as exc:
                return ec2.error("InvalidParameterValue", str(exc))
            except OSError as exc:
                return ec2.error("Unavailable", f"the twin's upstream {self.upstream} did not answer: {exc}", 503)
            except Exception as exc:  # a bug of the twin: the client still gets EC2's shape
                LOG.exception("twin: %s %s", method, path)
                return ec2.error("InternalError", f"the twin failed: {type(exc).__name__}: {exc}", 500)

    def _forward(self, method: str, path: str, headers: Sequence[tuple[str, str]], body: bytes) -> Answer:
        if self.upstream is None:
            raise OSError("no upstream: the twin is not started")
        target = urlsplit(self.upstream)
        if target.hostname is None:
            raise OSError(f"the upstream {self.upstream} names no host")
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=UPSTREAM_TIMEOUT_S)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", f"{target.hostname}:{target.port}")
            for name, value in headers:
                if name.lower() not in HOP_HEADERS:
                    conn.putheader(name, value)
            if body or method in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            response = conn.getresponse()
            out = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_HEADERS]
            return response.status, kept, out
        finally:
            conn.close()

    def _own(self, method: str, path: str, body: bytes) -> Answer:
        """The ``/_twin/`` endpoints."""
        routes = {"clock": "GET", "state": "GET", "instances": "GET", "advance": "POST"}
        name = path[len(PREFIX) :].strip("/")
        if name not in routes:
            return _json(404, {"error": f"no twin endpoint {path} (known: {', '.join(PREFIX + r for r in routes)})"})
        if method != routes[name]:
            return _json(405, {"error": f"{path} takes {routes[name]}"})
        if name == "clock":
            return _json(200, self.clock.to_dict(self._t))
        if name == "state":
            return _json(200, self.state())
        if name == "instances":
            return _json(200, [i.to_dict() for i in self.instances()])
        try:
            seconds = json.loads(body or b"null")["seconds"]
            events = self.advance(seconds)
        except (ValueError, TypeError, KeyError) as exc:
            return _json(400, {"error": f'POST /_twin/advance takes {{"seconds": S}} with S >= 0: {exc}'})
        return _json(
            200,
            {
                **self.clock.to_dict(self._t),
                "events": [
                    {"time_s": e.time_s, "kind": e.kind, "instance_id": e.instance_id, "pool": e.pool} for e in events
                ],
            },
        )

    def _RunInstances(self, path: str, headers: list[tuple[str, str]], params: ec2.Params, region: str) -> Answer:
        token = ec2.first(params, "ClientToken")
        fingerprint = tuple(sorted((k, v) for k, v in params if k not in ("ClientToken", "Placement.AvailabilityZone")))
        if token and (region, token) in self._tokens:
            seen, answer = self._tokens[(region, token)]
            if seen != fingerprint:
                return ec2.error(
                    "IdempotentParameterMismatch", f"The client token '{token}' was used with other parameters"
                )
            return answer
        try:
            low, high = int(ec2.first(params, "MinCount") or ""), int(ec2.first(params, "MaxCount") or "")
        except ValueError:
            return ec2.error(
                "MissingParameter", "The request must contain the parameters MinCount and MaxCount (whole numbers)"
            )
        if not 1 <= low <= high:
            return ec2.error(
                "InvalidParameterValue", f"MinCount {low} and MaxCount {high}: need 1 <= MinCount <= MaxCount"
            )
        if (ec2.first(params, "DryRun") or "").lower() == "true":
            return self._forward("POST", path, headers, ec2.encode_params(params))
        type_name = ec2.first(params, "InstanceType") or "m1.small"
        zone = ec2.first(params, "Placement.AvailabilityZone")
        spot = ec2.first(params, "InstanceMarketOptions.MarketType") == "spot"
        pool = None
        if spot:
            pool = next(
                (
                    p
                    for p in self.pools
                    if p.type_name == type_name and (p.zone == zone if zone else _zone_region(p.zone) == region)
                ),
                None,
            )
            if pool is None or self.book is None:
                return ec2.insufficient_capacity(type_name, zone)
            if self._t >= self.end_s:
                return ec2.error(
                    "InsufficientInstanceCapacity",
                    f"the twin's traces end at {self.end_s:g} s of twin time (now {self._t:g} s)",
                    500,
                )
            granted = self.book.grant(pool.name, low, high)
            if granted == 0:
                return ec2.insufficient_capacity(type_name, pool.zone)
            sent = ec2.replaced(
                params, {"MinCount": str(granted), "MaxCount": str(granted), "Placement.AvailabilityZone": pool.zone}
            )
        else:
            sent = ec2.replaced(params, {"MinCount": str(high)})
        answer = self._forward("POST", path, headers, ec2.encode_params(sent))
        if answer[0] != 200:
            return answer
        made = ec2.launched(answer[2])
        if pool is not None and self.book is not None:
            self.book.add(pool.name, [i for i, _ in made])
        tags = ec2.tag_specifications(params)
        auth = {k: v for k, v in headers if k.lower() in ("authorization", "x-amz-date", "x-moto-account-id")}
        price = ec2.first(params, "InstanceMarketOptions.SpotOptions.MaxPrice") or (
            f"{pool.price_per_h:.6f}" if pool is not None else ""
        )
        for instance_id, where in made:
            instance = TwinInstance(
                instance_id=instance_id,
                type_name=type_name,
                zone=where or zone,
                market="spot" if spot else "on-demand",
                tags=dict(tags.get("instance", {})),
                launched_s=self._t,
                pool=pool.name if pool else None,
                region=region,
            )
            self._records[instance_id] = _Record(
                instance, dict(tags.get("spot-instances-request", {})), auth, price, status_s=self._t
            )
        answer = self._with_twin_times(answer)
        if token:
            self._tokens[(region, token)] = (fingerprint, answer)
        return answer

    def _with_twin_times(self, answer: Answer) -> Answer:
        """moto's instance answer with the twin's launch times and reclaims (its own are wall time)."""
        if answer[0] != 200:
            return answer
        base = self.clock.base
        times = {
            i: (
                ec2.iso(base, r.instance.launched_s),
                None if r.instance.ended_s is None else ec2.iso(base, r.instance.ended_s),
                r.instance.ended_by == "no-capacity",
            )
            for i, r in self._records.items()
        }
        return answer[0], answer[1], ec2.with_twin_times(answer[2], times)

    def _TerminateInstances(self, path: str, headers: list[tuple[str, str]], params: ec2.Params, region: str) -> Answer:
        answer = self._forward("POST", path, headers, ec2.encode_params(params))
        if answer[0] != 200 or (ec2.first(params, "DryRun") or "").lower() == "true":
            return answer
        for instance_id in ec2.indexed(params, "InstanceId"):
            record = self._records.get(instance_id)
            if record is None or record.instance.ended_s is not None:
                continue
            record.instance = replace(record.instance, ended_s=self._t, ended_by="user")
            if record.instance.market == "spot":
                record.state, record.status, record.status_s = "closed", ec2.BY_USER, self._t
                if self.book is not None:
                    self.book.release(instance_id)
        return answer

    def _DescribeSpotInstanceRequests(
        self, path: str, headers: list[tuple[str, str]], params: ec2.Params, region: str
    ) -> Answer:
        if (ec2.first(params, "DryRun") or "").lower() == "true":
            return ec2.error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)
        requests = [
            self._spot_request(r)
            for r in self._records.values()
            if r.instance.market == "spot" and r.instance.region == region
        ]
        chosen = ec2.select_spot_requests(requests, params)
        return chosen if isinstance(chosen, tuple) else ec2.spot_requests_answer(chosen)

    def _spot_request(self, record: _Record) -> ec2.SpotRequest:
        i, base = record.instance, self.clock.base
        return ec2.SpotRequest(
            request_id=f"sir-{i.instance_id.removeprefix('i-')}",
            instance_id=i.instance_id,
            type_name=i.type_name,
            zone=i.zone,
            state=record.state,
            status_code=record.status,
            update_time=ec2.iso(base, record.status_s),
            create_time=ec2.iso(base, i.launched_s),
            spot_price=record.spot_price,
            tags=record.request_tags,
        )
