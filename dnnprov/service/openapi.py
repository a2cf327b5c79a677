"""The OpenAPI 3.1 document of ``dnnprov serve``, built from the JSON Schemas the files use.

The instance and catalog schemas of ``dnnprov/data/schema`` go into
``components/schemas`` as they are (their ``$defs`` moved beside them, references
rewritten), so the service and the files can never disagree about an instance.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

from dnnprov import __version__
from dnnprov.cloud.export import TARGETS
from dnnprov.service.store import STATES
from dnnprov.solve import METHODS

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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_INSTANCE = {"description": "An instance object (the file's JSON), or \"embedded:REL\" for a file shipped with dnnprov.",
             "oneOf": [_ref("SpotInstance"), _ref("ServerlessInstance"),
                       {"type": "string", "pattern": "^embedded:", "examples": ["embedded:spot/paper-table1.json"]}]}
_TIME_LIMIT = {"type": "number", "exclusiveMinimum": 0, "description": "Seconds (capped by the server's --max-time-limit)."}
_METHOD = {"enum": list(METHODS), "default": "milp"}

_REQUESTS: dict[str, Any] = {
    "SolveRequest": {"type": "object", "additionalProperties": False, "required": ["instance"], "properties": {
        "instance": _INSTANCE, "method": _METHOD, "time_limit_s": {**_TIME_LIMIT, "default": 10},
        "gap": {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": 0},
        "max_plans": {"type": "integer", "minimum": 1}}},
    "SolveManyRequest": {"type": "object", "additionalProperties": False, "required": ["instances"], "properties": {
        "instances": {"type": "array", "minItems": 1, "items": _INSTANCE},
        "shared": {"type": "object", "additionalProperties": False, "properties": {
            "quotas": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
            "vcpu_quotas": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                                       "required": ["family", "vcpus"], "properties": {
                "family": {"type": "string"}, "market": {"enum": ["spot", "on-demand"], "default": "spot"},
                "vcpus": {"type": "integer", "minimum": 0}}}},
            "concurrency": {"type": "integer", "minimum": 0}}},
        "time_limit_s": {**_TIME_LIMIT, "default": 60}, "max_plans_per_job": {"type": "integer", "minimum": 1}}},
    "ReplanRequest": {"type": "object", "additionalProperties": False,
                      "required": ["instance", "plan", "revoked", "elapsed_s", "loss_reached"], "properties": {
        "instance": _INSTANCE, "plan": _ref("PlanDocument"),
        "revoked": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "elapsed_s": {"type": "number", "minimum": 0}, "loss_reached": {"type": "number"},
        "takeover_overhead_s": {"type": "number", "minimum": 0, "default": 30},
        "avoid_revoked": {"type": "boolean", "default": False}, "method": _METHOD,
        "time_limit_s": {**_TIME_LIMIT, "default": 10}}},
    "PredictRequest": {"type": "object", "additionalProperties": False, "required": ["instance"], "properties": {
        "instance": _INSTANCE,
        "plan": {"type": "object", "description": "A result's plan ({counts, ps} or {functions, memory_mb, ...})."},
        "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "ps": {"type": "integer", "minimum": 1}, "functions": {"type": "integer", "minimum": 1},
        "memory_mb": {"type": "integer", "minimum": 1}, "local_batch": {"type": "number", "exclusiveMinimum": 0}}},
    "ExportRequest": {"type": "object", "additionalProperties": False, "required": ["plan", "target"], "properties": {
        "plan": _ref("PlanDocument"), "target": {"enum": list(TARGETS)}, "instance": _INSTANCE,
        "catalog": _ref("Catalog"),
        "options": {"type": "object", "additionalProperties": {"type": "string"}, "description":
                    "image_id, launch_template, launch_template_version, subnet_id, key_name, function_name, "
                    "role, image_uri, s3_bucket, s3_key, runtime, handler, queue_name, namespace, kueue_api"}}},
    "SweepRequest": {"type": "object", "additionalProperties": False, "required": ["instance", "deadlines"], "properties": {
        "instance": _INSTANCE,
        "deadlines": {"oneOf": [{"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 1},
                                {"type": "string", "pattern": "^[0-9.]+:[0-9.]+:[0-9]+$", "examples": ["600:3600:24"]}]},
        "losses": {"type": "array", "items": {"type": "number"}, "minItems": 1},
        "heuristic": {"type": "boolean", "default": True}, "time_limit_s": {**_TIME_LIMIT, "default": 10}}},
}
_ANSWERS: dict[str, Any] = {
    "Result": {"type": "object", "description": "What `dnnprov solve --json` prints.", "required": ["status", "method", "kind"],
               "properties": {"status": {"enum": ["optimal", "feasible", "limit", "infeasible", "unknown", "error"]},
                              "method": {"type": "string"}, "kind": {"enum": ["spot", "serverless"]},
                              "plan": {"type": ["object", "null"]}, "cost": {"type": ["number", "null"]},
                              "bound": {"type": ["number", "null"]}, "time_s": {"type": ["number", "null"]}}},
    "PlanDocument": {"type": "object", "description": "A dnnprov/plan v1 document, or a bare Result."},
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["field", "message"],
        "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}}},
    "JobRequest": {"description": "A request body of one of the solving endpoints, with `kind` naming it "
                                  "(default `solve`).", "type": "object", "properties": {
        "kind": {"enum": ["solve", "solve-many", "replan", "predict", "sweep"], "default": "solve"}}},
    "JobAccepted": {"type": "object", "required": ["id", "status"], "properties": {
        "id": {"type": "string"}, "status": {"const": "queued"}, "url": {"type": "string"}}},
    "Job": {"type": "object", "required": ["id", "kind", "status"], "properties": {
        "id": {"type": "string"}, "kind": {"type": "string"}, "status": {"enum": list(STATES)},
        "result": {"description": "The endpoint's answer once done"}, "error": {"oneOf": [{"type": "null"}, {
            "type": "object", "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}]},
        "attempts": {"type": "integer"}, "created": {"type": "number"},
        "started": {"type": ["number", "null"]}, "finished": {"type": ["number", "null"]}}},
    "ExportAnswer": {"type": "object", "properties": {"target": {"type": "string"},
                                                      "files": {"type": "object", "additionalProperties": {"type": "string"}}}},
    "SweepAnswer": {"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "object"}}}},
}
_ERRORS = {code: {"description": text, "content": {"application/json": {"schema": _ref("Error")}}}
           for code, text in (("400", "the body is not JSON"), ("401", "missing or wrong bearer token"),
                              ("413", "body too large"), ("422", "a field is invalid (named in the answer)"),
                              ("429", "the server is full: retry later"), ("504", "the task overran its time budget"))}


def _op(summary: str, request: str | None, answer: str, code: str = "200", **extra: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {
        code: {"description": "OK" if code == "200" else "Accepted",
               "content": {"application/json": {"schema": _ref(answer) if answer else {"type": "object"}}}}, **_ERRORS}}
    if request:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(request)}}}
    op.update(extra)
    return op


def openapi_document(auth: bool) -> dict[str, Any]:
    """The OpenAPI 3.1 document (``bearer`` security when the server has a token)."""
    job_id = [{"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    paths = {
        "/healthz": {"get": {"summary": "liveness (no token needed)", "security": [],
                             "responses": {"200": {"description": "OK"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics (text format)", "responses": {"200": {
            "description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/v1/solve": {"post": _op("solve one instance (as `dnnprov solve --json`)", "SolveRequest", "Result")},
        "/v1/solve-many": {"post": _op("joint provisioning under shared limits (as `dnnprov solve-many --json`)",
                                       "SolveManyRequest", "")},
        "/v1/replan": {"post": _op("takeover plan after revocations (as `dnnprov replan --json`)", "ReplanRequest",
                                   "PlanDocument")},
        "/v1/predict": {"post": _op("predicted time and cost of one plan (dnnprov.models.predict.predict)", "PredictRequest", "")},
        "/v1/export": {"post": _op("a plan in a deployable form (as `dnnprov export`)", "ExportRequest", "ExportAnswer")},
        "/v1/sweep": {"post": _op("proven minimal cost per deadline (as `dnnprov sweep`)", "SweepRequest", "SweepAnswer")},
        "/v1/jobs": {"post": _op("queue a request; answers at once", "JobRequest", "JobAccepted", "202"),
                     "get": {"summary": "the newest jobs", "parameters": [
                         {"name": "status", "in": "query", "schema": {"enum": list(STATES)}},
                         {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}}],
                         "responses": {"200": {"description": "OK"}}}},
        "/v1/jobs/{job_id}": {
            "get": {"summary": "a job's state and result", "parameters": job_id, "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": _ref("Job")}}},
                "404": _ERRORS["422"] | {"description": "no such job"}}},
            "delete": {"summary": "cancel a queued or running job", "parameters": job_id, "responses": {
                "200": {"description": "cancelled", "content": {"application/json": {"schema": _ref("Job")}}},
                "404": {"description": "no such job"}, "409": {"description": "the job has already ended"}}}},
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "dnnprov", "version": __version__,
                 "description": "Proven-optimal cloud provisioning for distributed DNN training. "
                                "Errors are {\"error\": {\"field\", \"message\"}}."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {"schemas": {**_file_schemas(), **copy.deepcopy(_REQUESTS), **_ANSWERS}},
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
