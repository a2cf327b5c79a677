"""Own side variables (issue 29) checked against brute force on small spot instances.

:func:`side_case` draws a spot fuzz instance and a few side constraints that need binaries
(at most k types, all or nothing over a set of columns, at least k workers of a column if
any, a limit on fixed charges, a link "column a used only with column b") and states them
in the Pyomo model through :mod:`dnnprov.formulations.side` or own binaries. The oracle,
:func:`brute_optimum`, is independent of the side rows: it evaluates every plan of the box
with the model alone and applies each constraint as plain Python over the counts. :func:`check_case`
compares ``solve_model`` (``milp``; with ``cell_enumeration=0`` on every other instance,
so that the cell MILPs carry the binaries) and ``enumerate`` with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo

from dnnprov import fuzz
from dnnprov.formulations import side as side_api
from dnnprov.formulations.spot import create_spot_model, side_rows
from dnnprov.model_solve import solve_model
from dnnprov.models.spot import SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.result import Result, SpotPlan, Status
from dnnprov.solvers.side_vars import attach
from dnnprov.solvers.spot.exact import solve_spot_exact

#: Spot families small enough to evaluate every plan, with something for the side rows to bite on.
FAMILIES = (
    "price-decades",
    "zero-quota",
    "slo-at-plan",
    "budget-at-plan",
    "worker-ranges",
    "ps-ranges",
    "vcpu-quotas",
    "on-demand",
    "existing",
    "cc-gamma4-small",
    "reference-model",
    "paper-no-cc",
    "overhead-ps-price",
    "validity-domain",
    "mixed",
    "price-magnitudes",
)

#: A plan's verdict over its counts (n, in column order).
Rule = Callable[[np.ndarray], bool]


@dataclass
class SideCase:
    """One instance, its side constraints in words, the model stating them and the oracle's rules."""

    problem: SpotProblem
    words: list[str]
    model: pyo.ConcreteModel
    rules: list[Rule]


def _types(problem: SpotProblem) -> dict[str, list[int]]:
    cols = problem.columns()
    by_type: dict[str, list[int]] = {}
    for i, name in enumerate(cols.type_names):
        by_type.setdefault(name, []).append(i)
    return by_type


def side_case(family: str, seed: int) -> SideCase:
    """Instance ``seed`` of ``family`` with one to three binary side constraints."""
    problem = fuzz.instance(family, seed)
    assert isinstance(problem, SpotProblem)
    rng = np.random.default_rng([seed, 29])
    m = create_spot_model(problem)
    labels = list(m.C)
    by_type = _types(problem)
    upper = problem.columns().upper
    words: list[str] = []
    rules: list[Rule] = []
    for j in range(int(rng.integers(1, 4))):
        kind = str(rng.choice(["types", "all-or-nothing", "at-least", "charge", "link"]))
        if kind == "types":
            k = int(rng.integers(1, max(2, len(by_type))))
            side_api.at_most_types(m, k, name=f"types{j}")
            words.append(f"at most {k} types")

            def types_rule(n: np.ndarray, k: int = k) -> bool:
                return sum(any(n[i] > 0 for i in cs) for cs in by_type.values()) <= k

            rules.append(types_rule)
        elif kind == "all-or-nothing":
            chosen = [c for c in range(len(labels)) if rng.random() < 0.5] or [0]
            b = pyo.Block()
            m.add_component(f"aon{j}", b)
            b.on = pyo.Var(domain=pyo.Binary)
            b.same = pyo.Constraint(chosen, rule=lambda b, c: m.performance.used[labels[c]] == b.on)
            words.append(f"all or nothing of {[labels[c] for c in chosen]}")

            def aon_rule(n: np.ndarray, chosen: list[int] = chosen) -> bool:
                return len({bool(n[c] > 0) for c in chosen}) == 1

            rules.append(aon_rule)
        elif kind == "at-least":
            c = int(rng.integers(len(labels)))
            k = int(rng.integers(2, 4))
            b = pyo.Block()
            m.add_component(f"least{j}", b)
            b.y = pyo.Var(domain=pyo.Binary)
            b.floor = pyo.Constraint(expr=m.n[labels[c]] >= k * b.y)
            b.cap = pyo.Constraint(expr=m.n[labels[c]] <= max(int(upper[c]), 1) * b.y)
            words.append(f"{labels[c]}: none or at least {k}")

            def least_rule(n: np.ndarray, c: int = c, k: int = k) -> bool:
                return bool(n[c] == 0 or n[c] >= k)

            rules.append(least_rule)
        elif kind == "charge":
            fees = {t: float(rng.choice([0.5, 1.0, 2.0])) for t in by_type}
            limit = float(rng.choice([0.5, 1.0, 1.5, 2.5]))
            side_api.fixed_charge(m, fees, limit, name=f"charge{j}")
            words.append(f"fixed charges {fees} at most {limit}")

            def charge_rule(n: np.ndarray, fees: dict[str, float] = fees, limit: float = limit) -> bool:
                return sum(f for t, f in fees.items() if any(n[i] > 0 for i in by_type[t])) <= limit + 1e-9

            rules.append(charge_rule)
        else:
            a, b_ = (int(v) for v in rng.choice(len(labels), size=2, replace=len(labels) < 2))
            m.add_component(
                f"link{j}", pyo.Constraint(expr=m.performance.used[labels[a]] <= m.performance.used[labels[b_]])
            )
            words.append(f"{labels[a]} only with {labels[b_]}")

            def link_rule(n: np.ndarray, a: int = a, b_: int = b_) -> bool:
                return bool(n[a] == 0 or n[b_] > 0)

            rules.append(link_rule)
    return SideCase(problem, words, m, rules)


def brute_optimum(case: SideCase) -> tuple[float, tuple[tuple[int, ...], int] | None]:
    """The least cost over every plan of the box meeting the model and every rule (inf: none)."""
    problem = case.problem
    model = SpotModel(problem)
    cols = model.columns
    shape = tuple(int(hi - lo + 1) for lo, hi in zip(cols.lower, cols.upper))
    counts = np.stack(np.unravel_index(np.arange(math.prod(shape)), shape), axis=-1) + cols.lower
    best, plan = math.inf, None
    ps_low, ps_high = problem.constraints.ps_count
    for ps in range(int(ps_low), int(ps_high or ps_low) + 1):
        ev = model.evaluate(counts, ps)
        for i in np.flatnonzero(ev.feasible):
            if ev.cost[i] < best and all(rule(counts[i]) for rule in case.rules):
                best, plan = float(ev.cost[i]), (tuple(int(v) for v in counts[i]), ps)
    return best, plan


def _verdict(name: str, result: Result, best: float, case: SideCase) -> str | None:
    """What is wrong with ``result`` against the brute-force optimum ``best`` (``None``: all right)."""
    if result.status is Status.ERROR:
        return f"{name}: error {result.message}"
    if isinstance(result.plan, SpotPlan):
        n = np.array([result.plan.counts[c] for c in case.problem.columns().labels])
        if not all(rule(n) for rule in case.rules):
            return f"{name}: plan {result.plan} breaks a side constraint"
    if math.isinf(best):
        return None if result.status is Status.INFEASIBLE else f"{name}: {result.status.value}, brute force: infeasible"
    if result.status is Status.INFEASIBLE:
        return f"{name}: infeasible, brute force found ${best:.9g}"
    if result.status is Status.OPTIMAL and result.cost is not None and abs(result.cost - best) > 1e-6 * best + 1e-12:
        return f"{name}: optimal ${result.cost:.9g}, brute force ${best:.9g}"
    if result.bound is not None and result.bound > best * (1 + 1e-9) + 1e-12:
        return f"{name}: bound ${result.bound:.9g} above the optimum ${best:.9g}"
    return None


def check_case(case: SideCase, *, force_milps: bool = False, time_limit_s: float = 600.0) -> list[str]:
    """The findings of ``milp`` and ``enumerate`` on one case against brute force (empty: all right).

    ``time_limit_s`` (wall) only guards against a hang: these instances take well under a
    CPU second, and a loaded machine must not turn them into give-ups.
    """
    best, _ = brute_optimum(case)
    findings = []
    if force_milps:
        milp = solve_spot_exact(
            case.problem, side=attach(side_rows(case.model)), cell_enumeration=0, time_limit_s=time_limit_s
        )
    else:
        milp = solve_model(case.model, "milp", time_limit_s=time_limit_s)
    for name, result in (
        ("milp", milp),
        ("enumerate", solve_model(case.model, "enumerate", time_limit_s=time_limit_s)),
    ):
        wrong = _verdict(name, result, best, case)
        if wrong is not None:
            findings.append(wrong)
        elif result.status is not Status.OPTIMAL and not math.isinf(best):
            findings.append(f"{name}: gave up ({result.status.value}: {result.message})")
    return findings
