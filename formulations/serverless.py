"""The serverless provisioning problem as a Pyomo model (spec/serverless.md, eqs. 1-13).

:func:`create_serverless_model` states the λDNN problem as a mixed-integer nonlinear
program:

* ``m.n`` -- integer number of functions (eq. 13), within the function range and the
  platform's concurrency limit;
* ``m.use_memory[mb]`` -- one-hot choice of the memory size on the grid (eq. 12), and the
  expression ``m.memory_mb = sum mb * use_memory[mb]``;
* ``m.s`` -- integer number of PS nodes;
* ``m.side`` -- the linear side constraints (function-count range);
* ``m.performance`` -- eqs. (1)-(11) with the restart rule of the 900 s timeout, the
  concurrency limit and the budget;
* ``m.objective`` -- minimize ``m.performance.cost`` (eq. 10 with Lambda's tariff).

What is exact. Everything that depends on the memory only (training rate R, eq. 6;
storage bandwidth min(alpha_2 m + beta_2, B_s), eq. 8) is a constant per grid point and
enters linearly through the one-hot binaries. The two case splits, B_f^p = min(B_f^max,
s B_p / n) (eq. 7) and the local batch b_l of eq. (9), are stated with one regime binary
each, whose two cases agree on their common boundary. The number of function launches
(``ceil(T_train / (timeout - margin))``, at least 1) is an integer variable with
``(launches - 1) (timeout - margin) <= T_train <= launches (timeout - margin)``; at an exact
multiple both counts are allowed, and the cheaper one (fewer launches) is what a minimizer
picks. The rest is bilinear and division terms, stated as written.

:func:`side_rows` turns linear user constraints on ``m.n``, ``m.memory_mb`` and ``m.s``
into :class:`~dnnprov.models.serverless.ServerlessSideRows`.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo
from dnnprov.formulations.spot import (
    PROBLEM_ATTR,
    _define,
    bound_rows,
    check_builtins,
    linear_rows,
    record_builtins,
    user_only,
)
from dnnprov.formulations.user_rows import own_box, own_variables

from dnnprov.errors import InvalidInputError
from dnnprov.models.serverless import ServerlessSideRows
from dnnprov.models.side import OwnVariables
from dnnprov.problems.serverless import ServerlessProblem


def problem_of(model: pyo.ConcreteModel) -> ServerlessProblem:
    """The :class:`ServerlessProblem` a model was built from."""
    problem = getattr(model, PROBLEM_ATTR, None)
    if not isinstance(problem, ServerlessProblem):
        raise InvalidInputError("model", "was not built by dnnprov.formulations.serverless.create_serverless_model")
    return problem


def create_serverless_model(problem: ServerlessProblem) -> pyo.ConcreteModel:
    """The serverless provisioning MINLP of ``problem`` (see the module docstring)."""
    low, high = problem.function_range()
    s_lo, s_hi = problem.constraints.ps_count
    grid = problem.memory_grid()

    m = pyo.ConcreteModel(name=f"serverless:{problem.name}")
    setattr(m, PROBLEM_ATTR, problem)
    m.MEM = pyo.Set(initialize=grid, ordered=True, doc="memory sizes on the grid (eq. 12), MB")
    # eq. (13): n positive integer (function range and concurrency limit as bounds)
    m.n = pyo.Var(domain=pyo.PositiveIntegers, bounds=(low, max(low, high)), initialize=low, doc="number of functions")
    m.use_memory = pyo.Var(m.MEM, domain=pyo.Binary, initialize=0, doc="1 if every function gets mb MB")
    m.s = pyo.Var(domain=pyo.PositiveIntegers, bounds=(s_lo, s_hi), initialize=s_lo, doc="PS count")

    # eq. (12): exactly one memory size of the grid
    def one_memory_rule(m):
        return pyo.quicksum(m.use_memory[mb] for mb in m.MEM) == 1

    m.one_memory = pyo.Constraint(rule=one_memory_rule)
    m.memory_mb = pyo.Expression(
        expr=pyo.quicksum(mb * m.use_memory[mb] for mb in m.MEM), doc="memory per function, MB"
    )

    m.side = pyo.Block(doc="linear side constraints")
    f_low, f_high = problem.constraints.functions

    def functions_rule(side):
        return m.n >= f_low if f_high is None else pyo.inequality(f_low, m.n, f_high)

    m.side.functions = pyo.Constraint(rule=functions_rule, doc="function-count range")

    m.performance = pyo.Block(doc="performance model, eqs. (1)-(11), and the cost (10)")
    _build_performance(m, problem, low, max(low, high), s_lo, s_hi)
    m.objective = pyo.Objective(expr=m.performance.cost, sense=pyo.minimize, doc="eq. (10)")
    record_builtins(m, linear_rows(m, _plan_columns(m), skip=[m.one_memory], what=_WHAT))
    return m


def _build_performance(m, problem: ServerlessProblem, n_lo: int, n_hi: int, s_lo: int, s_hi: int) -> None:
    b = m.performance
    w, p = problem.workload, problem.platform
    grid = list(m.MEM)
    usable = p.timeout_s - p.checkpoint_margin_s

    # eqs. (6) and (8): constants per memory size
    rate = {mb: w.rate_alpha * mb + w.rate_beta for mb in grid}
    storage = {mb: min(w.storage_alpha * mb + w.storage_beta, p.storage_bandwidth_mb_s) for mb in grid}
    b.rate = pyo.Param(m.MEM, initialize=rate, doc="R(m) = alpha_1 m + beta_1, eq. (6)")
    b.storage_bw = pyo.Param(m.MEM, initialize=storage, doc="B_f^s(m) = min(alpha_2 m + beta_2, B_s), eq. (8)")
    b.R = pyo.Expression(expr=pyo.quicksum(b.rate[mb] * m.use_memory[mb] for mb in m.MEM))
    b.B_fs = pyo.Expression(expr=pyo.quicksum(b.storage_bw[mb] * m.use_memory[mb] for mb in m.MEM))
    invalid = [mb for mb in grid if rate[mb] <= 0 or storage[mb] <= 0]

    # a function can only train where its rate and storage bandwidth are positive
    def valid_memory_rule(b):
        if not invalid:
            return pyo.Constraint.Skip
        return pyo.quicksum(m.use_memory[mb] for mb in invalid) == 0

    b.valid_memory = pyo.Constraint(rule=valid_memory_rule)

    # eq. (9): local batch, regime binary (1: b_l = b_l^f, 0: b_l = b_g^max / n)
    b_lf, b_gmax = float(w.local_batch), float(w.max_global_batch)
    b.full_batch = pyo.Var(domain=pyo.Binary, doc="1 if b_l^f n <= b_g^max (eq. 9)")
    b.b_l = pyo.Var(bounds=(min(b_lf, b_gmax / n_hi), b_lf), doc="local batch size b_l")

    def batch_rule(b):
        return b.b_l == b.full_batch * b_lf + (1 - b.full_batch) * b_gmax / m.n

    b.eq9_batch = pyo.Constraint(rule=batch_rule)

    def batch_small_rule(b):
        return b.full_batch * (b_lf * m.n - b_gmax) <= 0

    b.eq9_full = pyo.Constraint(rule=batch_small_rule, doc="regime 1 needs b_l^f n <= b_g^max")

    def batch_large_rule(b):
        return (1 - b.full_batch) * (b_gmax - b_lf * m.n) <= 0

    b.eq9_capped = pyo.Constraint(rule=batch_large_rule, doc="regime 0 needs b_l^f n >= b_g^max")

    # eq. (2): k = n_t e / b_g with b_g = b_l n
    b.k = pyo.Var(bounds=(0.0, None), doc="iterations")

    def k_rule(b):
        return b.k == w.samples * w.epochs / (b.b_l * m.n)

    b.eq2_iterations = pyo.Constraint(rule=k_rule)

    # eq. (7): B_f^p = min(B_f^max, s B_p / n), regime binary (1: B_f^max, 0: s B_p / n)
    b_max, b_ps = p.function_bandwidth_mb_s, p.ps_bandwidth_mb_s
    b.full_bandwidth = pyo.Var(domain=pyo.Binary, doc="1 if B_f^max n <= s B_p (eq. 7)")
    b.B_fp = pyo.Var(bounds=(0.0, b_max), doc="bandwidth between a function and the PS, MB/s")

    def bandwidth_rule(b):
        return b.B_fp == b.full_bandwidth * b_max + (1 - b.full_bandwidth) * m.s * b_ps / m.n

    b.eq7_bandwidth = pyo.Constraint(rule=bandwidth_rule)

    def bandwidth_full_rule(b):
        return b.full_bandwidth * (b_max * m.n - m.s * b_ps) <= 0

    b.eq7_full = pyo.Constraint(rule=bandwidth_full_rule, doc="regime 1 needs B_f^max <= s B_p / n")

    def bandwidth_shared_rule(b):
        return (1 - b.full_bandwidth) * (m.s * b_ps - b_max * m.n) <= 0

    b.eq7_shared = pyo.Constraint(rule=bandwidth_shared_rule, doc="regime 0 needs s B_p / n <= B_f^max")

    b.t_load = pyo.Var(bounds=(0.0, None), doc="data loading time, s")
    b.t_comp = pyo.Var(bounds=(0.0, None), doc="computation per iteration, s")
    b.t_comm = pyo.Var(bounds=(0.0, None), doc="communication per iteration, s")
    b.T_train = pyo.Var(bounds=(0.0, None), doc="training time without restarts, s")

    # eq. (3): t_load = d_t / (n B_f^s)
    def load_rule(b):
        return b.t_load == w.dataset_mb / (m.n * b.B_fs)

    b.eq3_load = pyo.Constraint(rule=load_rule)

    # eq. (4): t_comp = b_l / R
    def comp_rule(b):
        return b.t_comp == b.b_l / b.R

    b.eq4_compute = pyo.Constraint(rule=comp_rule)

    # eq. (5): t_comm = 2 d_m / B_f^p
    def comm_rule(b):
        return b.t_comm == 2 * w.model_mb / b.B_fp

    b.eq5_communicate = pyo.Constraint(rule=comm_rule)

    # eq. (1): T = t_load + k (t_comp + t_comm)
    def train_rule(b):
        return b.T_train == b.t_load + b.k * (b.t_comp + b.t_comm)

    b.eq1_time = pyo.Constraint(rule=train_rule)

    # timeout: loading and one iteration fit before the first checkpoint
    def fits_rule(b):
        return b.t_load + b.t_comp + b.t_comm <= usable

    b.first_checkpoint = pyo.Constraint(rule=fits_rule)

    # timeout: launches = max(ceil(T_train / usable), 1), each restart costs the overhead
    most = max(1, math.ceil(problem.time_s / usable) + 1)
    b.launches = pyo.Var(
        domain=pyo.PositiveIntegers,
        bounds=(1, most),
        initialize=1,
        doc="function launches (1 + restarts from checkpoints)",
    )

    def launches_low_rule(b):
        return (b.launches - 1) * usable <= b.T_train

    b.launches_low = pyo.Constraint(rule=launches_low_rule)

    def launches_high_rule(b):
        return b.T_train <= b.launches * usable

    b.launches_high = pyo.Constraint(rule=launches_high_rule)

    b.T = pyo.Var(bounds=(0.0, None), doc="training time with restarts, s")

    def time_rule(b):
        return b.T == b.T_train + (b.launches - 1) * p.checkpoint_overhead_s

    b.restart_time = pyo.Constraint(rule=time_rule)

    # eq. (11): T <= T_o
    def deadline_rule(b):
        return b.T <= problem.time_s

    b.eq11_deadline = pyo.Constraint(rule=deadline_rule)

    # concurrency limit of the platform
    def concurrency_rule(b):
        return m.n <= p.concurrency_limit

    b.concurrency = pyo.Constraint(rule=concurrency_rule)

    # eq. (10): C = n m p T (memory-time), plus requests and the PS VMs
    b.cost = pyo.Expression(
        expr=m.n * m.memory_mb / 1024.0 * b.T * p.price_per_gb_s
        + m.n * b.launches * p.price_per_request
        + m.s * p.ps_price_per_h * b.T / 3600.0,
        doc="cost in $, eq. (10)",
    )
    budget = problem.constraints.budget_usd

    def budget_rule(b):
        return b.cost <= budget if budget is not None else pyo.Constraint.Skip

    b.budget = pyo.Constraint(rule=budget_rule, doc="cost <= budget")


# ---------------------------------------------------------------------- plans in the model
def load_plan(model: pyo.ConcreteModel, functions: int, memory_mb: int, ps: int) -> None:
    """Set ``m.n``, the memory choice and ``m.s`` to a plan and :func:`complete_plan` the rest."""
    if memory_mb not in model.MEM:
        raise InvalidInputError("plan.memory_mb", f"{memory_mb} MB is not on the model's memory grid")
    model.n.set_value(int(functions), skip_validation=True)
    for mb in model.MEM:
        model.use_memory[mb].set_value(int(mb == memory_mb))
    model.s.set_value(int(ps), skip_validation=True)
    complete_plan(model)


def complete_plan(model: pyo.ConcreteModel) -> None:
    """Give every performance variable the value its defining equation implies for the
    current values of ``m.n``, ``m.use_memory`` and ``m.s`` (regimes and launches from
    their definitions). The values need not be feasible."""
    b = model.performance
    problem = problem_of(model)
    w, p = problem.workload, problem.platform
    n, s = pyo.value(model.n), pyo.value(model.s)
    b.full_batch.set_value(int(w.local_batch * n <= w.max_global_batch))
    b.full_bandwidth.set_value(int(p.function_bandwidth_mb_s * n <= s * p.ps_bandwidth_mb_s))
    for var, con in (
        (b.b_l, b.eq9_batch),
        (b.k, b.eq2_iterations),
        (b.B_fp, b.eq7_bandwidth),
        (b.t_load, b.eq3_load),
        (b.t_comp, b.eq4_compute),
        (b.t_comm, b.eq5_communicate),
        (b.T_train, b.eq1_time),
    ):
        _define(var, con)
    usable = p.timeout_s - p.checkpoint_margin_s
    b.launches.set_value(max(math.ceil(pyo.value(b.T_train) / usable), 1), skip_validation=True)
    _define(b.T, b.restart_time)


def plan_of(model: pyo.ConcreteModel) -> tuple[int, int, int]:
    """(functions, memory MB, PS count) held by the model's variables, rounded."""
    memory = max(model.MEM, key=lambda mb: pyo.value(model.use_memory[mb]))
    return round(pyo.value(model.n)), int(memory), round(pyo.value(model.s))


# ---------------------------------------------------------------------- user constraints
_WHAT = "m.n, m.memory_mb (m.use_memory[...]) and m.s"


def _plan_columns(model: pyo.ConcreteModel) -> dict[int, int]:
    """Row positions: n, s, then one per memory binary."""
    columns = {id(model.n): 0, id(model.s): 1}
    for i, mb in enumerate(model.MEM):
        columns[id(model.use_memory[mb])] = 2 + i
    return columns


def side_rows(model: pyo.ConcreteModel, *, builtin: bool = True) -> ServerlessSideRows | None:
    """The linear constraints on ``m.n``, ``m.memory_mb`` and ``m.s`` outside ``m.performance``.

    A constraint may use the memory binaries only through an affine function of the
    memory size (as ``m.memory_mb`` does); a constraint that singles out memory sizes in
    another way (say ``m.use_memory[2048] == 0``) is refused, since plans are described by
    (n, m, s). ``builtin=False`` leaves out the unchanged built-in rows of ``m.side``.
    Returns ``None`` when there is no row.
    """
    problem = problem_of(model)
    check_builtins(model, [model.side, model.performance], [model.one_memory])
    grid = np.array(list(model.MEM), dtype=float)
    columns = _plan_columns(model)
    base = len(columns)
    own = own_variables(model, columns, _WHAT)
    rows = linear_rows(model, columns, skip=[model.one_memory], what=f"{_WHAT} and variables of your own")
    if not builtin:
        rows = user_only(model, rows)
    low, high = problem.function_range()
    width = len(columns)
    rows += bound_rows(
        [model.n, model.s],
        [(float(low), float(max(low, high))), tuple(float(v) for v in problem.constraints.ps_count)],
        columns,
        width,
    )
    for var in model.use_memory.values():
        if var.fixed or (var.lb or 0) > 0 or (var.ub if var.ub is not None else 1) < 1:
            raise InvalidInputError(
                var.name, "fixing or bounding a memory binary is not supported; constrain m.memory_mb instead"
            )
    if not rows:
        return None
    a_n, a_m, a_s, lows, highs = [], [], [], [], []
    rows = [(np.pad(r[0], (0, width - len(r[0]))), *r[1:]) for r in rows]
    for coefs, lo, hi, name in rows:
        per_size = coefs[2:base]
        # sum_mb c_mb u_mb with sum u = 1 equals a m + d when c is affine in mb
        if len(grid) > 1:
            slope = float((per_size[-1] - per_size[0]) / (grid[-1] - grid[0]))
            shift = float(per_size[0] - slope * grid[0])
        else:
            slope, shift = 0.0, float(per_size[0])
        scale = max(1.0, float(np.abs(per_size).max()))
        if np.abs(slope * grid + shift - per_size).max() > 1e-9 * scale:
            raise InvalidInputError(
                name,
                "uses the memory binaries in a way that is not a linear "
                "function of m.memory_mb; constrain m.memory_mb instead",
            )
        a_n.append(coefs[0])
        a_s.append(coefs[1])
        a_m.append(slope)
        lows.append(lo - shift)
        highs.append(hi - shift)
    own_vars = None
    if own:
        y_low, y_high, integer, names = own_box(own)
        own_vars = OwnVariables(np.array([r[0][base:] for r in rows]), y_low, y_high, integer, names)
    return ServerlessSideRows(
        a_n=np.array(a_n),
        a_m=np.array(a_m),
        a_s=np.array(a_s),
        low=np.array(lows),
        high=np.array(highs),
        names=tuple(r[3] for r in rows),
        own=own_vars,
    )
