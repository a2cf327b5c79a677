"""The files of a batch (:mod:`dnnprov.batch.runner`): finding and reading the instance
files given, and the results file: its columns, the CSV / Parquet writer, reading results
back, the exclusive lock on it, and the normalised identity of a row's instance that
``--resume`` matches on.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from dnnprov.errors import InvalidInputError, PlausibilityWarning
from dnnprov.io.instances import FORMATS, problem_from_dict, read_instance, read_json_file, resolve_instance_path
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Status

if TYPE_CHECKING:  # pandas is imported where used: task processes start without it
    import pandas as pd

Problem = SpotProblem | ServerlessProblem
INSTANCE_SUFFIXES = (".json", ".jsonl")

#: Columns of a result row, in file order. ``workers`` (spot: instances, serverless:
#: functions), ``gpus`` (spot), ``ps`` and ``memory_mb`` (serverless) repeat parts of the
#: JSON ``plan`` as numbers, so that rows can be filtered on them.
ROW_COLUMNS = (
    "path",
    "instance",
    "kind",
    "model",
    "method",
    "status",
    "cost",
    "time_s",
    "bound",
    "gap",
    "solve_seconds",
    "cpu_seconds",
    "plan",
    "workers",
    "gpus",
    "ps",
    "memory_mb",
    "message",
    "error",
)
PLAN_COLUMNS = ("workers", "gpus", "ps", "memory_mb")
NUMERIC_COLUMNS = ("cost", "time_s", "bound", "gap", "solve_seconds", "cpu_seconds") + PLAN_COLUMNS
TEXT_COLUMNS = tuple(c for c in ROW_COLUMNS if c not in NUMERIC_COLUMNS)


@dataclass(frozen=True)
class Item:
    """One instance found in the input: its row path, the problem or the read error."""

    path: str
    problem: Problem | None
    error: str = ""


# ------------------------------------------------------------------ finding instances
def find_instance_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files given, and ``*.json`` / ``*.jsonl`` below folders given, sorted and unique
    (``embedded:REL`` names a file or folder shipped with dnnprov)."""
    files: set[Path] = set()
    for entry in paths:
        p = resolve_instance_path(entry)
        if p.is_dir():
            files.update(
                f
                for f in p.rglob("*")
                if f.is_file()
                and f.suffix in INSTANCE_SUFFIXES
                and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
        elif p.is_file():
            files.add(p)
        elif p.exists():
            raise InvalidInputError(str(entry), "not a regular file or folder (a pipe, socket or device)")
        else:
            raise InvalidInputError(str(entry), "no such file or folder")
    return sorted(files, key=lambda f: f.as_posix())


#: Keys of an instance file: an object without ``format`` holding one of them is a broken
#: instance (a row), not another document (skipped).
INSTANCE_KEYS = frozenset({"instance_types", "workload", "slo", "platform", "constraints"})


def _other_document(path: Path) -> bool:
    """Whether ``path`` is JSON that does not claim to be an instance: an object with
    neither ``format`` nor any instance field (a benchmark set's ``index.json``), or
    another dnnprov format (catalog, workload profile)."""
    try:
        data = read_json_file(path)
    except InvalidInputError:
        return False
    if not isinstance(data, dict):
        return False
    fmt = data.get("format")
    if fmt is None:
        return not INSTANCE_KEYS & set(data)
    return isinstance(fmt, str) and fmt.startswith("dnnprov/") and fmt not in FORMATS


@contextlib.contextmanager
def warnings_naming(label: str) -> Iterator[None]:
    """Within the block, plausibility warnings name the file they came from (``FILE: FIELD``):
    a batch reads many files, and the CLI shows each distinct warning once."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:  # also when the file then fails: what it warned is shown
        for w in caught:
            if isinstance(w.message, PlausibilityWarning):
                warnings.warn(PlausibilityWarning(f"{label}: {w.message.field}", w.message.problem), stacklevel=3)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def read_items(files: Sequence[Path], named: Iterable[Path] = ()) -> tuple[list[Item], list[Path]]:
    """Read every file: ``(items, skipped)``; skipped files are JSON found in a folder
    that is no instance. Every file in ``named`` (given by the user) gets an item.

    A ``.jsonl`` file is read with ``dnnprov.benchsets.generate.read_instance_lines`` and gives one
    item per instance, with path ``FILE#N`` (N counts from 1 in the order read).
    """
    items: list[Item] = []
    skipped: list[Path] = []
    named_real = {os.path.realpath(n) for n in named}
    for f in files:
        label = f.as_posix()
        if f.suffix == ".jsonl":
            count = 0
            try:
                with warnings_naming(label):
                    for count, problem in enumerate(_read_lines(f), start=1):
                        items.append(Item(f"{label}#{count}", problem))
            except Exception as exc:  # noqa: BLE001 (the reader stops at a bad line: the rest is one failed item)
                items.append(
                    Item(
                        label if count == 0 and _is_read_failure(exc) else f"{label}#{count + 1}",
                        None,
                        _error_text(exc),
                    )
                )
            else:
                if count == 0 and os.path.realpath(f) in named_real:
                    items.append(Item(label, None, "bad instance: the file holds no instance (no non-blank line)"))
            continue
        try:
            with warnings_naming(label):
                items.append(Item(label, read_instance(f)))
        except Exception as exc:  # noqa: BLE001 (fault isolation: one failed item, the rest goes on)
            if os.path.realpath(f) not in named_real and _other_document(f):
                skipped.append(f)
            else:
                items.append(Item(label, None, _error_text(exc)))
    return items, skipped


def named_files(paths: Iterable[str | Path]) -> list[Path]:
    """The entries of ``paths`` that are files (not folders): the files the user named."""
    return [p for p in map(resolve_instance_path, paths) if p.is_file()]


def _is_read_failure(exc: Exception) -> bool:
    """Whether ``exc`` is about the whole file (unreadable, no reader) rather than a line."""
    return isinstance(exc, InvalidInputError) and ("cannot read" in exc.problem or "read_instance_lines" in exc.problem)


def _error_text(exc: Exception) -> str:
    if isinstance(exc, InvalidInputError):
        return f"bad instance: {exc}"
    return f"bad instance: {type(exc).__name__}: {exc}"


def _read_lines(path: Path) -> Iterator[Problem]:
    try:
        from dnnprov.benchsets.generate import read_instance_lines
    except ImportError:
        raise InvalidInputError(
            str(path),
            "reading .jsonl files needs dnnprov.benchsets.generate.read_instance_lines, "
            "which this dnnprov does not have",
        ) from None
    for entry in read_instance_lines(path):
        if isinstance(entry, tuple) and len(entry) == 2:  # (line number, problem)
            entry = entry[1]
        yield problem_from_dict(entry) if isinstance(entry, dict) else entry


def split_path(path: str) -> tuple[str, int | None]:
    """``"trace.jsonl#3"`` -> ``("trace.jsonl", 3)``; a plain path -> ``(path, None)``."""
    head, sep, tail = path.rpartition("#")
    if sep and tail.isdigit() and head.endswith(".jsonl"):
        return head, int(tail)
    return path, None


def load_instance(path: str) -> Problem:
    """The problem a row's ``path`` refers to (a file, or ``FILE.jsonl#N``)."""
    found = load_instances([path])[path]
    if isinstance(found, Exception):
        raise found
    return found


def load_instances(paths: Iterable[str]) -> dict[str, Problem | Exception]:
    """The problems of many row paths, reading each file once; failures as exceptions."""
    wanted: dict[str, dict[int | None, str]] = {}
    for path in paths:
        file, index = split_path(path)
        wanted.setdefault(file, {})[index] = path
    found: dict[str, Problem | Exception] = {}
    for file, indexes in wanted.items():
        lines: dict[int, str] = {i: p for i, p in indexes.items() if i is not None}
        if None in indexes:
            path = indexes[None]
            try:
                with warnings_naming(file):
                    found[path] = read_instance(file)
            except Exception as exc:  # noqa: BLE001 (fault isolation: one failed item, the rest goes on)
                found[path] = exc
        if not lines:
            continue
        last = max(lines)
        try:
            for i, problem in enumerate(_read_lines(Path(file)), start=1):
                if i in lines:
                    found[lines.pop(i)] = problem
                if i >= last:
                    break
        except Exception as exc:  # noqa: BLE001 (fault isolation: one failed item, the rest goes on)
            for path in lines.values():
                found[path] = exc
            continue
        for i, path in lines.items():
            found[path] = InvalidInputError(path, f"{file} has fewer than {i} instances")
    return found


# ------------------------------------------------------------------ result files
def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


class ResultWriter:
    """Rows to CSV (appended and flushed per row) or Parquet (rewritten in chunks)."""

    def __init__(
        self, path: Path, existing: Sequence[dict[str, Any]] = (), *, chunk_rows: int = 50, chunk_seconds: float = 30.0
    ) -> None:
        self.path = path
        self.parquet = path.suffix == ".parquet"
        self.rows = list(existing)
        self.chunk_rows, self.chunk_seconds = chunk_rows, chunk_seconds
        self.unsaved, self.saved_at = 0, time.monotonic()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.rewrite(self.rows)
        self.handle = None if self.parquet else path.open("a", newline="")
        self.csv = None if self.handle is None else csv.writer(self.handle)

    def write(self, row: dict[str, Any]) -> None:
        """Add one row (on disk now for CSV, within a chunk for Parquet)."""
        self.rows.append(row)
        if self.csv is not None and self.handle is not None:
            self.csv.writerow([_cell(row[c]) for c in ROW_COLUMNS])
            self.handle.flush()
            return
        self.unsaved += 1
        if self.unsaved >= self.chunk_rows or time.monotonic() - self.saved_at >= self.chunk_seconds:
            self.rewrite(self.rows)

    def rewrite(self, rows: Sequence[dict[str, Any]]) -> None:
        """Replace the file by ``rows`` (atomically)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        if self.parquet:
            rows_frame(rows).to_parquet(tmp, index=False)
        else:
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(ROW_COLUMNS)
            w.writerows([_cell(r.get(c)) for c in ROW_COLUMNS] for r in rows)
            tmp.write_text(buf.getvalue())
        os.replace(tmp, self.path)
        self.unsaved, self.saved_at = 0, time.monotonic()

    def close(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write the final, sorted rows."""
        if self.handle is not None:
            self.handle.close()
        self.rewrite(rows)


def rows_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with :data:`ROW_COLUMNS`, NaN for missing numbers, '' for text."""
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=list(ROW_COLUMNS))
    for c in NUMERIC_COLUMNS:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    for c in TEXT_COLUMNS:
        df[c] = df[c].fillna("").astype(str)
    return df


def read_results(path: str | Path, *, drop_bad: bool = False) -> pd.DataFrame:
    """Read a results file written by :func:`~dnnprov.batch.runner.run_batch` (``.csv`` or
    ``.parquet``); columns an older file lacks come back empty. A row no batch writes
    (:func:`_check_row`) is one error naming its row and column; with ``drop_bad`` (a batch
    resumed: a row cut short by a kill, or edited by hand) it is left out with a warning
    line, so that its task runs again."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        raise InvalidInputError(str(path), "is a folder: give the results file (.csv or .parquet) a batch wrote")
    if not path.is_file():
        raise InvalidInputError(str(path), "no such results file")
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except ImportError:
        raise InvalidInputError(str(path), "reading Parquet needs pyarrow: pip install 'dnnprov[batch]'") from None
    except (OSError, ValueError) as exc:  # unreadable, or not CSV / Parquet (pandas, pyarrow errors)
        raise InvalidInputError(str(path), f"not a results file: {exc}") from None
    missing = [c for c in ("path", "method", "status") if c not in df.columns]
    if missing:
        raise InvalidInputError(str(path), f"not a results file: no column {', '.join(missing)}")
    for c in ROW_COLUMNS:
        if c not in df.columns:
            df[c] = None
    records = []
    for number, row in enumerate(df[list(ROW_COLUMNS)].to_dict("records"), start=2 if path.suffix != ".parquet" else 1):
        try:
            _check_row(row, f"{path}: row {number}")
        except InvalidInputError as exc:
            if not drop_bad:
                raise
            print(f"dnnprov: warning: {exc.field}: {exc.problem}; its task runs again", file=sys.stderr)
            continue
        records.append(row)
    return rows_frame(records)


#: Columns whose numbers are whole (counts of a plan).
WHOLE_COLUMNS = PLAN_COLUMNS
#: Numeric columns that may be negative (none of a batch's: costs, times, gaps and counts are >= 0).
SIGNED_COLUMNS = ("bound",)
STATUS_VALUES = tuple(s.value for s in Status)


def _check_row(row: dict[str, Any], where: str) -> None:
    """Refuse a results row no batch writes: a status dnnprov does not have, a number that is
    not one (or not finite), a negative cost, time, gap or count, a fractional count. A report
    computed from such a row would count it as what it is not (a cost of -1 as the cheapest)."""
    status = row.get("status")
    if status not in STATUS_VALUES:
        raise InvalidInputError(f"{where}, column status", f"must be one of {', '.join(STATUS_VALUES)}; got {status!r}")
    for column in NUMERIC_COLUMNS:
        value = row.get(column)
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            continue  # empty: not given (written for NaN and None)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidInputError(f"{where}, column {column}", f"not a number: {str(value)[:40]!r}") from None
        if not math.isfinite(number):
            raise InvalidInputError(f"{where}, column {column}", f"must be finite, got {str(value)[:40]!r}")
        if number < 0 and column not in SIGNED_COLUMNS:
            raise InvalidInputError(f"{where}, column {column}", f"must be >= 0, got {str(value)[:40]!r}")
        if column in WHOLE_COLUMNS and not number.is_integer():
            raise InvalidInputError(f"{where}, column {column}", f"must be a whole number, got {str(value)[:40]!r}")


def plan_values(plan: Any, gpus_per_column: dict[str, int] | None = None) -> dict[str, Any]:
    """The :data:`PLAN_COLUMNS` of a result's plan (``None`` where they do not apply)."""
    values: dict[str, Any] = dict.fromkeys(PLAN_COLUMNS)
    if plan is None:
        return values
    values["ps"] = plan.ps
    if hasattr(plan, "counts"):
        values["workers"] = sum(plan.counts.values())
        if gpus_per_column is not None:
            values["gpus"] = sum(n * gpus_per_column.get(label, 0) for label, n in plan.counts.items())
    else:
        values["workers"], values["memory_mb"] = plan.functions, plan.memory_mb
    return values


def plan_counts(df: pd.DataFrame) -> pd.DataFrame:
    """One integer column per spot column label (instances bought), one row per row of
    ``df`` that has a spot plan; join it back with ``df.join(plan_counts(df))``."""
    import pandas as pd

    counts = {}
    for index, text in df["plan"].items():
        if text:
            plan = json.loads(text)
            if isinstance(plan, dict) and isinstance(plan.get("counts"), dict):
                counts[index] = plan["counts"]
    table = pd.DataFrame.from_dict(counts, orient="index")
    return table.fillna(0).astype(int).sort_index(axis=1)


# ------------------------------------------------------------------ identity for --resume
def instance_identity(path: str, bases: Iterable[Path] = ()) -> str:
    """A row path made canonical: the real absolute path of its file (plus ``#N`` for an
    entry of a ``.jsonl``). A relative path is looked up against each of ``bases`` in
    turn (then the current folder); one found nowhere is made absolute against the first."""
    head, sep, tail = path.rpartition("#")
    file, suffix = (head, f"#{tail}") if sep and tail.isdigit() and head.endswith(".jsonl") else (path, "")
    p = Path(file)
    if not p.is_absolute():
        candidates = [Path(b) / p for b in bases] + [Path.cwd() / p]
        p = next((c for c in candidates if c.exists()), candidates[0])
    return os.path.realpath(p) + suffix


# ------------------------------------------------------------------ the output lock
class OutputLock:
    """An exclusive lock on a results file, so that two batches never write it at once.

    The lock is ``flock`` on a small file beside the output (``.NAME.lock``, holding the
    owner's pid), not on the output itself, which is replaced atomically while it is
    written. The operating system drops the lock when its process ends in any way
    (SIGKILL included), so a killed batch never leaves a stale lock.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(f".{path.name}.lock")
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`InvalidInputError` naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_pid(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise InvalidInputError(str(self.path), f"cannot lock the results file: {exc.strerror}") from None
                who = f"pid {holder}" if holder else "another process"
                raise InvalidInputError(
                    str(self.path),
                    f"another dnnprov batch ({who}) is writing this results "
                    "file; wait for it to end or choose another --out",
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file its previous owner removed after we opened it
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        """Remove the lock file and drop the lock."""
        if self.fd is None:
            return
        try:
            os.unlink(self.lock_path)
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (OSError, ValueError):
        return None
