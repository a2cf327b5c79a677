"""The durable job stores of ``dnnprov serve``: SQLite (one server) and PostgreSQL (several replicas).

- :mod:`~dnnprov.service.store.base`: the job record, its states, the store interface and errors;
- :mod:`~dnnprov.service.store.sqlite`: :class:`JobStore`, one SQLite file owned by one server;
- :mod:`~dnnprov.service.store.postgres`: :class:`PgJobStore`, jobs claimed with leases.

The server imports the names below from here; :func:`open_store` picks the store ``--db`` names.
"""

from __future__ import annotations

from pathlib import Path

from dnnprov.errors import InvalidInputError
from dnnprov.service.store.base import (
    FAILURE_REASONS,
    FINAL,
    STATES,
    Job,
    Store,
    StoreBusy,
    StoreFailed,
    body_hash,
    list_query,
)
from dnnprov.service.store.sqlite import JobStore, StoreOwner, default_db_path

__all__ = [
    "FAILURE_REASONS",
    "FINAL",
    "STATES",
    "Job",
    "JobStore",
    "Store",
    "StoreBusy",
    "StoreFailed",
    "StoreOwner",
    "body_hash",
    "default_db_path",
    "is_database_url",
    "list_query",
    "open_store",
]


def is_database_url(db: str | Path) -> bool:
    """Whether ``--db`` names a PostgreSQL database (``postgresql://...``) rather than a SQLite file."""
    return str(db).startswith(("postgresql://", "postgres://"))


def open_store(db: str | Path) -> Store:
    """The job store ``--db`` names: a PostgreSQL URL (several servers) or a SQLite file (one server)."""
    if is_database_url(db):
        try:
            from dnnprov.service.store.postgres import PgJobStore
        except ImportError as exc:
            raise InvalidInputError(
                "--db", f"a PostgreSQL store needs the postgres extra: pip install 'dnnprov[postgres]' ({exc})"
            ) from None
        return PgJobStore(str(db))
    return JobStore(db)
