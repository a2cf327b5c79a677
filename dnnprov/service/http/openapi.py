"""The OpenAPI 3.1 document of ``dnnprov serve``, built from the JSON Schemas the files use.

The instance and catalog schemas of ``dnnprov/data/schema`` go into
``components/schemas`` as they are (their ``$defs`` moved beside them, references
rewritten), so the service and the files can never disagree about an instance.

Why this module is long: the request and answer schemas are dict literals, which the formatter
writes one key a line; they are data read top to bottom, and splitting them by endpoint would
scatter the rules each handler shares (the code itself is a few hundred lines).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

from dnnprov import __version__
from dnnprov.cloud.export import TARGETS
from dnnprov.dispatch import METHODS
from dnnprov.problems.interruption import MAX_TRACE_TICKS
from dnnprov.problems.spot import MARKETS
from dnnprov.problems.validation.checks import MAX_INTEGER, MAX_MAGNITUDE, MIN_POSITIVE
from dnnprov.result import REASON_KINDS, Status
from dnnprov.service.kinds.replay import MAX_TRACE_NAME
from dnnprov.service.kinds.tasks import EXPORT_TEXT_OPTIONS, MAX_SWEEP_POINTS
from dnnprov.service.store import STATES

#: Schema files embedded as components: file stem -> component name.
SCHEMA_FILES = {"spot-v1": "SpotInstance", "serverless-v1": "ServerlessInstance", "catalog-v1": "Catalog"}


def _file_schemas() -> dict[str, Any]:
    """The schema files as components, each ``$defs`` entry hoisted to ``Name_def``."""
    components: dict[str, Any] = {}
    for stem, name in SCHEMA_FILES.items():
        schema = json.loads(resources.files("dnnprov.data").joinpath("schema", f"{stem}.schema.json").read_text())
        schema.pop("$schema", None)
        for key, value in schema.pop("$defs", {}).items():
            components[f"{name}_{key}"] = _rewrite(value, name)
        components[name] = _rewrite(schema, name)
    return components


def _rewrite(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        out = {k: _rewrite(v, name) for k, v in value.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = f"#/components/schemas/{name}_{ref.removeprefix('#/$defs/')}"
        return out
    if isinstance(value, list):
        return [_rewrite(v, name) for v in value]
    return value


def checked_rules(schema: Any) -> Any:
    """``schema`` with the rules every field check applies (:mod:`dnnprov.problems.validation.checks`) written in.

    ``check.number`` refuses magnitudes above ``MAX_MAGNITUDE`` and, for a positive quantity
    (``exclusiveMinimum: 0``), values below ``MIN_POSITIVE``; ``check.integer`` refuses
    magnitudes above ``MAX_INTEGER``. Written into every number and integer of the request
    schemas, so a body valid for the schema is never refused by those rules.
    """
    if isinstance(schema, list):
        return [checked_rules(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = (
        {k: checked_rules(v) for k, v in schema.items()}
        if "properties" not in schema
        else {
            **{k: checked_rules(v) for k, v in schema.items() if k != "properties"},
            "properties": {name: checked_rules(v) for name, v in schema["properties"].items()},
        }
    )
    types = out.get("type")
    types = {types} if isinstance(types, str) else set(types or ())
    if "number" in types:
        if out.get("exclusiveMinimum") == 0:
            del out["exclusiveMinimum"]
            out["minimum"] = MIN_POSITIVE
        _bound(out, -MAX_MAGNITUDE, MAX_MAGNITUDE)
    elif "integer" in types:
        _bound(out, -MAX_INTEGER, MAX_INTEGER)
    return out


def _bound(schema: dict[str, Any], low: float, high: float) -> None:
    """Add ``minimum``/``maximum`` where ``schema`` states none, tighten those outside ``low..high``."""
    if "exclusiveMinimum" not in schema:
        schema["minimum"] = max(schema.get("minimum", low), low)
    if "exclusiveMaximum" not in schema:
        schema["maximum"] = min(schema.get("maximum", high), high)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _embedded_names() -> list[str]:
    """``embedded:REL`` of every instance file shipped with dnnprov."""
    root = resources.files("dnnprov.data").joinpath("instances")
    names: list[str] = []
    for kind in ("spot", "serverless"):
        folder = root.joinpath(kind)
        if folder.is_dir():
            names += sorted(f"embedded:{kind}/{f.name}" for f in folder.iterdir() if f.name.endswith(".json"))
    return names


def _requests(max_time_limit_s: float) -> dict[str, Any]:
    """The request bodies, one schema per endpoint, with this server's cap on ``time_limit_s``."""
    fields = _request_fields(max_time_limit_s)
    return {
        **_solve_requests(fields),
        **_plan_requests(fields),
        **_replay_requests(fields["instance"], fields["time_limit"]),
    }


def _request_fields(max_time_limit_s: float) -> dict[str, Any]:
    """The fields several request bodies share: ``instance``, ``time_limit`` (capped at the server's
    ``--max-time-limit``), ``method``, ``counts`` and a prediction's ``plan_fields``."""
    instance = {
        "description": 'An instance object (the file\'s JSON), or "embedded:REL" for a file shipped with dnnprov.',
        "oneOf": [_ref("SpotInstance"), _ref("ServerlessInstance"), {"enum": _embedded_names()}],
    }
    time_limit = {
        "type": "number",
        "minimum": 1e-9,
        "maximum": max_time_limit_s,
        "description": "Seconds (at most the server's --max-time-limit).",
    }
    method = {"enum": list(METHODS), "default": "milp"}
    counts = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
    plan_fields = {  # a prediction's plan fields, in its body and in its `plan`
        "counts": {**counts, "minProperties": 1},
        "ps": {"type": "integer", "minimum": 1},
        "functions": {"type": "integer", "minimum": 1},
        "memory_mb": {"type": "integer", "minimum": 1},
        "local_batch": {"type": "number", "exclusiveMinimum": 0},
    }
    return {
        "instance": instance,
        "time_limit": time_limit,
        "method": method,
        "counts": counts,
        "plan_fields": plan_fields,
    }


def _solve_requests(fields: dict[str, Any]) -> dict[str, Any]:
    """The bodies of ``solve``, ``solve-many`` and ``replan``."""
    instance, time_limit, method, counts = fields["instance"], fields["time_limit"], fields["method"], fields["counts"]
    return {
        "SolveRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance"],
            "properties": {
                "instance": instance,
                "method": method,
                "time_limit_s": time_limit,
                "gap": {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": 0},
                "max_plans": {"type": ["integer", "null"], "minimum": 1, "description": "null: no limit"},
                "objective": {
                    "type": "string",
                    "pattern": "^(cost|time|weighted:.+)$",
                    "default": "cost",
                    "description": "as `dnnprov solve --objective`: cost, time (needs the instance's "
                    "constraints.budget_usd) or weighted:W (cost + W time, W in $/s)",
                },
            },
        },
        "SolveManyRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instances"],
            "properties": {
                "instances": {"type": "array", "minItems": 1, "items": instance},
                "shared": {
                    "type": ["object", "null"],
                    "description": "null: no shared limits",
                    "additionalProperties": False,
                    "properties": {
                        "quotas": counts,
                        "vcpu_quotas": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["family", "vcpus"],
                                "properties": {
                                    "family": {"type": "string", "minLength": 1},
                                    "market": {"enum": list(MARKETS), "default": "spot"},
                                    "vcpus": {"type": "integer", "minimum": 0},
                                },
                            },
                        },
                        "concurrency": {"type": ["integer", "null"], "minimum": 0, "description": "null: no limit"},
                    },
                },
                "time_limit_s": time_limit,
                "max_plans_per_job": {"type": ["integer", "null"], "minimum": 1, "description": "null: no limit"},
            },
        },
        "ReplanRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance", "plan", "revoked", "elapsed_s", "loss_reached"],
            "properties": {
                "instance": instance,
                "plan": _ref("PlanInput"),
                "revoked": {**counts, "minProperties": 1},
                "elapsed_s": {"type": "number", "minimum": 0},
                "loss_reached": {"type": "number"},
                "takeover_overhead_s": {"type": "number", "minimum": 0, "default": 30},
                "avoid_revoked": {"type": "boolean", "default": False},
                "capacity": {
                    "type": ["object", "null"],
                    "description": "free spot instances now per type and zone "
                    "(zones of the type's `zones`), as `dnnprov replan --capacity TYPE@ZONE=N`: caps the "
                    "takeover's spot quotas and adds `details.zones` (where to launch)",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": {"type": "integer", "minimum": 0},
                    },
                },
                "method": method,
                "time_limit_s": time_limit,
            },
        },
    }


def _plan_requests(fields: dict[str, Any]) -> dict[str, Any]:
    """The bodies of ``predict``, ``export`` and ``sweep``: one plan or a sweep of deadlines."""
    instance, time_limit, plan_fields = fields["instance"], fields["time_limit"], fields["plan_fields"]
    return {
        "PredictRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance"],
            "properties": {
                "instance": instance,
                "plan": {
                    "type": "object",
                    "description": "a plan (e.g. the `plan` of a solve result); the body's own plan fields override its",
                    "additionalProperties": False,
                    "properties": plan_fields,
                },
                **plan_fields,
            },
        },
        "ExportRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["plan", "target"],
            "properties": {
                "plan": _ref("PlanInput"),
                "target": {"enum": list(TARGETS)},
                "instance": {"anyOf": [instance, {"type": "null"}]},
                "catalog": {"anyOf": [_ref("Catalog"), {"type": "null"}]},
                "options": {
                    "type": "object",
                    "additionalProperties": False,
                    "description": "the options of "
                    "`dnnprov export` (`--image-id` is `image_id`, ...); each is read by the targets it applies to",
                    "properties": {
                        **{
                            k: {"type": "string", "minLength": 1}
                            for k in EXPORT_TEXT_OPTIONS
                            if k not in _SKYPILOT_OPTIONS
                        },
                        **_SKYPILOT_OPTIONS,
                    },
                },
            },
        },
        "SweepRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance", "deadlines"],
            "properties": {
                "instance": instance,
                "deadlines": {
                    "oneOf": [
                        {
                            "type": "array",
                            "items": {"type": "number", "exclusiveMinimum": 0},
                            "minItems": 1,
                            "maxItems": MAX_SWEEP_POINTS,
                        },
                        {"type": "string", "pattern": "^[0-9.]+:[0-9.]+:[0-9]+$", "examples": ["600:3600:24"]},
                    ]
                },
                "losses": {
                    "type": ["array", "null"],
                    "items": {"type": "number"},
                    "minItems": 1,
                    "description": "null: the instance's own target loss",
                },
                "heuristic": {"type": "boolean", "default": True},
                "time_limit_s": time_limit,
            },
        },
    }


def _traces() -> dict[str, Any]:
    """The ``traces`` of a replay body: one trace file's JSON per ``--trace TYPE=FILE``."""
    trace = {
        "type": "object",
        "description": "A trace file's JSON (docs/revocation.md): alive instances per tick.",
        "additionalProperties": False,
        "required": ["metadata", "data"],
        "properties": {
            "metadata": {
                "type": "object",
                "additionalProperties": False,
                "required": ["gap_seconds"],
                "properties": {"gap_seconds": {"type": "number", "exclusiveMinimum": 0}},
            },
            "data": {
                "type": "array",
                "minItems": 2,
                "maxItems": MAX_TRACE_TICKS,
                "items": {"type": "integer", "minimum": 0},
            },
            "prices": {
                "type": "array",
                "items": {"type": "number"},
                "description": "spot price per tick (checked, not used)",
            },
        },
    }
    return {
        "type": "array",
        "minItems": 1,
        "description": "one per `--trace TYPE=FILE`, in order",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["type", "trace"],
            "properties": {
                "type": {"type": "string", "minLength": 1, "description": "the spot instance type"},
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TRACE_NAME,
                    "description": "the trace's file name: its zone is read from it as from a file name "
                    "(`us-west-2a_v100_1.json`: zone `us-west-2a`); default `traces.I`",
                },
                "trace": trace,
            },
        },
    }


def _replay_requests(instance: dict[str, Any], time_limit: dict[str, Any]) -> dict[str, Any]:
    """The bodies of ``simulate`` and ``choose-plan`` (dnnprov/service/kinds/replay.py)."""
    from dnnprov.revocation.policies import POLICY_NAMES
    from dnnprov.revocation.replay.simulate import POLICIES, REPLAN_METHODS

    traces = _traces()
    period = {
        "type": "string",
        "pattern": "^[0-9.]+:[0-9.]+$",
        "examples": ["0.5:1"],
        "description": "A:B, fractions 0 <= A < B <= 1 of the traces' common ticks",
    }
    flag = {"type": "boolean", "default": False}
    join = {"type": "number", "minimum": 0, "default": 126, "description": "seconds before launched instances train"}
    return {
        "SimulateRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance", "plan", "traces"],
            "description": "`dnnprov simulate INSTANCE --plan PLAN --trace TYPE=FILE... --json`; "
            "time_limit_s is wall-clock seconds from the start, set-up included, as --time-limit",
            "properties": {
                "instance": instance,
                "plan": _ref("PlanInput"),
                "traces": traces,
                "zones": {**flag, "description": "the traces of one type are simultaneous pools, aligned in time"},
                "policy": {"enum": sorted(set(POLICIES) | set(POLICY_NAMES)), "default": "none"},
                "period": period,
                "fit_period": {**period, "description": "with policy mpc: fit its model on this A:B"},
                "model": {
                    "type": ["object", "null"],
                    "description": "with policy mpc: a dnnprov/availability model (`dnnprov risk fit --zones --json`)",
                },
                "hindsight": flag,
                "runs": {"type": "integer", "minimum": 1, "maximum": 10_000_000, "default": 1000},
                "seed": {"type": "integer", "minimum": 0, "default": 0},
                "replan_method": {"enum": list(REPLAN_METHODS), "default": "exact"},
                "join_s": join,
                "horizon": {"type": "number", "minimum": 1, "default": 3},
                "per_run": flag,
                "time_limit_s": time_limit,
            },
        },
        "RunRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance", "plan", "endpoint_url"],
            "description": "A `run` job (jobs only): `dnnprov run INSTANCE --plan PLAN --policy P "
            "--endpoint-url URL`, driven by the server (docs/service.md)",
            "properties": {
                "instance": instance,
                "plan": {"anyOf": [_ref("SpotPlan"), _ref("PlanInput")]},
                "endpoint_url": {
                    "type": "string",
                    "pattern": "^https?://",
                    "description": "the EC2 endpoint (a twin, moto)",
                },
                "policy": {"enum": list(POLICY_NAMES), "default": "failover"},
                "model": {
                    "type": "object",
                    "description": "with policy mpc (required then): its availability model "
                    "(`dnnprov risk fit --zones --out`)",
                },
                "region": {"type": "string", "description": "where the PS goes; default: the plan's main region"},
                "progress": {
                    "type": "string",
                    "default": "model",
                    "description": "`model` (the stand-in trainer) or the http(s) URL of the trainer's reports",
                },
                "image_id": {"type": "string"},
                "poll_s": {"type": "number", "exclusiveMinimum": 0, "default": 15},
                "join_s": join,
                "horizon": {"type": "number", "minimum": 1, "default": 1},
            },
        },
        "ChoosePlanRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance", "traces"],
            "description": "`dnnprov risk plan INSTANCE --trace TYPE=FILE... --json`; the task is "
            "stopped (504) at its budget, time_limit_s plus max(5 s, 25 %)",
            "properties": {
                "instance": instance,
                "traces": traces,
                "zones": {**flag, "description": "the traces of one type are simultaneous pools, aligned in time"},
                "fit_period": {**period, "default": "0:1"},
                "join_s": join,
                "time_limit_s": time_limit,
            },
        },
    }


#: The SkyPilot export's options beyond plain strings (``dnnprov export --to skypilot``).
_SKYPILOT_OPTIONS: dict[str, Any] = {
    "region": {
        "type": "string",
        "pattern": "^[a-z]{2}(-[a-z]+)+-[0-9]+$",
        "description": "AWS region of the tasks when the plan carries no catalog (`--region`)",
    },
    "skypilot_catalog": {
        "type": "string",
        "minLength": 1,
        "description": "the text of SkyPilot's AWS catalog (a `vms.csv`) to check the types against "
        "(`--skypilot-catalog`; the server reads no file the caller names). Default: "
        "the server's ~/.sky/catalogs/v8/aws/vms.csv",
    },
    "no_catalog_check": {
        "type": "boolean",
        "default": False,
        "description": "do not check the types against SkyPilot's catalog (`--no-catalog-check`)",
    },
    "managed_spot": {
        "type": "boolean",
        "default": False,
        "description": "spot workers as managed jobs, `sky jobs launch` (`--managed-spot`)",
    },
    "autostop": {
        "type": "integer",
        "minimum": 1,
        "maximum": 10080,
        "default": 10,
        "description": "idle minutes before a cluster is torn down (`--autostop`)",
    },
}
_NUMBER_OR_NULL = {"type": ["number", "null"]}
#: Kind of job -> (request schema, answer schema).
_JOB_REQUEST = {
    "solve": "SolveRequest",
    "solve-many": "SolveManyRequest",
    "replan": "ReplanRequest",
    "predict": "PredictRequest",
    "sweep": "SweepRequest",
    "simulate": "SimulateRequest",
    "choose-plan": "ChoosePlanRequest",
    "run": "RunRequest",
}
_JOB_ANSWER = {
    "solve": "Result",
    "solve-many": "SolveManyAnswer",
    "replan": "ReplanAnswer",
    "predict": "PredictAnswer",
    "sweep": "SweepAnswer",
    "simulate": "SimulateAnswer",
    "choose-plan": "Result",
    "run": "RunAnswer",
}


#: The plan of a result (``Result.plan.to_dict()``): the same shape in every answer that has one.
_PLANS: dict[str, Any] = {
    "SpotPlan": {
        "type": "object",
        "required": ["counts", "ps"],
        "additionalProperties": False,
        "properties": {
            "counts": {
                "type": "object",
                "description": "instance type (or `TYPE:on-demand`) -> workers; zeros left out",
                "additionalProperties": {"type": "integer", "minimum": 1},
                "minProperties": 1,
            },
            "ps": {"type": "integer", "minimum": 0},
        },
    },
    "ServerlessPlan": {
        "type": "object",
        "required": ["functions", "memory_mb", "local_batch", "ps"],
        "additionalProperties": False,
        "properties": {
            "functions": {"type": "integer", "minimum": 1},
            "memory_mb": {"type": "integer", "minimum": 1},
            "local_batch": {"type": "number"},
            "ps": {"type": "integer", "minimum": 0},
        },
    },
    "Plan": {"oneOf": [_ref("SpotPlan"), _ref("ServerlessPlan")]},
}
_ANSWERS: dict[str, Any] = {
    "Result": {
        "type": "object",
        "description": "What `dnnprov solve --json` prints (`Result.to_dict()`).",
        "required": [
            "status",
            "method",
            "kind",
            "model",
            "instance",
            "plan",
            "time_s",
            "cost",
            "bound",
            "gap",
            "solve_seconds",
            "message",
            "details",
            "stats",
        ],
        "properties": {
            "status": {"enum": [s.value for s in Status]},
            "method": {"type": "string"},
            "kind": {"enum": ["spot", "serverless"]},
            "model": {"type": "string"},
            "instance": {"type": "string"},
            "plan": {"oneOf": [_ref("Plan"), {"type": "null"}]},
            "time_s": _NUMBER_OR_NULL,
            "cost": _NUMBER_OR_NULL,
            "bound": _NUMBER_OR_NULL,
            "gap": _NUMBER_OR_NULL,
            "solve_seconds": {"type": "number"},
            "message": {"type": "string"},
            "details": {"type": "object"},
            "stats": {"type": "object"},
            "infeasibility": {
                "type": "array",
                "items": _ref("Reason"),
                "description": "Why an infeasible answer has no plan (empty otherwise).",
            },
            "warnings": {
                "type": "array",
                "description": "Plausibility warnings of the input (docs/instance-format.md).",
                "items": {
                    "type": "object",
                    "required": ["field", "message"],
                    "additionalProperties": False,
                    "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                },
            },
        },
    },
    "Reason": {
        "type": "object",
        "description": "One cause of infeasibility and the relaxation that admits a plan "
        "(`dnnprov.result.Reason`; docs/solvers.md).",
        "required": ["kind", "field", "current", "needed", "proven", "text", "plan"],
        "properties": {
            "kind": {"enum": list(REASON_KINDS)},
            "field": {"type": "string"},
            "current": {},
            "needed": {},
            "proven": {"type": "boolean"},
            "text": {"type": "string"},
            "plan": {"oneOf": [_ref("Plan"), {"type": "null"}]},
        },
    },
    "PlanDocument": {
        "type": "object",
        "description": "A dnnprov/plan v1 document.",
        "required": ["format", "version", "result"],
        "properties": {
            "format": {"const": "dnnprov/plan"},
            "version": {"const": 1},
            "result": _ref("Result"),
            "instance": {"type": "object"},
            "catalog": {"type": "object"},
        },
    },
    "PlanInput": {
        "description": "A plan to act on: a dnnprov/plan v1 document, or a bare Result.",
        "anyOf": [_ref("PlanDocument"), _ref("Result")],
    },
    "SolveManyAnswer": {
        "type": "object",
        "description": "What `dnnprov solve-many --json` prints.",
        "required": ["status", "cost", "bound", "gap", "shared", "jobs"],
        "properties": {
            "status": {"enum": [s.value for s in Status]},
            "cost": _NUMBER_OR_NULL,
            "bound": _NUMBER_OR_NULL,
            "gap": _NUMBER_OR_NULL,
            "solve_seconds": {"type": "number"},
            "message": {"type": "string"},
            "shared": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "limit": {"type": ["integer", "number", "null"]},
                        "used": {"type": ["integer", "number", "null"]},
                    },
                },
            },
            "stats": {"type": "object"},
            "jobs": {"type": "array", "items": _ref("Result")},
            "infeasibility": {
                "type": "array",
                "items": _ref("Reason"),
                "description": "Which shared limits cannot hold when jobs with plans of their own "
                "have no joint plan (empty otherwise).",
            },
        },
    },
    "PredictAnswer": {
        "type": "object",
        "required": ["kind", "plan", "time_s", "cost", "feasible"],
        "properties": {
            "kind": {"enum": ["spot", "serverless"]},
            "model": {"type": "string"},
            "instance": {"type": "string"},
            "plan": _ref("Plan"),
            "time_s": _NUMBER_OR_NULL,
            "cost": _NUMBER_OR_NULL,
            "feasible": {"type": "boolean"},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
    },
    "ReplanAnswer": {
        "description": "The takeover plan as a plan document, or the bare Result when no plan was found.",
        "anyOf": [_ref("PlanDocument"), _ref("Result")],
    },
    "ExportAnswer": {
        "type": "object",
        "required": ["target", "files"],
        "properties": {
            "target": {"enum": list(TARGETS)},
            "files": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "SweepAnswer": {
        "type": "object",
        "required": ["instance", "kind", "rows", "violations"],
        "properties": {
            "instance": {"type": "string"},
            "kind": {"enum": ["spot", "serverless"]},
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["deadline_s", "status", "cost", "plan_summary"],
                    "properties": {
                        "deadline_s": {"type": "number"},
                        "loss": _NUMBER_OR_NULL,
                        "status": {"enum": [s.value for s in Status]},
                        "cost": _NUMBER_OR_NULL,
                        "plan_summary": {"type": "string", "description": "the plan in words"},
                    },
                },
            },
            "violations": {"type": "array", "items": {"type": "string"}},
        },
    },
    "SimulateAnswer": {
        "type": "object",
        "description": "What `dnnprov simulate --json` prints.",
        "required": [
            "runs",
            "policy",
            "met_deadline",
            "finished",
            "cost_mean",
            "cost_p95",
            "loss_mean",
            "revocations_mean",
            "replans_mean",
            "on_demand_launched_mean",
            "settings",
        ],
        "properties": {
            "runs": {"type": "integer", "minimum": 1},
            "policy": {"type": "string"},
            "met_deadline": {"type": "number"},
            "finished": {"type": "number"},
            "cost_mean": _NUMBER_OR_NULL,
            "cost_p95": _NUMBER_OR_NULL,
            "finish_s_mean": _NUMBER_OR_NULL,
            "loss_mean": _NUMBER_OR_NULL,
            "revocations_mean": {"type": "number"},
            "replans_mean": {"type": "number"},
            "on_demand_launched_mean": {"type": "number"},
            "hindsight_cost_mean": {
                **_NUMBER_OR_NULL,
                "description": "with hindsight: the mean of each run's proven "
                "lower bound (null when some run cannot meet T_obj at all)",
            },
            "hindsight_unreachable_runs": {"type": "integer", "minimum": 0},
            "settings": {"type": "object"},
            "per_run": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["field", "message"],
                "additionalProperties": False,
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    },
    "JobAccepted": {
        "type": "object",
        "required": ["id", "status", "url"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            "status": {"enum": list(STATES)},
            "url": {"type": "string"},
        },
    },
    "Job": {
        "type": "object",
        "required": ["id", "kind", "status", "result", "error", "attempts", "created", "started", "finished"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"enum": list(_JOB_ANSWER)},
            "status": {"enum": list(STATES)},
            "result": {
                "description": "The answer of the job's endpoint once done (null before)",
                "anyOf": [{"type": "null"}, *(_ref(a) for a in dict.fromkeys(_JOB_ANSWER.values()))],
            },
            "error": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["field", "message"],
                        "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                    },
                ]
            },
            "attempts": {"type": "integer", "minimum": 0},
            "created": {"type": "number"},
            "started": _NUMBER_OR_NULL,
            "finished": _NUMBER_OR_NULL,
            "run": {
                "type": ["object", "null"],
                "description": "A `run` job's run as `dnnprov run status --json` prints it "
                "(state, held, progress, cost_so_far, counters, outcome, events); null before its run exists",
            },
        },
    },
    "RunAnswer": {
        "type": "object",
        "description": "How a `run` job's run ended (`dnnprov run --json`).",
        "required": [
            "run",
            "state",
            "met_deadline",
            "finish_s",
            "end_s",
            "cost",
            "loss",
            "revocations",
            "launches",
            "refusals",
            "on_demand_launched",
        ],
        "properties": {
            "run": {"type": "string"},
            "state": {"enum": ["met", "missed", "gave-up", "cancelled"]},
            "met_deadline": {"type": "boolean"},
            "finish_s": _NUMBER_OR_NULL,
            "end_s": {"type": "number"},
            "cost": {"type": "number"},
            "loss": _NUMBER_OR_NULL,
            "revocations": {"type": "integer"},
            "launches": {"type": "integer"},
            "refusals": {"type": "integer"},
            "on_demand_launched": {"type": "integer"},
        },
    },
    "JobList": {
        "type": "object",
        "required": ["jobs", "next_cursor"],
        "properties": {
            "jobs": {"type": "array", "items": _ref("Job")},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "pass as ?cursor= for the next page; null: last page",
            },
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string"},
            "reasons": {"type": "array", "items": {"type": "string"}},
            "workers": {"type": "integer"},
            "running": {"type": "integer"},
            "idle": {"type": "integer"},
            "queue_depth": {"type": "integer"},
            "peak_admitted": {"type": "integer"},
            "max_pending": {"type": "integer"},
        },
    },
}


def _job_requests(requests: dict[str, Any]) -> dict[str, Any]:
    """One schema per job kind: the endpoint's body with ``kind`` (optional for ``solve``)."""
    out: dict[str, Any] = {}
    for kind, name in _JOB_REQUEST.items():
        schema = copy.deepcopy(requests[name])
        schema["properties"]["kind"] = {"const": kind}
        if kind != "solve":
            schema["required"] = ["kind", *schema["required"]]
        out[f"{name.removesuffix('Request')}Job"] = schema
    out["JobRequest"] = {
        "description": "The body of one of the solving endpoints, with `kind` naming it (default `solve`).",
        "oneOf": [_ref(f"{n.removesuffix('Request')}Job") for n in _JOB_REQUEST.values()],
    }
    return out


_HEADER = {"schema": {"type": "string"}}
_RETRY = {"Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer"}}}
_IDS = {
    "X-Request-Id": {"description": "the caller's request id (1-64 of `A-Za-z0-9._:-`) or a new one", **_HEADER},
    "traceparent": {"description": "W3C trace context: the caller's trace id, a new span", **_HEADER},
}


def _error(text: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "description": text,
        "headers": {**_IDS, **(headers or {})},
        "content": {"application/json": {"schema": _ref("Error")}},
    }


def _errors(*codes: str, auth: bool) -> dict[str, Any]:
    texts = {
        "400": ("the body is not JSON, not UTF-8, or nested too deep", None),
        "401": ("missing or wrong bearer token", {"WWW-Authenticate": _HEADER}),
        "404": ("no such job (of this tenant)", None),
        "413": ("the body is too large", None),
        "415": ("the body is not sent as application/json", None),
        "422": (
            (
                "a field is invalid (named in the answer), including rules of the problem no JSON Schema states "
                "(an SLO the model cannot reach, a plan with a type the instance lacks)"
            ),
            None,
        ),
        "429": ("the server is full, or too many failed token checks: retry after Retry-After", _RETRY),
        "500": ("internal error (logged by the server)", None),
        "503": (
            "the server is shutting down, its job store is busy or its Dask scheduler is unreachable: retry later",
            _RETRY,
        ),
        "504": ("the task overran its time budget and was stopped", None),
    }
    return {code: _error(*texts[code]) for code in codes if code != "401" or auth}


def _ok(description: str, schema: str | None, code: str = "200", **extra: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "headers": dict(_IDS)}
    if schema is not None:
        answer["content"] = {"application/json": {"schema": _ref(schema)}}
    return {code: answer | extra}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


def _health_paths(auth: bool) -> dict[str, Any]:
    """``/healthz``, ``/livez``, ``/readyz`` (no token needed) and ``/metrics``."""
    health = {
        "security": [],
        "responses": {
            **_ok("the state", "Health"),
            "503": {
                "description": "not ready (reasons named)",
                "headers": dict(_IDS),
                "content": {"application/json": {"schema": _ref("Health")}},
            },
        },
    }
    return {
        "/healthz": {
            "get": {"summary": "liveness and counts (no token needed)", "operationId": "healthz", **health},
            "head": {
                "summary": "liveness (no body)",
                "operationId": "healthzHead",
                "security": [],
                "responses": {"200": {"description": "alive"}},
            },
        },
        "/livez": {
            "get": {"summary": "the event loop answers", "operationId": "livez", **health},
            "head": {
                "summary": "liveness (no body)",
                "operationId": "livezHead",
                "security": [],
                "responses": {"200": {"description": "alive"}},
            },
        },
        "/readyz": {
            "get": {
                "summary": "ready for work: not draining, not full, store writable, every worker slot alive",
                "operationId": "readyz",
                **health,
            },
            "head": {
                "summary": "readiness (no body)",
                "operationId": "readyzHead",
                "security": [],
                "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
            },
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (text format)",
                "operationId": "metrics",
                "responses": {
                    "200": {
                        "description": "OK",
                        "headers": dict(_IDS),
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors("401", "429", auth=auth),
                },
            }
        },
    }


def _kind_paths(auth: bool) -> dict[str, Any]:
    """``POST /v1/{kind}``: one synchronous operation per kind."""
    solving = ("400", "401", "413", "415", "422", "429", "500", "503")
    paths: dict[str, Any] = {}
    for kind, (summary, request, answer) in {
        "solve": ("solve one instance (as `dnnprov solve --json`)", "SolveRequest", "Result"),
        "solve-many": (
            "joint provisioning under shared limits (as `dnnprov solve-many --json`)",
            "SolveManyRequest",
            "SolveManyAnswer",
        ),
        "replan": ("takeover plan after revocations (as `dnnprov replan --json`)", "ReplanRequest", "ReplanAnswer"),
        "predict": ("predicted time and cost of one plan", "PredictRequest", "PredictAnswer"),
        "export": ("a plan in a deployable form (as `dnnprov export`)", "ExportRequest", "ExportAnswer"),
        "sweep": ("proven minimal cost per deadline (as `dnnprov sweep`)", "SweepRequest", "SweepAnswer"),
        "simulate": (
            "replay spot traces against a plan under a policy (as `dnnprov simulate --json`)",
            "SimulateRequest",
            "SimulateAnswer",
        ),
        "choose-plan": (
            ("the plan cheapest under mpc on a fitted availability model (as `dnnprov risk plan --json`)"),
            "ChoosePlanRequest",
            "Result",
        ),
    }.items():
        codes = solving + (("504",) if kind != "export" else ())
        paths[f"/v1/{kind}"] = {
            "post": {
                "summary": summary,
                "operationId": kind.replace("-", "_"),
                "requestBody": _body(request),
                "responses": {**_ok("the answer", answer), **_errors(*codes, auth=auth)},
            }
        }
    return paths


def _job_paths(auth: bool) -> dict[str, Any]:
    """``/v1/jobs``: queue, list, look up, cancel and delete stored jobs (links from creation to the others)."""
    job_id = {
        "name": "job_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    }
    links = {
        "GetJob": {"operationId": "getJob", "parameters": {"job_id": "$response.body#/id"}},
        "CancelJob": {"operationId": "cancelJob", "parameters": {"job_id": "$response.body#/id"}},
        "DeleteJob": {"operationId": "deleteJob", "parameters": {"job_id": "$response.body#/id"}},
    }
    accepted = {
        "Location": {"description": "the job's URL, relative", **_HEADER},
        "Idempotent-Replayed": {"description": "`true` when the Idempotency-Key named an existing job", **_HEADER},
    }
    paths: dict[str, Any] = {}
    paths["/v1/jobs"] = {
        "post": {
            "summary": "queue a request; answers at once",
            "operationId": "submitJob",
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "the same key and body give the same job; the same key and another body 422",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                }
            ],
            "requestBody": _body("JobRequest"),
            "responses": {
                "202": {
                    "description": "queued",
                    "headers": {**_IDS, **accepted},
                    "links": links,
                    "content": {"application/json": {"schema": _ref("JobAccepted")}},
                },
                **_errors("400", "401", "413", "415", "422", "429", "503", auth=auth),
            },
        },
        "get": {
            "summary": "this tenant's jobs, newest first, a page at a time",
            "operationId": "listJobs",
            "parameters": [
                {"name": "status", "in": "query", "schema": {"enum": list(STATES)}},
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                },
                {"name": "cursor", "in": "query", "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"}},
            ],
            "responses": {**_ok("a page", "JobList"), **_errors("401", "422", "429", "503", auth=auth)},
        },
    }
    paths["/v1/jobs/{job_id}"] = {
        "get": {
            "summary": "a job's state and result; ?wait=S answers when it ends or after S seconds",
            "operationId": "getJob",
            "parameters": [
                job_id,
                {
                    "name": "wait",
                    "in": "query",
                    "schema": {"type": "number", "minimum": 0, "maximum": 60, "default": 0},
                },
            ],
            "responses": {**_ok("the job", "Job"), **_errors("401", "404", "422", "429", "503", auth=auth)},
        },
        "delete": {
            "summary": "delete a job (a queued or running one is cancelled first)",
            "operationId": "deleteJob",
            "parameters": [job_id],
            "responses": {
                "204": {"description": "deleted", "headers": dict(_IDS)},
                **_errors("401", "404", "429", "503", auth=auth),
            },
        },
    }
    paths["/v1/jobs/{job_id}/cancel"] = {
        "post": {
            "summary": "cancel a queued or running job (its worker is stopped); the job stays, `cancelled`",
            "operationId": "cancelJob",
            "parameters": [job_id],
            "responses": {
                **_ok("the job, cancelled", "Job"),
                "409": _error("the job has already ended"),
                **_errors("401", "404", "429", "503", auth=auth),
            },
        }
    }
    return paths


def openapi_document(auth: bool, max_time_limit_s: float = 300.0) -> dict[str, Any]:
    """The OpenAPI 3.1 document (``bearer`` security when the server has tokens)."""
    requests = _requests(max_time_limit_s)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "dnnprov",
            "version": __version__,
            "description": "Proven-optimal cloud provisioning for distributed DNN training. "
            'Errors are {"error": {"field", "message"}}.',
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": {**_health_paths(auth), **_kind_paths(auth), **_job_paths(auth)},
        "components": {
            "schemas": {
                **checked_rules({**_file_schemas(), **requests, **_job_requests(requests), **_PLANS}),
                **_ANSWERS,
            }
        },
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
