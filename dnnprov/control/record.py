"""The durable record of runs (SQLite): what a restarted controller needs to go on.

One database file holds every run of a state folder. A run's row keeps its inputs (the
instance, the plan, the policy, the settings, the cloud's endpoint and region) and its
state; its steps are written **before** they are sent (``intent``) and marked ``done`` with
their outcome after, so a controller killed between the two re-sends the step with the same
ClientToken (the cloud answers with the instances it already launched) instead of launching
again. Events are appended as they happen (the notices and reclaims the controller saw
among them, so a restarted one knows when each instance ended, :meth:`RunRecord.instances`).
The controller's own memory (its policy's state, the pools it takes as full and their
back-offs) is kept as one JSON object per run, rewritten when it changes
(:meth:`RunRecord.remember`); so is the run's latest progress after each poll (the
trainer's report, the cost so far: :meth:`RunRecord.snapshot`, read by ``run status``). One controller at a time owns a run: an OS lock on
``RUN.lock`` in the state folder, released by the OS when its process dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from dnnprov.control.cloud import Instance
from dnnprov.control.loop import Event
from dnnprov.errors import InvalidInputError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created REAL, updated REAL, state TEXT, spec TEXT,
                                 outcome TEXT);
CREATE TABLE IF NOT EXISTS steps (run_id TEXT, step INTEGER, kind TEXT, payload TEXT, status TEXT, result TEXT,
                                  PRIMARY KEY (run_id, step));
CREATE TABLE IF NOT EXISTS events (run_id TEXT, seq INTEGER PRIMARY KEY AUTOINCREMENT, time_s REAL, kind TEXT,
                                   detail TEXT);
CREATE TABLE IF NOT EXISTS memory (run_id TEXT PRIMARY KEY, state TEXT);
CREATE TABLE IF NOT EXISTS progress (run_id TEXT PRIMARY KEY, snapshot TEXT);
"""
#: The longest run id: each launch's ClientToken is ``RUN-STEP``, and EC2 takes at most 64 ASCII characters.
RUN_ID_MAX = 48
STATES = ("running", "met", "missed", "gave-up", "cancelled", "cancelling", "failed")


class RunRecord:
    """Runs in ``folder/runs.db`` (module docstring)."""

    def __init__(self, folder: str | Path, *, existing: bool = False) -> None:
        """``existing``: open a record that must be there already (status, cancel, resume), made nowhere else."""
        self.folder = Path(folder)
        if existing and not (self.folder / "runs.db").is_file():
            raise InvalidInputError(
                "RUN", f"no run in {folder}: it holds no run record (runs.db); is --state the run's?"
            )
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInputError("--state", f"{folder}: {exc.strerror}") from None
        self.path = self.folder / "runs.db"
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        self._locks: dict[str, int] = {}

    def close(self) -> None:
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
        self._db.close()

    # ------------------------------------------------------------------ runs
    def create(self, spec: dict[str, Any], run_id: str | None = None) -> str:
        """A new run with its inputs; its id (``run-`` and 12 hex digits unless given)."""
        run_id = f"run-{uuid.uuid4().hex[:12]}" if run_id is None else check_run_id(run_id)
        now = time.time()
        try:
            self._db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, 'running', ?, NULL)", (run_id, now, now, json.dumps(spec))
            )
        except sqlite3.IntegrityError:
            raise InvalidInputError("--run-id", f"a run {run_id!r} exists already in {self.folder}") from None
        return run_id

    def get(self, run_id: str) -> dict[str, Any]:
        """The run's row: id, state, spec, outcome, created, updated."""
        row = self._db.execute(
            "SELECT id, created, updated, state, spec, outcome FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise InvalidInputError("RUN", f"no run {run_id!r} in {self.folder}")
        return {
            "id": row[0],
            "created": row[1],
            "updated": row[2],
            "state": row[3],
            "spec": json.loads(row[4]),
            "outcome": None if row[5] is None else json.loads(row[5]),
        }

    def runs(self) -> list[str]:
        """Every run id, oldest first."""
        return [r[0] for r in self._db.execute("SELECT id FROM runs ORDER BY created")]

    def set_spec(self, run_id: str, spec: dict[str, Any]) -> None:
        """Replace the run's inputs (before its first step)."""
        self._db.execute("UPDATE runs SET spec = ?, updated = ? WHERE id = ?", (json.dumps(spec), time.time(), run_id))

    def set_state(self, run_id: str, state: str, outcome: dict[str, Any] | None = None) -> None:
        """Move the run to ``state`` (and keep its outcome)."""
        if state not in STATES:
            raise ValueError(state)
        self._db.execute(
            "UPDATE runs SET state = ?, updated = ?, outcome = COALESCE(?, outcome) WHERE id = ?",
            (state, time.time(), None if outcome is None else json.dumps(outcome), run_id),
        )

    def request_cancel(self, run_id: str) -> bool:
        """Mark a live run (``running`` or ``cancelling``) ``cancelling``, in one statement: a run
        its controller ended meanwhile keeps its end (``met``, ...). Whether the run was live."""
        moved = self._db.execute(
            "UPDATE runs SET state = 'cancelling', updated = ? WHERE id = ? AND state IN ('running', 'cancelling')",
            (time.time(), run_id),
        )
        return moved.rowcount == 1

    # ------------------------------------------------------------------ steps and events
    def intend(self, run_id: str, step: int, kind: str, payload: dict[str, Any]) -> None:
        """Write a step before it is sent."""
        self._db.execute(
            "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, 'intent', NULL)",
            (run_id, step, kind, json.dumps(payload)),
        )

    def done(self, run_id: str, step: int, result: dict[str, Any]) -> None:
        """Mark a step sent, with what it got."""
        self._db.execute(
            "UPDATE steps SET status = 'done', result = ? WHERE run_id = ? AND step = ?",
            (json.dumps(result), run_id, step),
        )

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        """The run's steps in order."""
        return [
            {
                "step": r[0],
                "kind": r[1],
                "payload": json.loads(r[2]),
                "status": r[3],
                "result": None if r[4] is None else json.loads(r[4]),
            }
            for r in self._db.execute(
                "SELECT step, kind, payload, status, result FROM steps WHERE run_id = ? ORDER BY step", (run_id,)
            )
        ]

    def event(self, run_id: str, event: Event) -> None:
        """Append an event."""
        self._db.execute(
            "INSERT INTO events (run_id, time_s, kind, detail) VALUES (?, ?, ?, ?)",
            (run_id, event.time_s, event.kind, json.dumps(event.detail)),
        )

    def events(self, run_id: str) -> Iterator[dict[str, Any]]:
        """The run's events in order."""
        for time_s, kind, detail in self._db.execute(
            "SELECT time_s, kind, detail FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ):
            yield {"time_s": time_s, "kind": kind, **json.loads(detail)}

    def remember(self, run_id: str, state: dict[str, Any]) -> None:
        """Keep the controller's memory (replacing what was kept)."""
        self._db.execute("INSERT OR REPLACE INTO memory VALUES (?, ?)", (run_id, json.dumps(state)))

    def memory(self, run_id: str) -> dict[str, Any] | None:
        """The controller's memory last kept (``None``: none was)."""
        row = self._db.execute("SELECT state FROM memory WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def snapshot(self, run_id: str, snapshot: dict[str, Any]) -> None:
        """Keep the run's latest progress as its driver saw it after a poll (``run status``)."""
        self._db.execute("INSERT OR REPLACE INTO progress VALUES (?, ?)", (run_id, json.dumps(snapshot)))

    def latest(self, run_id: str) -> dict[str, Any] | None:
        """The progress last kept by :meth:`snapshot` (``None``: none yet)."""
        row = self._db.execute("SELECT snapshot FROM progress WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def instances(self, run_id: str) -> list[Instance]:
        """The instances the run's launch steps got, with what the record knows of their ends:
        the notices and reclaims the controller saw, and its own terminations (the time in the
        step, else its ``terminate`` event's)."""
        known: dict[str, Instance] = {}
        steps = self.steps(run_id)
        for step in steps:
            if step["kind"] == "launch" and step["result"]:
                for data in step["result"].get("instances", []):
                    known.setdefault(data["instance_id"], Instance.from_dict(data))
        events = list(self.events(run_id))
        terminated_at = {int(e["step"]): float(e["time_s"]) for e in events if e["kind"] == "terminate" and "step" in e}
        for e in events:
            instance = known.get(str(e.get("instance")))
            if instance is None:
                continue
            if e["kind"] == "notice" and instance.notice_s is None:
                instance.notice_s = float(e["time_s"])
            elif e["kind"] == "reclaim" and instance.ended_s is None:
                instance.ended_s = float(e["time_s"])
        for step in steps:
            if step["kind"] != "terminate" or step["status"] != "done":
                continue
            when = step["payload"].get("time_s", terminated_at.get(int(step["step"])))
            for instance_id in step["payload"].get("instances", []):
                instance = known.get(instance_id)
                if instance is not None and instance.ended_s is None and when is not None:
                    instance.ended_s = float(when)
        return list(known.values())

    # ------------------------------------------------------------------ ownership
    def lock(self, run_id: str) -> None:
        """Own the run (one controller at a time); refused while another process owns it."""
        path = self.folder / f"{check_run_id(run_id, 'RUN')}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = path.read_text().strip() or "another process"
            raise InvalidInputError("RUN", f"run {run_id} is being controlled by {owner}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self._locks[run_id] = fd


def check_run_id(run_id: str, field: str = "--run-id") -> str:
    """``run_id`` if it can name a run: its ``dnnprov:run`` tag, its launches' ClientTokens
    (``RUN-STEP``, at most 64 ASCII characters on EC2) and its lock file ``RUN.lock`` in the
    state folder (so no ``/``, no ``..``)."""
    from dnnprov.cloud.export.names import RUN_ID, require

    return require(
        field, run_id, RUN_ID, RUN_ID_MAX, "a run id has letters, digits, '-', '_' and '.', alphanumeric at both ends"
    )


def open_record(folder: str | Path) -> closing[RunRecord]:
    """A record to use in a ``with`` block."""
    return closing(RunRecord(folder))
