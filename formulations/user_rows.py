"""What users add to the Pyomo models beyond the plan variables (issue 29): their own
variables and the objective, read from a model for :func:`dnnprov.model_solve.solve_model`.

Shared by :mod:`dnnprov.formulations.spot` and :mod:`dnnprov.formulations.serverless`.
"""

from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo
from pyomo.core.expr.visitor import identify_variables
from pyomo.repn import generate_standard_repn

from dnnprov.errors import InvalidInputError


def _inside(component, block) -> bool:
    """Whether ``component`` lives in ``block`` or one of its sub-blocks."""
    parent = component.parent_block()
    while parent is not None:
        if parent is block:
            return True
        parent = parent.parent_block()
    return False


def model_objective(model: pyo.ConcreteModel) -> str:
    """What the model's one active objective asks for: ``"cost"``, ``"time"`` or ``"weighted:W"``.

    Recognized (minimized): ``m.performance.cost``, ``m.performance.T`` (least time within
    the budget, ties by cost) and ``m.performance.cost + W * m.performance.T`` (W >= 0 in
    $/s). Anything else is refused by the objective's name.
    """
    objectives = list(model.component_data_objects(pyo.Objective, active=True, descend_into=True))
    if len(objectives) != 1:
        raise InvalidInputError(
            "objective",
            f"the model has {len(objectives)} active objectives; keep one: "
            "m.performance.cost, m.performance.T or cost + W * T, minimized",
        )
    obj = objectives[0]
    b = model.performance
    expr = obj.expr
    refused = InvalidInputError(
        f"objective {obj.name}",
        f"minimizes {str(expr)[:80]!r}; solve_model knows m.performance.cost, "
        "m.performance.T and m.performance.cost + W * m.performance.T (W >= 0), "
        "minimized",
    )
    if obj.sense != pyo.minimize:
        raise refused
    if expr is b.cost or expr is b.cost.expr:
        return "cost"
    if expr is b.T:
        return "time"
    args = list(getattr(expr, "args", ())) if type(expr).__name__ in ("SumExpression", "LinearExpression") else []
    if len(args) == 2:
        for first, second in (args, args[::-1]):
            if first is b.cost or first is b.cost.expr:
                repn = generate_standard_repn(second, compute_values=True, quadratic=False)
                named = list(identify_variables(second, include_fixed=False))
                if (  # cost + 0 * T: the weight 0 (the repn drops a zero coefficient and its variable)
                    repn.is_linear()
                    and not repn.linear_vars
                    and not pyo.value(repn.constant)
                    and len(named) == 1
                    and named[0] is b.T
                ):
                    return "weighted:0.0"
                if (
                    repn.is_linear()
                    and len(repn.linear_vars) == 1
                    and repn.linear_vars[0] is b.T
                    and not pyo.value(repn.constant)
                    and float(repn.linear_coefs[0]) >= 0
                ):
                    return f"weighted:{float(repn.linear_coefs[0])!r}"
    raise refused


def own_variables(model: pyo.ConcreteModel, columns: dict[int, int], what: str) -> list:
    """The user's own variables: those the constraints outside ``m.performance`` use besides
    the allowed ones (``columns``), in order of first use; each gets the next row position.

    A variable of ``m.performance`` other than an allowed one is refused by name.
    """
    performance = model.performance
    own = []
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        if _inside(con, performance):
            continue
        for var in identify_variables(con.body, include_fixed=False):
            if id(var) in columns:
                continue
            if _inside(var, performance):
                raise InvalidInputError(
                    con.name,
                    f"uses {var.name}; constraints outside m.performance may only use {what} and variables of your own",
                )
            columns[id(var)] = len(columns)
            own.append(var)
    return own


def own_box(own: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Bounds (infinite when open), integrality and names of own variables."""
    low = np.array([-math.inf if v.lb is None else float(v.lb) for v in own])
    high = np.array([math.inf if v.ub is None else float(v.ub) for v in own])
    integer = np.array([bool(v.is_integer()) for v in own], dtype=bool)
    for var, lo, hi in zip(own, low, high):
        if lo > hi:
            raise InvalidInputError(var.name, f"has bounds {lo:g} > {hi:g}")
    return low, high, integer, tuple(v.name for v in own)
