"""Loss logs for the profiler: the CSV contract and readers that turn raw logs into it.

Every reader produces :class:`LossLog`, the table the loss fit reads: one row per logged
step with columns ``run,workers,batch_wa,cc,step,loss`` (``step`` = normalized iterations
j, ``batch_wa`` = b_w of eq. 4, ``cc`` = R of eq. 5, ``workers`` = |N|). Readers:

- :func:`read_loss_csv`: that CSV itself;
- :func:`read_tf_worker_logs`: the spotDNN authors' TensorFlow worker logs, one file per
  worker of a run, lines of ``datetime, global step, global images, loss, examples/s,
  s/batch`` (tab- or comma-separated); b_w and R come from the workers' logged speeds and
  j = global images / b_w, as the authors' profiler computes them;
- :func:`read_trainer_state`: a Hugging Face Trainer ``trainer_state.json``
  (``log_history`` rows with ``loss`` and ``step``; the batch size is not in the file).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.json_files import parse_json
from dnnprov.problems.validation.checks import MAX_BATCH, MAX_MAGNITUDE, MAX_WORKERS

COLUMNS = ("run", "workers", "batch_wa", "cc", "step", "loss")
#: Rows skipped at the start and end of a worker log when averaging its s/batch (warm-up
#: and shutdown), as the authors' profiler does; only when enough rows remain.
SKIP_HEAD, SKIP_TAIL = 10, 3


@dataclass(frozen=True)
class LossLog:
    """Loss observations: parallel arrays, one entry per logged step."""

    run: np.ndarray
    workers: np.ndarray
    batch_wa: np.ndarray
    cc: np.ndarray
    step: np.ndarray
    loss: np.ndarray

    def __len__(self) -> int:
        return len(self.loss)

    def runs(self) -> list[str]:
        """Run names in first-seen order."""
        return list(dict.fromkeys(self.run.tolist()))

    def select(self, mask: np.ndarray) -> LossLog:
        """The rows where ``mask`` is true."""
        return LossLog(*(getattr(self, c)[mask] for c in COLUMNS))

    @classmethod
    def concat(cls, logs: Sequence[LossLog]) -> LossLog:
        """All rows of ``logs`` in order."""
        return cls(*(np.concatenate([getattr(log, c) for log in logs]) for c in COLUMNS))

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, int, float, float, float, float]]) -> LossLog:
        """Build from ``(run, workers, batch_wa, cc, step, loss)`` tuples."""
        rows = list(rows)
        if not rows:
            raise InvalidInputError("loss log", "has no rows")
        cols = list(zip(*rows))
        return cls(
            run=np.array(cols[0], dtype=object),
            workers=np.array(cols[1], dtype=np.int64),
            batch_wa=np.array(cols[2], dtype=float),
            cc=np.array(cols[3], dtype=float),
            step=np.array(cols[4], dtype=float),
            loss=np.array(cols[5], dtype=float),
        )

    def write_csv(self, path: str | Path) -> None:
        """Write the CSV contract (header ``run,workers,batch_wa,cc,step,loss``)."""
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(COLUMNS)
            for i in range(len(self)):
                out.writerow(
                    [
                        self.run[i],
                        int(self.workers[i]),
                        repr(float(self.batch_wa[i])),
                        repr(float(self.cc[i])),
                        repr(float(self.step[i])),
                        repr(float(self.loss[i])),
                    ]
                )


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInputError(str(path), "not UTF-8 text") from None


def _finite(
    where: str, text: str, *, positive: bool = False, minimum: float | None = None, maximum: float = MAX_MAGNITUDE
) -> float:
    """``text`` as a float within the stated bounds and at most 1e15 in size (as instance numbers)."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidInputError(where, f"not a number: {text!r}") from None
    if not math.isfinite(value) or (positive and value <= 0) or (minimum is not None and value < minimum):
        need = " > 0" if positive else f" >= {minimum:g}" if minimum is not None else ""
        raise InvalidInputError(where, f"must be a finite number{need}, got {text!r}")
    if abs(value) > maximum:
        raise InvalidInputError(where, f"{value:g} is out of range (at most {maximum:g})")
    return value


def csv_rows(path: str | Path, text: str) -> Iterable[tuple[int, list[str]]]:
    """(line number, fields) of every CSV row; a malformed row (a field over the csv module's
    131,072-character limit, say) is one :class:`InvalidInputError` naming its line."""
    reader = csv.reader(text.splitlines())
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InvalidInputError(f"{path}:{reader.line_num}", f"not a readable CSV row: {exc}") from None
        yield reader.line_num, row


def read_loss_csv(path: str | Path) -> LossLog:
    """Read the CSV contract ``run,workers,batch_wa,cc,step,loss`` (one header line)."""
    reader = iter(csv_rows(path, _read_text(path)))
    header = next(reader, (1, None))[1]
    if header is None or [h.strip() for h in header] != list(COLUMNS):
        raise InvalidInputError(f"{path}:1", f"header must be {','.join(COLUMNS)}; got {','.join(header or [])!r}")
    rows = []
    for number, row in reader:
        if not row or not "".join(row).strip():
            continue
        where = f"{path}:{number}"
        if len(row) != len(COLUMNS):
            raise InvalidInputError(where, f"expected {len(COLUMNS)} columns, got {len(row)}")
        run = row[0].strip()
        if not run:
            raise InvalidInputError(f"{where}.run", "empty run name")
        workers = _finite(f"{where}.workers", row[1], positive=True, maximum=MAX_WORKERS)
        if workers != int(workers):
            raise InvalidInputError(f"{where}.workers", f"must be an integer, got {row[1]!r}")
        cc = _finite(f"{where}.cc", row[3], minimum=0)
        if cc >= 1:
            raise InvalidInputError(f"{where}.cc", f"R lies in [0, 1), got {row[3]!r}")
        rows.append(
            (
                run,
                int(workers),
                _finite(f"{where}.batch_wa", row[2], positive=True),
                cc,
                _finite(f"{where}.step", row[4], minimum=0),
                _finite(f"{where}.loss", row[5]),
            )
        )
    if not rows:
        raise InvalidInputError(str(path), "has a header but no rows")
    return LossLog.from_rows(rows)


def cluster_stats(batches: Sequence[float], iteration_s: Sequence[float]) -> tuple[float, float]:
    """(b_w, R) of a cluster from its workers' batches and iteration times, eqs. (4)-(5)."""
    b = np.asarray(batches, dtype=float)
    t = np.asarray(iteration_s, dtype=float)
    rates = 1 / t
    speeds = b / t
    batch_wa = float(speeds.sum() / rates.sum())
    shares = speeds / speeds.sum()
    top = int(np.argmax(shares))
    rest = np.delete(shares, top)
    return batch_wa, float(math.sqrt((1 - shares[top]) ** 2 + float((rest**2).sum())))


_BATCH_IN_NAME = re.compile(r"(?:^|_)b(\d+)(?:_|$)")


def _worker_batch(path: Path, batch: int | None) -> int:
    if batch is not None:
        return batch
    match = _BATCH_IN_NAME.search(path.stem)
    if not match:
        raise InvalidInputError(
            str(path),
            "the worker batch is not in the file name (a _b<batch>_ token, as the "
            "authors name their logs): give it with --worker-batch",
        )
    return int(match.group(1))


def _worker_rows(path: Path) -> list[tuple[float, float, float]]:
    """(global images, loss, s/batch) of every data line of one worker log."""
    rows = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        fields = [f.strip() for f in re.split(r"\t|,", line) if f.strip()]
        if len(fields) != 6 or not re.match(r"\d{4}-\d{2}-\d{2}", fields[0]):
            continue  # headers, TF start-up chatter
        where = f"{path}:{number}"
        rows.append(
            (
                _finite(f"{where}.global_images", fields[2], minimum=0),
                _finite(f"{where}.loss", fields[3]),
                _finite(f"{where}.sec_per_batch", fields[5], positive=True),
            )
        )
    if not rows:
        raise InvalidInputError(
            str(path), "no log lines of the form: datetime, global step, global images, loss, examples/s, s/batch"
        )
    return rows


def read_tf_worker_logs(
    files: Sequence[str | Path], *, run: str | None = None, worker_batch: int | None = None
) -> LossLog:
    """One run of the spotDNN authors' TF trainer: one log file per worker.

    A worker's iteration time is its mean s/batch (skipping the first
    :data:`SKIP_HEAD` and last :data:`SKIP_TAIL` lines when more than 20 remain); b_w and R
    follow from the workers' batches and times (eqs. 4-5); every logged line becomes a
    row with j = global images / b_w. ``worker_batch`` gives every worker's batch
    (default: the ``_b<batch>_`` token of each file name).
    """
    paths = [Path(f) for f in files]
    if not paths:
        raise InvalidInputError("files", "a run needs at least one worker log")
    batches, times, points = [], [], []
    for path in paths:
        rows = _worker_rows(path)
        batches.append(_worker_batch(path, worker_batch))
        seconds = [r[2] for r in rows]
        if len(seconds) > SKIP_HEAD + SKIP_TAIL + 20:
            seconds = seconds[SKIP_HEAD:-SKIP_TAIL]
        times.append(float(np.mean(seconds)))
        points += [(r[0], r[1]) for r in rows]
    batch_wa, cc = cluster_stats(batches, times)
    name = run or paths[0].parent.name or paths[0].stem
    points.sort()
    return LossLog.from_rows((name, len(paths), batch_wa, cc, images / batch_wa, loss) for images, loss in points)


def read_trainer_state(path: str | Path, *, batch_size: float, workers: int = 1, run: str | None = None) -> LossLog:
    """A Hugging Face Trainer ``trainer_state.json``: its ``log_history`` training losses.

    ``batch_size`` is the samples of one optimizer step of one worker (per-device batch x
    that worker's devices x gradient accumulation; the file does not record it): b_w,
    the per-worker batch of eq. (4), not the global batch of all ``workers``. The workers
    train synchronously with equal batches, so b_w = ``batch_size`` and R is that of
    ``workers`` identical workers (eq. 5; 0 for one). j = the logged ``step``.
    """
    if not (isinstance(batch_size, (int, float)) and math.isfinite(batch_size) and 0 < batch_size <= MAX_BATCH):
        raise InvalidInputError("batch_size", f"must be a number > 0 and at most {MAX_BATCH:,}, got {batch_size!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InvalidInputError("workers", f"must be an integer from 1 to {MAX_WORKERS:,}, got {workers!r}")
    state = parse_json(_read_text(path), str(path))
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InvalidInputError(f"{path}.log_history", "missing: not a Trainer state file")
    cc = cluster_stats([batch_size] * workers, [1.0] * workers)[1]
    name = run or Path(path).stem
    rows = []
    for i, entry in enumerate(history):
        if isinstance(entry, dict) and "loss" in entry and "step" in entry:
            loss, step = entry["loss"], entry["step"]
            where = f"{path}.log_history[{i}]"
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (loss, step)):
                raise InvalidInputError(where, f"loss and step must be numbers, got {loss!r}, {step!r}")
            # the same limits as the CSV reader's: a step is >= 0, numbers at most 1e15 in size
            rows.append(
                (
                    name,
                    workers,
                    float(batch_size),
                    cc,
                    _finite(f"{where}.step", repr(step), minimum=0),
                    _finite(f"{where}.loss", repr(loss)),
                )
            )
    if not rows:
        raise InvalidInputError(f"{path}.log_history", "has no entries with both loss and step")
    return LossLog.from_rows(rows)
