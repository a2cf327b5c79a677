"""Whose profile a fitted log writes: the log's workload against the ``--base`` profile's.

``dnnprov profile fit-loss --base P --out Q`` copies from P everything a loss log does not
measure: the workload's name, parameter size, B_req, the contention coefficients and the
per-type timings. They are P's workload's, so they are never carried to another workload
silently (issue 31): :func:`logged_workload` reads the name a log states, and
:func:`with_identity` refuses a log of another workload unless ``--name`` says which it is
(then ``--param-size-mb`` is needed, P's per-type timings are dropped or kept marked as
estimates, and P's B_req, alpha_1, beta_1 are marked estimated), warns when the log states
no name, and can record the log's own measured speed on the type it ran on.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dnnprov.errors import InvalidInputError, ProfileWarning
from dnnprov.io.catalogs.catalog import SpotWorkloadProfile
from dnnprov.json_files import read_json_file

#: Workload fields a loss log does not measure and ``--base`` supplies (beside the name,
#: the parameter size and the per-type timings).
BASE_TIMING_FIELDS = ("bandwidth_req_mb_s", "alpha_1", "beta_1")


@dataclasses.dataclass(frozen=True)
class Logged:
    """What a log says about its workload: a name (``None``: none stated), where it is
    stated, and the measured training speed of a Trainer state (samples/s), if any."""

    name: str | None
    where: str
    samples_per_s: float | None = None


def _trainer_state(path: Path) -> Logged:
    state = read_json_file(path)
    if not isinstance(state, dict):
        return Logged(None, str(path))
    speed = next(
        (
            e.get("train_samples_per_second")
            for e in reversed(state.get("log_history") or [])
            if isinstance(e, dict) and isinstance(e.get("train_samples_per_second"), (int, float))
        ),
        None,
    )
    speed = float(speed) if speed is not None and math.isfinite(speed) and speed > 0 else None
    checkpoint = state.get("best_model_checkpoint")
    if isinstance(checkpoint, str) and checkpoint.strip():
        parts = [p for p in Path(checkpoint).parts if p and not re.fullmatch(r"checkpoint-\d+", p)]
        if parts:
            return Logged(parts[-1][:200], f"best_model_checkpoint of {path.name}", speed)
    return Logged(None, str(path), speed)


def logged_workload(paths: Sequence[str | Path]) -> Logged:
    """The workload the logs name: a Trainer state's ``best_model_checkpoint`` folder; CSVs
    and TF worker logs state none."""
    for p in map(Path, paths):
        if p.suffix == ".json" and p.is_file():
            return _trainer_state(p)
    return Logged(None, ", ".join(map(str, paths)))


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def same_workload(logged: str, base: str) -> bool:
    """Whether a logged name is the base's workload (one contains the other, case and punctuation aside)."""
    a, b = _key(logged), _key(base)
    return bool(a and b) and (a in b or b in a)


def with_identity(
    profile: SpotWorkloadProfile,
    logged: Logged,
    *,
    name: str | None = None,
    param_size_mb: float | None = None,
    keep_base_timings: bool = False,
    measured_on: str | None = None,
) -> SpotWorkloadProfile:
    """``profile`` (a base with a fitted loss model) as the logged workload's profile.

    Without ``name``: a log that names another workload is refused; one that names none
    keeps the base's identity with a :class:`ProfileWarning`. With a ``name`` other than
    the base's: ``param_size_mb`` is required; the base's per-type timings are dropped
    (``keep_base_timings``: kept, each marked as an estimate) and its B_req, alpha_1, beta_1
    are marked estimated. ``measured_on`` records the log's own samples/s as the compute time
    of that one-GPU type at the logged batch.
    """
    base = profile.workload
    if name is None:
        if logged.name is not None and not same_workload(logged.name, base.name):
            raise InvalidInputError(
                "--name",
                f"the log is of workload {logged.name!r} ({logged.where}), not "
                f"{base.name!r} of --base, whose name, parameter size and per-type "
                "timings the profile would carry: give --name (the new workload) and "
                "--param-size-mb",
            )
        if logged.name is None:
            warnings.warn(
                ProfileWarning(
                    f"the log does not name its workload: the profile keeps --base's name {base.name!r}, parameter "
                    f"size {base.param_size_mb:g} MB and per-type timings; give --name if the log is of another workload"
                )
            )
        name = base.name
    out = profile
    if name != base.name:
        if param_size_mb is None:
            raise InvalidInputError(
                "--param-size-mb",
                f"needed with --name {name!r}: the parameter size of {base.name!r} (--base) is not that workload's",
            )
        per_type: dict[str, Any] = {}
        if keep_base_timings:
            per_type = {
                t: {
                    **entry,
                    "estimate": entry.get("estimate")
                    or f"timing of {base.name} (--base), not measured for {name}: kept by --keep-base-timings",
                }
                for t, entry in profile.per_type.items()
            }
        workload = dataclasses.replace(
            base,
            name=name,
            param_size_mb=param_size_mb,
            estimated=tuple(dict.fromkeys([*base.estimated, *BASE_TIMING_FIELDS])),
        )
        note = (
            f"Workload {name} (--name), parameter size {param_size_mb:g} MB (--param-size-mb); B_req, alpha_1 "
            f"and beta_1 are {base.name}'s (--base), marked estimated; "
            + (
                "its per-type timings are kept, each marked as an estimate."
                if keep_base_timings
                else "its per-type timings were dropped (measure them: dnnprov profile plan)."
            )
        )
        out = dataclasses.replace(
            profile, workload=workload, per_type=per_type, notes=f"{profile.notes} {note}".strip()
        )
    if measured_on is not None:
        out = _measured_on(out, logged, measured_on)
    return out


def _measured_on(profile: SpotWorkloadProfile, logged: Logged, type_name: str) -> SpotWorkloadProfile:
    """The log's samples/s as the compute time of one-GPU type ``type_name`` at the logged batch."""
    domain = profile.workload.domain
    if logged.samples_per_s is None or domain is None:
        raise InvalidInputError(
            "--measured-on", "the log records no training speed (a Trainer state's train_samples_per_second)"
        )
    if domain.workers != (1, 1) or domain.batch_wa[0] != domain.batch_wa[1]:
        raise InvalidInputError("--measured-on", "needs a log of one worker at one batch (the speed is that run's)")
    batch = domain.batch_wa[0]
    if batch != int(batch):
        raise InvalidInputError("--measured-on", f"the logged batch {batch:g} is not a whole number of samples")
    seconds = float(f"{batch / logged.samples_per_s:.6g}")
    per_type = {**profile.per_type, type_name: {"batch_per_gpu": int(batch), "compute_time_s": seconds}}
    note = (
        f"{type_name}: compute time {seconds:g} s per iteration of {int(batch)} samples = the log's "
        f"train_samples_per_second {logged.samples_per_s:g} on the one-GPU type named by --measured-on "
        "(a lone run without a PS: its whole step is compute)."
    )
    return dataclasses.replace(profile, per_type=per_type, notes=f"{profile.notes} {note}".strip())
