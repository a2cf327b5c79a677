"""A real PostgreSQL server for the tests and benchmarks of the replicas' job store.

:class:`LocalPostgres` runs ``initdb`` into a fresh folder and starts ``postgres`` on a free
127.0.0.1 port, from the binaries of the machine (``/usr/lib/postgresql/15/bin``, or the
folder in ``DNNPROV_PG_BIN``). PostgreSQL refuses to run as root: as root the server runs
as the ``postgres`` user the Debian package makes. Authentication is ``trust`` on
loopback; ``fsync`` is off (the tests kill replicas, never the database).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

PG_BIN = Path(os.environ.get("DNNPROV_PG_BIN", "/usr/lib/postgresql/15/bin"))


def missing() -> str | None:
    """Why a local server cannot be started here (``None``: it can)."""
    for tool in ("initdb", "postgres"):
        if not (PG_BIN / tool).is_file():
            return (
                f"no PostgreSQL binaries: {PG_BIN / tool} is absent (apt-get install postgresql-15, or DNNPROV_PG_BIN)"
            )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no 'postgres' user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPostgres:
    """``initdb`` + ``postgres`` on a free loopback port; :meth:`stop` removes everything."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="dnnprov-pg-"))
        self.port = _free_port()
        user, group = None, None  # as root: the postgres user
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            user, group = entry.pw_uid, entry.pw_gid
        data = self.root / "data"
        subprocess.run(
            [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            cwd=self.root,
            user=user,
            group=group,
        )
        self.log = self.root / "postgres.log"
        self._command = [
            str(PG_BIN / "postgres"),
            "-D",
            str(data),
            "-p",
            str(self.port),
            "-k",
            str(self.root),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
        ]
        self._user, self._group = user, group
        self._start()

    def _start(self) -> None:
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                self._command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                user=self._user,
                group=self._group,
            )
        self._wait_ready()

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server (fast shutdown: every connection is cut), wait ``down_s``, start it again."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)
        time.sleep(down_s)
        self._start()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.2)

    def url(self, database: str) -> str:
        """The connection URL of one database of this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"t{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)
