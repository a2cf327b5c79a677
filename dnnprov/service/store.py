"""The durable job store of ``dnnprov serve``: one SQLite file.

A job is written (and committed, ``synchronous=FULL``) before the server answers 202, so
an accepted job survives a crash. On start, :meth:`JobStore.recover` puts every job that
was queued or running back in the queue: nothing accepted is lost.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError

#: Job states; the last three are final.
STATES = ("queued", "running", "done", "failed", "cancelled")
FINAL = ("done", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
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


def default_db_path() -> Path:
    """``$XDG_DATA_HOME/dnnprov/jobs.sqlite`` (default ``~/.local/share/dnnprov/jobs.sqlite``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dnnprov" / "jobs.sqlite"


@dataclass(frozen=True)
class Job:
    """One job as stored."""

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

    def to_dict(self) -> dict[str, Any]:
        """The answer of ``GET /v1/jobs/{id}`` (the body is not repeated)."""
        return {"id": self.id, "kind": self.kind, "status": self.status, "result": self.result,
                "error": self.error, "attempts": self.attempts, "created": self.created,
                "started": self.started, "finished": self.finished}


class JobStore:
    """Jobs in SQLite, safe to use from several threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise InvalidInputError("--db", f"cannot use {self.path} as the job store: "
                                            f"{getattr(exc, 'strerror', None) or exc}") from None

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def add(self, kind: str, body: Any) -> str:
        """Store a new queued job; returns its id once it is committed."""
        job_id = uuid.uuid4().hex
        with self._lock:
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            self._db.execute("INSERT INTO jobs (id, seq, kind, body, status, created) VALUES (?, ?, ?, ?, 'queued', ?)",
                             (job_id, seq, kind, json.dumps(body), time.time()))
        return job_id

    def get(self, job_id: str) -> Job | None:
        """The job, or ``None``."""
        with self._lock:
            row = self._db.execute("SELECT id, kind, body, status, result, error, attempts, created, started, "
                                   "finished FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return Job(row[0], row[1], json.loads(row[2]), row[3], _load(row[4]), _load(row[5]), *row[6:])

    def start(self, job_id: str) -> bool:
        """Mark a queued job running; ``False`` when it is no longer queued (cancelled)."""
        with self._lock:
            cur = self._db.execute("UPDATE jobs SET status = 'running', started = ?, attempts = attempts + 1 "
                                   "WHERE id = ? AND status = 'queued'", (time.time(), job_id))
        return cur.rowcount == 1

    def finish(self, job_id: str, status: str, *, result: Any = None, error: Any = None) -> bool:
        """Record the end of a running job; ``False`` when it was cancelled meanwhile."""
        with self._lock:
            cur = self._db.execute("UPDATE jobs SET status = ?, result = ?, error = ?, finished = ? "
                                   "WHERE id = ? AND status = 'running'",
                                   (status, _dump(result), _dump(error), time.time(), job_id))
        return cur.rowcount == 1

    def cancel(self, job_id: str) -> str | None:
        """Cancel a queued or running job; returns the status it had (``None``: no such job)."""
        with self._lock:
            row = self._db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            if row[0] not in FINAL:
                self._db.execute("UPDATE jobs SET status = 'cancelled', finished = ? WHERE id = ?",
                                 (time.time(), job_id))
        return row[0]

    def recover(self) -> list[str]:
        """Put jobs left running by a stopped server back in the queue; ids of all queued jobs in order."""
        with self._lock:
            self._db.execute("UPDATE jobs SET status = 'queued', started = NULL WHERE status = 'running'")
            rows = self._db.execute("SELECT id FROM jobs WHERE status = 'queued' ORDER BY seq").fetchall()
        return [r[0] for r in rows]

    def counts(self) -> dict[str, int]:
        """Number of jobs per state."""
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        return {state: 0 for state in STATES} | dict(rows)

    def list(self, status: str | None = None, limit: int = 100) -> list[Job]:
        """The newest jobs (optionally of one state), newest first."""
        query = "SELECT id FROM jobs" + (" WHERE status = ?" if status else "") + " ORDER BY seq DESC LIMIT ?"
        with self._lock:
            ids = [r[0] for r in self._db.execute(query, ((status,) if status else ()) + (limit,)).fetchall()]
        return [job for job in map(self.get, ids) if job is not None]


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, allow_nan=False)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)
