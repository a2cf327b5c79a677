"""Own side variables decided per plan (solvers/side_vars.py): unbounded ones, tiny magnitudes, no hang."""

from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo
import pytest
from dnnprov.formulations.spot import create_spot_model
from dnnprov.solvers.side_vars import witness

import dnnprov
from dnnprov.model_solve import solve_model
from dnnprov.models.side import OwnVariables

INF = math.inf


@pytest.fixture(scope="module")
def table1() -> dnnprov.SpotProblem:
    return dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))


def test_rows_of_tiny_terms_are_decided_exactly():
    """z == S (a priced sum of 3.1e-6) and z <= S - 5e-8: no z fits, and that is the answer.

    Before, HiGHS (absolute tolerances of 1e-7) called the rows met, the check of its point
    refused it, and the solve ended in an error.
    """
    own = OwnVariables(
        np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]),
        np.array([-INF, -INF]),
        np.array([INF, INF]),
        np.array([False, False]),
        ("z1", "z2"),
    )
    s = 3.1e-6
    for limit, fits in ((s - 5e-8, False), (s, True), (s + 5e-8, True)):
        y = witness(own, np.array([s, -INF, s, -INF]), np.array([s, limit, s, limit]))
        assert (y is not None) is fits
        if fits:
            assert y[0] == s and y[1] == s


def test_unbounded_own_integers_tied_to_counts(table1):
    """n_a even and n_a + n_b a multiple of 3 through unbounded integers: the same proven answer as with bounds.

    Before, a plan with n_a odd sent the unbounded integers to HiGHS, whose "none" could not be
    verified: status error.
    """
    costs = {}
    for bounds in ((None, None), (0, 10)):
        m = create_spot_model(table1)
        a, b = list(m.C)[1:3]
        m.y = pyo.Var(domain=pyo.Integers, bounds=bounds)
        m.z = pyo.Var(domain=pyo.Integers, bounds=bounds)
        m.even = pyo.Constraint(expr=m.n[a] == 2 * m.y)
        m.three = pyo.Constraint(expr=m.n[a] + m.n[b] == 3 * m.z)
        for method in ("milp", "enumerate"):
            result = solve_model(m, method)
            assert result.status is dnnprov.Status.OPTIMAL, result.message
            assert result.plan.counts[a] % 2 == 0 and (result.plan.counts[a] + result.plan.counts[b]) % 3 == 0
            costs[bounds, method] = result.cost
    assert len(set(costs.values())) == 1, costs


def test_open_integer_lattice_is_refused_by_name(table1):
    """2 y + 4 z == n_a with y, z unbounded: no box to prove "none" in, so one error naming them.

    Before, HiGHS branched without end on an odd n_a (the solve's time limit did not reach it).
    """
    own = OwnVariables(
        np.array([[2.0, 4.0]]), np.array([-INF, -INF]), np.array([INF, INF]), np.array([True, True]), ("y", "z")
    )
    assert witness(own, np.array([4.0]), np.array([4.0])) is not None
    with pytest.raises(dnnprov.InvalidInputError, match=r"y, z.*give them bounds"):
        witness(own, np.array([3.0]), np.array([3.0]))
    m = create_spot_model(table1)
    a = list(m.C)[1]
    m.y = pyo.Var(domain=pyo.Integers)
    m.z = pyo.Var(domain=pyo.Integers)
    m.lattice = pyo.Constraint(expr=m.n[a] == 2 * m.y + 4 * m.z)
    with pytest.raises(dnnprov.InvalidInputError, match=r"y, z"):
        solve_model(m, "enumerate")
    m.y.setlb(-10), m.y.setub(10), m.z.setlb(-10), m.z.setub(10)
    assert solve_model(m, "milp").cost == solve_model(m, "enumerate").cost
