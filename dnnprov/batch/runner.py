"""Solve many instance files with many methods: a local process pool or a Dask cluster.

:func:`run_batch` expands files and folders into instances, makes one task per
(instance, method) that applies, runs every task in a supervised child process that is
killed when it outlives the time limit, and writes one flat row per task to CSV (appended
and flushed per row) or Parquet (rewritten in chunks). A bad file, a solver error, a
crashed or killed child each become that row's ``error``; the batch goes on.
:func:`summarize` turns the rows into one line per method.

Every task runs in a supervised worker process of :mod:`dnnprov.execution` (a fresh
interpreter), locally or in a Dask worker, killed past the task's ``kill_after_s``: with the
same process on both backends a timeout or crash gives the same row locally and on Dask.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dnnprov.batch.files import (
    INSTANCE_SUFFIXES,
    NUMERIC_COLUMNS,
    PLAN_COLUMNS,
    ROW_COLUMNS,
    TEXT_COLUMNS,
    Item,
    OutputLock,
    ResultWriter,
    find_instance_files,
    instance_identity,
    load_instance,
    load_instances,
    named_files,
    plan_counts,
    plan_values,
    read_items,
    read_results,
    rows_frame,
    split_path,
)
from dnnprov.batch.reports.summary import (
    SUMMARY_COLUMNS,
    best_known,
    cost_ratios,
    format_summary,
    method_rank,
    summarize,
)
from dnnprov.dispatch import METHODS, solve
from dnnprov.errors import InvalidInputError
from dnnprov.execution.pool import Work, WorkerPool
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation.checks import MAX_MAGNITUDE
from dnnprov.result import Status

if TYPE_CHECKING:  # pandas is imported where used: task processes start without it
    import pandas as pd

Problem = SpotProblem | ServerlessProblem

__all__ = [
    "INSTANCE_SUFFIXES",
    "NUMERIC_COLUMNS",
    "PLAN_COLUMNS",
    "ROW_COLUMNS",
    "SUMMARY_COLUMNS",
    "TEXT_COLUMNS",
    "Item",
    "OutputLock",
    "ResultWriter",
    "best_known",
    "cost_ratios",
    "find_instance_files",
    "format_summary",
    "instance_identity",
    "load_instance",
    "load_instances",
    "method_rank",
    "named_files",
    "plan_counts",
    "read_items",
    "read_results",
    "rows_frame",
    "run_batch",
    "split_path",
    "summarize",
]

#: Environment variable naming an instance (name, file name or path) whose task makes its
#: child process exit hard; for testing crash handling. Read when the tasks are made.
CRASH_ENV = "DNNPROV_TEST_CRASH_ON"
CRASH_EXIT_CODE = 70
#: Likewise, an instance whose task never returns (its child sleeps): for testing the kill.
HANG_ENV = "DNNPROV_TEST_HANG_ON"


# ------------------------------------------------------------------ tasks and rows
@dataclass(frozen=True)
class Task:
    """One (instance, method) to solve; ``problem`` is ``None`` when the file is bad."""

    path: str
    method: str
    instance: str
    kind: str
    model: str
    problem: Problem | None
    read_error: str
    time_limit_s: float
    gap: float
    max_plans: int | None
    kill_after_s: float
    crash_on: str = ""
    hang_on: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """The resume key ``(normalised path, method)`` (see :func:`instance_identity`)."""
        return instance_identity(self.path), self.method


def applies(problem: Problem | None, method: str) -> bool:
    """Whether ``method`` applies to ``problem`` (``reference-heuristic``: spot only).

    A file that could not be read gets a row for every requested method.
    """
    return not (method == "reference-heuristic" and isinstance(problem, ServerlessProblem))


def _kind_model(problem: Problem | None) -> tuple[str, str]:
    if isinstance(problem, SpotProblem):
        return "spot", problem.model
    if isinstance(problem, ServerlessProblem):
        return "serverless", "lambda-dnn"
    return "", ""


def _row(task: Task, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in ROW_COLUMNS}
    row.update(
        path=task.path,
        instance=task.instance,
        kind=task.kind,
        model=task.model,
        method=task.method,
        plan="",
        message="",
        error="",
    )
    row.update(values)
    return row


def failure_row(task: Task, error: str, solve_seconds: float | None = None) -> dict[str, Any]:
    """The row of a task that produced no result: status ``error`` and the reason."""
    return _row(task, status=Status.ERROR.value, solve_seconds=solve_seconds, error=error)


def run_task(task: Task) -> dict[str, Any]:
    """Solve one task in this process and return its row (never raises)."""
    if task.problem is None:
        return failure_row(task, task.read_error)
    names = {task.instance, task.path, Path(task.path).name}
    if task.crash_on and task.crash_on in names:
        os._exit(CRASH_EXIT_CODE)
    if task.hang_on and task.hang_on in names:
        time.sleep(24 * 3600)
    started, cpu = time.perf_counter(), time.process_time()
    try:
        result = solve(
            task.problem, task.method, time_limit_s=task.time_limit_s, gap=task.gap, max_plans=task.max_plans
        )
    except Exception as exc:  # noqa: BLE001 (InvalidInputError or anything solve lets through)
        row = failure_row(task, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
        row["cpu_seconds"] = time.process_time() - cpu
        return row
    cpu = time.process_time() - cpu
    row = result.to_row()
    row.pop("instance", None)
    gpus = None
    if isinstance(task.problem, SpotProblem):
        cols = task.problem.columns()
        gpus = dict(zip(cols.labels, (int(g) for g in cols.gpus)))
    out = _row(task, **row, cpu_seconds=cpu, **plan_values(result.plan, gpus))
    if result.status is Status.ERROR:
        out["error"] = result.message or "solver error"
    return out


def make_tasks(
    items: Sequence[Item],
    methods: Sequence[str],
    *,
    time_limit_s: float,
    gap: float = 0.0,
    max_plans: int | None = None,
    kill_after_s: float | None = None,
) -> list[Task]:
    """One task per (item, method) that applies, in item order then method order."""
    kill = kill_after_s if kill_after_s is not None else default_kill_after(time_limit_s)
    crash_on, hang_on = os.environ.get(CRASH_ENV, ""), os.environ.get(HANG_ENV, "")
    tasks: list[Task] = []
    for item in items:
        kind, model = _kind_model(item.problem)
        name = item.problem.name if item.problem is not None else Path(split_path(item.path)[0]).stem
        tasks.extend(
            Task(
                path=item.path,
                method=m,
                instance=name,
                kind=kind,
                model=model,
                problem=item.problem,
                read_error=item.error,
                time_limit_s=time_limit_s,
                gap=gap,
                max_plans=max_plans,
                kill_after_s=kill,
                crash_on=crash_on,
                hang_on=hang_on,
            )
            for m in methods
            if applies(item.problem, m)
        )
    return tasks


def default_kill_after(time_limit_s: float) -> float:
    """Seconds after which a task's child is killed: ``1.1 * limit + 30`` s.

    The solver is to stop itself at its time limit and return its incumbent (status
    ``limit``); the kill is the last resort for one that does not return, so the grace is
    generous (a loaded machine, the set-up and the final MILP count against the limit).
    """
    return 1.1 * time_limit_s + 30.0


# ------------------------------------------------------------------ supervised execution
#: The job function of the worker processes (``"module:function"``): a task -> ``("ok", row)``.
RUNNER = "dnnprov.batch.runner:task_outcome"
#: Longest start of a task process (imports) before the batch gives up on the machine.
START_FAILURES = 3


def task_outcome(task: Task) -> tuple[str, dict[str, Any]]:
    """:func:`run_task` as a worker process answers it: ``("ok", row)``."""
    return ("ok", run_task(task))


def warm_up() -> None:
    """Import the solvers in a new task process before its first task (not timed)."""
    from dnnprov.solvers import milp  # noqa: F401
    from dnnprov.solvers.search import enumeration, heuristics  # noqa: F401


def outcome_row(task: Task, outcome: tuple, seconds: float | None) -> dict[str, Any]:
    """The row of ``task`` from the pool's outcome: its own row, or a crash or timeout row."""
    if outcome[0] == "ok":
        row: dict[str, Any] = outcome[1]
        return row
    if outcome[0] == "killed":
        return failure_row(
            task,
            f"timeout: task process killed after {task.kill_after_s:g} s: the solver did not "
            f"return within its time limit of {task.time_limit_s:g} s and the grace after it; "
            "no result",
            seconds,
        )
    if outcome[0] == "crashed" and outcome[1].startswith("the worker process ended unexpectedly ("):
        how = outcome[1].removeprefix("the worker process ended unexpectedly ")
        return failure_row(task, f"crash: task process died {how}", seconds)
    return failure_row(task, f"crash: {' '.join(map(str, outcome[1:])) or outcome[0]}", seconds)


def _run_pool(pool: WorkerPool, tasks: Sequence[Task], emit: Callable[[dict[str, Any]], None]) -> None:
    """Submit every task to ``pool`` and ``emit`` each row as it ends."""
    works: dict[Future, tuple[Task, Work]] = {}
    for task in tasks:
        work = Work((task,), task.kill_after_s)
        pool.reserve(work)
        works[pool.submit(work)] = (task, work)
    pending = set(works)
    while pending:
        done, pending = futures_wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
        for future in done:
            task, work = works[future]
            seconds = time.perf_counter() - work.started if work.started else None
            emit(outcome_row(task, future.result(), seconds))
        if pool.start_failures > START_FAILURES:
            raise RuntimeError(
                f"batch task processes exit at start; try `{sys.executable} -c 'import dnnprov.solvers.milp'`"
            )


def run_local(tasks: Sequence[Task], workers: int, emit: Callable[[dict[str, Any]], None]) -> None:
    """Run ``tasks`` on ``workers`` supervised task processes; ``emit`` each row as it ends."""
    pool = WorkerPool(max(1, min(workers, len(tasks))), runner=RUNNER, warm_up=f"{__name__}:warm_up", quiet=True)
    try:
        _run_pool(pool, tasks, emit)
    finally:
        pool.close()


def run_dask(
    tasks: Sequence[Task], address: str, emit: Callable[[dict[str, Any]], None], workers: int | None = None
) -> None:
    """Run ``tasks`` on the Dask cluster at ``address`` (``"local"``: a 2-worker LocalCluster),
    each in a supervised task process of a Dask worker."""
    try:
        from distributed import LocalCluster

        from dnnprov.execution.dask import DaskPool
    except ImportError:
        raise InvalidInputError("--dask", "needs dask.distributed: pip install 'dnnprov[batch]'") from None
    cluster = None
    if address == "local":
        # silence_logs: the cluster lives as long as the batch, and its teardown chatter
        # (comm closed, nanny timeouts, with tracebacks under load) is no news to the user;
        # a task that fails is a row (crash: ...), a cluster that fails to start raises.
        cluster = LocalCluster(
            n_workers=workers or 2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
            silence_logs=logging.CRITICAL,
        )
        address = cluster.scheduler_address
    try:
        try:
            pool = DaskPool(address, runner=RUNNER, warm_up=f"{__name__}:warm_up", supervised=True)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InvalidInputError("--dask", f"cannot connect to {address}: {exc}") from None
        try:
            _run_pool(pool, tasks, emit)
        finally:
            pool.close()
    finally:
        if cluster is not None:
            _close_cluster(cluster)


def _close_cluster(cluster: Any) -> None:
    """Close the batch's own cluster: the rows are all in by now, so a cluster that closes
    badly (a timeout on a loaded machine) is one warning line, not a failed batch."""
    try:
        cluster.close()
    except Exception as exc:  # noqa: BLE001 (a cluster that closes badly is a warning, not a failed batch)
        print(
            f"dnnprov: warning: the local Dask cluster did not close cleanly ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )


# ------------------------------------------------------------------ the batch
def sort_rows(rows: Sequence[dict[str, Any]], methods: Sequence[str] = METHODS) -> list[dict[str, Any]]:
    """Rows in a fixed order: by file, then instance number in a ``.jsonl``, then method."""
    rank = method_rank(methods)

    def key(row: dict[str, Any]) -> tuple:
        file, index = split_path(str(row["path"]))
        return file, -1 if index is None else index, rank(str(row["method"]))

    return sorted(rows, key=key)


def run_batch(
    paths: Iterable[str | Path],
    methods: Sequence[str] = METHODS,
    *,
    time_limit_s: float = 60.0,
    gap: float = 0.0,
    max_plans: int | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    workers: int | None = None,
    dask: str | None = None,
    kill_after_s: float | None = None,
    progress: bool | None = None,
) -> pd.DataFrame:
    """Solve every instance below ``paths`` with every method in ``methods``.

    Parameters
    ----------
    paths
        Instance files and folders (searched recursively for ``*.json`` and ``*.jsonl``).
    methods
        Methods of :func:`dnnprov.solve`; those that do not apply to an instance are
        skipped (``reference-heuristic`` on serverless problems).
    time_limit_s, gap, max_plans
        Passed to :func:`dnnprov.solve` for every task.
    out
        Results file, ``.csv`` (one row appended and flushed per task) or ``.parquet``
        (rewritten every 50 rows or 30 s). Rewritten sorted at the end. The batch holds an
        exclusive lock on it (:class:`OutputLock`): a second batch writing the same file
        is refused with an :class:`InvalidInputError`.
    resume
        Keep the rows already in ``out`` and run only the (instance, method) pairs missing;
        instances are matched by their real absolute path (:func:`instance_identity`), so
        a folder given relative once and absolute the next time is the same.
    workers
        Task processes of the local pool (default: CPU count); with ``dask="local"`` the
        number of Dask workers (default 2).
    dask
        ``None`` runs locally; ``"local"`` starts a 2-worker ``LocalCluster`` on
        127.0.0.1; any other value is a scheduler address such as ``tcp://127.0.0.1:8786``.
    kill_after_s
        Seconds after which a task's process is killed and the row recorded as a timeout
        (default ``1.1 * time_limit_s + 30``: the solver is to stop itself at its limit).
    progress
        Show a progress bar on stderr (default: when stderr is a terminal).

    Returns
    -------
    pandas.DataFrame
        Every row of ``out`` (old and new), columns :data:`ROW_COLUMNS`, sorted by path and
        method. ``df.attrs`` holds ``ran`` (tasks run now), ``kept`` (rows resumed) and
        ``skipped_files`` (other dnnprov documents found in the folders).
    """
    methods = list(dict.fromkeys(methods))
    bad = [m for m in methods if m not in METHODS]
    if not methods or bad:
        raise InvalidInputError("methods", f"must be among {', '.join(METHODS)}; got {', '.join(bad) or 'none'}")
    for name, seconds in (("time_limit_s", time_limit_s), ("kill_after_s", kill_after_s)):
        if seconds is not None and not 0 < seconds <= MAX_MAGNITUDE:  # NaN and inf fail too
            raise InvalidInputError(name, f"must be > 0 and at most 1e15 seconds, got {seconds!r}")
    if not 0 <= gap < 1:
        raise InvalidInputError("gap", f"must be in [0, 1), got {gap!r}")
    if workers is not None and workers < 1:
        raise InvalidInputError("workers", f"must be >= 1, got {workers!r}")
    out_path = None if out is None else Path(out)
    if out_path is not None and out_path.suffix not in (".csv", ".parquet"):
        raise InvalidInputError(str(out), "results file must end in .csv or .parquet")
    if out_path is not None and out_path.suffix == ".parquet":
        _need("pyarrow", "--out *.parquet")
    if resume and out_path is None:
        raise InvalidInputError("resume", "needs an output file (--out) to resume from")

    paths = list(paths)
    files = find_instance_files(paths)
    items, skipped = read_items(files, named_files(paths))
    if not items:
        raise InvalidInputError(", ".join(map(str, paths)) or "paths", "no instance files (*.json, *.jsonl) found")
    tasks = make_tasks(
        items, methods, time_limit_s=time_limit_s, gap=gap, max_plans=max_plans, kill_after_s=kill_after_s
    )
    lock = OutputLock(out_path) if out_path is not None else None
    if lock is not None:
        lock.acquire()
    try:
        return _run_tasks(tasks, methods, out_path, resume, workers, dask, progress, skipped)
    finally:
        if lock is not None:
            lock.release()


def _run_tasks(
    tasks: Sequence[Task],
    methods: Sequence[str],
    out_path: Path | None,
    resume: bool,
    workers: int | None,
    dask: str | None,
    progress: bool | None,
    skipped: Sequence[Path],
) -> pd.DataFrame:
    """Run the tasks not yet in ``out_path`` (with ``resume``) and write every row."""
    existing: list[dict[str, Any]] = []
    if resume and out_path is not None and out_path.exists():
        existing = read_results(out_path, drop_bad=True).to_dict("records")
    bases = [Path.cwd()] + ([out_path.parent] if out_path is not None else [])
    done = {(instance_identity(r["path"], bases), r["method"]) for r in existing}
    todo = [t for t in tasks if t.key not in done]

    writer = ResultWriter(out_path, existing) if out_path is not None else None
    rows = list(existing)
    failed = 0
    from tqdm.auto import tqdm

    bar = tqdm(
        total=len(todo),
        unit="task",
        desc="batch",
        file=sys.stderr,
        disable=(not sys.stderr.isatty()) if progress is None else not progress,
    )

    def emit(row: dict[str, Any]) -> None:
        nonlocal failed
        rows.append(row)
        if writer is not None:
            writer.write(row)
        failed += row["status"] == Status.ERROR.value
        bar.set_postfix_str(f"{failed} failed", refresh=False)
        bar.update()

    try:
        if todo and dask:
            run_dask(todo, dask, emit, workers)
        elif todo:
            run_local(todo, workers or os.cpu_count() or 1, emit)
    finally:
        bar.close()
        ordered = sort_rows(rows, methods)
        if writer is not None:
            writer.close(ordered)
    df = rows_frame(ordered)
    df.attrs.update(ran=len(todo), kept=len(existing), skipped_files=[f.as_posix() for f in skipped])
    return df


def _need(module: str, what: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise InvalidInputError(what, f"needs {module}: pip install 'dnnprov[batch]'") from None
