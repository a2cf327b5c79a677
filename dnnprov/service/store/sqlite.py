"""The durable job store of ``dnnprov serve``: one SQLite file, owned by one server.

A job is written (and committed, ``synchronous=FULL``) before the server answers 202, so
an accepted job survives a crash. On start, :meth:`JobStore.recover` puts every job that
was queued or running back in the queue: nothing accepted is lost. One server owns a
store file at a time (:class:`StoreOwner`: OS locks on ``PATH.lock`` and on the file's
inode, held for the server's life), so no job is run by two servers.

SQLite may be busy (another process holding a write lock): every operation is retried
with a growing pause for up to ``retry_s`` seconds, then raises :class:`StoreBusy`. Other
failures (disk full, I/O error, corruption, the file deleted or replaced: writes check its
inode first) are tried a few times, then raise :class:`StoreFailed` with the ``/readyz``
reason; :meth:`JobStore.probe` writes a row to say whether a write works now.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dnnprov.errors import InvalidInputError
from dnnprov.service.store.base import (
    COLUMNS,
    FAILURE_TRIES,
    FINAL,
    STATES,
    Job,
    StoreBusy,
    StoreFailed,
    body_hash,
    dump_json,
    job_of_row,
    list_query,
    replay_of,
)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    started REAL,
    finished REAL
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, seq);
"""
#: Columns added after the first release (old files get them on open).
_ADDED = {"tenant": "TEXT NOT NULL DEFAULT ''", "idempotency_key": "TEXT", "body_hash": "TEXT", "request_id": "TEXT"}


#: SQLite primary result codes -> readiness reason.
_SQLITE_REASONS = {
    13: "store not writable",
    10: "store not writable",
    8: "store not writable",  # FULL, IOERR, RO
    11: "store corrupt",
    26: "store corrupt",
    14: "store file missing",
}  # CORRUPT, NOTADB, CANTOPEN
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY_CODES
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _reason(exc: sqlite3.Error) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return _SQLITE_REASONS.get(code & 0xFF, "store failed")
    text = str(exc).lower()
    if "full" in text or "i/o" in text or "readonly" in text or "read-only" in text:
        return "store not writable"
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return "store corrupt"
    return "store failed"


def default_db_path() -> Path:
    """``$XDG_DATA_HOME/dnnprov/jobs.sqlite`` (default ``~/.local/share/dnnprov/jobs.sqlite``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dnnprov" / "jobs.sqlite"


def check_store_path(db_path: Path) -> None:
    """Refuse a ``--db`` that cannot be a store file before anything is made beside it (``/tmp``
    would leave ``/tmp.lock``, ``/dev/null`` a ``/dev/null.lock``): an existing path must be a
    regular file, and the nearest existing folder above it a folder."""
    if db_path.exists() and not db_path.is_file():
        what = "a directory" if db_path.is_dir() else "not a regular file"
        raise InvalidInputError("--db", f"{db_path} is {what}; give the path of a job store file")
    for parent in db_path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidInputError("--db", f"{parent} is a file, not a folder: {db_path} cannot be made there")
            return


class StoreOwner:
    """The exclusive OS locks (``flock``) on ``DB.lock`` and on the store file itself: one server per store.

    The store file's own lock is taken on its inode, so the same file under another name (a
    symlink, a hard link) cannot be served twice; ``DB.lock`` holds the owner's pid for the
    error message.
    """

    def __init__(self, db_path: Path) -> None:
        check_store_path(db_path)
        self.path = Path(f"{db_path}.lock")
        self._file_fd = -1
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise InvalidInputError("--db", f"cannot create the lock file {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise InvalidInputError(
                "--db", f"{db_path} is in use by another dnnprov serve (pid {holder}); one server per job store"
            ) from None
        try:
            self._file_fd = os.open(db_path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._file_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            busy = exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
            self.release()
            if busy:
                raise InvalidInputError(
                    "--db",
                    f"{db_path} ({os.path.realpath(db_path)}) is in use by another "
                    "dnnprov serve under another name (a link); one server per job "
                    "store",
                ) from None
            raise InvalidInputError("--db", f"cannot open {db_path}: {exc.strerror or exc}") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Give the store up (the OS also does this when the process ends)."""
        for name in ("_file_fd", "_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


class JobStore:
    """Jobs in SQLite, safe to use from several threads of one process."""

    def __init__(self, path: str | Path, *, retry_s: float = 5.0) -> None:
        self.path = Path(path)
        self.retry_s = retry_s
        self.healthy = True
        self.failure: tuple[str, str] | None = None  # the last failure: (readiness reason, message)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=0.2)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
            for column, kind in _ADDED.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
            self._db.execute("CREATE INDEX IF NOT EXISTS jobs_idem ON jobs (tenant, idempotency_key)")
            self._db.execute("CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, ts REAL NOT NULL)")
            stat = os.stat(self.path)
            self._identity = (stat.st_dev, stat.st_ino)
        except (OSError, sqlite3.Error) as exc:
            raise InvalidInputError(
                "--db", f"cannot use {self.path} as the job store: {getattr(exc, 'strerror', None) or exc}"
            ) from None

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def _check_identity(self) -> None:
        """Raise :class:`StoreFailed` when the path no longer names the file the server opened."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            raise StoreFailed(
                "store file missing", f"{self.path} was deleted while the server ran: jobs written now would be lost"
            ) from None
        except OSError as exc:
            raise StoreFailed("store failed", f"cannot check {self.path}: {exc.strerror or exc}") from None
        if (stat.st_dev, stat.st_ino) != self._identity:
            raise StoreFailed(
                "store file replaced",
                f"{self.path} is another file than the one the server opened (replaced while it ran)",
            )

    def _rollback(self) -> None:
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _run(
        self, operation: Callable[[sqlite3.Connection], T], retry_s: float | None = None, *, write: bool = True
    ) -> T:
        """``operation(db)`` (a write: in one ``IMMEDIATE`` transaction, after the file's identity is checked).

        Retried while SQLite is busy for up to ``retry_s`` seconds (then :class:`StoreBusy`);
        other failures (disk full, I/O error, corruption) are tried :data:`FAILURE_TRIES`
        times, then raise :class:`StoreFailed`. :attr:`failure` keeps the last failure.
        """
        deadline = time.monotonic() + (self.retry_s if retry_s is None else retry_s)
        pause = 0.02
        failures = 0
        while True:
            try:
                with self._lock:
                    if not write:
                        value = operation(self._db)
                    else:
                        self._check_identity()
                        self._db.execute("BEGIN IMMEDIATE")
                        try:
                            value = operation(self._db)
                            self._db.execute("COMMIT")
                        except BaseException:
                            self._rollback()
                            raise
                self.healthy, self.failure = True, None
                return value
            except StoreFailed as exc:
                self.healthy, self.failure = False, (exc.reason, str(exc))
                raise
            except sqlite3.DatabaseError as exc:
                self.healthy = False
                if _is_busy(exc):
                    if time.monotonic() + pause > deadline:
                        raise StoreBusy(f"the job store is unavailable: {exc}") from None
                else:
                    failures += 1
                    if failures >= FAILURE_TRIES:
                        self.failure = (_reason(exc), f"{exc}")
                        raise StoreFailed(_reason(exc), f"the job store failed: {exc}") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def ping(self) -> bool:
        """Whether the store takes a write now (readiness)."""
        return self.probe() is None

    def probe(self) -> str | None:
        """Write one row now (identity checked, committed): ``None`` when it is written, else the
        ``/readyz`` reason (``store busy`` or one of :data:`FAILURE_REASONS`)."""
        try:
            self._run(
                lambda db: db.execute("INSERT OR REPLACE INTO probe (id, ts) VALUES (1, ?)", (time.time(),)),
                retry_s=0.0,
            )
        except StoreBusy:
            return "store busy"
        except StoreFailed as exc:
            return exc.reason
        return None

    def add(
        self,
        kind: str,
        body: Any,
        *,
        tenant: str = "",
        idempotency_key: str | None = None,
        request_id: str | None = None,
    ) -> tuple[str, bool]:
        """Store a new queued job; returns ``(id, created)`` once committed.

        With an ``idempotency_key`` already used by ``tenant`` the stored job's id is
        returned (``created`` false) when its body is the same; another body raises
        :class:`InvalidInputError` on ``Idempotency-Key``.
        """
        digest = body_hash(kind, body)
        text = json.dumps(body)

        def insert(db: sqlite3.Connection) -> tuple[str, bool]:
            if idempotency_key is not None:
                row = db.execute(
                    "SELECT id, body_hash FROM jobs WHERE tenant = ? AND idempotency_key = ?", (tenant, idempotency_key)
                ).fetchone()
                if row is not None:
                    return replay_of(row, digest), False
            job_id = uuid.uuid4().hex
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            db.execute(
                "INSERT INTO jobs (id, seq, kind, body, status, created, tenant, idempotency_key, body_hash, "
                "request_id) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                (job_id, seq, kind, text, time.time(), tenant, idempotency_key, digest, request_id),
            )
            return job_id, True

        return self._run(insert)

    def replayed(self, kind: str, body: Any, *, tenant: str, idempotency_key: str) -> str | None:
        """The id of ``tenant``'s job under ``idempotency_key`` when its body is this one (``None``:
        the key is unused); another body raises :class:`InvalidInputError` on ``Idempotency-Key``."""
        row = self._run(
            lambda db: db.execute(
                "SELECT id, body_hash FROM jobs WHERE tenant = ? AND idempotency_key = ?", (tenant, idempotency_key)
            ).fetchone(),
            write=False,
        )
        return None if row is None else replay_of(row, body_hash(kind, body))

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        """The job (of ``tenant``, when given), or ``None``."""
        query = f"SELECT {COLUMNS} FROM jobs WHERE id = ?" + (" AND tenant = ?" if tenant is not None else "")
        args = (job_id,) if tenant is None else (job_id, tenant)
        row = self._run(lambda db: db.execute(query, args).fetchone(), write=False)
        return None if row is None else job_of_row(row)

    def start(self, job_id: str, retry_s: float | None = None) -> bool:
        """Mark a queued job running (one more attempt); ``False`` when it is no longer queued."""
        return self._run(
            lambda db: (
                db.execute(
                    "UPDATE jobs SET status = 'running', started = ?, attempts = attempts + 1 "
                    "WHERE id = ? AND status = 'queued'",
                    (time.time(), job_id),
                ).rowcount
                == 1
            ),
            retry_s,
        )

    def finish(
        self, job_id: str, status: str, *, result: Any = None, error: Any = None, retry_s: float | None = None
    ) -> bool:
        """Record the end of a running job (its body is dropped); ``False`` when it was cancelled meanwhile."""
        values = (status, dump_json(result), dump_json(error), time.time(), job_id)
        return self._run(
            lambda db: (
                db.execute(
                    "UPDATE jobs SET status = ?, result = ?, error = ?, finished = ?, body = NULL "
                    "WHERE id = ? AND status = 'running'",
                    values,
                ).rowcount
                == 1
            ),
            retry_s,
        )

    def requeue(self, job_id: str, *, refund: bool, retry_s: float | None = None) -> bool:
        """Put a running job back in the queue; ``refund``: its attempt is not counted (a graceful stop)."""
        return self._run(
            lambda db: (
                db.execute(
                    "UPDATE jobs SET status = 'queued', started = NULL, attempts = attempts - ? "
                    "WHERE id = ? AND status = 'running'",
                    (1 if refund else 0, job_id),
                ).rowcount
                == 1
            ),
            retry_s,
        )

    def cancel(self, job_id: str, tenant: str | None = None) -> str | None:
        """Cancel a queued or running job; returns the status it had (``None``: no such job)."""

        def cancel(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT status, tenant FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or (tenant is not None and row[1] != tenant):
                return None
            if row[0] not in FINAL:
                db.execute(
                    "UPDATE jobs SET status = 'cancelled', finished = ?, body = NULL WHERE id = ?",
                    (time.time(), job_id),
                )
            return row[0]

        return self._run(cancel)

    def delete(self, job_id: str, tenant: str | None = None) -> bool:
        """Delete an ended job; ``False`` when there is no such ended job."""
        query = "DELETE FROM jobs WHERE id = ? AND status IN ('done', 'failed', 'cancelled')"
        query += " AND tenant = ?" if tenant is not None else ""
        args = (job_id,) if tenant is None else (job_id, tenant)
        return self._run(lambda db: db.execute(query, args).rowcount == 1)

    def purge(self, older_than_s: float) -> int:
        """Delete jobs that ended more than ``older_than_s`` seconds ago; returns how many."""
        cutoff = time.time() - older_than_s
        return self._run(
            lambda db: (
                db.execute(
                    "DELETE FROM jobs WHERE status IN ('done', 'failed', 'cancelled') AND finished < ?", (cutoff,)
                ).rowcount
            )
        )

    def recover(self) -> list[Job]:
        """Put jobs left running by a stopped server back in the queue; all queued jobs in order."""

        def recover(db: sqlite3.Connection) -> list[Job]:
            db.execute("UPDATE jobs SET status = 'queued', started = NULL WHERE status = 'running'")
            return [
                job_of_row(r) for r in db.execute(f"SELECT {COLUMNS} FROM jobs WHERE status = 'queued' ORDER BY seq")
            ]

        return self._run(recover)

    def counts(self) -> dict[str, int]:
        """Number of jobs per state."""
        rows = self._run(
            lambda db: db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall(), write=False
        )
        return {state: 0 for state in STATES} | dict(rows)

    def list(
        self, status: str | None = None, limit: int = 100, *, tenant: str | None = None, before_seq: int | None = None
    ) -> list[Job]:
        """The newest jobs (of one state, of one tenant, older than ``before_seq``), newest first."""
        query, args = list_query("jobs", "?", status, tenant, before_seq, limit)
        rows = self._run(lambda db: db.execute(query, args).fetchall(), write=False)
        return [job_of_row(r) for r in rows]
