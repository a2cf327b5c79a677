"""The PostgreSQL job store of ``dnnprov serve --db postgresql://...``: several servers on one database.

The same interface as the SQLite :class:`~dnnprov.service.store.sqlite.JobStore`, for replicas that
share one database. Each server (a *replica*, named ``host:pid:random``) owns the jobs it
accepted and holds a **lease** on each of them: ``owner`` and ``lease_until`` (seconds on
the database's clock, so replicas' clocks do not matter). A thread of the replica renews
its leases every ``lease_s / 5`` seconds and, in the same beat, adopts what nobody holds:

- a ``running`` job whose lease expired (its replica was killed) goes back to ``queued``
  with its attempt counted, then is claimed like a queued one;
- a ``queued`` job with no owner or an expired lease is claimed (``FOR UPDATE SKIP
  LOCKED``: two replicas never claim one job), and so is, when this replica has idle
  slots, the oldest queued job of a busy replica (work stealing);
- a job this replica held but that its renewal no longer finds (cancelled through another
  replica, stolen, or adopted after this replica lost the database for a whole lease) is
  stopped here at once;
- a job the database says this replica owns but that its runner has not had for
  :data:`STRAY_S` seconds (a start or re-queue committed just as the connection broke, its
  answer lost) is queued again.

Expired leases are trusted only after this replica has reached the database without a
break for a whole lease (any failed statement or renewal restarts that clock): after an
outage longer than a lease every lease looks expired, and the live owners renew theirs
within ``lease_s / 5`` of the database's return, before anyone may take their jobs.

Starting a job (:meth:`PgJobStore.start`) is an atomic claim of a ``queued`` job owned by this
replica (or the running job whose start this replica committed but never heard back about: it
is not counted twice); its end (:meth:`finish`, :meth:`requeue`) is written only while this
replica still owns the job *and* the attempt it started is the job's current one, so a job's
result is written once, by the attempt that ran to the end. Database errors (a lost
connection, a lock timeout, a server restart) are retried with a new connection for up to
``retry_s`` seconds, then raise :class:`~dnnprov.service.store.StoreBusy`, as SQLite's busy
errors do.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from dnnprov.errors import InvalidInputError
from dnnprov.service.store.base import (
    COLUMNS,
    FINAL,
    STATES,
    Capacity,
    Job,
    JobRunner,
    StoreBusy,
    body_hash,
    dump_json,
    job_of_row,
    list_query,
    replay_of,
)

LOG = logging.getLogger("dnnprov.service")
T = TypeVar("T")
#: Seconds a replica's hold on a job lasts without renewal (``?lease_s=`` in the URL sets it).
DEFAULT_LEASE_S = 10.0
#: Seconds a job this replica owns may be missing from its runner before it is queued again (see ``_strays_due``).
STRAY_S = 5.0
#: The database's clock, in seconds since the epoch: every lease is measured on it.
NOW = "extract(epoch from clock_timestamp())::float8"
_TABLE = "dnnprov_jobs"
_RETURNED = ", ".join(f"j.{column}" for column in COLUMNS.split(", "))
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    id TEXT PRIMARY KEY,
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    kind TEXT NOT NULL,
    body TEXT,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created DOUBLE PRECISION NOT NULL,
    started DOUBLE PRECISION,
    finished DOUBLE PRECISION,
    tenant TEXT NOT NULL DEFAULT '',
    idempotency_key TEXT,
    body_hash TEXT,
    request_id TEXT,
    owner TEXT,
    lease_until DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS {_TABLE}_status ON {_TABLE} (status, seq);
CREATE INDEX IF NOT EXISTS {_TABLE}_owner ON {_TABLE} (owner) WHERE status IN ('queued', 'running');
CREATE UNIQUE INDEX IF NOT EXISTS {_TABLE}_idem ON {_TABLE} (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
"""
#: Any number, the same in every replica: serializes the schema's creation by replicas starting at once.
_SCHEMA_LOCK = 0x646E6E70


def redacted(url: str) -> str:
    """The URL without its password (for logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _split_options(url: str) -> tuple[str, float]:
    """The connection URL without dnnprov's own ``lease_s`` parameter, and the lease."""
    parts = urlsplit(url)
    query, lease_s = [], DEFAULT_LEASE_S
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key != "lease_s":
            query.append((key, value))
            continue
        try:
            lease_s = float(value)
        except ValueError:
            lease_s = float("nan")
        if not 1.0 <= lease_s <= 3600.0:
            raise InvalidInputError("--db", f"lease_s must be within 1..3600 seconds, got {value!r}")
    return urlunsplit(parts._replace(query=urlencode(query))), lease_s


class PgJobStore:
    """Jobs in PostgreSQL, shared by several replicas; safe to use from several threads of one process."""

    def __init__(self, url: str, *, retry_s: float = 5.0) -> None:
        self.path = redacted(url)  # what the server logs as its ``db``
        self.retry_s = retry_s
        self.healthy = True
        self.replica = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._conninfo, self.lease_s = _split_options(url)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._held: set[str] = set()  # jobs this replica owns (queued or running here)
        self._claims: dict[str, int] = {}  # running job -> the attempt this replica started
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._renewed_ok = True
        self._closed = False
        self._runner: JobRunner | None = None
        self._pool: Capacity | None = None
        self._draining: Callable[[], bool] = lambda: False
        self._stray_since: dict[str, float] = {}
        #: Since when this replica has reached the database without a break (``None``: the last renewal failed).
        self._connected_since: float | None = time.monotonic()
        try:
            with self._lock:
                conn = self._connect()
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    conn.execute(_SCHEMA)
        except psycopg.Error as exc:
            raise InvalidInputError(
                "--db",
                f"cannot use {self.path} as the job store: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}",
            ) from None

    # ------------------------------------------------------------------ connection
    def _connect(self) -> psycopg.Connection[Any]:
        """The open connection (a new one when there is none or it broke); the caller holds ``_lock``."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            conn = psycopg.connect(
                self._conninfo, autocommit=True, connect_timeout=5, application_name=f"dnnprov {self.replica}"[:63]
            )
            conn.execute("SET lock_timeout = '2s'")
            conn.execute("SET statement_timeout = '30s'")
            self._conn = conn
        return self._conn

    def close(self) -> None:
        """Stop renewing, hand the jobs still queued here to the other replicas, close the connection."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(10)
        try:
            self._run(
                lambda db: db.execute(
                    f"UPDATE {_TABLE} SET owner = NULL, lease_until = 0 WHERE owner = %s AND status = 'queued'",
                    (self.replica,),
                ),
                retry_s=1.0,
            )
        except StoreBusy:
            pass  # their leases expire on their own
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(
        self, operation: Callable[[psycopg.Connection[Any]], T], retry_s: float | None = None, *, write: bool = True
    ) -> T:
        """``operation(db)`` (a write: in one transaction), retried on a new connection while the database fails."""
        deadline = time.monotonic() + (self.retry_s if retry_s is None else retry_s)
        pause = 0.02
        while True:
            try:
                with self._lock:
                    if self._closed:
                        raise StoreBusy("the job store is closed")
                    conn = self._connect()
                    if write:
                        with conn.transaction():
                            value = operation(conn)
                    else:
                        value = operation(conn)
                self.healthy = True
                if self._connected_since is None:
                    self._connected_since = time.monotonic()
                return value
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self.healthy = False
                self._connected_since = None  # expired leases are not trusted for a lease from now
                if time.monotonic() + pause > deadline:
                    raise StoreBusy(f"the job store is unavailable: {str(exc).strip() or type(exc).__name__}") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def ping(self) -> bool:
        """Whether the database answers now and this replica's leases are being renewed (readiness)."""
        try:
            self._run(lambda db: db.execute("SELECT 1").fetchone(), retry_s=0.0, write=False)
        except StoreBusy:
            return False
        return self._renewed_ok

    # ------------------------------------------------------------------ the SQLite store's interface
    def add(
        self,
        kind: str,
        body: Any,
        *,
        tenant: str = "",
        idempotency_key: str | None = None,
        request_id: str | None = None,
    ) -> tuple[str, bool]:
        """Store a new queued job owned by this replica; returns ``(id, created)`` once committed.

        An ``idempotency_key`` already used by ``tenant`` (on any replica) returns the stored
        job's id when its body is the same; another body raises :class:`InvalidInputError`.
        """
        digest = body_hash(kind, body)
        text = json.dumps(body)

        def insert(db: psycopg.Connection[Any]) -> tuple[str, bool]:
            job_id = uuid.uuid4().hex
            row = db.execute(
                f"INSERT INTO {_TABLE} (id, kind, body, status, created, tenant, idempotency_key, body_hash, "
                f"request_id, owner, lease_until) VALUES (%s, %s, %s, 'queued', %s, %s, %s, %s, %s, %s, {NOW} + %s) "
                "ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id",
                (
                    job_id,
                    kind,
                    text,
                    time.time(),
                    tenant,
                    idempotency_key,
                    digest,
                    request_id,
                    self.replica,
                    self.lease_s,
                ),
            ).fetchone()
            if row is not None:
                return job_id, True
            found = db.execute(
                f"SELECT id, body_hash FROM {_TABLE} WHERE tenant = %s AND idempotency_key = %s",
                (tenant, idempotency_key),
            ).fetchone()
            if found is None:  # deleted between the two statements: a new job after all
                return insert(db)
            return replay_of(found, digest), False

        job_id, created = self._run(insert)
        if created:
            with self._held_lock:
                self._held.add(job_id)
        return job_id, created

    def replayed(self, kind: str, body: Any, *, tenant: str, idempotency_key: str) -> str | None:
        """The id of ``tenant``'s job under ``idempotency_key`` when its body is this one (``None``:
        the key is unused); another body raises :class:`InvalidInputError` on ``Idempotency-Key``."""
        row = self._run(
            lambda db: db.execute(
                f"SELECT id, body_hash FROM {_TABLE} WHERE tenant = %s AND idempotency_key = %s",
                (tenant, idempotency_key),
            ).fetchone(),
            write=False,
        )
        return None if row is None else replay_of(row, body_hash(kind, body))

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        """The job (of ``tenant``, when given), or ``None``."""
        query = f"SELECT {COLUMNS} FROM {_TABLE} WHERE id = %s" + (" AND tenant = %s" if tenant is not None else "")
        args = (job_id,) if tenant is None else (job_id, tenant)
        row = self._run(lambda db: db.execute(query, args).fetchone(), write=False)
        return None if row is None else job_of_row(row)

    def start(self, job_id: str, retry_s: float | None = None) -> bool:
        """Claim a queued job of this replica (one more attempt); ``False`` when it is no longer ours to start.

        A job this replica already set running without hearing back (the commit happened, the
        answer was lost with the connection, and this call or a caller's retry asks again) is
        claimed as it is: the same attempt, not counted twice.
        """
        with self._held_lock:
            unheard = job_id not in self._claims  # a running job of ours we hold no attempt of
        row = self._run(
            lambda db: db.execute(
                f"UPDATE {_TABLE} SET status = 'running', started = %s, "
                "attempts = attempts + CASE WHEN status = 'queued' THEN 1 ELSE 0 END, "
                f"lease_until = {NOW} + %s WHERE id = %s AND owner = %s "
                "AND (status = 'queued' OR (status = 'running' AND %s)) RETURNING attempts",
                (time.time(), self.lease_s, job_id, self.replica, unheard),
            ).fetchone(),
            retry_s,
        )
        if row is None:
            return False
        with self._held_lock:
            self._held.add(job_id)
            self._claims[job_id] = row[0]
        return True

    def finish(
        self, job_id: str, status: str, *, result: Any = None, error: Any = None, retry_s: float | None = None
    ) -> bool:
        """Record the end of the attempt this replica started; ``False`` when it is no longer that attempt's job."""
        attempt = self._claims.get(job_id)
        if attempt is None:
            return False
        # ``status IN ('running', status)``: a retry after a lost commit of this same end finds it written.
        values = (status, dump_json(result), dump_json(error), time.time(), job_id, self.replica, attempt, status)
        with self._held_lock:  # before the write: a renewal must not take the ended job for a lost one
            self._held.discard(job_id)
        done = self._run(
            lambda db: (
                db.execute(
                    f"UPDATE {_TABLE} SET status = %s, result = %s, error = %s, finished = %s, body = NULL, lease_until = NULL "
                    "WHERE id = %s AND owner = %s AND attempts = %s AND status IN ('running', %s)",
                    values,
                ).rowcount
                == 1
            ),
            retry_s,
        )
        with self._held_lock:
            self._claims.pop(job_id, None)
        return done

    def requeue(self, job_id: str, *, refund: bool, retry_s: float | None = None) -> bool:
        """Put the running attempt of this replica back in the queue.

        ``refund`` (a graceful stop): the attempt is not counted and the job is left to any
        replica; otherwise (its worker died) this replica keeps it and runs it again.
        """
        attempt = self._claims.get(job_id)
        if attempt is None:
            return False
        owner = None if refund else self.replica
        done = self._run(
            lambda db: (
                db.execute(
                    f"UPDATE {_TABLE} SET status = 'queued', started = NULL, attempts = attempts - %s, owner = %s, "
                    f"lease_until = CASE WHEN %s THEN 0 ELSE {NOW} + %s END "
                    "WHERE id = %s AND status = 'running' AND owner = %s AND attempts = %s",
                    (1 if refund else 0, owner, refund, self.lease_s, job_id, self.replica, attempt),
                ).rowcount
                == 1
            ),
            retry_s,
        )
        with self._held_lock:
            self._claims.pop(job_id, None)
            if refund:
                self._held.discard(job_id)
        return done

    def cancel(self, job_id: str, tenant: str | None = None) -> str | None:
        """Cancel a queued or running job; returns the status it had (``None``: no such job).

        The replica running it sees the cancel at its next lease renewal and stops the work.
        """

        def cancel(db: psycopg.Connection[Any]) -> str | None:
            row = db.execute(f"SELECT status, tenant FROM {_TABLE} WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
            if row is None or (tenant is not None and row[1] != tenant):
                return None
            if row[0] not in FINAL:
                db.execute(
                    f"UPDATE {_TABLE} SET status = 'cancelled', finished = %s, body = NULL, lease_until = NULL "
                    "WHERE id = %s",
                    (time.time(), job_id),
                )
            return str(row[0])

        with self._held_lock:  # before the write, as in finish
            held = job_id in self._held
            self._held.discard(job_id)
        before = self._run(cancel)
        with self._held_lock:
            if before is None and held:  # not this tenant's job: it stays ours
                self._held.add(job_id)
            elif before is not None:
                self._claims.pop(job_id, None)
        return before

    def delete(self, job_id: str, tenant: str | None = None) -> bool:
        """Delete an ended job; ``False`` when there is no such ended job."""
        query = f"DELETE FROM {_TABLE} WHERE id = %s AND status IN ('done', 'failed', 'cancelled')"
        query += " AND tenant = %s" if tenant is not None else ""
        args = (job_id,) if tenant is None else (job_id, tenant)
        return self._run(lambda db: db.execute(query, args).rowcount == 1)

    def purge(self, older_than_s: float) -> int:
        """Delete jobs that ended more than ``older_than_s`` seconds ago; returns how many."""
        cutoff = time.time() - older_than_s
        return self._run(
            lambda db: (
                db.execute(
                    f"DELETE FROM {_TABLE} WHERE status IN ('done', 'failed', 'cancelled') AND finished < %s", (cutoff,)
                ).rowcount
            )
        )

    def counts(self) -> dict[str, int]:
        """Number of jobs per state (of every replica)."""
        rows = self._run(
            lambda db: db.execute(f"SELECT status, COUNT(*) FROM {_TABLE} GROUP BY status").fetchall(), write=False
        )
        return {state: 0 for state in STATES} | {str(status): int(n) for status, n in rows}

    # ------------------------------------------------------------------ leases
    def recover(self) -> list[Job]:
        """Adopt the jobs nobody holds (and, with idle slots, steal queued ones); returns them in order.

        Called at start and at every lease beat (:meth:`attach`) through
        :meth:`~dnnprov.service.jobs.JobRunner.recover`, which queues them here.
        """
        steal = self._capacity() if self._runner is not None else 0

        def adopt(db: psycopg.Connection[Any]) -> list[tuple[Job, str | None, str]]:
            # Judged at each try, not once before them: a try retried across an outage must not
            # trust the leases the outage expired (the live owners have not renewed them yet).
            since = self._connected_since
            trusted = since is not None and time.monotonic() - since >= self.lease_s
            expired = db.execute(
                f"WITH old AS (SELECT id, owner FROM {_TABLE} WHERE %s AND status = 'running' AND owner <> %s "
                f"AND lease_until < {NOW} FOR UPDATE SKIP LOCKED) "
                f"UPDATE {_TABLE} j SET status = 'queued', started = NULL, owner = NULL FROM old WHERE j.id = old.id "
                "RETURNING j.id, old.owner",
                (trusted, self.replica),
            ).fetchall()
            was = {row[0]: row[1] for row in expired}
            rows = db.execute(  # unowned (handed over, or expired just above) always; expired ones when trusted
                f"WITH old AS (SELECT id, owner FROM {_TABLE} WHERE status = 'queued' "
                f"AND (owner IS NULL OR (%s AND owner <> %s AND lease_until < {NOW})) FOR UPDATE SKIP LOCKED) "
                f"UPDATE {_TABLE} j SET owner = %s, lease_until = {NOW} + %s FROM old WHERE j.id = old.id "
                f"RETURNING old.owner, {_RETURNED}",
                (trusted, self.replica, self.replica, self.lease_s),
            ).fetchall()
            found = [
                (job_of_row(row[1:]), was.get(row[1], row[0]), "running" if row[1] in was else "queued") for row in rows
            ]
            return sorted(found + self._strays(db, steal), key=lambda item: item[0].seq)

        adopted = self._run(adopt)
        with self._held_lock:
            self._held.update(job.id for job, _, _ in adopted)
        for job, previous, was in adopted:
            _log(
                "job_adopted",
                job_id=job.id,
                kind=job.kind,
                was=was,
                previous_owner=previous,
                owner=self.replica,
                attempts=job.attempts,
            )
        return [job for job, _, _ in adopted]

    def _strays(self, db: psycopg.Connection[Any], steal: int) -> list[tuple[Job, str | None, str]]:
        """The queued jobs stolen from busy replicas (``steal`` at most), and this replica's strays queued again."""
        found: list[tuple[Job, str | None, str]] = []
        if steal > 0:
            rows = db.execute(
                f"WITH old AS (SELECT id, owner FROM {_TABLE} WHERE status = 'queued' AND owner <> %s "
                "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED) "
                f"UPDATE {_TABLE} j SET owner = %s, lease_until = {NOW} + %s FROM old WHERE j.id = old.id "
                f"RETURNING old.owner, {_RETURNED}",
                (self.replica, steal, self.replica, self.lease_s),
            ).fetchall()
            found += [(job_of_row(row[1:]), row[0], "queued") for row in rows]
        strays = self._strays_due(db)
        if strays:
            rows = db.execute(
                f"UPDATE {_TABLE} j SET status = 'queued', started = NULL WHERE id = ANY(%s) AND owner = %s "
                f"AND status IN ('queued', 'running') RETURNING {_RETURNED}",
                (list(strays), self.replica),
            ).fetchall()
            found += [(job_of_row(row), self.replica, strays[row[0]]) for row in rows]
        return found

    def _strays_due(self, db: psycopg.Connection[Any]) -> dict[str, str]:
        """Jobs this replica owns that its runner has not had for :data:`STRAY_S` seconds: id -> status.

        A start or a re-queue whose commit was lost with the connection (it happened, but
        the answer did not come back) leaves such a job; it is queued again here.
        """
        if self._runner is None:
            return {}
        rows = db.execute(
            f"SELECT id, status FROM {_TABLE} WHERE owner = %s AND status IN ('queued', 'running')", (self.replica,)
        ).fetchall()
        now, seen, due = time.monotonic(), {}, {}
        for job_id, status in rows:
            if self._runner.active(job_id) is not None:
                continue
            seen[job_id] = self._stray_since.get(job_id, now)
            if now - seen[job_id] >= STRAY_S:
                due[job_id] = str(status)
        self._stray_since = {job_id: since for job_id, since in seen.items() if job_id not in due}
        return due

    def attach(self, runner: JobRunner, pool: Capacity, draining: Callable[[], bool]) -> None:
        """Start the lease beat: renew this replica's leases, stop lost jobs, adopt orphans through ``runner``."""
        self._runner, self._pool, self._draining = runner, pool, draining
        self._renewer = threading.Thread(target=self._beat, name="dnnprov-leases", daemon=True)
        self._renewer.start()

    def _capacity(self) -> int:
        """Idle slots of this replica with nothing queued for them (what it may steal)."""
        pool = self._pool
        if pool is None or self._draining():
            return 0
        return max(0, min(pool.idle(), pool.workers - pool.pending()))

    def _beat(self) -> None:
        """Every ``lease_s / 5`` seconds: renew, stop the works of lost jobs, adopt orphans."""
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.wait(self.lease_s / 5):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5)
                    conn.execute("SET statement_timeout = '5s'")
                self._renew(conn)
                self._renewed_ok = True
                if self._connected_since is None:
                    self._connected_since = time.monotonic()
            except psycopg.Error as exc:
                self._renewed_ok = False
                self._connected_since = None
                _log("lease_renewal_failed", level=logging.WARNING, error=str(exc).strip()[:200])
                continue
            if self._runner is not None and not self._draining():
                try:
                    self._runner.recover()
                except Exception as exc:  # noqa: BLE001 (never lose the beat: the next one tries again)
                    _log("adoption_failed", level=logging.WARNING, error=f"{type(exc).__name__}: {exc}")
        if conn is not None:
            conn.close()

    def _renew(self, conn: psycopg.Connection[Any]) -> None:
        with self._held_lock:
            before = set(self._held)
        rows = conn.execute(
            f"UPDATE {_TABLE} SET lease_until = {NOW} + %s WHERE owner = %s "
            "AND status IN ('queued', 'running') RETURNING id",
            (self.lease_s, self.replica),
        ).fetchall()
        renewed = {row[0] for row in rows}
        with self._held_lock:
            lost = (before - renewed) & self._held
            self._held -= lost
            for job_id in lost:
                self._claims.pop(job_id, None)
        for job_id in sorted(lost):
            _log(
                "job_lost",
                job_id=job_id,
                owner=self.replica,
                reason="cancelled, or taken by another replica; its work here is stopped",
            )
            if self._runner is not None:
                self._runner.cancel(job_id)

    def list(
        self, status: str | None = None, limit: int = 100, *, tenant: str | None = None, before_seq: int | None = None
    ) -> list[Job]:
        """The newest jobs (of one state, of one tenant, older than ``before_seq``), newest first."""
        query, args = list_query(_TABLE, "%s", status, tenant, before_seq, limit)
        rows = self._run(lambda db: db.execute(query, args).fetchall(), write=False)
        return [job_of_row(r) for r in rows]


def _log(event: str, level: int = logging.INFO, **fields: Any) -> None:
    LOG.log(
        level,
        json.dumps(
            {"ts": round(time.time(), 3), "level": logging.getLevelName(level).lower(), "event": event, **fields}
        ),
    )
