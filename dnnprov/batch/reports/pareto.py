"""The figure of an exact (time, cost) front (:func:`dnnprov.pareto`): ``dnnprov pareto --out FIG``."""

from __future__ import annotations

from pathlib import Path

from dnnprov.solvers.objectives.front import NO_DEADLINE_S, Front

#: The figure formats ``--out`` writes (by the file's suffix).
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def plot_front(front: Front, ax=None):
    """The front's points (time, cost) and the least cost of meeting each deadline (a staircase).

    Filled circles: proven nondominated; hollow: not proven (the time limit came first).
    Returns the figure.
    """
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(8, 5), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    points = sorted(front.points, key=lambda p: p.time_s)
    times, costs = [p.time_s for p in points], [p.cost for p in points]
    if points:
        right = front.deadlines[1] if front.deadlines[1] < NO_DEADLINE_S else times[-1] * 1.02
        ax.step(
            times + [right],
            costs + costs[-1:],
            where="post",
            color="C0",
            linewidth=1,
            alpha=0.6,
            label="least cost of meeting a deadline",
        )
    proven = [p for p in points if p.proven]
    unproven = [p for p in points if not p.proven]
    if proven:
        ax.plot(
            [p.time_s for p in proven],
            [p.cost for p in proven],
            "o",
            color="C0",
            markersize=5,
            label=f"nondominated plan, proven ({len(proven)})",
        )
    if unproven:
        ax.plot(
            [p.time_s for p in unproven],
            [p.cost for p in unproven],
            "o",
            color="C0",
            markerfacecolor="white",
            markersize=6,
            label=f"not proven: the time limit came first ({len(unproven)})",
        )
    ax.set_xlabel("predicted training time (s)")
    ax.set_ylabel("cost ($)")
    name = front.instance if len(front.instance) <= 48 else front.instance[:45] + "..."
    state = "complete" if front.complete else "incomplete (time limit)"
    ax.set_title(f"{name}: exact (time, cost) front by {front.method}, {state}", fontsize=11)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


def write_front_figure(front: Front, path: str | Path) -> Path:
    """Draw the front into ``path`` (PNG, SVG or PDF by its suffix)."""
    path = Path(path)
    plot_front(front).savefig(path, dpi=150)
    return path
