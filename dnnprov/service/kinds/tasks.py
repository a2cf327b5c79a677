"""The work behind each endpoint: read a request body, then run it (in a worker process).

:func:`prepare` checks a body and returns a :class:`CheckedRequest`: the server calls it to answer
bad bodies at once (one :class:`InvalidInputError` naming the field) and to learn the time
limit; a worker process calls it again and runs ``task.run()``. Every field name matches
the CLI option it mirrors (``time_limit_s`` for ``--time-limit``, ...).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from dnnprov.dispatch import METHODS
from dnnprov.errors import InvalidInputError
from dnnprov.io.instances import Problem
from dnnprov.problems.spot import MARKETS, SpotProblem, VcpuQuota
from dnnprov.problems.validation import checks as check
from dnnprov.result import Objective, SpotPlan
from dnnprov.service.kinds.requests import CheckedRequest, body_fields, body_time_limit, instance, kill_after

#: The kinds of work, one per endpoint that solves.
KINDS = ("solve", "solve-many", "replan", "predict", "export", "sweep", "simulate", "choose-plan")
#: Kinds of stored jobs only (no endpoint of their own): a ``run`` lasts as long as its training.
JOB_ONLY_KINDS = ("run",)
#: Most points a sweep request may ask for.
MAX_SWEEP_POINTS = 200


#: CLI options the library names in its errors -> the body field they stand for (others: ``--a-b`` is ``a_b``).
OPTION_FIELDS = {
    "--time-limit": "time_limit_s",
    "--trace": "traces",
    "--fit-period": "fit_period",
    "--autostop": "options.autostop",
    "--region": "options.region",
    "--skypilot-catalog": "options.skypilot_catalog",
    "--no-catalog-check": "options.no_catalog_check",
    "--managed-spot": "options.managed_spot",
    "--image-id": "options.image_id",
    "--launch-template": "options.launch_template",
    "--subnet-id": "options.subnet_id",
    "--key-name": "options.key_name",
    "--run-id": "options.run_id",
}


def body_field(field: str) -> str:
    """The body path an error field stands for: every answer names body paths, never CLI options."""
    if not field.startswith("--"):
        return field
    option = field.split(" ", 1)[0]
    return OPTION_FIELDS.get(option, option[2:].replace("-", "_"))


def _method(body: Mapping[str, Any]) -> str:
    return check.choice("method", body.get("method", "milp"), METHODS)


def prepare(kind: str, body: object, *, max_time_limit_s: float = 300.0) -> CheckedRequest:
    """Check ``body`` for endpoint ``kind`` and return the :class:`CheckedRequest` that answers it."""
    kind = check.choice("kind", kind, KINDS + JOB_ONLY_KINDS)
    return _PREPARE[kind](body, max_time_limit_s)


def _solve(body: object, cap: float) -> CheckedRequest:
    from dnnprov.dispatch import solve

    b = body_fields(body, {"instance", "method", "time_limit_s", "gap", "max_plans", "objective"}, ("instance",))
    problem = instance(b["instance"])
    method, limit = _method(b), body_time_limit(b, "solve", cap)
    gap = check.number("gap", b.get("gap", 0.0), minimum=0)
    if gap >= 1:  # as solve() says, so that a job is refused at once like /v1/solve
        raise InvalidInputError("gap", f"must be below 1, got {gap!r}")
    max_plans = check.optional_integer("max_plans", b.get("max_plans"), minimum=1)
    objective = _objective(b, problem, method, gap)
    return CheckedRequest(
        "solve",
        lambda: solve(problem, method, time_limit_s=limit, gap=gap, max_plans=max_plans, objective=objective).to_dict(),
        limit,
        kill_after(limit),
        method,
    )


def _objective(body: Mapping[str, Any], problem: Problem, method: str, gap: float) -> Objective:
    """``objective`` (``cost``, ``time``, ``weighted:W``: ``dnnprov solve --objective``), checked
    as :func:`dnnprov.solve` checks it, so that a request it refuses is refused at once."""
    from dnnprov.dispatch import checked_objective

    objective = body.get("objective", "cost")
    try:
        parsed = checked_objective(objective, problem, method, gap=gap, robust=None, risk=False)
    except InvalidInputError as exc:  # the budget is a field of the instance in a body
        field = f"instance.{exc.field}" if exc.field.startswith("constraints.") else exc.field
        raise InvalidInputError(field, exc.problem) from None
    return parsed


def _shared(value: object):
    from dnnprov.solvers.joint.provision import SharedLimits

    s = body_fields({} if value is None else value, {"quotas", "vcpu_quotas", "concurrency"})
    quotas = s.get("quotas", {})
    if not isinstance(quotas, Mapping):
        raise InvalidInputError("shared.quotas", "must map instance types to counts")
    quotas = {str(k): check.integer(f"shared.quotas.{k}", v, minimum=0) for k, v in quotas.items()}
    rows = s.get("vcpu_quotas", [])
    if not isinstance(rows, list):
        raise InvalidInputError("shared.vcpu_quotas", "must be a list of {family, market, vcpus}")
    vcpus = []
    for i, row in enumerate(rows):
        r = body_fields(row, {"family", "market", "vcpus"}, ("family", "vcpus"))
        vcpus.append(
            VcpuQuota(
                family=check.text(f"shared.vcpu_quotas.{i}.family", r["family"]),
                market=check.choice(f"shared.vcpu_quotas.{i}.market", r.get("market", "spot"), MARKETS),
                vcpus=check.integer(f"shared.vcpu_quotas.{i}.vcpus", r["vcpus"], minimum=0),
            )
        )
    concurrency = check.optional_integer("shared.concurrency", s.get("concurrency"), minimum=0)
    return SharedLimits(quotas=quotas, vcpu_quotas=tuple(vcpus), concurrency=concurrency)


def _solve_many(body: object, cap: float) -> CheckedRequest:
    from dnnprov.solvers.joint.columns import check_shared_names
    from dnnprov.solvers.joint.provision import DEFAULT_MAX_PLANS_PER_JOB, solve_many

    b = body_fields(body, {"instances", "shared", "time_limit_s", "max_plans_per_job"}, ("instances",))
    if not isinstance(b["instances"], list) or not b["instances"]:
        raise InvalidInputError("instances", "must be a non-empty list of instances")
    problems = [instance(v, f"instances.{i}") for i, v in enumerate(b["instances"])]
    shared, limit = _shared(b.get("shared")), body_time_limit(b, "solve-many", cap)
    check_shared_names(problems, shared)  # as solve_many() does, so that a bad job is refused at once
    max_plans = DEFAULT_MAX_PLANS_PER_JOB
    if b.get("max_plans_per_job") is not None:
        max_plans = check.integer("max_plans_per_job", b["max_plans_per_job"], minimum=1)
    return CheckedRequest(
        "solve-many",
        lambda: solve_many(problems, shared=shared, time_limit_s=limit, max_plans_per_job=max_plans).to_dict(),
        limit,
        kill_after(limit),
        "joint",
    )


def _counts(value: object, where: str) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidInputError(where, 'must map instance types to counts, e.g. {"g3.8xlarge": 5}')
    return {str(k): check.integer(f"{where}.{k}", v, minimum=0) for k, v in value.items()}


def _zone_counts(value: object) -> dict[str, dict[str, int]]:
    """``capacity``: free spot instances per type and zone now, ``{type: {zone: count}}``."""
    if not isinstance(value, Mapping) or not all(isinstance(z, Mapping) for z in value.values()):
        raise InvalidInputError(
            "capacity", 'must map instance types to {zone: free count}, e.g. {"g3.8xlarge": {"us-east-1a": 2}}'
        )
    return {
        str(k): {str(z): check.integer(f"capacity.{k}@{z}", n, minimum=0) for z, n in zones.items()}
        for k, zones in value.items()
    }


def _replan(body: object, cap: float) -> CheckedRequest:
    from dataclasses import replace

    from dnnprov.cloud.export import plan_document
    from dnnprov.revocation.replan import (
        DEFAULT_TAKEOVER_OVERHEAD_S,
        replanned_problem,
        solve_takeover,
        takeover_document,
        zone_capacity,
        zone_placement,
    )

    b = body_fields(
        body,
        {
            "instance",
            "plan",
            "revoked",
            "elapsed_s",
            "loss_reached",
            "takeover_overhead_s",
            "avoid_revoked",
            "capacity",
            "method",
            "time_limit_s",
        },
        ("instance", "plan", "revoked", "elapsed_s", "loss_reached"),
    )
    problem = instance(b["instance"])
    if not isinstance(problem, SpotProblem):
        raise InvalidInputError("instance", "re-planning needs a spot instance")
    doc = plan_document_of(b["plan"], spot=True)
    avoid = b.get("avoid_revoked", False)
    if not isinstance(avoid, bool):
        raise InvalidInputError("avoid_revoked", "must be true or false")
    revoked = _counts(b["revoked"], "revoked")
    free = _zone_counts(b["capacity"]) if b.get("capacity") is not None else {}
    survivors = {k: n - revoked.get(k, 0) for k, n in doc.counts().items()}
    takeover = replanned_problem(
        problem,
        doc.counts(),
        revoked,
        check.number("elapsed_s", b["elapsed_s"], minimum=0),
        check.number("loss_reached", b["loss_reached"]),
        takeover_overhead_s=check.number(
            "takeover_overhead_s", b.get("takeover_overhead_s", DEFAULT_TAKEOVER_OVERHEAD_S), minimum=0
        ),
        avoid_revoked=avoid,
        ps=doc.ps,
        capacity=zone_capacity(problem, free, survivors) if free else None,
    )
    method, limit = _method(b), body_time_limit(b, "replan", cap)

    def run() -> dict[str, Any]:  # as `dnnprov replan --json`
        result = solve_takeover(takeover, method, time_limit_s=limit)
        if result.plan is None:
            return takeover_document(result, takeover, doc.catalog)
        # where to launch the new spot instances, as `dnnprov replan --capacity` says (a takeover's plan is a spot plan)
        if free and isinstance(result.plan, SpotPlan):
            new = {k: n - survivors.get(k, 0) for k, n in result.plan.counts.items() if n > survivors.get(k, 0)}
            result = replace(result, details={**result.details, "zones": zone_placement(problem, new, free)})
        return plan_document(result, takeover, doc.catalog).to_dict()

    return CheckedRequest("replan", run, limit, kill_after(limit), method)


def plan_document_of(value: object, *, spot: bool = False) -> Any:
    """The body's ``plan`` as a :class:`~dnnprov.cloud.export.PlanDocument` (a plan document or a solve
    answer; ``spot``: a spot plan), its errors named as body fields (``plan.version``, ...)."""
    from dnnprov.cloud.export import PlanDocument

    try:
        doc = PlanDocument.from_dict(value)
        if spot:
            doc.require_spot()
    except InvalidInputError as exc:
        raise InvalidInputError(f"plan.{exc.field}" if exc.field else "plan", exc.problem) from None
    return doc


def _check_plan_fields(fields: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The plan fields of a prediction, checked and converted (``5.0`` is the integer 5, as in every
    other field); ``where``: ``plan.`` for those inside its ``plan``."""
    checked: dict[str, Any] = dict(fields)
    for key in ("ps", "functions", "memory_mb"):
        if key in fields:
            checked[key] = check.integer(f"{where}{key}", fields[key], minimum=1)
    if "local_batch" in fields:
        checked["local_batch"] = check.number(f"{where}local_batch", fields["local_batch"], exclusive_minimum=0)
    if "counts" in fields:  # null or {} too: the schema's counts is a non-empty object
        checked["counts"] = _counts(fields["counts"], f"{where}counts")
    return checked


def _predict(body: object, cap: float) -> CheckedRequest:
    from dnnprov.models.predict import check_plan, predict

    plan_keys = ("counts", "ps", "functions", "memory_mb", "local_batch")
    b = body_fields(body, {"instance", "plan", *plan_keys})
    if "instance" not in b:
        raise InvalidInputError("instance", "missing required field")
    problem = instance(b["instance"])
    plan = b.get("plan", {})
    if not isinstance(plan, Mapping):
        raise InvalidInputError("plan", 'must be a plan object, e.g. the "plan" of a solve result')
    for key in plan:
        if key not in plan_keys:
            raise InvalidInputError(f"plan.{key}", f"unknown field (expected one of {', '.join(sorted(plan_keys))})")
    in_plan = _check_plan_fields({k: v for k, v in plan.items() if k in plan_keys}, "plan.")  # also those overridden
    given = in_plan | _check_plan_fields({k: b[k] for k in plan_keys if k in b}, "")
    try:  # what predict() refuses is refused now, so that a bad job is refused at once
        check_plan(problem, **given)
    except InvalidInputError as exc:  # named where the body gave it: the plan's fields are plan.*
        top = exc.field.split(".", 1)[0]
        raise InvalidInputError(
            f"plan.{exc.field}" if top in in_plan and top not in b else exc.field, exc.problem
        ) from None
    return CheckedRequest("predict", lambda: predict(problem, **given), 0.0, 60.0, "predict")


#: ``options`` of an export request that are strings, and the SkyPilot ones of other types (as the CLI's options).
EXPORT_TEXT_OPTIONS = (
    "image_id",
    "launch_template",
    "launch_template_version",
    "subnet_id",
    "key_name",
    "run_id",
    "function_name",
    "role",
    "image_uri",
    "s3_bucket",
    "s3_key",
    "runtime",
    "handler",
    "queue_name",
    "namespace",
    "kueue_api",
    "region",
    "skypilot_catalog",
)
EXPORT_FLAG_OPTIONS = ("no_catalog_check", "managed_spot")


def _export(body: object, cap: float) -> CheckedRequest:
    from dnnprov.cloud.export import (
        KUEUE_API,
        TARGETS,
        ExportOptions,
        FunctionCode,
        LaunchOptions,
        PlanDocument,
        export_files,
    )
    from dnnprov.io.catalogs.catalog import Catalog

    b = body_fields(body, {"plan", "target", "instance", "catalog", "options"}, ("plan", "target"))
    target = check.choice("target", b["target"], TARGETS)
    doc = plan_document_of(b["plan"])
    if b.get("instance") is not None or b.get("catalog") is not None:
        catalog = doc.catalog
        if b.get("catalog") is not None:
            if not isinstance(b["catalog"], Mapping):
                raise InvalidInputError("catalog", "must be a catalog object")
            catalog = Catalog.from_dict(b["catalog"])
        problem = instance(b["instance"]) if b.get("instance") is not None else doc.problem
        doc = PlanDocument(result=doc.result, problem=problem, catalog=catalog)
    launch_keys = {"image_id", "launch_template", "launch_template_version", "subnet_id", "key_name", "run_id"}
    code_keys = {"role", "image_uri", "s3_bucket", "s3_key", "runtime", "handler"}
    o = body_fields(b.get("options", {}), {*EXPORT_TEXT_OPTIONS, *EXPORT_FLAG_OPTIONS, "autostop"})
    for key, value in o.items():
        if key in EXPORT_FLAG_OPTIONS:
            if not isinstance(value, bool):
                raise InvalidInputError(f"options.{key}", f"must be true or false, got {check.short(value)}")
        elif key != "autostop":
            check.text(f"options.{key}", value)
    try:
        launch = LaunchOptions(**{k: o[k] for k in launch_keys if k in o})
    except InvalidInputError as exc:
        raise InvalidInputError(f"options.{exc.field}", exc.problem) from None
    code = FunctionCode(**{"role": "", **{k: o[k] for k in code_keys if k in o}}) if code_keys & set(o) else None
    options = ExportOptions(
        launch=launch,
        function_name=o.get("function_name"),
        code=code,
        queue_name=o.get("queue_name"),
        namespace=o.get("namespace", "default"),
        kueue_api=o.get("kueue_api", KUEUE_API),
        skypilot=_skypilot_options(o),
    )
    files = export_files(doc, target, options)  # cheap: checked (and answered) here already
    return CheckedRequest("export", lambda: {"target": target, "files": files}, 0.0, 30.0, "export")


def _skypilot_options(o: Mapping[str, Any]):
    """The SkyPilot options of an export request, as ``dnnprov export --to skypilot`` takes them.

    ``skypilot_catalog`` is the text of a ``vms.csv`` (the server reads no files the caller names);
    without it the server's own SkyPilot catalog is used, as the CLI does.
    """
    from dnnprov.cloud.export import SkyPilotCatalog, SkyPilotOptions

    try:
        catalog = (
            SkyPilotCatalog.parse(o["skypilot_catalog"], "options.skypilot_catalog")
            if "skypilot_catalog" in o
            else None
        )
        return SkyPilotOptions(
            catalog=catalog,
            check_catalog=not o.get("no_catalog_check", False),
            region=o.get("region"),
            managed_spot=o.get("managed_spot", False),
            autostop_minutes=o.get("autostop", 10),
        )
    except InvalidInputError as exc:
        raise InvalidInputError(f"options.{exc.field}", exc.problem) from None


def _sweep(body: object, cap: float) -> CheckedRequest:
    from dnnprov.batch.sweep import deadline_grid, sweep

    b = body_fields(body, {"instance", "deadlines", "losses", "time_limit_s", "heuristic"}, ("instance", "deadlines"))
    problem = instance(b["instance"])
    deadlines = deadline_grid(b["deadlines"], field="deadlines")
    losses = None
    if b.get("losses") is not None:
        if not isinstance(b["losses"], list) or not b["losses"]:
            raise InvalidInputError("losses", "must be a non-empty list of target losses")
        losses = [check.number(f"losses.{i}", v) for i, v in enumerate(b["losses"])]
    points = len(deadlines) * (len(losses) if losses else 1)
    if points > MAX_SWEEP_POINTS:
        raise InvalidInputError("deadlines", f"{points} points; at most {MAX_SWEEP_POINTS} per request")
    heuristic = b.get("heuristic", True)
    if not isinstance(heuristic, bool):
        raise InvalidInputError("heuristic", "must be true or false")
    limit = body_time_limit(b, "sweep", cap)
    return CheckedRequest(
        "sweep",
        lambda: _sweep_answer(sweep(problem, deadlines, losses, time_limit_s=limit, heuristic=heuristic).to_dict()),
        limit,
        points * kill_after(limit),
        "milp",
    )


def _sweep_answer(table: dict[str, Any]) -> dict[str, Any]:
    """The sweep table with its text plans under ``plan_summary``/``heuristic_plan_summary``:
    in every answer of the service ``plan`` is a plan object, never text."""
    renames = {"plan": "plan_summary", "heuristic_plan": "heuristic_plan_summary"}
    rows = [{renames.get(k, k): v for k, v in row.items()} for row in table["rows"]]
    return {**table, "rows": rows}


def _simulate(body: object, cap: float) -> CheckedRequest:
    from dnnprov.service.kinds.replay import simulate_task

    return simulate_task(body, cap)


def _choose_plan(body: object, cap: float) -> CheckedRequest:
    from dnnprov.service.kinds.replay import choose_plan_task

    return choose_plan_task(body, cap)


def _run(body: object, cap: float) -> CheckedRequest:
    from dnnprov.service.kinds.run_jobs import run_task

    return run_task(body, cap)


_PREPARE: dict[str, Callable[[object, float], CheckedRequest]] = {
    "solve": _solve,
    "solve-many": _solve_many,
    "replan": _replan,
    "predict": _predict,
    "export": _export,
    "sweep": _sweep,
    "simulate": _simulate,
    "choose-plan": _choose_plan,
    "run": _run,
}


def run(kind: str, body: object, max_time_limit_s: float) -> dict[str, Any]:
    """Prepare and run one request (what a worker process does); finite floats only in the answer."""
    return _finite(prepare(kind, body, max_time_limit_s=max_time_limit_s).run())


def outcome(kind: str, body: object, max_time_limit_s: float) -> tuple:
    """:func:`run` as a worker answers it: ``("ok", answer, seconds)``, ``("invalid", field,
    message)`` or ``("error", message)`` (one line, never a traceback)."""
    started = time.perf_counter()
    try:
        return ("ok", run(kind, body, max_time_limit_s), time.perf_counter() - started)
    except InvalidInputError as exc:
        return ("invalid", body_field(exc.field), exc.problem)
    except Exception as exc:  # noqa: BLE001 - any failure is the job's answer, one line (docstring)
        return ("error", f"{type(exc).__name__}: {exc}")


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: they become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
