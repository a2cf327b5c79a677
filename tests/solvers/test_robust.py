"""--robust K and --risk against exhaustive oracles written independently of the solvers.

The oracles walk every plan of small random quota boxes one by one: for --robust they play
every adversary schedule (each event's outage integrated explicitly, events back to
back) and for --risk they evaluate the expected cost and the Poisson deadline bound with
scalar formulas. The solvers must return the same optimal cost (or infeasibility).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import random_spot_problem
from dnnprov.solvers.revocation.risk import solve_risk
from dnnprov.solvers.revocation.robust import replaced_delay, solve_robust, worst_case_delay

import dnnprov
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import read_instance
from dnnprov.models.spot import SpotModel
from dnnprov.problems.interruption import Interruption

OVERHEAD = 126.0
#: The audit's defect reproductions (outside the repository, like ../shared/data).
REPRO = Path(__file__).resolve().parents[2].parent / "shared" / "repro" / "turn3"


@pytest.fixture
def shared_repro() -> Path:
    if not (REPRO / "robust-short-job.json").is_file():
        pytest.skip(f"the audit's reproductions are not at {REPRO}")
    return REPRO


def speed(model: SpotModel, counts, ps) -> float:
    """Progress speed x / N of one cluster (0 without workers or progress)."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.sum() == 0:
        return 0.0
    ev = model.evaluate(counts[None, :], ps)
    n = (float(ev.iterations[0]) + model.problem.workload.gamma_1) * model.loss_gap
    sigma = float(ev.iteration_rate[0]) / n
    return sigma if math.isfinite(sigma) and sigma > 0 else 0.0


def play(model: SpotModel, counts, ps, revocations, overhead: float = OVERHEAD) -> float | None:
    """Finish time when each ``(moment, column)`` revokes one running instance of that column
    (an original or a replacement), each replaced ``overhead`` s later; progress integrated
    piece by piece. ``None`` when a revocation names a column with nothing running then."""
    counts = np.asarray(counts)
    ev = model.evaluate(counts[None, :], ps)
    fixed = model.problem.slo.takeover_overhead_s
    full = speed(model, counts, ps)
    work = (float(ev.time_s[0]) - fixed) * full  # progress needed, u* - u0
    # joins (-1) sort before revocations (+1) at one moment: a replacement may be revoked on arrival
    changes = sorted([(t, 1, m) for t, m in revocations] + [(t + overhead, -1, m) for t, m in revocations])
    out = np.zeros_like(counts)
    t, done = 0.0, 0.0
    for at, step, column in changes:
        rate = speed(model, counts - out, ps)
        if rate > 0 and done + rate * (at - t) >= work:
            return t + (work - done) / rate + fixed
        done, t = done + rate * (at - t), at
        out[column] += step
        if out[column] > counts[column]:
            return None
    return t + (work - done) / full + fixed


def adversary_worst(model: SpotModel, counts, ps, k: int, overhead: float = OVERHEAD) -> float:
    """Largest finish over every schedule of at most k revocations (replacements included) at
    moments on a grid of the overhead (0, o/4, o/2, o, 3o/2, 2o) and at T_c / 2."""
    counts = np.asarray(counts)
    ev = model.evaluate(counts[None, :], ps)
    core = float(ev.time_s[0]) - model.problem.slo.takeover_overhead_s
    spot = [i for i, m in enumerate(model.columns.markets) if m == "spot" and counts[i] > 0]
    moments = sorted({0.0, overhead / 4, overhead / 2, overhead, 1.5 * overhead, 2 * overhead, core / 2})
    choices = [(t, m) for t in moments for m in spot]
    worst = float(ev.time_s[0])
    for size in range(1, k + 1):
        for schedule in itertools.combinations_with_replacement(choices, size):
            finish = play(model, counts, ps, schedule, overhead)
            if finish is not None:
                worst = max(worst, finish)
    return worst


def cheapest_surviving(problem: dnnprov.SpotProblem, worst) -> float | None:
    """Cheapest feasible plan whose worst finish ``worst(model, counts, ps, ev)`` meets T_obj."""
    model = SpotModel(problem)
    cols = model.columns
    best = None
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for counts in itertools.product(*(range(lo, hi + 1) for lo, hi in zip(cols.lower, cols.upper))):
            ev = model.evaluate(np.array([counts]), ps)
            if not ev.feasible[0] or speed(model, counts, ps) == 0:
                continue
            if worst(model, counts, ps, ev) <= problem.slo.time_s * (1 + 1e-9) and (best is None or ev.cost[0] < best):
                best = float(ev.cost[0])
    return best


def robust_oracle(problem: dnnprov.SpotProblem, k: int) -> float | None:
    """Cheapest plan meeting T_obj under every schedule of k revocations (replacements included)."""
    return cheapest_surviving(problem, lambda model, counts, ps, ev: adversary_worst(model, counts, ps, k))


def schedules(workers: list[int], k: int):
    """Every list of events (non-empty groups of distinct workers), at most k workers in all
    (workers lost for good: each can be lost once)."""
    yield []
    if k == 0:
        return
    for size in range(1, min(k, len(workers)) + 1):
        for picked in itertools.combinations(range(len(workers)), size):
            rest = [w for i, w in enumerate(workers) if i not in picked]
            for tail in schedules(rest, k - size):
                yield [[workers[i] for i in picked]] + tail


def finish_unreplaced(model: SpotModel, counts, ps, timed_events) -> float:
    """Integrate progress when each (time, group) removes its workers for good."""
    counts = np.asarray(counts)
    ev = model.evaluate(counts[None, :], ps)
    fixed = model.problem.slo.takeover_overhead_s
    work = (float(ev.time_s[0]) - fixed) * speed(model, counts, ps)
    t, done, cluster = 0.0, 0.0, counts.copy()
    for at, group in sorted(timed_events, key=lambda e: e[0]):
        rate = speed(model, cluster, ps)
        if rate > 0 and done + rate * (at - t) >= work:
            return t + (work - done) / rate + fixed
        done, t = done + rate * (at - t), at
        cluster = cluster - np.bincount(group, minlength=len(counts))
    rate = speed(model, cluster, ps)
    return t + (work - done) / rate + fixed if rate > 0 else math.inf


def unreplaced_oracle(problem: dnnprov.SpotProblem, k: int) -> float | None:
    """Cheapest plan meeting T_obj when up to k workers are lost for good, at 0, T/3 or 2T/3."""

    def worst_timing(model, counts, ps, ev) -> float:
        moments = (0.0, float(ev.time_s[0]) / 3, 2 * float(ev.time_s[0]) / 3)
        spot = [i for i, m in enumerate(model.columns.markets) if m == "spot"]
        workers = [i for i in spot for _ in range(counts[i])]
        return max(
            finish_unreplaced(model, counts, ps, list(zip(times, s)))
            for s in schedules(workers, k)
            for times in itertools.product(moments, repeat=len(s))
        )

    return cheapest_surviving(problem, worst_timing)


@pytest.mark.parametrize("seed", [0, 4, 6, 9])
def test_robust_unreplaced_matches_exhaustive_adversary(seed: int) -> None:
    """Without replacement, the cheapest K-robust plan matches an adversary revoking at 0, T/3, 2T/3."""
    problem = paper_problem(seed)
    for k in (1, 2):
        result = solve_robust(problem, k, replaced=False)
        expected = unreplaced_oracle(problem, k)
        if expected is None:
            assert result.status is dnnprov.Status.INFEASIBLE
        else:
            assert result.status is dnnprov.Status.OPTIMAL and result.details["replaced"] is False
            assert result.cost == pytest.approx(expected, rel=1e-9)


def paper_problem(seed: int) -> dnnprov.SpotProblem:
    rng = np.random.default_rng(seed)
    problem = random_spot_problem(
        rng, model="paper", n_types=3, max_quota=2, max_ps=2, on_demand=bool(seed % 3 == 0), existing=False
    )
    # Leave room for K replacements of OVERHEAD s (the oracle plays events from the start).
    return problem.replace(slo=dnnprov.SpotSLO(problem.slo.loss, max(problem.slo.time_s, 1500.0) * 1.1))


@pytest.mark.parametrize("seed", range(12))
def test_robust_matches_exhaustive_adversary(seed: int) -> None:
    """The cheapest K-robust plan costs what the brute-force adversary says (K = 1, 2), by
    enumeration and by the decomposition."""
    problem = paper_problem(seed)
    for k in (1, 2):
        expected = robust_oracle(problem, k)
        for method in ("enumerate", "decompose"):
            result = solve_robust(problem, k, overhead_s=OVERHEAD, method=method)
            if expected is None:
                assert result.status is dnnprov.Status.INFEASIBLE and result.plan is None
            else:
                assert result.status is dnnprov.Status.OPTIMAL
                assert result.cost == pytest.approx(expected, rel=1e-9)
                assert result.details["worst_case_time_s"] <= problem.slo.time_s * (1 + 1e-9)


@pytest.mark.parametrize("seed", [1, 4, 6, 10])  # boxes with plans of at most 4 workers
@pytest.mark.parametrize("overhead", [10.0, OVERHEAD, 3000.0])
def test_worst_case_matches_adversary_plan_by_plan(seed: int, overhead: float) -> None:
    """Every plan's worst case (K = 1, 2) is never beaten by the adversary and, where the
    planner says it is exact, the adversary attains it; long and short runs (o up to 3000 s)."""
    problem = paper_problem(seed)
    model = SpotModel(problem)
    cols = model.columns
    exact_seen = 0
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for counts in itertools.product(*(range(lo, hi + 1) for lo, hi in zip(cols.lower, cols.upper))):
            if speed(model, counts, ps) == 0 or sum(counts) > 4:
                continue
            ev = model.evaluate(np.array([counts]), ps)
            for k in (1, 2):
                delay, exact = replaced_delay(model, np.array([counts]), np.array([ps]), k, overhead)
                planned = float(ev.time_s[0]) + float(delay[0])
                played = adversary_worst(model, counts, ps, k, overhead)
                assert played <= planned * (1 + 1e-9) + 1e-9
                if exact[0]:
                    exact_seen += 1
                    assert played == pytest.approx(planned, rel=1e-9, abs=1e-9)
    assert exact_seen > 0


def test_k_counts_revoked_replacements(resnet110_paper) -> None:
    """K = 2 on a plan with one worker of a type: revoking it and then its replacement
    delays by 2 o D, more than any two distinct workers can (the adversary plays it)."""
    model = SpotModel(resnet110_paper)
    counts = np.array([1, 0, 0, 0, 0])
    delay, exact = replaced_delay(model, counts[None, :], np.array([1]), 2, OVERHEAD)
    assert exact[0] and delay[0] == pytest.approx(2 * OVERHEAD)  # a lone worker: D = 1, twice
    played = play(model, counts, 1, [(0.0, 0), (OVERHEAD, 0)])
    assert played == pytest.approx(float(model.evaluate(counts[None, :], 1).time_s[0]) + 2 * OVERHEAD)


def test_short_job_is_robust(shared_repro) -> None:
    """The audit's short job (T_obj 7.09 s, o = 126 s): a plan exists, its worst case ~1.28 s."""
    problem = read_instance(str(shared_repro / "robust-short-job.json"))
    for method in ("enumerate", "decompose"):
        result = solve_robust(problem, 1, method=method)
        assert result.status is dnnprov.Status.OPTIMAL
        assert result.details["worst_case_time_s"] == pytest.approx(1.282, abs=1e-3)
        counts = [result.plan.counts[label] for label in SpotModel(problem).columns.labels]
        played = adversary_worst(SpotModel(problem), counts, result.plan.ps, 1)
        assert played == pytest.approx(result.details["worst_case_time_s"], rel=1e-9)


def test_robust_zero_is_the_nominal_optimum(resnet110_paper) -> None:
    """K = 0 is the plain problem: the same cost as exhaustive search."""
    problem = resnet110_paper.replace(slo=dnnprov.SpotSLO(0.8, 3000.0))
    assert solve_robust(problem, 0).cost == pytest.approx(dnnprov.solve(problem, "enumerate").cost, rel=1e-9)


def test_worst_case_delay_is_bounded_by_k(resnet110_paper) -> None:
    """F_K <= K (each event delays by at most o), and F grows with K."""
    model = SpotModel(resnet110_paper)
    counts = np.array([[2, 1, 2, 1, 0]])
    delays = [float(worst_case_delay(model, counts, np.array([1]), k)[0]) for k in range(4)]
    assert delays[0] == 0.0
    assert all(0 <= a <= b <= k for k, (a, b) in enumerate(itertools.pairwise(delays), start=1))


def test_decomposition_beyond_max_plans_is_proven(resnet110_paper) -> None:
    """A quota box beyond max_plans: the decomposition still proves the enumerated optimum."""
    problem = resnet110_paper.replace(slo=dnnprov.SpotSLO(0.8, 3000.0))
    exact = solve_robust(problem, 2, method="enumerate")
    result = solve_robust(problem, 2, max_plans=10)
    assert result.status is dnnprov.Status.OPTIMAL and result.stats["method"] == "decompose"
    assert result.cost == pytest.approx(exact.cost, rel=1e-9)
    with pytest.raises(InvalidInputError, match="max_plans"):
        solve_robust(problem, 2, max_plans=10, method="enumerate")


def test_time_limit_gives_limit_with_a_bound(resnet110_paper) -> None:
    """A tiny limit ends with status limit and a bound no higher than the optimum."""
    problem = resnet110_paper.replace(slo=dnnprov.SpotSLO(0.8, 3000.0))
    optimum = solve_robust(problem, 1).cost
    for method in ("enumerate", "decompose"):
        result = solve_robust(problem, 1, time_limit_s=1e-6, method=method)
        assert result.status is dnnprov.Status.LIMIT
        assert result.bound is not None and result.bound <= optimum + 1e-12


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda p: solve_robust(p, -1), "robust"),
        (lambda p: solve_robust(p, 1, overhead_s=-5), "takeover_overhead_s"),
        (
            lambda p: solve_robust(p.replace(model="reference", workload=replace(p.workload, loss_variant="no-cc")), 1),
            "model",
        ),
        (lambda p: solve_risk(p), "interruption"),
        (lambda p: solve_risk(p, deadline_probability=1.5), "deadline_probability"),
    ],
)
def test_bad_options_name_the_field(resnet110_paper, call, field: str) -> None:
    """Bad options are one InvalidInputError naming the field."""
    with pytest.raises(InvalidInputError) as info:
        call(resnet110_paper)
    assert field in info.value.field


# ----------------------------------------------------------------------------- --risk
def poisson_cdf(k: int, mean: float) -> float:
    """P(Poisson(mean) <= k), term by term."""
    term = total = math.exp(-mean)
    for i in range(1, min(k, 10_000) + 1):
        term *= mean / i
        total += term
    return min(total, 1.0)


def risk_oracle(problem: dnnprov.SpotProblem, q: float | None, lost: float) -> float | None:
    """Least expected cost by a per-plan scalar evaluation of the documented model."""
    model = SpotModel(problem)
    cols = model.columns
    types = {t.name: t for t in problem.instance_types}
    best = None
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        for counts in itertools.product(*(range(lo, hi + 1) for lo, hi in zip(cols.lower, cols.upper))):
            ev = model.evaluate(np.array([counts]), ps)
            sigma = speed(model, counts, ps)
            if not ev.feasible[0] or sigma == 0:
                continue
            rho, events, d_safe, premium = 0.0, 0.0, 0.0, []
            for i, n in enumerate(counts):
                if cols.markets[i] != "spot" or n == 0:
                    continue
                t = types[cols.type_names[i]]
                rest = list(counts)
                rest[i] -= 1
                d = OVERHEAD * max(0.0, 1 - speed(model, rest, ps) / sigma) + lost
                rho += n * t.interruption.rate_per_h * d / 3600
                events += n * t.interruption.rate_per_h
                d_safe = OVERHEAD + lost if t.interruption.rate_per_h > 0 else d_safe
                premium.append((n, t.interruption.rate_per_h, t.on_demand_price_per_h - t.spot_price_per_h))
            if rho >= 1:
                continue
            fixed = problem.slo.takeover_overhead_s
            e_time = (float(ev.time_s[0]) - fixed) / (1 - rho) + fixed
            hours = e_time / 3600
            rate = float(np.dot(counts, cols.price)) + ps * problem.platform.ps_price_per_h
            e_cost = rate * hours + sum(n * dp * (hours - (1 - math.exp(-lam * hours)) / lam) for n, lam, dp in premium)
            if q is None:
                ok = e_time <= problem.slo.time_s * (1 + 1e-12)
            else:
                slack = problem.slo.time_s - float(ev.time_s[0])
                k_star = math.inf if d_safe == 0 else math.floor(slack / d_safe)  # outages may overlap
                ok = k_star == math.inf or poisson_cdf(int(k_star), events * problem.slo.time_s / 3600) >= q
            if ok and (best is None or e_cost < best):
                best = e_cost
    return best


def with_rates(problem: dnnprov.SpotProblem, rng: np.random.Generator) -> dnnprov.SpotProblem:
    types = tuple(
        replace(
            t,
            interruption=Interruption(float(rng.uniform(0.05, 1.5)), "test draw"),
            on_demand_price_per_h=t.on_demand_price_per_h or 3 * t.spot_price_per_h,
        )
        for t in problem.instance_types
    )
    return problem.replace(instance_types=types)


@pytest.mark.parametrize("seed", range(10))
def test_risk_matches_scalar_oracle(seed: int) -> None:
    """Expected-cost optimum (in expectation and at a probability) equals the per-plan oracle,
    by enumeration and by the decomposition."""
    rng = np.random.default_rng(100 + seed)
    problem = with_rates(paper_problem(seed), rng)
    for (q, lost), method in itertools.product(((None, 0.0), (0.9, 30.0)), ("enumerate", "decompose")):
        result = solve_risk(problem, deadline_probability=q, lost_work_s=lost, overhead_s=OVERHEAD, method=method)
        expected = risk_oracle(problem, q, lost)
        if expected is None:
            assert result.status is dnnprov.Status.INFEASIBLE
        else:
            assert result.status is dnnprov.Status.OPTIMAL
            assert result.cost == pytest.approx(expected, rel=1e-9)
            assert result.cost >= result.details["nominal_cost"] - 1e-12
            if q is not None:
                assert result.details["deadline_probability_lower_bound"] >= q


def test_risk_with_no_revocations_is_the_nominal_optimum(resnet110_paper) -> None:
    """With zero interruption rates E[C] = C: the risk plan is the plain optimum."""
    problem = resnet110_paper.replace(
        slo=dnnprov.SpotSLO(0.8, 3000.0),
        instance_types=tuple(
            replace(t, interruption=Interruption(0.0, "never revoked")) for t in resnet110_paper.instance_types
        ),
    )
    result = solve_risk(problem, replacement="spot")
    assert result.cost == pytest.approx(dnnprov.solve(problem, "enumerate").cost, rel=1e-9)
    assert result.details["revocations_expected"] == 0.0


def test_solve_entry_point_reaches_the_revocation_planners(resnet110_paper) -> None:
    """dnnprov.solve(robust=K / risk=True) gives what the planners give, and refuses misuse."""
    from dnnprov.solvers.revocation.robust import solve_robust

    via_solve = dnnprov.solve(resnet110_paper, robust=1)
    direct = solve_robust(resnet110_paper, 1)
    assert via_solve.status is direct.status and via_solve.cost == direct.cost
    assert via_solve.method == "robust-1"
    with pytest.raises(dnnprov.InvalidInputError, match="method"):
        dnnprov.solve(resnet110_paper, "heuristic", robust=1)
    with pytest.raises(dnnprov.InvalidInputError, match="robust"):
        dnnprov.solve(resnet110_paper, robust=1, risk=True)


# ----------------------------------------------------------------------------- options and limits
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--deadline-probability", "0.9"], "--deadline-probability"),
        (["--no-replacement"], "--no-replacement"),
        (["--takeover-overhead", "60"], "--takeover-overhead"),
        (["--robust", "1", "--deadline-probability", "0.9"], "--deadline-probability"),
        (["--risk", "--no-replacement"], "--no-replacement"),
    ],
)
def test_solve_refuses_revocation_options_without_their_planner(
    tmp_path: Path, capsys: pytest.CaptureFixture, resnet110_paper, args: list[str], option: str
) -> None:
    """`dnnprov solve` with an option of a planner not asked for: one error line naming it, exit 2."""
    from dnnprov.cli import main

    instance = tmp_path / "i.json"
    dnnprov.write_instance(resnet110_paper, instance)
    assert main(["solve", str(instance), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dnnprov: error:") and option in err[0]


def test_api_refuses_revocation_options_without_their_planner(resnet110_paper) -> None:
    """dnnprov.solve(deadline_probability=..., replaced=False) without robust/risk is refused, not ignored."""
    with pytest.raises(InvalidInputError) as info:
        dnnprov.solve(resnet110_paper, deadline_probability=0.9)
    assert info.value.field == "deadline_probability"
    with pytest.raises(InvalidInputError) as info:
        dnnprov.solve(resnet110_paper, replaced=False)
    assert info.value.field == "replaced"


@pytest.mark.parametrize("planner", [["--robust", "1"], ["--risk"]])
def test_cli_time_limit_gives_limit_and_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture, resnet110_paper, planner: list[str]
) -> None:
    """`risk solve --time-limit` and `solve --robust/--risk --time-limit`: status limit with a bound
    no higher than the proven optimum (the solve with the default limit)."""
    from dnnprov.cli import main

    problem = with_rates(resnet110_paper, np.random.default_rng(7))
    instance = tmp_path / "i.json"
    dnnprov.write_instance(problem, instance)
    assert main(["risk", "solve", str(instance), *planner, "--json"]) == 0
    optimum = json.loads(capsys.readouterr().out)
    assert optimum["status"] == "optimal"
    for command in (["risk", "solve"], ["solve"]):
        for method in ([], ["--method", "decompose"] if command == ["risk", "solve"] else []):
            code = main([*command, str(instance), *planner, *method, "--time-limit", "0.000001", "--json"])
            limited = json.loads(capsys.readouterr().out)
            assert limited["status"] == "limit" and code == 1 - (limited["plan"] is not None)
            assert limited["bound"] is not None and limited["bound"] <= optimum["cost"] + 1e-12
