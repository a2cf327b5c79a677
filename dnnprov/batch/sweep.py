"""Cost-deadline curves: the proven minimal cost at each deadline (and target loss).

``sweep(problem, deadlines, losses)`` solves the problem once per point with ``milp``
(exact, each point proven optimal or reported as it ended) and, beside it, with the
paper's heuristic. Each point is solved from scratch: the exact method takes no warm
start, and a point takes milliseconds. What a warm start would use is checked instead:
for one target loss the plan optimal at a deadline meets every later deadline, so the
proven minimal cost can only fall as the deadline grows; a rise is reported in
``Sweep.violations`` (none is expected; tests assert there is none).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnprov.dispatch import solve
from dnnprov.errors import InvalidInputError
from dnnprov.problems.serverless import ServerlessProblem
from dnnprov.problems.spot import SpotProblem, SpotSLO
from dnnprov.problems.validation import checks as check, plausibility
from dnnprov.result import Result

#: Most points one grid may have.
MAX_POINTS = 10_000
COLUMNS = [
    "loss",
    "deadline_s",
    "status",
    "cost",
    "bound",
    "gap",
    "time_s",
    "plan",
    "workers",
    "ps",
    "changed",
    "solve_seconds",
    "heuristic_status",
    "heuristic_cost",
    "heuristic_plan",
]


def deadline_grid(spec: object, *, field: str = "--deadlines") -> list[float]:
    """Deadlines in seconds from ``"START:STOP:N"`` (N evenly spaced, both ends included) or a list."""
    if isinstance(spec, str):
        parts = spec.split(":")
        if len(parts) != 3:
            raise InvalidInputError(field, f"expected START:STOP:N (e.g. 600:3600:24), got {check.short(spec)}")
        try:
            start, stop, n = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            raise InvalidInputError(field, f"expected START:STOP:N with numbers, got {check.short(spec)}") from None
        if not (math.isfinite(start) and math.isfinite(stop)) or not 0 < start <= stop:
            raise InvalidInputError(field, f"need 0 < START <= STOP, got {start:g}:{stop:g}")
        if not 1 <= n <= MAX_POINTS or (n == 1 and start != stop):
            raise InvalidInputError(field, f"N must be within 2..{MAX_POINTS} (1 when START = STOP), got {n}")
        return [start] if n == 1 else [start + (stop - start) * i / (n - 1) for i in range(n)]
    if not isinstance(spec, (list, tuple)) or not spec or len(spec) > MAX_POINTS:
        raise InvalidInputError(field, f"must be START:STOP:N or a list of 1..{MAX_POINTS} deadlines")
    values = [check.number(f"{field}.{i}", v, exclusive_minimum=0) for i, v in enumerate(spec)]
    return sorted(set(values))


def parse_losses(text: str, *, field: str = "--losses") -> list[float]:
    """Target losses from ``"0.7,0.8,0.9"``: each once, none empty (a typo would drop or repeat a point)."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise InvalidInputError(
            field, f"expected comma-separated numbers (none empty), got {check.short(text)}"
        ) from None
    if not all(math.isfinite(v) for v in values):
        raise InvalidInputError(field, f"expected comma-separated finite numbers, got {check.short(text)}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise InvalidInputError(field, f"{', '.join(f'{v:g}' for v in repeated)} given twice, got {check.short(text)}")
    return values


@dataclass
class Sweep:
    """The points of a sweep, in order of loss and then deadline (see :data:`COLUMNS`)."""

    instance: str
    kind: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the service's answer); ``warnings``: the problem's plausibility warnings."""
        return {
            "instance": self.instance,
            "kind": self.kind,
            "rows": self.rows,
            "violations": self.violations,
            "warnings": self.warnings,
        }

    def to_frame(self):
        """The rows as a pandas DataFrame with :data:`COLUMNS`."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=COLUMNS)


def _plan_text(result: Result) -> str:
    return "" if result.plan is None else str(result.plan)


def _workers(result: Result) -> int | None:
    """Workers of a spot plan, functions of a serverless plan."""
    if result.plan is None:
        return None
    return getattr(result.plan, "workers", None) or getattr(result.plan, "functions", None)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def point_problem(
    problem: SpotProblem | ServerlessProblem, deadline_s: float, loss: float | None
) -> SpotProblem | ServerlessProblem:
    """The problem with the deadline (and, for spot, the target loss) of one point."""
    if isinstance(problem, SpotProblem):
        slo = problem.slo
        return problem.replace(
            slo=SpotSLO(
                loss=slo.loss if loss is None else loss, time_s=deadline_s, takeover_overhead_s=slo.takeover_overhead_s
            )
        )
    if loss is not None:
        raise InvalidInputError("losses", "a serverless problem has no target loss (its SLO is a time)")
    return problem.replace(time_s=deadline_s)


def check_losses(
    problem: SpotProblem | ServerlessProblem, losses: Sequence[float] | None, field: str = "losses"
) -> None:
    """Refuse, before any point is solved, target losses no point can have (one error naming
    ``field`` and the loss): a loss on a serverless problem, or one its model cannot reach."""
    if not losses:
        return
    if isinstance(problem, ServerlessProblem):
        raise InvalidInputError(field, "a serverless problem has no target loss (its SLO is a time)")
    for loss in losses:
        try:
            point_problem(problem, problem.slo.time_s, loss)
        except InvalidInputError as exc:
            raise InvalidInputError(field, exc.problem) from None


def sweep(
    problem: SpotProblem | ServerlessProblem,
    deadlines: Sequence[float],
    losses: Sequence[float] | None = None,
    *,
    time_limit_s: float = 60.0,
    heuristic: bool = True,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> Sweep:
    """Solve ``problem`` exactly at every (loss, deadline) point; the heuristic beside it.

    Parameters
    ----------
    problem
        A spot or serverless problem; its own SLO is replaced at each point.
    deadlines
        Deadlines in seconds (``slo.time_s`` or ``time_s``).
    losses
        Target losses (spot only; default: the problem's own).
    time_limit_s
        Time limit per point, for ``milp`` and again for the heuristic: a sweep of N
        points ends within N x 2 x ``time_limit_s`` (plus each call's return margin).
    heuristic
        Also solve each point with the paper's heuristic (``heuristic_*`` columns).
    progress
        Called after each point with its number (from 1), the number of points and its row.
    """
    kind = "spot" if isinstance(problem, SpotProblem) else "serverless"
    out = Sweep(
        instance=problem.name,
        kind=kind,
        warnings=[{"field": w.field, "message": w.problem} for w in plausibility.findings(problem)],
    )
    check_losses(problem, losses)
    targets: Sequence[float | None] = losses or [None]  # None: the problem's own loss
    total = len(deadlines) * len(targets)
    for loss in targets:
        previous: dict[str, Any] | None = None
        for deadline in sorted(deadlines):
            point = point_problem(problem, float(deadline), loss)
            exact = solve(point, "milp", time_limit_s=time_limit_s)
            plan = _plan_text(exact)
            row: dict[str, Any] = {
                "loss": point.slo.loss if isinstance(point, SpotProblem) else None,
                "deadline_s": float(deadline),
                "status": exact.status.value,
                "cost": _finite(exact.cost),
                "bound": _finite(exact.bound),
                "gap": _finite(exact.gap),
                "time_s": _finite(exact.time_s),
                "plan": plan,
                "workers": _workers(exact),
                "ps": exact.plan.ps if exact.plan is not None else None,
                "changed": previous is None or previous["plan"] != plan,
                "solve_seconds": exact.solve_seconds,
                "heuristic_status": None,
                "heuristic_cost": None,
                "heuristic_plan": None,
            }
            if heuristic:
                h = solve(point, "heuristic", time_limit_s=time_limit_s)
                row.update(
                    heuristic_status=h.status.value, heuristic_cost=_finite(h.cost), heuristic_plan=_plan_text(h)
                )
            if (
                previous is not None
                and previous["status"] == "optimal"
                and row["status"] == "optimal"
                and row["cost"] > previous["cost"] * (1 + 1e-9) + 1e-9
            ):
                out.violations.append(
                    f"loss {row['loss']}: cost rose from {previous['cost']:.6f} at "
                    f"{previous['deadline_s']:g} s to {row['cost']:.6f} at {deadline:g} s"
                )
            out.rows.append(row)
            previous = row
            if progress is not None:
                progress(len(out.rows), total, row)
    return out


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"{chr(ord('A') + i // 26 - 1)}{chr(ord('A') + i % 26)}"


def _proof(row: Any) -> str:
    """How far a point's cost is proven: ``proven`` or its gap to the bound."""
    if row["status"] == "optimal":
        return "proven"
    gap = row["gap"]
    return (
        f"{row['status']}, not proven: gap {100 * gap:.1f} %"
        if gap is not None and math.isfinite(gap)
        else f"{row['status']}, not proven: no bound"
    )


def plot_sweep(result: Sweep, ax=None):
    """milp's cost vs deadline (one line per loss) with the heuristic's cost beside it.

    Proven optima are filled circles; a point that ended at the time limit is a hollow
    circle with a bar down to its proven lower bound; proven-infeasible deadlines are
    shaded; points with no plan and no proof are crosses on the axis. Each point where
    milp's plan changes gets a letter; the notes below the axes list the plans. Returns
    the figure.
    """
    from matplotlib.figure import Figure

    frame = result.to_frame()
    changes = frame[frame["changed"] & frame["cost"].notna()]
    if ax is None:
        fig = Figure(figsize=(9, 5.2 + 0.14 * len(changes)), layout="constrained")
        ax, notes = fig.subplots(2, 1, height_ratios=[5.2, 0.3 + 0.14 * len(changes)])
    else:
        fig, notes = ax.figure, None
    groups = [(None, frame)] if frame["loss"].isna().all() else list(frame.groupby("loss", sort=True))
    lines, letter = [], 0
    for i, (loss, rows) in enumerate(groups):
        color = f"C{i}"
        label = "" if loss is None or len(groups) == 1 else f" (loss {loss:g})"
        solved = rows[rows["cost"].notna()]
        proven = solved[solved["status"] == "optimal"]
        unproven = solved[solved["status"] != "optimal"]
        ax.plot(solved["deadline_s"], solved["cost"], "-", color=color, linewidth=1.2, alpha=0.7)
        if len(proven):
            ax.plot(
                proven["deadline_s"],
                proven["cost"],
                "o",
                color=color,
                markersize=5,
                label=f"milp: proven minimal cost{label}",
            )
        if len(unproven):
            below = (unproven["cost"] - unproven["bound"]).clip(lower=0).fillna(0)
            ax.errorbar(
                unproven["deadline_s"],
                unproven["cost"],
                yerr=[below, 0 * below],
                fmt="o",
                color=color,
                markerfacecolor="white",
                markersize=6,
                capsize=3,
                elinewidth=1,
                label=f"milp: best plan at the time limit, not proven (bar: down to the proven bound){label}",
            )
        if rows["heuristic_cost"].notna().any():
            h = rows[rows["heuristic_cost"].notna()]
            ax.plot(
                h["deadline_s"],
                h["heuristic_cost"],
                "^--",
                color=color,
                alpha=0.55,
                markersize=4,
                label=f"heuristic (the paper's){label}",
            )
        for j, (_, row) in enumerate(solved[solved["changed"]].iterrows()):
            name = _letter(letter)
            letter += 1
            ax.annotate(
                name,
                (row["deadline_s"], row["cost"]),
                textcoords="offset points",
                xytext=(-10, -13) if j % 2 else (4, 6),
                fontsize=8,
                fontweight="bold",
                color=color,
            )
            lines.append(
                f"{name}{label}: {row['plan']}  (from {row['deadline_s']:.0f} s, ${row['cost']:.4f}, {_proof(row)})"
            )
        infeasible = rows[rows["status"] == "infeasible"]
        if len(infeasible):
            later = solved["deadline_s"][solved["deadline_s"] > infeasible["deadline_s"].max()]
            right = later.min() if len(later) else infeasible["deadline_s"].max()
            ax.axvspan(
                infeasible["deadline_s"].min(),
                right,
                color=color,
                alpha=0.08,
                label=f"proven infeasible: no plan meets the deadline{label}",
            )
        lost = rows[rows["cost"].isna() & (rows["status"] != "infeasible")]
        if len(lost):
            ax.plot(
                lost["deadline_s"],
                [0.02] * len(lost),
                "x",
                color=color,
                markersize=7,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
                label=f"no plan found by the time limit, not proven infeasible{label}",
            )
    ax.set_xlabel("deadline (s)")
    ax.set_ylabel("training cost ($)")
    ax.set_title(f"{_shorten(result.instance)}: cost of meeting a deadline", fontsize=11)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    if notes is not None:
        notes.axis("off")
        text = "Letters: where milp's plan changes\n" + "\n".join(lines) if lines else "no plan at any point"
        notes.text(0, 1, text, va="top", ha="left", fontsize=7.5, family="monospace", transform=notes.transAxes)
    return fig


def _shorten(name: str, limit: int = 48) -> str:
    """``name`` cut to ``limit`` characters, so that a title fits its figure."""
    return name if len(name) <= limit else name[: limit - 3] + "..."


def plot_loss(result: Sweep, ax=None, *, deadlines: int = 4):
    """milp's cost vs target loss at up to ``deadlines`` deadlines (hollow: not proven
    optimal). Returns the figure."""
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    frame = result.to_frame()
    values = sorted(frame["deadline_s"].unique())
    step = max(1, math.ceil(len(values) / deadlines))
    for i, deadline in enumerate(values[::step]):
        rows = frame[(frame["deadline_s"] == deadline) & frame["cost"].notna()].sort_values("loss")
        ax.plot(rows["loss"], rows["cost"], "-", color=f"C{i}", label=f"deadline {deadline:g} s")
        proven = rows["status"] == "optimal"
        ax.plot(rows["loss"][proven], rows["cost"][proven], "o", color=f"C{i}")
        ax.plot(rows["loss"][~proven], rows["cost"][~proven], "o", color=f"C{i}", markerfacecolor="white")
    drawn = frame[frame["deadline_s"].isin(values[::step]) & frame["cost"].notna()]
    if (drawn["status"] != "optimal").any():
        ax.plot([], [], "o", color="0.4", markerfacecolor="white", label="hollow: not proven optimal (time limit)")
    ax.set_xlabel("target loss")
    ax.set_ylabel("proven minimal cost ($)" if (drawn["status"] == "optimal").all() else "milp's cost ($)")
    ax.set_title(f"{_shorten(result.instance, 40)}: cost of a lower target loss", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def write_sweep(result: Sweep, out: str | Path) -> list[Path]:
    """Write ``sweep.csv``, ``sweep.parquet`` (when pyarrow is there) and the figures to ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    frame = result.to_frame()
    files = [folder / "sweep.csv"]
    frame.to_csv(files[0], index=False)
    try:
        frame.to_parquet(folder / "sweep.parquet", index=False)
        files.append(folder / "sweep.parquet")
    except ImportError:
        pass
    figures = [("sweep", plot_sweep(result))]
    if frame["loss"].nunique() > 1:
        figures.append(("sweep-loss", plot_loss(result)))
    for stem, fig in figures:
        for ext in ("png", "svg"):
            fig.savefig(folder / f"{stem}.{ext}", dpi=130)
            files.append(folder / f"{stem}.{ext}")
    return files
