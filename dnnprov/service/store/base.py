"""What every job store of ``dnnprov serve`` is: the job record, its states, the store interface, errors.

Imported by both stores (:mod:`~dnnprov.service.store.sqlite`, :mod:`~dnnprov.service.store.postgres`)
and by the server; it imports neither store, so the stores and the server form no import cycle.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from dnnprov.errors import InvalidInputError

#: Job states; the last three are final.
STATES = ("queued", "running", "done", "failed", "cancelled")
FINAL = ("done", "failed", "cancelled")
#: The columns of a job row, in :class:`Job`'s order.
COLUMNS = "id, kind, body, status, result, error, attempts, created, started, finished, tenant, seq"


def list_query(
    table: str, mark: str, status: str | None, tenant: str | None, before_seq: int | None, limit: int
) -> tuple[str, tuple[Any, ...]]:
    """The newest jobs' query of either store (``mark``: the driver's placeholder) and its arguments."""
    where, args = [], []
    for column, value in (("status =", status), ("tenant =", tenant), ("seq <", before_seq)):
        if value is not None:
            where.append(f"{column} {mark}")
            args.append(value)
    query = (
        f"SELECT {COLUMNS} FROM {table}"
        + (" WHERE " + " AND ".join(where) if where else "")
        + f" ORDER BY seq DESC LIMIT {mark}"
    )
    return query, (*args, limit)


class StoreBusy(Exception):
    """The store could not be used within the retry window (locked by another process)."""


class StoreFailed(Exception):
    """The store failed in a way waiting does not cure soon (disk full, I/O error, corrupt,
    file deleted or replaced): tried :data:`FAILURE_TRIES` times, then this. ``reason`` is
    the ``/readyz`` reason (one of :data:`FAILURE_REASONS`)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: Tries of an operation that fails with something other than a busy store.
FAILURE_TRIES = 3
#: The ``/readyz`` reasons of a failed store.
FAILURE_REASONS = ("store not writable", "store corrupt", "store file missing", "store file replaced", "store failed")


def body_hash(kind: str, body: Any) -> str:
    """SHA-256 of a job's kind and canonical JSON body (what an idempotency key is bound to)."""
    return hashlib.sha256(json.dumps([kind, body], sort_keys=True).encode()).hexdigest()


def replay_of(row: Any, digest: str) -> str:
    """The job id of a ``(id, body_hash)`` row found under an idempotency key, when its body hash
    is ``digest``; another body raises :class:`InvalidInputError`."""
    if row[1] != digest:
        raise InvalidInputError("Idempotency-Key", "already used for a job with another body")
    return str(row[0])


@dataclass(frozen=True)
class Job:
    """One job as stored (``body`` is ``None`` once the job has ended)."""

    id: str
    kind: str
    body: Any
    status: str
    result: Any
    error: Any
    attempts: int
    created: float
    started: float | None
    finished: float | None
    tenant: str = ""
    seq: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The answer of ``GET /v1/jobs/{id}`` (the body is not repeated)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "attempts": self.attempts,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
        }


def dump_json(value: Any) -> str | None:
    """A JSON column's text (``None`` stays SQL ``NULL``); NaN and infinities are refused."""
    return None if value is None else json.dumps(value, allow_nan=False)


def load_json(text: str | None) -> Any:
    """A JSON column's value."""
    return None if text is None else json.loads(text)


def job_of_row(row: Any) -> Job:
    """The :class:`Job` of a row selected as :data:`COLUMNS`, by either store (the numbers are
    cast: each driver types them by its own columns)."""
    started, finished = row[8], row[9]
    return Job(
        id=row[0],
        kind=row[1],
        body=load_json(row[2]),
        status=row[3],
        result=load_json(row[4]),
        error=load_json(row[5]),
        attempts=int(row[6]),
        created=float(row[7]),
        started=None if started is None else float(started),
        finished=None if finished is None else float(finished),
        tenant=row[10],
        seq=int(row[11]),
    )


class Store(Protocol):
    """What the server needs of a job store: :class:`JobStore` (SQLite, one server) or
    :class:`~dnnprov.service.store.postgres.PgJobStore` (PostgreSQL, several replicas)."""

    path: Any
    healthy: bool

    def close(self) -> None: ...
    def ping(self) -> bool: ...
    def add(
        self,
        kind: str,
        body: Any,
        *,
        tenant: str = "",
        idempotency_key: str | None = None,
        request_id: str | None = None,
    ) -> tuple[str, bool]: ...
    def replayed(self, kind: str, body: Any, *, tenant: str, idempotency_key: str) -> str | None: ...
    def get(self, job_id: str, tenant: str | None = None) -> Job | None: ...
    def start(self, job_id: str, retry_s: float | None = None) -> bool: ...
    def finish(
        self, job_id: str, status: str, *, result: Any = None, error: Any = None, retry_s: float | None = None
    ) -> bool: ...
    def requeue(self, job_id: str, *, refund: bool, retry_s: float | None = None) -> bool: ...
    def cancel(self, job_id: str, tenant: str | None = None) -> str | None: ...
    def delete(self, job_id: str, tenant: str | None = None) -> bool: ...
    def purge(self, older_than_s: float) -> int: ...
    def recover(self) -> list[Job]: ...
    def counts(self) -> dict[str, int]: ...
    def list(
        self, status: str | None = None, limit: int = 100, *, tenant: str | None = None, before_seq: int | None = None
    ) -> list[Job]: ...


class JobRunner(Protocol):
    """What a store shared by replicas needs of the server's job runner (:class:`dnnprov.service.jobs.JobRunner`)."""

    def active(self, job_id: str) -> Any: ...
    def cancel(self, job_id: str) -> None: ...
    def recover(self) -> int: ...


class Capacity(Protocol):
    """What a store shared by replicas needs of the server's executor: its free places."""

    @property
    def workers(self) -> int: ...
    def idle(self) -> int: ...
    def pending(self) -> int: ...
