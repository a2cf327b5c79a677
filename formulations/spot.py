"""The spot provisioning problem as a Pyomo model (spec/spot.md, eqs. 1-14).

:func:`create_spot_model` states the problem the way the paper writes it, as a mixed-integer
nonlinear program (MINLP) that a user can read, extend with linear constraints of their own,
and hand to :func:`dnnprov.model_solve.solve_model`:

* ``m.n[c]`` -- integer count of every column ``c`` in ``m.C`` (instance type and market),
  bounded by the kept instances E and the quota Lim (eq. 14);
* ``m.s`` -- integer number of PS nodes (multi-PS, paper's Discussion);
* ``m.workers`` -- the expression |N| = sum n;
* ``m.side`` -- the linear side constraints (vCPU-family quotas, worker range);
* ``m.performance`` -- the nonlinear performance model (eqs. 1-13) and the cost (11);
* ``m.objective`` -- minimize ``m.performance.cost``.

Why the statement is an exact MINLP without ``min`` or case splits. With one PS group the
worker bandwidth B_wk (eqs. 8-9) depends only on (K, s) = (|N|, PS count), so the per-worker
iteration time T_c(K, s) (eqs. 6-7) of every column is a *constant* once (K, s) is known.
One-hot binaries ``size[K, s]`` select the pair; the rates r_c = 1/T_c and speeds
v_c = b_c r_c are then linear in those binaries, and the ``min`` and the case split of
eqs. (8)-(9) disappear into the constants. What is left is bilinear (counts times rates),
division (b_w = V / X, T = j / X) and square roots (eqs. 3 and 5), all stated exactly.

Only strict inequalities are closed: the evaluator requires j > 0 and a positive numerator
in eq. (3); the model states j >= 0 and gamma_2 b_w + gamma_3 >= 0 (they differ on a set
of measure zero).

The ``reference`` model (the authors' code, spec section 6) is stated with the same
equations but *without its rounding* (b_w to 0.1, j to an integer, T to 0.01 s, cost to
1e-6 $), which is not part of the MINLP; the exact solver accounts for it. Like the paper
model it adds the takeover overhead to T and prices the PS (both zero in the authors' setting).

:func:`side_rows` turns the linear constraints users add on ``m.n`` and ``m.s`` into
:class:`~dnnprov.models.spot.SideRows`, which every solver method enforces.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo
from dnnprov.formulations.user_rows import _inside, model_objective, own_box, own_variables
from pyomo.core.expr.visitor import identify_variables
from pyomo.repn import generate_standard_repn
from pyomo.util.calc_var_value import calculate_variable_from_constraint

from dnnprov.errors import InvalidInputError
from dnnprov.models.side import OwnVariables
from dnnprov.models.spot import SideRows, SpotModel
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation.domain import TOLERANCE

PROBLEM_ATTR = "_dnnprov_problem"


# ---------------------------------------------------------------------- data helpers
def _worker_range(problem: SpotProblem) -> tuple[int, int]:
    """Inclusive range of |N|: the worker constraint, kept instances, quotas and the validity
    domain (empty when the domain's enforced loss axis refuses the SLO loss)."""
    cols, cons = problem.columns(), problem.constraints
    model = SpotModel(problem)
    _, (dom_lo, dom_hi) = model.domain_bounds()
    low = max(cons.workers[0], int(cols.lower.sum()), 1, dom_lo)
    high = int(cols.upper.sum())
    for cap in (cons.workers[1], dom_hi):
        if cap is not None:
            high = min(high, cap)
    return (low, low - 1) if model.slo_refused() else (low, high)


def problem_of(model: pyo.ConcreteModel) -> SpotProblem:
    """The :class:`SpotProblem` a model was built from (by :func:`create_spot_model`)."""
    problem = getattr(model, PROBLEM_ATTR, None)
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("model", "was not built by dnnprov.formulations.spot.create_spot_model")
    return problem


def _padded(low: float, high: float | None) -> tuple[float, float | None]:
    """Variable bounds widened by a relative 1e-9, so that rounding never leaves them."""

    def pad(v: float) -> float:
        return 1e-9 * max(abs(v), 1.0)

    return float(low) - pad(low), None if high is None else float(high) + pad(high)


# ---------------------------------------------------------------------- the model
def create_spot_model(problem: SpotProblem) -> pyo.ConcreteModel:
    """The spot provisioning MINLP of ``problem`` (eqs. 1-14 plus side constraints).

    See the module docstring for the variables and why the statement is exact. For the
    ``reference`` model the rounding of the authors' code is not part of the MINLP.
    """
    cols = problem.columns()
    k_lo, k_hi = _worker_range(problem)
    s_lo, s_hi = problem.constraints.ps_count

    m = pyo.ConcreteModel(name=f"spot:{problem.name}")
    setattr(m, PROBLEM_ATTR, problem)
    m.C = pyo.Set(initialize=list(cols.labels), ordered=True, doc="columns: (instance type, market)")
    lower = dict(zip(cols.labels, (int(v) for v in cols.lower)))
    upper = dict(zip(cols.labels, (int(v) for v in cols.upper)))

    # eq. (14): E_c <= n_c <= Lim_c, integer
    def n_bounds(m, c):
        return lower[c], upper[c]

    m.n = pyo.Var(
        m.C, domain=pyo.NonNegativeIntegers, bounds=n_bounds, initialize=lower, doc="workers bought per column (eq. 14)"
    )
    m.s = pyo.Var(domain=pyo.PositiveIntegers, bounds=(s_lo, s_hi), initialize=s_lo, doc="PS count")
    m.workers = pyo.Expression(expr=pyo.quicksum(m.n[c] for c in m.C), doc="|N|")

    m.side = pyo.Block(doc="linear side constraints")
    _build_side(m, problem, cols)
    m.performance = pyo.Block(doc="performance model, eqs. (1)-(13), and the cost (11)")
    _build_performance(m, problem, cols, k_lo, k_hi, s_lo, s_hi)
    m.objective = pyo.Objective(expr=m.performance.cost, sense=pyo.minimize, doc="eq. (11)")
    record_builtins(m, linear_rows(m, _plan_columns(m), what=_WHAT))
    return m


def _build_side(m: pyo.ConcreteModel, problem: SpotProblem, cols) -> None:
    """vCPU-family quotas and the worker range (quotas and kept instances are bounds of n)."""
    b = m.side
    quotas = problem.constraints.vcpu_quotas
    b.Q = pyo.Set(initialize=range(len(quotas)), doc="vCPU-family quotas")

    def vcpu_rule(b, q):
        quota = quotas[q]
        members = [
            i for i, c in enumerate(cols.labels) if (cols.families[i], cols.markets[i]) == (quota.family, quota.market)
        ]
        return pyo.quicksum(int(cols.vcpus[i]) * m.n[cols.labels[i]] for i in members) <= quota.vcpus

    b.vcpu = pyo.Constraint(b.Q, rule=vcpu_rule, doc="vCPUs of a family on a market <= quota")

    low, high = problem.constraints.workers

    def workers_rule(b):
        if high is None:
            return m.workers >= max(low, 1)
        return pyo.inequality(max(low, 1), m.workers, high)

    b.workers = pyo.Constraint(rule=workers_rule, doc="worker-count range")


def _build_performance(
    m: pyo.ConcreteModel, problem: SpotProblem, cols, k_lo: int, k_hi: int, s_lo: int, s_hi: int
) -> None:
    """Eqs. (1)-(13) with one-hot (K, s) binaries; see the module docstring."""
    b = m.performance
    sm = SpotModel(problem)
    w, slo = problem.workload, problem.slo
    uses_cc = w.loss_variant == "cc"
    ps_price = problem.platform.ps_price_per_h
    overhead = slo.takeover_overhead_s

    pairs = [(k, s) for k in range(k_lo, k_hi + 1) for s in range(s_lo, s_hi + 1)]
    b.KS = pyo.Set(initialize=pairs, dimen=2, ordered=True, doc="(worker count K, PS count s)")
    if pairs:
        ks = np.array(pairs, dtype=np.int64)
        times = sm.iteration_times(ks[:, 0], ks[:, 1])  # T_c(K, s), eqs. (6)-(9)
    else:
        times = np.ones((0, len(cols)))
    rate = {(c, k, s): float(1.0 / times[i, j]) for i, (k, s) in enumerate(pairs) for j, c in enumerate(cols.labels)}
    speed = {
        (c, k, s): float(cols.batch[j] / times[i, j])
        for i, (k, s) in enumerate(pairs)
        for j, c in enumerate(cols.labels)
    }
    b.r = pyo.Param(m.C, b.KS, initialize=rate, doc="r_c(K, s) = 1 / T_c(K, s), eqs. (6)-(9)")
    b.v = pyo.Param(m.C, b.KS, initialize=speed, doc="v_c(K, s) = b_c r_c(K, s), eq. (4)")
    b.price = pyo.Param(m.C, initialize=dict(zip(cols.labels, map(float, cols.price))), doc="p_c, $/h")

    # ---- one-hot choice of (K, s)
    b.size = pyo.Var(b.KS, domain=pyo.Binary, doc="1 if |N| = K and the PS count is s")

    def one_size_rule(b):
        if not pairs:  # empty worker range: the bounds of n and m.side are infeasible already
            return pyo.Constraint.Skip
        return pyo.quicksum(b.size[k, s] for k, s in b.KS) == 1

    b.one_size = pyo.Constraint(rule=one_size_rule)

    def size_workers_rule(b):
        return pyo.quicksum(k * b.size[k, s] for k, s in b.KS) == m.workers

    b.size_workers = pyo.Constraint(rule=size_workers_rule, doc="K = |N|")

    def size_ps_rule(b):
        return pyo.quicksum(s * b.size[k, s] for k, s in b.KS) == m.s

    b.size_ps = pyo.Constraint(rule=size_ps_rule, doc="s = PS count")

    # the chosen pair's rate and speed of each column (linear in the binaries)
    def rate_rule(b, c):
        return pyo.quicksum(b.r[c, k, s] * b.size[k, s] for k, s in b.KS)

    b.rate = pyo.Expression(m.C, rule=rate_rule, doc="r_c = 1 / T^c, eqs. (6)-(9)")

    def speed_rule(b, c):
        return pyo.quicksum(b.v[c, k, s] * b.size[k, s] for k, s in b.KS)

    b.speed = pyo.Expression(m.C, rule=speed_rule, doc="v^c = b_c / T^c, eq. (4)")

    # ---- cluster aggregates (bounds help a MINLP solver; they never cut a plan)
    r_all = np.array(list(rate.values()) or [1.0])
    v_all = np.array(list(speed.values()) or [1.0])
    b.X = pyo.Var(bounds=_padded(k_lo * r_all.min(), k_hi * r_all.max()), doc="1 / T_exp, iterations per s")
    b.V = pyo.Var(bounds=_padded(k_lo * v_all.min(), k_hi * v_all.max()), doc="cluster speed v, samples/s")
    p_hi = float(cols.upper @ cols.price) + s_hi * ps_price
    b.P = pyo.Var(bounds=_padded(0.0, p_hi), doc="price of the cluster with its PS nodes, $/h")
    b.b_w = pyo.Var(bounds=_padded(cols.batch.min(), cols.batch.max()), doc="WA batch size")

    # eq. (2): 1 / T_exp = sum_i 1 / T^i
    def x_rule(b):
        return b.X == pyo.quicksum(m.n[c] * b.rate[c] for c in m.C)

    b.eq2_rate = pyo.Constraint(rule=x_rule)

    # eq. (4): v = sum_i b_i / T^i
    def v_rule(b):
        return b.V == pyo.quicksum(m.n[c] * b.speed[c] for c in m.C)

    b.eq4_speed = pyo.Constraint(rule=v_rule)

    # eq. (4): b_w = v T_exp = V / X
    def bw_rule(b):
        return b.b_w == b.V / b.X

    b.eq4_batch = pyo.Constraint(rule=bw_rule)

    # price per hour of workers and PS nodes (the factor of eq. 11)
    def p_rule(b):
        return b.P == pyo.quicksum(b.price[c] * m.n[c] for c in m.C) + ps_price * m.s

    b.price_rate = pyo.Constraint(rule=p_rule)

    # used_c = 1 exactly when n_c >= 1: part of the model users may constrain (docs/formulations.md)
    b.used = pyo.Var(m.C, domain=pyo.Binary, doc="1 if column c has a worker (n_c >= 1)")

    def used_low_rule(b, c):
        return b.used[c] <= m.n[c]

    b.used_low = pyo.Constraint(m.C, rule=used_low_rule)

    def used_high_rule(b, c):
        return m.n[c] <= m.n[c].ub * b.used[c]

    b.used_high = pyo.Constraint(m.C, rule=used_high_rule)

    if uses_cc:
        _build_cc(m, b, cols, v_all, k_hi)

    # eq. (3) solved for j (f_loss = L_obj, eq. 12)
    loss_gap = slo.loss - w.gamma_5
    numerator = w.gamma_2 * float(cols.batch.min() if w.gamma_2 < 0 else cols.batch.max()) + w.gamma_3
    spread_hi = ((1.0 + w.gamma_4) if uses_cc else 1.0) * max(k_hi, 1)
    j_hi = max(numerator * math.sqrt(spread_hi) / loss_gap - w.gamma_1, 1.0)
    b.j = pyo.Var(bounds=(0.0, j_hi * (1 + 1e-9)), doc="normalized iterations (j > 0 closed to j >= 0)")

    def domain_iterations_rule(b):
        if problem.workload.domain is None:
            return pyo.Constraint.Skip
        cap = sm.iteration_cap()
        return pyo.inequality(sm.iteration_floor(), b.j, cap if math.isfinite(cap) else None)

    b.domain_iterations = pyo.Constraint(
        rule=domain_iterations_rule, doc="j within the domain: its floor, and the enforced loss axis"
    )

    # the validity domain's b_w interval (extrapolated, eq. 3's numerator cap included)
    (dom_lo, dom_hi), _ = sm.domain_bounds()

    def domain_rule(b):
        if problem.workload.domain is None:
            return pyo.Constraint.Skip
        low, high = _padded(dom_lo * (1 - TOLERANCE), dom_hi * (1 + TOLERANCE))
        return pyo.inequality(low, b.b_w, high)

    b.domain_batch = pyo.Constraint(rule=domain_rule, doc="b_w inside the validity domain")

    def root_rule(b):
        return w.gamma_2 * b.b_w + w.gamma_3 >= 0

    b.eq3_root = pyo.Constraint(rule=root_rule, doc="eq. (3) has a root (numerator > 0, closed)")

    def j_rule(b):
        spread = (b.R + w.gamma_4) * m.workers if uses_cc else m.workers
        return b.j == (w.gamma_2 * b.b_w + w.gamma_3) * pyo.sqrt(spread) / loss_gap - w.gamma_1

    b.eq12_loss = pyo.Constraint(rule=j_rule)

    # eq. (1): T = j T_exp (+ takeover overhead)
    b.T = pyo.Var(bounds=(0.0, None), doc="training time, s")

    def t_rule(b):
        return b.T == b.j / b.X + overhead

    b.eq1_time = pyo.Constraint(rule=t_rule)

    # eq. (13): T <= T_obj
    def deadline_rule(b):
        return b.T <= slo.time_s

    b.eq13_deadline = pyo.Constraint(rule=deadline_rule)

    # eq. (11): C = T * (sum p n + PS price), T in hours
    b.cost = pyo.Expression(expr=b.P * b.T / 3600.0, doc="cost in $, eq. (11)")
    budget = problem.constraints.budget_usd

    def budget_rule(b):
        return b.cost <= budget if budget is not None else pyo.Constraint.Skip

    b.budget = pyo.Constraint(rule=budget_rule, doc="cost <= budget")


def _build_cc(m, b, cols, v_all: np.ndarray, k_hi: int) -> None:
    """The convergence coefficient R of eq. (5) via the fastest used column v_top."""
    b.Q = pyo.Var(bounds=_padded(0.0, k_hi * float(v_all.max()) ** 2), doc="sum_i (v^i)^2")
    b.top = pyo.Var(m.C, domain=pyo.Binary, doc="1 if column c is the fastest used one")
    b.v_top = pyo.Var(bounds=_padded(v_all.min(), v_all.max()), doc="speed of the fastest worker")
    b.R = pyo.Var(bounds=_padded(0.0, 1.0), doc="convergence coefficient, eq. (5)")

    def q_rule(b):
        return b.Q == pyo.quicksum(
            m.n[c] * pyo.quicksum(b.v[c, k, s] ** 2 * b.size[k, s] for k, s in b.KS) for c in m.C
        )

    b.cc_squares = pyo.Constraint(rule=q_rule)

    # v_top is the speed of one used column and at least the speed of every used column
    def one_top_rule(b):
        return pyo.quicksum(b.top[c] for c in m.C) == 1

    b.one_top = pyo.Constraint(rule=one_top_rule)

    def top_used_rule(b, c):
        return b.top[c] <= b.used[c]

    b.top_used = pyo.Constraint(m.C, rule=top_used_rule)

    def v_top_rule(b):
        return b.v_top == pyo.quicksum(b.top[c] * b.speed[c] for c in m.C)

    b.v_top_value = pyo.Constraint(rule=v_top_rule)

    def v_top_max_rule(b, c):
        return b.v_top >= b.used[c] * b.speed[c]

    b.v_top_max = pyo.Constraint(m.C, rule=v_top_max_rule)

    # eq. (5) with shares w_i = v^i / V, w_1 = v_top / V the largest:
    # R = sqrt((w_1 - 1)^2 + sum_{i>1} w_i^2) = sqrt((1 - v_top / V)^2 + (Q - v_top^2) / V^2)
    def r_rule(b):
        return b.R == pyo.sqrt((1 - b.v_top / b.V) ** 2 + (b.Q - b.v_top**2) / b.V**2)

    b.eq5_cc = pyo.Constraint(rule=r_rule)


# ---------------------------------------------------------------------- plans in the model
def load_plan(model: pyo.ConcreteModel, counts, ps: int) -> None:
    """Set ``m.n`` and ``m.s`` to a plan and :func:`complete_plan` the rest.

    ``counts`` is a mapping from column label to count, or a sequence in ``m.C`` order.
    """
    labels = list(model.C)
    values = counts if hasattr(counts, "items") else dict(zip(labels, counts, strict=True))
    for c in labels:
        model.n[c].set_value(int(values.get(c, 0)), skip_validation=True)
    model.s.set_value(int(ps), skip_validation=True)
    complete_plan(model)


def complete_plan(model: pyo.ConcreteModel) -> None:
    """Give every performance variable the value the model's equations imply for the
    current (for example fixed) values of ``m.n`` and ``m.s``.

    The binaries follow from their definitions (the (K, s) pair, used columns, the fastest
    used column). Every continuous variable has a defining equation ``var == expression``
    of quantities defined before it; the expressions are evaluated in that order. The
    values need not be feasible: check the ``m.performance`` constraints to see whether
    the plan is.
    """
    b = model.performance
    counts = {c: round(pyo.value(model.n[c])) for c in model.C}
    k, s = sum(counts.values()), round(pyo.value(model.s))
    if (k, s) not in b.KS:
        raise InvalidInputError("plan", f"{k} workers with {s} PS nodes lie outside the model's worker and PS ranges")
    for pair in b.KS:
        b.size[pair].set_value(int(pair == (k, s)))
    # With size one-hot at (k, s), rate[c] = sum r[c, pair] size[pair] is r[c, k, s] and
    # speed[c] is v[c, k, s] (the other terms are 0): the sums over X, V, Q and v_top are
    # evaluated from those, in the equations' column order, without walking the thousands of
    # zero terms per column (3.3 of 4.1 CPU s of an at-most-2-types solve of large-003).
    n = {c: pyo.value(model.n[c]) for c in model.C}
    rate = {c: pyo.value(b.r[c, k, s]) for c in model.C}
    speed = {c: pyo.value(b.v[c, k, s]) for c in model.C}
    b.X.set_value(float(sum(n[c] * rate[c] for c in model.C)), skip_validation=True)  # eq2_rate
    b.V.set_value(float(sum(n[c] * speed[c] for c in model.C)), skip_validation=True)  # eq4_speed
    order = [(b.b_w, b.eq4_batch), (b.P, b.price_rate)]
    for c in model.C:
        b.used[c].set_value(int(counts[c] > 0))
    if hasattr(b, "R"):
        used = [c for c in model.C if counts[c] > 0]
        fastest = max(used, key=lambda c: speed[c])
        for c in model.C:
            b.top[c].set_value(int(c == fastest))
        b.Q.set_value(float(sum(n[c] * speed[c] ** 2 for c in model.C)), skip_validation=True)  # cc_squares
        b.v_top.set_value(float(speed[fastest]), skip_validation=True)  # v_top_value
        order += [(b.R, b.eq5_cc)]
    order += [(b.j, b.eq12_loss), (b.T, b.eq1_time)]
    for var, con in order:
        _define(var, con)


def _define(var, con) -> None:
    """Set ``var`` from its defining equality ``var == expression``."""
    lhs, rhs = con.expr.args
    if lhs is not var:
        calculate_variable_from_constraint(var, con)
        return
    var.set_value(float(pyo.value(rhs)), skip_validation=True)


def plan_of(model: pyo.ConcreteModel) -> tuple[np.ndarray, int]:
    """The (counts in ``m.C`` order, PS count) held by the model's variables, rounded."""
    counts = np.array([round(pyo.value(model.n[c])) for c in model.C], dtype=np.int64)
    return counts, round(pyo.value(model.s))


# ---------------------------------------------------------------------- user constraints
def check_builtins(model: pyo.ConcreteModel, blocks, extra_constraints=()) -> None:
    """Refuse what the solvers could not honour: a built-in constraint deactivated, a
    constraint added inside ``m.performance``, or an objective other than the cost."""
    performance = model.performance
    built = getattr(model, "_dnnprov_builtin", None)
    for block in blocks:
        for con in block.component_data_objects(pyo.Constraint, descend_into=True):
            if not con.active:
                raise InvalidInputError(
                    con.name,
                    "is a built-in constraint and was deactivated; the "
                    "solvers always enforce the problem's own constraints: "
                    "change the problem (dnnprov.SpotProblem.replace) instead",
                )
    for con in extra_constraints:
        if not con.active:
            raise InvalidInputError(
                con.name, "is a built-in constraint and was deactivated; change the problem instead"
            )
    if built is not None:
        for con in performance.component_data_objects(pyo.Constraint, active=True, descend_into=True):
            if con.name not in built:
                raise InvalidInputError(
                    con.name,
                    "was added inside m.performance; user constraints "
                    "must be linear in the plan variables and live outside "
                    "m.performance (e.g. at the top level)",
                )
    for var in performance.component_data_objects(pyo.Var, descend_into=True):
        if var.fixed:
            raise InvalidInputError(
                var.name,
                "is a performance variable and was fixed; the solvers "
                "compute it from the plan: constrain the plan variables "
                "or change the problem instead",
            )
    model_objective(model)


def record_builtins(model: pyo.ConcreteModel, rows) -> None:
    """Remember the built-in performance constraints and the built-in linear rows.

    ``rows`` are the linear rows the freshly built model has outside ``m.performance``;
    :func:`user_only` later drops rows that are still exactly these.
    """
    model._dnnprov_builtin = frozenset(
        con.name for con in model.performance.component_data_objects(pyo.Constraint, descend_into=True)
    )
    model._dnnprov_builtin_rows = {name: (tuple(a), low, high) for a, low, high, name in rows}


def user_only(model: pyo.ConcreteModel, rows):
    """The rows that are not unchanged built-in rows of ``m.side`` (own variables' columns,
    added after the built-in ones, must be zero in an unchanged row)."""
    builtin = getattr(model, "_dnnprov_builtin_rows", {})

    def unchanged(row) -> bool:
        known = builtin.get(row[3])
        if known is None:
            return False
        width = len(known[0])
        return (tuple(row[0][:width]), row[1], row[2]) == known and not np.any(row[0][width:])

    return [r for r in rows if not unchanged(r)]


def linear_rows(model: pyo.ConcreteModel, columns: dict, *, skip=(), what: str):
    """Active linear constraints outside ``m.performance`` as ``(coefficients, low, high, name)``.

    ``columns`` maps each allowed variable (by ``id``) to a row position. Fixed allowed
    variables are kept as variables here; :func:`bound_rows` turns the fixing into a row.
    """
    performance = model.performance
    skip_ids = {id(c) for c in skip}
    rows: list[tuple[np.ndarray, float, float, str]] = []
    # fixed plan variables stay variables here (their value becomes a row of its own)
    fixed = [v for v in model.component_data_objects(pyo.Var, descend_into=True) if id(v) in columns and v.fixed]
    for var in fixed:
        var.unfix()
    try:
        _collect_rows(model, columns, performance, skip_ids, what, rows)
    finally:
        for var in fixed:
            var.fix()
    return rows


def _collect_rows(model, columns, performance, skip_ids, what, rows) -> None:
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        if id(con) in skip_ids or _inside(con, performance):
            continue
        repn = generate_standard_repn(con.body, compute_values=True, quadratic=False)
        if not repn.is_linear():
            names = sorted({v.name for v in identify_variables(con.body, include_fixed=False)})
            raise InvalidInputError(
                con.name,
                f"is nonlinear in {', '.join(names)}; only constraints "
                f"linear in {what} can be added to the model (the "
                "performance model is fixed)",
            )
        coefs = np.zeros(max(columns.values(), default=-1) + 1)
        for var, coef in zip(repn.linear_vars, repn.linear_coefs):
            if id(var) not in columns:
                raise InvalidInputError(
                    con.name, f"uses {var.name}; constraints outside m.performance may only use {what}"
                )
            if not math.isfinite(float(coef)):
                raise InvalidInputError(con.name, f"has the coefficient {float(coef)!r} on {var.name}; {_FINITE}")
            coefs[columns[id(var)]] += float(coef)
        constant = float(pyo.value(repn.constant))
        if not math.isfinite(constant):
            raise InvalidInputError(con.name, f"has the constant term {constant!r}; {_FINITE}")
        low = -math.inf if con.lb is None else float(con.lb) - constant
        high = math.inf if con.ub is None else float(con.ub) - constant
        rows.append((coefs, low, high, con.name))


def bound_rows(variables, defaults, columns: dict, width: int):
    """Rows for user-tightened or fixed bounds of the plan variables."""
    rows = []
    for var, (low, high) in zip(variables, defaults):
        if var.fixed and (var.value is None or not math.isfinite(float(var.value))):
            raise InvalidInputError(var.name, f"is fixed to {var.value!r}; fix it to a count (or unfix it)")
        lb = var.value if var.fixed else var.lb
        ub = var.value if var.fixed else var.ub
        lb = -math.inf if lb is None else float(lb)
        ub = math.inf if ub is None else float(ub)
        if lb > low or ub < high:
            coefs = np.zeros(width)
            coefs[columns[id(var)]] = 1.0
            rows.append((coefs, lb, ub, f"{'fixed' if var.fixed else 'bounds of'} {var.name}"))
    return rows


_WHAT = "m.n[...], m.s, m.workers and m.performance.used[...]"
#: Why a NaN or infinite number in a user row is refused (it would read as a row no plan meets, or none).
_FINITE = "coefficients, constants and fixed values in constraints must be finite numbers (not nan or inf)"


def _plan_columns(model: pyo.ConcreteModel) -> dict[int, int]:
    """Row positions of the plan variables: ``m.n`` in ``m.C`` order, ``m.s``, then ``used[c]``."""
    columns = {id(model.n[c]): i for i, c in enumerate(model.C)}
    columns[id(model.s)] = len(columns)
    for c in model.C:
        columns[id(model.performance.used[c])] = len(columns)
    return columns


def side_rows(model: pyo.ConcreteModel, *, builtin: bool = True) -> SideRows | None:
    """The linear constraints outside ``m.performance`` as side rows.

    Every active constraint outside ``m.performance`` (in ``m.side``, at the top level, in
    any user block) must be linear in ``m.n[...]``, ``m.s``, the indicators
    ``m.performance.used[c]`` (1 exactly when n_c >= 1) and variables of the user's own
    (integer, binary or continuous, anywhere outside ``m.performance``); tightened or
    fixed bounds of ``m.n`` and ``m.s`` become rows too. The built-in rows of ``m.side``
    repeat constraints of the problem itself; ``builtin=False`` leaves them out while
    unchanged (only what the user added or changed). Returns ``None`` when there is no row.
    Raises :class:`~dnnprov.InvalidInputError` naming the first constraint that is
    nonlinear or uses another performance variable, a deactivated built-in constraint, or
    a replaced objective.
    """
    problem = problem_of(model)
    check_builtins(model, [model.side, model.performance])
    cols = problem.columns()
    labels = list(model.C)
    columns = _plan_columns(model)
    base = len(columns)
    own = own_variables(model, columns, _WHAT)
    width = len(columns)
    rows = linear_rows(model, columns, what=f"{_WHAT} and variables of your own")
    if not builtin:
        rows = user_only(model, rows)
    defaults = [(float(lo), float(hi)) for lo, hi in zip(cols.lower, cols.upper)]
    ps_low, ps_high = problem.constraints.ps_count
    defaults.append((float(ps_low), float(ps_high)))
    rows += bound_rows([model.n[c] for c in labels] + [model.s], defaults, columns, width)
    if not rows:
        return None
    a = np.array([np.pad(r[0], (0, width - len(r[0]))) for r in rows])
    k = len(labels)
    a_u = a[:, k + 1 : base]
    own_vars = None
    if own:
        low, high, integer, names = own_box(own)
        own_vars = OwnVariables(a[:, base:], low, high, integer, names)
    return SideRows(
        a_n=a[:, :k],
        a_s=a[:, k],
        low=np.array([r[1] for r in rows]),
        high=np.array([r[2] for r in rows]),
        names=tuple(r[3] for r in rows),
        a_u=a_u if np.any(a_u) else None,
        own=own_vars,
    )
