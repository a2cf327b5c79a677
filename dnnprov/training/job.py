"""The reference job: data, model and worker types, shared by the PS and the workers.

Time has one unit everywhere: **job seconds**. The processes run ``speed`` job seconds per
wall second (:attr:`Job.speed`), so that a cluster of emulated GPUs trains in seconds of
wall time while its iteration times, the control loop's polls and the traces' ticks keep
realistic sizes. A worker type's GPU time per iteration (:attr:`WorkerType.compute_s`) is
emulated: after computing its gradient for real, the worker waits until that much job time
has passed (docs/training.md); its gradients, their staleness and the loss are real.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError

#: The epoch job times are printed from in worker logs (``dnnprov profile`` reads the date only).
LOG_BASE = "2026-01-01T00:00:00"


@dataclass(frozen=True)
class WorkerType:
    """One kind of worker: its batch per iteration and its emulated GPU time per iteration (job s)."""

    name: str
    batch: int
    compute_s: float

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/\\ "):
            raise InvalidInputError("worker type", f"a name without spaces or slashes, got {self.name!r}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or not 1 <= self.batch <= 65536:
            raise InvalidInputError(f"{self.name}.batch", f"an integer from 1 to 65536, got {self.batch!r}")
        if not (math.isfinite(self.compute_s) and 0 <= self.compute_s <= 3600):
            raise InvalidInputError(f"{self.name}.compute_s", f"seconds in [0, 3600], got {self.compute_s!r}")


@dataclass(frozen=True)
class Job:
    """The reference job's settings (defaults: the job of docs/training.md)."""

    seed: int = 0
    samples: int = 4096  # training set size
    features: int = 32
    classes: int = 10
    hidden: int = 32
    label_noise: float = 0.05  # share of labels drawn at random: the loss has a floor
    lr: float = 0.05  # SGD step applied by the PS to every pushed gradient
    warmup_steps: int = 100  # sequential SGD steps (batch 32) the PS starts from: a warm start
    eval_samples: int = 512  # the fixed training subset the PS evaluates the loss on
    eval_every: int = 4  # PS updates between two evaluations
    smooth: int = 5  # evaluations averaged into the reported loss
    speed: float = 100.0  # job seconds per wall second
    param_size_mb: float = 0.0  # emulated S_parm of the transfers (0: no emulated transfer time)
    bandwidth_req_mb_s: float = 0.0  # a worker's own link (0: unlimited)
    ps_bandwidth_mb_s: float = 0.0  # the PS's link, shared by all workers (0: unlimited)

    def __post_init__(self) -> None:
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise InvalidInputError("job.warmup_steps", f"an integer >= 0, got {self.warmup_steps!r}")
        for name in ("samples", "features", "classes", "hidden", "eval_samples", "eval_every", "smooth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"job.{name}", f"an integer >= 1, got {value!r}")
        for name in ("lr", "speed"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise InvalidInputError(f"job.{name}", f"a number > 0, got {getattr(self, name)!r}")
        for name in ("label_noise", "param_size_mb", "bandwidth_req_mb_s", "ps_bandwidth_mb_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise InvalidInputError(f"job.{name}", f"a number >= 0, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (run summaries, benchmark output)."""
        return asdict(self)

    def transfer_s(self, bandwidth_mb_s: float) -> float:
        """Job seconds of one push and pull (2 S_parm) at ``bandwidth_mb_s`` (0: unlimited)."""
        return 2 * self.param_size_mb / bandwidth_mb_s if bandwidth_mb_s > 0 and self.param_size_mb > 0 else 0.0


def dataset(job: Job) -> tuple[np.ndarray, np.ndarray]:
    """The seeded synthetic classification set: two Gaussian blobs per class, some labels random.

    Returns features (float32, samples x features) and labels (int64)."""
    rng = np.random.default_rng(job.seed)
    centers = rng.normal(scale=1.0, size=(2 * job.classes, job.features))
    blob = rng.integers(0, 2 * job.classes, size=job.samples)
    x = centers[blob] + rng.normal(scale=1.0, size=(job.samples, job.features))
    y = blob // 2
    flip = rng.random(job.samples) < job.label_noise
    y[flip] = rng.integers(0, job.classes, size=int(flip.sum()))
    return x.astype(np.float32), y.astype(np.int64)


def make_model(job: Job) -> Any:
    """The MLP (features -> hidden -> classes), initialized from the job's seed."""
    import torch

    torch.manual_seed(job.seed)
    return torch.nn.Sequential(
        torch.nn.Linear(job.features, job.hidden), torch.nn.ReLU(), torch.nn.Linear(job.hidden, job.classes)
    )


@functools.lru_cache(maxsize=8)
def initial_params(job: Job) -> np.ndarray:
    """The parameters training starts from: the seeded initialization after ``warmup_steps``
    sequential SGD steps of batch 32 (a warm start, like fine-tuning: the asynchronous phase
    then follows the hyperbolic tail eq. (3) models, not the plateau of a cold start). Computed
    once per job and process (the launcher hands it to the PS); do not modify the array."""
    import torch

    model = make_model(job)
    x, y = dataset(job)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    rng = np.random.default_rng(job.seed + 2)
    for _ in range(job.warmup_steps):
        pick = torch.from_numpy(rng.integers(0, len(y), size=32))
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(xs[pick]), ys[pick]).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= job.lr * p.grad
    return get_flat(model)


def get_flat(model: Any) -> np.ndarray:
    """The model's parameters as one float32 vector."""
    import torch

    with torch.no_grad():
        return torch.cat([p.reshape(-1) for p in model.parameters()]).numpy().copy()


def set_flat(model: Any, flat: np.ndarray) -> None:
    """Load one float32 vector into the model's parameters."""
    import torch

    at = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(torch.from_numpy(flat[at : at + n]).reshape(p.shape))
            at += n


def grad_flat(model: Any) -> np.ndarray:
    """The gradients of the last backward pass as one float32 vector."""
    import torch

    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy().copy()


def job_time(epoch: Any, speed: float) -> float:
    """Job seconds since ``epoch``: a wall time (``time.time()``), or a shared
    ``multiprocessing.Value("d")`` holding one (NaN: the run's clock has not started; 0)."""
    import time

    start = float(getattr(epoch, "value", epoch))
    return 0.0 if math.isnan(start) else max(0.0, (time.time() - start) * speed)


def log_time(job_s: float) -> str:
    """A job time as the date-time a worker log line starts with."""
    from datetime import datetime, timedelta

    return (datetime.fromisoformat(LOG_BASE) + timedelta(seconds=job_s)).strftime("%Y-%m-%d %H:%M:%S.%f")
