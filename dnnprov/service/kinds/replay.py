"""The service's replay kinds: ``simulate`` (as ``dnnprov simulate --json``) and
``choose-plan`` (as ``dnnprov risk plan --json``).

Traces come inline, never as paths on the server's disk: ``"traces"`` is a list of
``{"type", "name", "trace"}``, one per ``--trace TYPE=FILE`` of the CLI, in the same order;
``trace`` is the trace file's JSON and ``name`` stands for its file name (the zone is read
from it as from a file name: ``us-west-2a_v100_1.json`` is zone ``us-west-2a``). Both kinds
call :mod:`dnnprov.revocation` as the CLI does; errors of the library, which name CLI
options (``--trace T``, ``--period``), are given back naming the body's fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dnnprov.errors import InvalidInputError
from dnnprov.problems.interruption import Trace, trace_from_dict
from dnnprov.problems.spot import SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.service.kinds.requests import CheckedRequest, body_fields, body_time_limit, instance, kill_after

#: Longest ``name`` of an inline trace.
MAX_TRACE_NAME = 200
#: CLI options the revocation code names in its errors -> the body field they stand for.
_OPTION_FIELDS = {
    "--trace": "traces",
    "--period": "period",
    "--fit-period": "fit_period",
    "--model": "model",
    "--policy": "policy",
    "--hindsight": "hindsight",
    "--time-limit": "time_limit_s",
    "--replan-method": "replan_method",
    "--join": "join_s",
    "--horizon": "horizon",
}
#: Fields of the problem the revocation code names without the ``instance.`` of the body.
_PROBLEM_FIELDS = ("model", "constraints", "instance_types", "slo", "workload", "platform")


def _spot(value: object) -> SpotProblem:
    problem = instance(value)
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("instance", "revocation-aware kinds need a spot instance")
    return problem


def inline_traces(value: object) -> tuple[dict[str, list[Trace]], list[str]]:
    """``traces`` as the CLI's ``--trace`` options give them (type -> traces, in order), and
    each trace's name by its position (for error fields)."""
    if not isinstance(value, list) or not value:
        raise InvalidInputError("traces", 'must be a non-empty list of {"type", "name", "trace"}')
    traces: dict[str, list[Trace]] = {}
    names = []
    for i, item in enumerate(value):
        where = f"traces.{i}"
        entry = body_fields(item, {"type", "name", "trace"}, ("type", "trace"))
        kind = check.text(f"{where}.type", entry["type"])
        name = check.text(f"{where}.name", entry.get("name", where))
        if len(name) > MAX_TRACE_NAME or "\x00" in name:
            raise InvalidInputError(f"{where}.name", f"at most {MAX_TRACE_NAME} characters, no NUL")
        traces.setdefault(kind, []).append(trace_from_dict(entry["trace"], name, field=f"{where}.trace."))
        names.append(name)
    return traces, names


def _body_field(field: str, names: Sequence[str]) -> tuple[str, str]:
    """The body field an error of the revocation code stands for, and a prefix for its message."""
    option, _, rest = field.partition(" ")
    if option in _OPTION_FIELDS:
        return _OPTION_FIELDS[option], f"type {rest}: " if rest else ""
    for i, name in enumerate(names):
        if field.startswith(f"{name}: "):
            return f"traces.{i}.trace.{field.removeprefix(f'{name}: ')}", ""
    if field.split(".", 1)[0] in _PROBLEM_FIELDS:
        return f"instance.{field}", ""
    return field, ""


def _fields_named(names: Sequence[str], work: Callable[[], Any]) -> Any:
    """``work()``, its errors naming the body's fields instead of CLI options."""
    try:
        return work()
    except InvalidInputError as exc:
        field, prefix = _body_field(exc.field, names)
        raise InvalidInputError(field, prefix + exc.problem) from None


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise InvalidInputError(key, "must be true or false")
    return value


def _period(body: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    from dnnprov.revocation.availability import parse_period

    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(key, f'expected "A:B" with fractions 0 <= A < B <= 1, got {check.short(value)}')
    return parse_period(value, key)


def simulate_task(body: object, cap: float) -> CheckedRequest:
    """``dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE... [options] --json`` as a task."""
    from dnnprov.cloud.export import PlanDocument
    from dnnprov.control.replay import Simulation
    from dnnprov.models.training_progress import JOIN_OVERHEAD_S
    from dnnprov.result import SpotPlan
    from dnnprov.revocation.availability import AvailabilityModel
    from dnnprov.revocation.policies import POLICY_NAMES
    from dnnprov.revocation.replay.simulate import POLICIES, REPLAN_METHODS

    b = body_fields(
        body,
        {
            "instance",
            "plan",
            "traces",
            "zones",
            "policy",
            "period",
            "fit_period",
            "model",
            "hindsight",
            "runs",
            "seed",
            "replan_method",
            "join_s",
            "horizon",
            "per_run",
            "time_limit_s",
        },
        ("instance", "plan", "traces"),
    )
    problem = _spot(b["instance"])
    try:
        doc = PlanDocument.from_dict(b["plan"])
        doc = PlanDocument(result=doc.result, problem=problem, catalog=doc.catalog)  # checked against the instance
    except InvalidInputError as exc:
        raise InvalidInputError(f"plan.{exc.field}" if exc.field else "plan", exc.problem) from None
    plan = SpotPlan(counts=doc.counts(), ps=doc.ps)
    traces, names = inline_traces(b["traces"])
    policy = check.choice("policy", b.get("policy", "none"), tuple(sorted(set(POLICIES) | set(POLICY_NAMES))))
    _flag(b, "zones")  # checked only: Simulation has no zones option
    hindsight, per_run = _flag(b, "hindsight"), _flag(b, "per_run")
    period, fit_period = _period(b, "period"), _period(b, "fit_period")
    runs = check.integer("runs", b.get("runs", 1000), minimum=1, maximum=10_000_000)
    seed = check.integer("seed", b.get("seed", 0), minimum=0)
    replan_method = check.choice("replan_method", b.get("replan_method", "exact"), REPLAN_METHODS)
    join_s = check.number("join_s", b.get("join_s", JOIN_OVERHEAD_S), minimum=0)
    horizon = check.number("horizon", b.get("horizon", 3.0), minimum=1)
    limit = body_time_limit(b, "simulate", cap)
    model = AvailabilityModel.from_dict(b["model"]) if b.get("model") is not None else None
    sim = _fields_named(
        names,
        lambda: Simulation(  # what the replay would refuse, before the job is queued
            problem,
            plan,
            traces,
            policy=policy,
            runs=runs,
            seed=seed,
            join_s=join_s,
            horizon=horizon,
            period=period,
            fit_period=fit_period,
            model=model,
            hindsight=hindsight,
            replan_method=replan_method,
            time_limit_s=limit,
        ),
    )
    return CheckedRequest(
        "simulate", lambda: _fields_named(names, lambda: sim.to_dict(per_run=per_run)), limit, kill_after(limit), policy
    )


def choose_plan_task(body: object, cap: float) -> CheckedRequest:
    """``dnnprov risk plan INSTANCE --trace TYPE=FILE... [--zones] [--fit-period A:B] --json`` as a task.

    ``time_limit_s`` is :func:`dnnprov.revocation.plan_choice.choose_plan`'s (wall-clock
    seconds, as ``--time-limit``): no candidate is priced after it and the answer says how
    many were left; the task's budget (``time_limit_s`` plus max(5 s, 25 %)) is the backstop (504).
    """
    from dnnprov.control.plan_choice import choose_plan
    from dnnprov.models.training_progress import JOIN_OVERHEAD_S
    from dnnprov.revocation.replay.pool_replay import TracePools

    b = body_fields(
        body, {"instance", "traces", "zones", "fit_period", "join_s", "time_limit_s"}, ("instance", "traces")
    )
    problem = _spot(b["instance"])
    traces, names = inline_traces(b["traces"])
    zones = _flag(b, "zones")
    fit_period = _period(b, "fit_period") or (0.0, 1.0)
    join_s = check.number("join_s", b.get("join_s", JOIN_OVERHEAD_S), minimum=0)
    limit = body_time_limit(b, "choose-plan", cap)
    _fields_named(names, lambda: TracePools(problem, traces, join_s=join_s, period=fit_period))
    return CheckedRequest(
        "choose-plan",
        lambda: _fields_named(
            names,
            lambda: choose_plan(
                problem, traces, zones=zones, fit_period=fit_period, join_s=join_s, time_limit_s=limit
            ).to_dict(),
        ),
        limit,
        kill_after(limit),
        "mpc",
    )
