"""Why infeasible: every needed value checked against brute force with the predictor, or a published number.

The oracles here never read the reasons' own bookkeeping: they build the relaxed problem
themselves (deadline raised, budget dropped, quotas raised, domain widened, constraint
removed), evaluate every plan of it with :func:`dnnprov.predict` or :class:`dnnprov.SpotModel`
/ :class:`dnnprov.ServerlessModel`, and take the least value over the feasible ones.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pyomo.environ as pyo
import pytest
from dnnprov.formulations.serverless import create_serverless_model
from dnnprov.formulations.spot import create_spot_model
from dnnprov.solvers.explain import serverless as why_serverless
from dnnprov.solvers.explain.infeasibility import explain
from dnnprov.solvers.explain.search import GroupSearch
from numpy.testing import assert_allclose

import dnnprov
from dnnprov import ServerlessModel, SpotModel, Status
from dnnprov.model_solve import solve_model
from dnnprov.models.spot import within_budget
from dnnprov.progress import Clock

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
NO_DEADLINE_S = 1e9

#: docs/instance-format.md's smallest file, with the deadline of its infeasible variant
DOCS_EXAMPLE = {
    "format": "dnnprov/spot",
    "version": 1,
    "instance_types": {
        "p3.2xlarge": {
            "gpus": 1,
            "spot_price_per_h": 1.25,
            "quota": 4,
            "batch_per_gpu": 1024,
            "speed_samples_per_s": 1885,
        }
    },
    "workload": {
        "name": "resnet110",
        "param_size_mb": 11.54,
        "bandwidth_req_mb_s": 142,
        "alpha_1": 0.8,
        "beta_1": -1.92,
        "gamma_1": 876.5,
        "gamma_2": -0.2,
        "gamma_3": 2507.6,
        "gamma_4": 1.0,
        "gamma_5": 0.5,
    },
    "slo": {"loss": 0.8, "time_s": 2600},
}


# ---------------------------------------------------------------- oracles
def reason(result: dnnprov.Result, kind: str) -> dnnprov.result.Reason:
    """The result's one reason of ``kind``."""
    found = [r for r in result.infeasibility if r.kind == kind]
    assert len(found) == 1, [r.text for r in result.infeasibility]
    return found[0]


def no_deadline(problem: dnnprov.SpotProblem) -> dnnprov.SpotProblem:
    return problem.replace(slo=dataclasses.replace(problem.slo, time_s=NO_DEADLINE_S))


def with_quotas(problem: dnnprov.SpotProblem, quota: int) -> dnnprov.SpotProblem:
    return problem.replace(
        instance_types=tuple(dataclasses.replace(t, quota=max(t.quota, quota)) for t in problem.instance_types)
    )


def spot_brute_force(
    problem: dnnprov.SpotProblem, what: str, side=None, max_workers: int | None = None
) -> tuple[float, np.ndarray]:
    """Least ``what`` ("time_s", "cost", "workers") over every feasible plan of the quota box, and its counts."""
    cols = problem.columns()
    boxes = [range(int(lo), int(hi) + 1) for lo, hi in zip(cols.lower, cols.upper)]
    counts = np.array(
        [c for c in itertools.product(*boxes) if max_workers is None or sum(c) <= max_workers], dtype=np.int64
    ).reshape(-1, len(cols))
    model = SpotModel(problem, side)
    best, plan = math.inf, None
    for ps in range(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1):
        ev = model.evaluate(counts, ps)
        values = np.where(ev.feasible, getattr(ev, what).astype(float), np.inf)
        i = int(np.argmin(values))
        if values[i] < best:
            best, plan = float(values[i]), counts[i]
    return best, plan


def serverless_brute_force(problem: dnnprov.ServerlessProblem, what: str, side=None) -> float:
    """Least ``what`` over every feasible plan of the (n, m, s) grid."""
    low, high = problem.function_range()
    n, m, s = (
        a.ravel()
        for a in np.meshgrid(
            np.arange(low, high + 1),
            problem.memory_grid(),
            np.arange(problem.constraints.ps_count[0], problem.constraints.ps_count[1] + 1),
        )
    )
    ev = ServerlessModel(problem, side).evaluate(n, m, s)
    return float(np.min(np.where(ev.feasible, getattr(ev, what), np.inf)))


# ---------------------------------------------------------------- the docs' example
def test_docs_example_needs_2729_s_and_a_fifth_worker():
    """docs/instance-format.md: four p3.2xlarge, the quota, need 2,729 s; the predictor agrees plan by plan."""
    problem = dnnprov.problem_from_dict(DOCS_EXAMPLE)
    for method in ("milp", "enumerate"):
        result = dnnprov.solve(problem, method)
        assert result.status is Status.INFEASIBLE
        deadline = reason(result, "deadline")
        relaxed = no_deadline(problem)
        times = {n: dnnprov.predict(relaxed, counts={"p3.2xlarge": n})["time_s"] for n in range(1, 5)}
        assert deadline.proven and deadline.current == 2600
        assert_allclose(deadline.needed, min(times.values()), rtol=1e-12)
        assert round(deadline.needed) == 2729 and deadline.plan == {"counts": {"p3.2xlarge": 4}, "ps": 1}
        quota = reason(result, "quota")
        raised = with_quotas(problem, 12)
        feasible = [n for n in range(1, 13) if dnnprov.predict(raised, counts={"p3.2xlarge": n})["feasible"]]
        assert quota.proven and quota.needed == {"p3.2xlarge": min(feasible)} == {"p3.2xlarge": 5}
        assert quota.current == {"p3.2xlarge": 4}


def test_docs_example_is_explained_in_text_and_json(tmp_path, capsys):
    """`dnnprov solve` prints the needed deadline and quota; `--json` carries them with stable keys."""
    from dnnprov.cli import main

    path = tmp_path / "short.json"
    path.write_text(json.dumps(DOCS_EXAMPLE))
    main(["solve", str(path)])
    out = capsys.readouterr().out
    assert "infeasible: no plan meets every constraint, because:" in out
    assert "4 x p3.2xlarge; 1 PS, needs 2,729.04 s" in out
    assert "needs 5 x p3.2xlarge but its quota is 4" in out
    main(["solve", str(path), "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in answer["infeasibility"]] == ["deadline", "quota"]
    for r in answer["infeasibility"]:
        assert set(r) == {"kind", "field", "current", "needed", "proven", "text", "plan"}
    assert_allclose(answer["infeasibility"][0]["needed"], 2729.044473, rtol=1e-9)


def test_feasible_answers_carry_no_reasons():
    problem = dnnprov.problem_from_dict({**DOCS_EXAMPLE, "slo": {"loss": 0.8, "time_s": 3000}})
    result = dnnprov.solve(problem)
    assert result.status is Status.OPTIMAL and result.infeasibility == ()
    assert result.to_dict()["infeasibility"] == []


# ---------------------------------------------------------------- each cause on Table I
def test_budget_needed_is_the_published_optimum(resnet110_table1):
    """Table I under a $5 budget: the budget needed is the exhaustive optimum $5.448374 (spec section 6)."""
    problem = resnet110_table1.replace(constraints=dataclasses.replace(resnet110_table1.constraints, budget_usd=5.0))
    result = dnnprov.solve(problem)
    assert result.status is Status.INFEASIBLE
    budget = reason(result, "budget")
    assert budget.proven and budget.current == 5.0
    assert_allclose(budget.needed, 5.448374, rtol=0, atol=1e-12)
    assert budget.plan["counts"] == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}


def test_deadline_needed_matches_brute_force(resnet110_table1):
    problem = resnet110_table1.replace(slo=dataclasses.replace(resnet110_table1.slo, time_s=2000.0))
    result = dnnprov.solve(problem)
    least, _ = spot_brute_force(no_deadline(problem), "time_s")
    deadline = reason(result, "deadline")
    assert deadline.proven and deadline.needed == least
    assert dnnprov.predict(
        problem.replace(slo=dataclasses.replace(problem.slo, time_s=least)), counts=deadline.plan["counts"]
    )["feasible"]


def test_every_quota_zero(resnet110_table1):
    """All quotas 0: said outright, and the least raise is brute-forced over quotas up to 3."""
    problem = resnet110_table1.replace(
        instance_types=tuple(dataclasses.replace(t, quota=0) for t in resnet110_table1.instance_types)
    )
    result = dnnprov.solve(problem)
    assert result.status is Status.INFEASIBLE
    assert any(r.kind == "quota" and "every quota is 0" in r.text and r.proven for r in result.infeasibility)
    raise_reason = next(r for r in result.infeasibility if r.kind == "quota" and r.plan is not None)
    fewest, _ = spot_brute_force(with_quotas(problem, 3), "workers")
    assert fewest <= 3  # so no plan outside that box needs fewer
    assert raise_reason.proven and sum(raise_reason.needed.values()) == fewest


def test_domain_miss_needs_the_least_extrapolation(resnet110_table1):
    """A domain of b_w 1024-1100 misses every plan meeting the SLO: the factor is the least that admits one."""
    w = resnet110_table1.workload
    tight = resnet110_table1.replace(
        workload=dataclasses.replace(w, domain=dnnprov.SpotDomain(batch_wa=(1024.0, 1100.0), workers=(2, 10)))
    )
    result = dnnprov.solve(tight)
    domain = reason(result, "domain")
    assert domain.proven and domain.current == 1.0 and domain.needed > 1

    def with_factor(f: float) -> dnnprov.SpotProblem:
        return tight.replace(
            workload=dataclasses.replace(
                tight.workload, domain=dataclasses.replace(tight.workload.domain, extrapolation=f)
            )
        )

    assert math.isfinite(spot_brute_force(with_factor(domain.needed), "cost")[0])
    assert spot_brute_force(with_factor(domain.needed * (1 - 1e-6)), "cost")[0] == math.inf
    assert "b_w" in domain.text and "1024-1100" in domain.text


def test_user_pyomo_constraint_is_named(resnet110_table1):
    """solve_model: a constraint that rules out every plan is named; without it the optimum is Table I's."""
    m = create_spot_model(resnet110_table1)
    m.few = pyo.Constraint(expr=m.workers <= 2)
    for method in ("milp", "enumerate"):
        result = solve_model(m, method)
        assert result.status is Status.INFEASIBLE
        cause = reason(result, "constraint")
        assert cause.field == "few" and cause.proven and "'few'" in cause.text
        assert cause.plan["counts"] == {"g4dn.4xlarge": 3, "g3.8xlarge": 5, "g3.16xlarge": 2}  # $5.448374


def test_repro_inception_deadline_matches_brute_force():
    """../shared/repro's Inception-v3 instance (161,051 plans) with a 3,000 s deadline."""
    path = SHARED / "repro" / "turn3" / "spot-inception.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared repro folder ships beside the repository)")
    problem = dnnprov.read_instance(str(path))
    short = problem.replace(slo=dataclasses.replace(problem.slo, time_s=3000.0))
    result = dnnprov.solve(short)
    assert result.status is Status.INFEASIBLE
    least, _ = spot_brute_force(no_deadline(short), "time_s")
    deadline = reason(result, "deadline")
    assert deadline.proven and deadline.needed == least


def test_unreachable_loss_target():
    """gamma_3 = 150: eq. (3)'s numerator -0.2 b_w + 150 is negative at every batch of 1024: no deadline helps."""
    data = {**DOCS_EXAMPLE, "workload": {**DOCS_EXAMPLE["workload"], "gamma_3": 150}}
    problem = dnnprov.problem_from_dict(data)
    result = dnnprov.solve(problem)
    cause = reason(result, "loss")
    assert cause.proven and "750" in cause.text and len(result.infeasibility) == 1
    relaxed = with_quotas(no_deadline(problem), 64)
    assert not any(dnnprov.predict(relaxed, counts={"p3.2xlarge": n})["feasible"] for n in range(1, 65))


# ---------------------------------------------------------------- large spaces: exact solves
def test_large_space_deadline_by_one_search():
    """7 types x quota 10 (19M plans, beyond outright evaluation): the least deadline from one search
    by time equals brute force over every plan the domain admits (|N| <= 9)."""
    problem = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table3-overhead-7x10.json"))
    short = problem.replace(slo=dataclasses.replace(problem.slo, time_s=800.0))
    result = dnnprov.solve(short)
    assert result.status is Status.INFEASIBLE
    deadline = reason(result, "deadline")
    least, _ = spot_brute_force(no_deadline(short), "time_s", max_workers=problem.workload.domain.workers[1])
    assert deadline.proven and "one search by time" in deadline.text
    assert_allclose(deadline.needed, least, rtol=1e-6)
    assert deadline.needed >= least


def test_large_serverless_grid_deadline_by_bisection(resnet50):
    """30,000 functions x 37 memory sizes (1.1M plans, beyond outright evaluation): bisection equals brute force."""
    wide = resnet50.replace(
        platform=dataclasses.replace(resnet50.platform, concurrency_limit=30000, memory_step_mb=16), time_s=30.0
    )
    deadline = reason(dnnprov.solve(wide), "deadline")
    assert deadline.proven and "exact solves" in deadline.text
    assert_allclose(deadline.needed, serverless_brute_force(wide.replace(time_s=NO_DEADLINE_S), "time_s"), rtol=1e-6)


# ---------------------------------------------------------------- serverless
def test_serverless_deadline_and_budget(resnet50):
    short = resnet50.replace(time_s=30.0)
    result = dnnprov.solve(short)
    deadline = reason(result, "deadline")
    assert deadline.proven and deadline.needed == serverless_brute_force(short.replace(time_s=NO_DEADLINE_S), "time_s")
    poor = resnet50.replace(constraints=dataclasses.replace(resnet50.constraints, budget_usd=0.01))
    budget = reason(dnnprov.solve(poor, "enumerate"), "budget")
    assert budget.proven and budget.needed == serverless_brute_force(resnet50, "cost")


def test_serverless_user_constraint(resnet50):
    m = create_serverless_model(resnet50)
    m.small = pyo.Constraint(expr=m.memory_mb <= 1024)
    result = solve_model(m)
    cause = reason(result, "constraint")
    assert cause.field == "small" and cause.proven
    assert_allclose(
        dnnprov.predict(resnet50, functions=cause.plan["functions"], memory_mb=cause.plan["memory_mb"])["cost"],
        serverless_brute_force(resnet50, "cost"),
        rtol=1e-12,
    )


# ---------------------------------------------------------------- random instances
def test_random_infeasible_instances(make_random_spot):
    """Proven deadline and budget values equal brute force on random instances made infeasible."""
    checked = {"deadline": 0, "budget": 0}
    for seed in range(40):
        problem = make_random_spot(np.random.default_rng(9000 + seed), budget=seed % 2 == 1)
        cons = problem.constraints
        if seed % 2 and cons.budget_usd is not None:  # odd seeds: a budget cut, even ones: a deadline cut
            problem = problem.replace(constraints=dataclasses.replace(cons, budget_usd=cons.budget_usd * 0.5))
        else:
            problem = problem.replace(slo=dataclasses.replace(problem.slo, time_s=problem.slo.time_s * 0.6))
        result = dnnprov.solve(problem)
        if result.status is not Status.INFEASIBLE:
            continue
        assert result.infeasibility, seed
        json.dumps(result.to_dict())
        for r in result.infeasibility:
            if r.kind == "deadline" and r.proven:
                assert r.needed == spot_brute_force(no_deadline(problem), "time_s")[0], seed
                checked["deadline"] += 1
            if r.kind == "budget" and r.proven:
                free = problem.replace(constraints=dataclasses.replace(problem.constraints, budget_usd=None))
                assert r.needed == spot_brute_force(free, "cost")[0], seed
                checked["budget"] += 1
    assert checked["deadline"] >= 10 and checked["budget"] >= 1, checked


# ---------------------------------------------------------------- limits and revocations
def test_an_expired_clock_proves_nothing(resnet110_table1):
    """With no time left, the reasons say the limit stopped them and claim no proof."""
    problem = resnet110_table1.replace(slo=dataclasses.replace(resnet110_table1.slo, time_s=2000.0))
    result = dnnprov.solve(problem)
    late = explain(dataclasses.replace(result, infeasibility=()), problem, clock=Clock(0.0))
    assert late.infeasibility and not any(r.proven for r in late.infeasibility)
    assert all("time limit" in r.text for r in late.infeasibility)


def test_robust_infeasible_says_it_is_infeasible_without_revocations():
    problem = dnnprov.problem_from_dict(DOCS_EXAMPLE)
    result = dnnprov.solve(problem, robust=1)
    assert result.status is Status.INFEASIBLE
    assert result.infeasibility[0].kind == "revocation" and "even without revocations" in result.infeasibility[0].text
    assert_allclose(reason(result, "deadline").needed, 2729.044473, rtol=1e-9)


def test_solve_many_explains_the_job_that_is_infeasible_alone():
    from dnnprov.solvers.joint.provision import solve_many

    short = dnnprov.problem_from_dict({**DOCS_EXAMPLE, "name": "short"})
    fine = dnnprov.problem_from_dict({**DOCS_EXAMPLE, "name": "fine", "slo": {"loss": 0.8, "time_s": 3000}})
    answer = solve_many([fine, short], time_limit_s=30)
    assert answer.status is Status.INFEASIBLE
    job = answer.results[1]
    assert job.status is Status.INFEASIBLE
    assert_allclose(reason(job, "deadline").needed, 2729.044473, rtol=1e-9)
    assert answer.to_dict()["jobs"][1]["infeasibility"][0]["kind"] == "deadline"
    assert "4 x p3.2xlarge; 1 PS, needs 2,729.04 s" in answer.summary()


def test_the_service_schema_describes_the_reasons():
    """An infeasible answer validates against the service's OpenAPI `Result` schema, reasons and all."""
    import jsonschema

    from dnnprov.service.http.openapi import openapi_document

    document = openapi_document(auth=False)
    answer = dnnprov.solve(dnnprov.problem_from_dict(DOCS_EXAMPLE)).to_dict()
    schema = {**document["components"]["schemas"]["Result"], "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(answer)
    answer["infeasibility"][0]["proven"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(answer)


def test_robust_infeasible_names_the_revocation_requirement():
    """Feasible without revocations (docs/instance-format.md: 4 x p3.2xlarge, $3.790340), not under one unreplaced."""
    problem = dnnprov.problem_from_dict({**DOCS_EXAMPLE, "slo": {"loss": 0.8, "time_s": 2750}})
    result = dnnprov.solve(problem, robust=1, replaced=False)
    assert result.status is Status.INFEASIBLE
    cause = reason(result, "revocation")
    assert cause.proven and cause.field == "robust=1" and "$3.790340" in cause.text
    assert cause.plan == {"counts": {"p3.2xlarge": 4}, "ps": 1}


def test_vcpu_quota_and_worker_range():
    """At 3,000 s the docs example needs 4 workers: a 24-vCPU quota (3 x 8) and workers <= 3 each rule it out."""
    base = {**DOCS_EXAMPLE, "slo": {"loss": 0.8, "time_s": 3000}}
    base["instance_types"] = {"p3.2xlarge": {**DOCS_EXAMPLE["instance_types"]["p3.2xlarge"], "vcpus": 8}}
    fewest = min(
        n for n in range(1, 5) if dnnprov.predict(dnnprov.problem_from_dict(base), counts={"p3.2xlarge": n})["feasible"]
    )
    assert fewest == 4
    vcpu = dnnprov.problem_from_dict(
        {**base, "constraints": {"vcpu_quotas": [{"family": "P", "market": "spot", "vcpus": 24}]}}
    )
    cause = reason(dnnprov.solve(vcpu), "vcpu_quota")
    assert cause.proven and cause.current == {"P/spot": 24} and cause.needed == {"P/spot": 8 * fewest}
    workers = dnnprov.problem_from_dict({**base, "constraints": {"workers": [1, 3]}})
    cause = reason(dnnprov.solve(workers, "enumerate"), "workers")
    assert cause.proven and cause.current == [1, 3] and cause.needed == [1, fewest]


def test_enforced_loss_axis_is_named_not_an_extrapolation():
    """A target below the logged losses with loss_axis "enforce": the reason is the loss axis
    (no factor helps); with the axis only flagging, brute force finds a plan."""
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    w = table1.workload
    logs = dataclasses.replace(w.domain, loss=(0.9, 4.6), loss_axis="enforce")
    enforced = table1.replace(workload=dataclasses.replace(w, domain=logs))
    for method in ("milp", "enumerate"):
        result = dnnprov.solve(enforced, method)
        assert result.status is Status.INFEASIBLE
        (only,) = result.infeasibility
        assert only.kind == "domain" and only.field == "slo.loss" and only.needed == 0.9 and only.proven
    flagged = enforced.replace(workload=dataclasses.replace(w, domain=dataclasses.replace(logs, loss_axis="flag")))
    assert math.isfinite(spot_brute_force(flagged, "cost")[0])


def test_an_iteration_floor_no_factor_lifts_is_not_blamed_on_the_ranges():
    """min_iterations above what any plan needs: every plan is refused whatever the extrapolation
    factor, so no reason may claim a factor that admits a plan (brute force checks each claim)."""
    table1 = dnnprov.read_instance(dnnprov.embedded_instance("spot/paper-table1.json"))
    w = table1.workload
    floor = table1.replace(
        workload=dataclasses.replace(w, domain=dataclasses.replace(w.domain, min_iterations=10_000_000))
    )
    result = dnnprov.solve(floor)
    assert result.status is Status.INFEASIBLE and result.infeasibility
    for r in result.infeasibility:
        if r.kind == "domain" and isinstance(r.needed, (int, float)) and math.isfinite(r.needed):
            wider = floor.replace(
                workload=dataclasses.replace(
                    floor.workload, domain=dataclasses.replace(floor.workload.domain, extrapolation=r.needed)
                )
            )
            assert math.isfinite(spot_brute_force(wider, "cost")[0]), r.text
    (named,) = [r for r in result.infeasibility if r.field == "workload.domain.min_iterations"]
    no_floor = floor.replace(
        workload=dataclasses.replace(
            floor.workload, domain=dataclasses.replace(floor.workload.domain, min_iterations=0)
        )
    )
    assert named.proven and f"${spot_brute_force(no_floor, 'cost')[0]:.6f}" in named.text


@pytest.mark.parametrize("covered", [True, False])
def test_serverless_budget_reason_is_proven_only_when_every_plan_was_evaluated(resnet50, covered: bool) -> None:
    """The enumerated budget reason says proven only when the enumeration covered every plan
    (it once read the pair of coverage flags, always truthy)."""

    problem = resnet50.replace(constraints=dataclasses.replace(resnet50.constraints, budget_usd=1e-6))
    relaxed = ServerlessModel(why_serverless.relax(why_serverless.relax(problem, "deadline"), "budget"))
    low, high = problem.function_range()
    n = np.arange(low, high + 1)
    ps = np.full(len(n), problem.constraints.ps_count[0])
    search = GroupSearch(["deadline", "budget"])
    for m in problem.memory_grid():
        ev = relaxed.evaluate(n, m, ps)
        ok = {"deadline": ev.time_s <= problem.time_s, "budget": within_budget(ev.cost, 1e-6)}
        measure = {"deadline": ev.time_s, "budget": ev.cost}
        search.add(ev.feasible, ok, measure, ev.cost, lambda i, m=m: (int(n[i]), int(m), int(ps[i])))
    how = "all plans evaluated" if covered else "the time limit stopped the evaluation"
    reasons = why_serverless.compose(problem, None, search, high, how, how, proven=(covered, covered))
    budget = next(r for r in reasons if r.kind == "budget")
    assert budget.needed is not None and budget.needed > 1e-6
    assert budget.proven is covered
