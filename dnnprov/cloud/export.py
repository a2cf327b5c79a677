"""Deployable forms of a plan: EC2 launch calls, Lambda settings, SkyPilot, Kueue, JSON.

A *plan document* (``dnnprov/plan`` v1) is a solve result (:meth:`Result.to_dict`, what
``dnnprov solve --json`` prints) optionally wrapped with the instance it solved and the
catalog its prices came from::

    {"format": "dnnprov/plan", "version": 1, "result": {...}, "instance": {...}, "catalog": {...}}

A bare result is accepted too. Workers already running (a takeover plan's kept
instances, ``constraints.existing``) are not launched again, nor are the running PS (only
the new ones a takeover asks for, ``details.new_ps``).
:func:`export_files` gives every target as ``{file name: text}`` (SkyPilot: one task file
per cluster); YAML is written by PyYAML's safe dumper only, so names stay data.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dnnprov.models.spot import SpotModel
from dnnprov.problems import _checks as check
from dnnprov.io.catalog import Catalog
from dnnprov.errors import InvalidInputError
from dnnprov.json_files import read_json_file
from dnnprov.io.instances import problem_from_dict
from dnnprov.result import Result
from dnnprov.problems.serverless import ServerlessPlatform, ServerlessProblem
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotPlatform, SpotProblem

TARGETS = ("ec2-fleet", "ec2-run-instances", "lambda", "skypilot", "kueue", "json")
PLAN_FORMAT = "dnnprov/plan"
CALLS_FORMAT = "dnnprov/aws-calls"
KUEUE_APIS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
KUEUE_API = KUEUE_APIS[0]  # served from Kueue 0.15, the storage version from 0.16; v1beta1 on request
FEASIBLE = ("optimal", "feasible", "limit")


def split_label(label: str) -> tuple[str, str]:
    """Column label -> ``(type name, market)``: ``"g3.8xlarge:on-demand"`` -> on-demand."""
    if label.endswith(ON_DEMAND_SUFFIX):
        return label.removesuffix(ON_DEMAND_SUFFIX), "on-demand"
    return label, "spot"


def check_spot_plan(problem: SpotProblem, counts: Mapping[str, int], ps: int, where: str = "plan") -> None:
    """Refuse a spot plan that ``problem`` does not allow, naming the constraint it breaks.

    The plan's columns must be the instance's, each count within its column's range (the
    kept instances up to the quota), the worker total and PS count within the instance's
    ranges, and every vCPU-family quota met: the checks of :meth:`SpotModel.admissible`,
    one error each, so that no replay or export is computed from a plan the cloud refuses.
    """
    cols = problem.columns()
    index = {label: i for i, label in enumerate(cols.labels)}
    vector = np.zeros(len(cols.labels), dtype=np.int64)
    for label, n in counts.items():
        if label not in index:
            raise InvalidInputError(f"{where}.counts.{label}", f"not a column of the instance (columns: "
                                    f"{check.listing(cols.labels)})")
        vector[index[label]] = n
    for i, label in enumerate(cols.labels):
        if vector[i] > cols.upper[i]:
            raise InvalidInputError(f"{where}.counts.{label}", f"{vector[i]} instances exceed the quota {int(cols.upper[i])}")
        if vector[i] < cols.lower[i]:
            raise InvalidInputError(f"{where}.counts.{label}", f"{vector[i]} instances are fewer than the "
                                    f"{int(cols.lower[i])} running ones the instance keeps (constraints.existing)")
    low, high = problem.constraints.ps_count
    if not low <= ps <= high:
        raise InvalidInputError(f"{where}.ps", f"{ps} PS lie outside the instance's range {low}-{high} (constraints.ps_count)")
    model = SpotModel(problem)
    if not bool(model.admissible(vector[None, :], np.array([ps]))[0]):
        workers = int(vector.sum())
        raise InvalidInputError(f"{where}.counts", f"the plan ({workers} workers) breaks the instance's worker range, "
                                "validity domain, vCPU quotas or side constraints (dnnprov show INSTANCE lists them)")


def check_serverless_plan(problem: ServerlessProblem, plan: Mapping[str, Any], where: str = "plan") -> None:
    """Refuse a serverless plan outside ``problem``'s function range, memory grid or PS range."""
    low, high = problem.function_range()
    if not low <= plan["functions"] <= high:
        raise InvalidInputError(f"{where}.functions", f"{plan['functions']} functions lie outside the instance's range {low}-{high}")
    grid = problem.memory_grid()
    if plan["memory_mb"] not in grid:
        raise InvalidInputError(f"{where}.memory_mb", f"{plan['memory_mb']} MB is not on the instance's memory grid "
                                f"({grid[0] if grid else '-'}-{grid[-1] if grid else '-'} MB in steps of "
                                f"{problem.platform.memory_step_mb})")
    ps_low, ps_high = problem.constraints.ps_count
    if not ps_low <= plan.get("ps", 1) <= ps_high:
        raise InvalidInputError(f"{where}.ps", f"{plan.get('ps', 1)} PS lie outside the instance's range {ps_low}-{ps_high}")


@dataclass(frozen=True)
class PlanDocument:
    """A solve result with, optionally, the problem it solved and the catalog it priced."""

    result: Mapping[str, Any]
    problem: SpotProblem | ServerlessProblem | None = None
    catalog: Catalog | None = None

    def __post_init__(self) -> None:
        r = self.result
        kind = check.choice("result.kind", r.get("kind"), ("spot", "serverless"))
        if r.get("status") not in FEASIBLE or not isinstance(r.get("plan"), Mapping):
            raise InvalidInputError("result.plan", f"the solve ended with status {r.get('status')!r} and no "
                                                   "plan: there is nothing to deploy")
        for key in ("time_s", "cost", "bound", "gap"):
            if r.get(key) is not None:
                check.number(f"result.{key}", r[key])             # finite: NaN or inf would reach the exports
        plan = r["plan"]
        if kind == "spot":
            counts = plan.get("counts")
            if not isinstance(counts, Mapping):
                raise InvalidInputError("result.plan.counts", "must map instance types to counts")
            for label, n in counts.items():
                check.integer(f"result.plan.counts.{label}", n, minimum=0, maximum=check.MAX_QUOTA)
            if sum(counts.values()) > check.MAX_WORKERS:
                raise InvalidInputError("result.plan.counts", f"{sum(counts.values()):,} workers exceed the "
                                        f"limit of {check.MAX_WORKERS:,} of any spot plan")
        else:
            check.integer("result.plan.functions", plan.get("functions"), minimum=1, maximum=check.MAX_FUNCTIONS)
            check.integer("result.plan.memory_mb", plan.get("memory_mb"), minimum=1, maximum=check.MAX_MEMORY_MB)
            if plan.get("local_batch") is not None:
                check.number("result.plan.local_batch", plan["local_batch"], exclusive_minimum=0)
        check.integer("result.plan.ps", plan.get("ps", 1), minimum=1, maximum=check.MAX_PS_COUNT)
        if self.problem is not None:
            expected = SpotProblem if kind == "spot" else ServerlessProblem
            if not isinstance(self.problem, expected):
                raise InvalidInputError("instance", f"a {kind} result needs a {kind} instance")
            if isinstance(self.problem, SpotProblem):
                check_spot_plan(self.problem, plan["counts"], plan.get("ps", 1), "result.plan")
            else:
                check_serverless_plan(self.problem, plan, "result.plan")

    @property
    def kind(self) -> str:
        """``"spot"`` or ``"serverless"``."""
        return str(self.result["kind"])

    @property
    def name(self) -> str:
        """The instance name the plan was solved for."""
        return str(self.result.get("instance") or "dnnprov")

    @property
    def region(self) -> str | None:
        """The catalog's region, if the document carries a catalog."""
        return self.catalog.region if self.catalog else None

    @property
    def ps(self) -> int:
        """Number of parameter servers of the plan."""
        return int(self.result["plan"].get("ps", 1))

    @property
    def ps_type(self) -> str:
        """Instance type of the PS node (the instance's platform, else the default)."""
        if self.problem is not None:
            return self.problem.platform.ps_type
        return SpotPlatform().ps_type if self.kind == "spot" else ServerlessPlatform().ps_type

    def counts(self) -> dict[str, int]:
        """Workers per column label of the whole plan (zeros dropped)."""
        self.require_spot()
        return {k: int(v) for k, v in self.result["plan"]["counts"].items() if v}

    def kept(self) -> dict[str, int]:
        """Workers already running that the plan keeps (from the instance, else the result)."""
        if isinstance(self.problem, SpotProblem):
            return {k: v for k, v in self.problem.constraints.existing.items() if v}
        new = self.result.get("details", {}).get("new_instances")
        if not isinstance(new, Mapping):
            return {}
        return {k: n - int(new.get(k, 0)) for k, n in self.counts().items() if n - int(new.get(k, 0))}

    def launch_counts(self) -> dict[str, int]:
        """Workers to launch: the plan minus the kept instances."""
        kept = self.kept()
        return {k: n - kept.get(k, 0) for k, n in self.counts().items() if n - kept.get(k, 0) > 0}

    def launches_ps(self) -> bool:
        """Whether PS nodes are launched (for a takeover of a running cluster: only new ones)."""
        return self.ps_to_launch() > 0

    def ps_to_launch(self) -> int:
        """PS nodes to launch: all, or for a takeover only those it adds (``details.new_ps``)."""
        if not self.kept():
            return self.ps
        new = self.result.get("details", {}).get("new_ps", 0)
        return new if isinstance(new, int) and not isinstance(new, bool) and new > 0 else 0

    def require_spot(self) -> None:
        """Refuse a serverless plan where a spot plan is needed."""
        if self.kind != "spot":
            raise InvalidInputError("result.kind", "this export needs a spot plan (a serverless plan exports to lambda or json)")

    @classmethod
    def from_dict(cls, data: object) -> "PlanDocument":
        """Read a ``dnnprov/plan`` v1 dict or a bare result dict."""
        if not isinstance(data, Mapping):
            raise InvalidInputError("", f"a plan must be a JSON object, got {type(data).__name__}")
        if data.get("format") == PLAN_FORMAT:
            if data.get("version") != 1:
                raise InvalidInputError("version", f"this dnnprov reads {PLAN_FORMAT} version 1; got {data.get('version')!r}")
            unknown = set(data) - {"format", "version", "result", "instance", "catalog"}
            if unknown:
                raise InvalidInputError(sorted(unknown)[0], "unknown field of a plan document")
            if not isinstance(data.get("result"), Mapping):
                raise InvalidInputError("result", "missing: the solve result (dnnprov solve --json)")
            problem = problem_from_dict(data["instance"]) if data.get("instance") is not None else None
            catalog = Catalog.from_dict(data["catalog"]) if data.get("catalog") is not None else None
            return cls(result=data["result"], problem=problem, catalog=catalog)
        if "status" in data and "kind" in data:
            return cls(result=data)
        raise InvalidInputError("format", f"expected a {PLAN_FORMAT} document or the output of `dnnprov solve --json`")

    def to_dict(self) -> dict[str, Any]:
        """The ``dnnprov/plan`` v1 dict."""
        out: dict[str, Any] = {"format": PLAN_FORMAT, "version": 1, "result": dict(self.result)}
        if self.problem is not None:
            out["instance"] = self.problem.to_dict()
        if self.catalog is not None:
            out["catalog"] = self.catalog.to_dict()
        return out


def plan_document(result: Result, problem: SpotProblem | ServerlessProblem | None = None,
                  catalog: Catalog | None = None) -> PlanDocument:
    """Wrap a solve result with its problem and catalog."""
    return PlanDocument(result=result.to_dict(), problem=problem, catalog=catalog)


def load_plan(path: str | Path, problem: SpotProblem | ServerlessProblem | None = None) -> PlanDocument:
    """Read a plan document (or a bare ``dnnprov solve --json`` result) from a file.

    With ``problem`` the plan is checked against it (and carries it) instead of the
    instance the document may hold: quotas, ranges and the memory grid, one error each.
    """
    doc = PlanDocument.from_dict(read_json_file(path))
    return doc if problem is None else PlanDocument(result=doc.result, problem=problem, catalog=doc.catalog)


# --------------------------------------------------------------------- EC2 and Lambda calls
@dataclass(frozen=True)
class ApiCall:
    """One AWS API call: service, operation (API name) and its parameters (boto3 / CLI JSON)."""

    service: str
    operation: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"service": self.service, "operation": self.operation, "params": self.params}


@dataclass(frozen=True)
class LaunchOptions:
    """What an EC2 launch needs beyond the plan: an AMI or a launch template, and placement."""

    image_id: str | None = None
    launch_template: str | None = None
    launch_template_version: str = "$Default"
    subnet_id: str | None = None
    key_name: str | None = None


def _tags(doc: PlanDocument, role: str) -> list[dict[str, Any]]:
    return [{"ResourceType": "instance", "Tags": [{"Key": "dnnprov:plan", "Value": doc.name},
                                                  {"Key": "dnnprov:role", "Value": role}]}]


def _run_instances(doc: PlanDocument, options: LaunchOptions, type_name: str, count: int,
                   market: str, role: str) -> ApiCall:
    params: dict[str, Any] = {"InstanceType": type_name, "MinCount": count, "MaxCount": count}
    if options.launch_template:
        params["LaunchTemplate"] = {"LaunchTemplateName": options.launch_template,
                                    "Version": options.launch_template_version}
    if options.image_id:
        params["ImageId"] = options.image_id
    if not options.image_id and not options.launch_template:
        raise InvalidInputError("image_id", "EC2 launches need an AMI (--image-id) or a launch template (--launch-template)")
    if options.subnet_id:
        params["SubnetId"] = options.subnet_id
    if options.key_name:
        params["KeyName"] = options.key_name
    if market == "spot":
        params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    params["TagSpecifications"] = _tags(doc, role)
    return ApiCall("ec2", "RunInstances", params)


def _ps_calls(doc: PlanDocument, options: LaunchOptions) -> list[ApiCall]:
    if not doc.launches_ps():
        return []
    return [_run_instances(doc, options, doc.ps_type, doc.ps_to_launch(), "on-demand", "ps")]


def run_instances_calls(doc: PlanDocument, options: LaunchOptions) -> list[ApiCall]:
    """One RunInstances per (type, market) with exactly the planned count (MinCount = MaxCount), plus the PS."""
    calls = []
    for label, count in doc.launch_counts().items():
        type_name, market = split_label(label)
        calls.append(_run_instances(doc, options, type_name, count, market, "worker"))
    return calls + _ps_calls(doc, options)


def ec2_fleet_calls(doc: PlanDocument, options: LaunchOptions) -> list[ApiCall]:
    """An ``instant`` CreateFleet for the workers (one override per type), plus the PS.

    TotalTargetCapacity is the number of workers to launch. EC2 Fleet picks the mix among
    the overrides by its allocation strategy, so the launched mix can differ from the
    plan; ``ec2-run-instances`` launches the exact mix.
    """
    if not options.launch_template:
        raise InvalidInputError("launch_template", "CreateFleet needs a launch template (--launch-template)")
    launch = doc.launch_counts()
    if not launch:
        raise InvalidInputError("result.plan", "no worker to launch: every planned worker is already running")
    by_market = {"spot": 0, "on-demand": 0}
    types: list[str] = []
    for label, count in launch.items():
        type_name, market = split_label(label)
        by_market[market] += count
        if type_name not in types:
            types.append(type_name)
    overrides = [{"InstanceType": t, **({"SubnetId": options.subnet_id} if options.subnet_id else {})} for t in types]
    params = {
        "Type": "instant",
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": {
            "LaunchTemplateName": options.launch_template, "Version": options.launch_template_version},
            "Overrides": overrides}],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": sum(by_market.values()), "SpotTargetCapacity": by_market["spot"],
            "OnDemandTargetCapacity": by_market["on-demand"], "DefaultTargetCapacityType": "spot"},
        "SpotOptions": {"AllocationStrategy": "price-capacity-optimized"},
        "TagSpecifications": _tags(doc, "worker"),
    }
    return [ApiCall("ec2", "CreateFleet", params)] + _ps_calls(doc, options)


@dataclass(frozen=True)
class FunctionCode:
    """What Lambda CreateFunction needs beyond the plan: the execution role and the code.

    Either ``image_uri`` (a container image) or ``s3_bucket`` + ``s3_key`` with ``runtime``
    and ``handler`` (a .zip package).
    """

    role: str
    image_uri: str | None = None
    s3_bucket: str | None = None
    s3_key: str | None = None
    runtime: str | None = None
    handler: str | None = None

    def __post_init__(self) -> None:
        if not self.role:
            raise InvalidInputError("role", "CreateFunction needs the execution role ARN (--role)")
        if bool(self.image_uri) == bool(self.s3_bucket or self.s3_key):
            raise InvalidInputError("code", "give either a container image (--image-uri) or a .zip "
                                            "package (--s3-bucket and --s3-key)")
        if not self.image_uri and not (self.s3_bucket and self.s3_key and self.runtime and self.handler):
            raise InvalidInputError("code", "a .zip package needs --s3-bucket, --s3-key, --runtime and --handler")

    def params(self) -> dict[str, Any]:
        """The CreateFunction parameters for the code."""
        if self.image_uri:
            return {"Role": self.role, "PackageType": "Image", "Code": {"ImageUri": self.image_uri}}
        return {"Role": self.role, "PackageType": "Zip", "Runtime": self.runtime, "Handler": self.handler,
                "Code": {"S3Bucket": self.s3_bucket, "S3Key": self.s3_key}}


def lambda_calls(doc: PlanDocument, function_name: str | None = None,
                 code: FunctionCode | None = None) -> list[ApiCall]:
    """Lambda settings of a serverless plan: memory and timeout, reserved concurrency = functions.

    Without ``code`` the function exists and gets UpdateFunctionConfiguration; with it,
    CreateFunction makes the function with the plan's memory and timeout.
    """
    if doc.kind != "serverless":
        raise InvalidInputError("result.kind", "the lambda export needs a serverless plan")
    plan = doc.result["plan"]
    platform = doc.problem.platform if isinstance(doc.problem, ServerlessProblem) else ServerlessPlatform()
    name = function_name or doc.name
    settings = {"FunctionName": name, "MemorySize": int(plan["memory_mb"]),
                "Timeout": min(900, math.ceil(platform.timeout_s))}
    if code is None:
        configure = ApiCall("lambda", "UpdateFunctionConfiguration", settings)
    else:
        configure = ApiCall("lambda", "CreateFunction", {
            **settings, **code.params(),
            "Tags": {"dnnprov:plan": doc.name, "dnnprov:role": "worker"}})
    return [configure, ApiCall("lambda", "PutFunctionConcurrency", {
        "FunctionName": name, "ReservedConcurrentExecutions": int(plan["functions"])})]


def calls_json(doc: PlanDocument, calls: list[ApiCall]) -> str:
    """The ``dnnprov/aws-calls`` v1 JSON text of ``calls``."""
    return json.dumps({"format": CALLS_FORMAT, "version": 1, "plan": doc.name, "region": doc.region,
                       "calls": [c.to_dict() for c in calls]}, indent=2) + "\n"


# --------------------------------------------------------------------- YAML exports
def dump_yaml(documents: list[Any], comment: str = "") -> str:
    """YAML text of ``documents`` (one YAML document each) written by PyYAML's safe dumper.

    Names are data: every string goes through the dumper, which quotes what needs quoting,
    so no value can start a new document, add a key or end a comment. ``comment`` is a
    fixed header of ours; each of its lines becomes a ``#`` line.
    """
    import yaml

    header = "".join(f"# {line}\n" for line in comment.splitlines())
    return header + yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False,
                                       explicit_start=len(documents) > 1, allow_unicode=False)


def _dns_name(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")[:63].strip("-.") or "dnnprov"


def skypilot_tasks(doc: PlanDocument) -> dict[str, dict[str, Any]]:
    """SkyPilot tasks of a spot plan, one per cluster: ``{task name: task}``.

    SkyPilot has no heterogeneous cluster in one task, so each (type, market) of the plan
    and the PS nodes is its own task, launched as its own cluster (``sky launch -c NAME``).
    """
    doc.require_spot()
    infra = f"aws/{doc.region}" if doc.region else "aws"
    base = _dns_name(doc.name).replace(".", "-")
    tasks: dict[str, dict[str, Any]] = {}
    for label, count in doc.launch_counts().items():
        type_name, market = split_label(label)
        name = f"{base}-{type_name.replace('.', '-')}-{market}"
        tasks[name] = {"name": name, "num_nodes": count,
                       "resources": {"infra": infra, "instance_type": type_name, "use_spot": market == "spot"},
                       "envs": {"DNNPROV_PLAN": doc.name, "DNNPROV_ROLE": "worker"}}
    if doc.launches_ps():
        tasks[f"{base}-ps"] = {"name": f"{base}-ps", "num_nodes": doc.ps_to_launch(),
                               "resources": {"infra": infra, "instance_type": doc.ps_type, "use_spot": False},
                               "envs": {"DNNPROV_PLAN": doc.name, "DNNPROV_ROLE": "ps"}}
    return tasks


def skypilot_files(doc: PlanDocument) -> dict[str, str]:
    """One SkyPilot task file per cluster (``NAME.yaml``) and ``launch.sh`` launching them all."""
    files = {f"{name}.yaml": dump_yaml([task], "SkyPilot task of a dnnprov plan: launch with\n"
                                                f"  sky launch -c {name} {name}.yaml")
             for name, task in skypilot_tasks(doc).items()}
    lines = ["#!/bin/sh", "# Launch every cluster of the dnnprov plan (one SkyPilot task file each).",
             'set -e', 'cd "$(dirname "$0")"']
    lines += [f"sky launch -y -c {shlex.quote(f.removesuffix('.yaml'))} {shlex.quote(f)}" for f in files]
    files["launch.sh"] = "\n".join(lines) + "\n"
    return files


def kueue_documents(doc: PlanDocument, queue_name: str | None = None, *, namespace: str = "default",
                    api_version: str = KUEUE_API) -> list[dict[str, Any]]:
    """Kueue objects of a spot plan: ResourceFlavors, a ClusterQueue with the plan's quotas, a LocalQueue.

    One ResourceFlavor per (type, market) of the workers and one for the PS nodes
    (on-demand). The ClusterQueue's quotas are the whole plan's totals: ``pods`` (one pod
    per node) and ``nvidia.com/gpu`` always, ``cpu`` and ``memory`` when the catalog (or the
    instance) gives them for every flavor. The LocalQueue in ``namespace`` points at it.
    """
    api_version = check.choice("kueue_api", api_version, KUEUE_APIS)
    counts = doc.counts()
    rows = []
    for label, count in counts.items():
        type_name, market = split_label(label)
        rows.append((type_name, market, count, *_hardware(doc, type_name)))
    ps_gpus, ps_vcpus, ps_memory = _ps_hardware(doc)
    rows.append((doc.ps_type, "on-demand", doc.ps, ps_gpus, ps_vcpus, ps_memory))
    covered = ["pods"]
    if all(r[4] is not None for r in rows):
        covered.append("cpu")
    if all(r[5] is not None for r in rows):
        covered.append("memory")
    covered.append("nvidia.com/gpu")
    documents: list[dict[str, Any]] = []
    queue_flavors = []
    for type_name, market, count, gpus, vcpus, memory in rows:
        flavor = _dns_name(f"{type_name}-{market}")
        documents.append({"apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": flavor},
                          "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": type_name,
                                                  "karpenter.sh/capacity-type": market}}})
        quota = {"pods": count, "cpu": count * (vcpus or 0), "memory": _quantity(count * (memory or 0.0)),
                 "nvidia.com/gpu": count * gpus}
        queue_flavors.append({"name": flavor, "resources": [{"name": r, "nominalQuota": quota[r]} for r in covered]})
    queue = _dns_name(queue_name or doc.name)
    documents.append({"apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": queue},
                      "spec": {"namespaceSelector": {},
                               "resourceGroups": [{"coveredResources": covered, "flavors": queue_flavors}]}})
    documents.append({"apiVersion": api_version, "kind": "LocalQueue",
                      "metadata": {"name": queue, "namespace": _dns_name(namespace)},
                      "spec": {"clusterQueue": queue}})
    return documents


def kueue_yaml(doc: PlanDocument, queue_name: str | None = None, *, namespace: str = "default",
               api_version: str = KUEUE_API) -> str:
    """The :func:`kueue_documents` as one YAML stream (``kubectl apply -f`` takes it)."""
    documents = kueue_documents(doc, queue_name, namespace=namespace, api_version=api_version)
    return dump_yaml(documents, f"Kueue quotas of a dnnprov plan: {sum(doc.counts().values())} workers "
                                f"and {doc.ps} PS node(s).")


def _ps_hardware(doc: PlanDocument) -> tuple[int, int | None, float | None]:
    """GPUs, vCPUs and memory of the PS type from the catalog (0 GPUs and unknown otherwise)."""
    if doc.catalog is not None and any(e.name == doc.ps_type for e in doc.catalog.instance_types):
        entry = doc.catalog.entry(doc.ps_type)
        return entry.gpus, entry.vcpus, entry.memory_gb
    return 0, None, None


def _hardware(doc: PlanDocument, type_name: str) -> tuple[int, int | None, float | None]:
    """GPUs, vCPUs and memory (GiB) of a type from the catalog, else the instance."""
    if doc.catalog is not None and any(e.name == type_name for e in doc.catalog.instance_types):
        entry = doc.catalog.entry(type_name)
        return entry.gpus, entry.vcpus, entry.memory_gb
    if isinstance(doc.problem, SpotProblem):
        t = next(t for t in doc.problem.instance_types if t.name == type_name)
        return t.gpus, t.vcpus, None
    raise InvalidInputError("catalog", f"the kueue export needs the GPU count of {type_name}: "
                                       "wrap the plan with its instance or catalog (--instance / --catalog)")


def _quantity(gib: float) -> str:
    """A Kubernetes memory quantity: whole GiB as ``Gi``, else ``Mi``."""
    return f"{int(gib)}Gi" if float(gib).is_integer() else f"{math.ceil(gib * 1024)}Mi"


# --------------------------------------------------------------------- plain JSON
def plan_json(doc: PlanDocument) -> dict[str, Any]:
    """The plan with what to launch, stamped with the catalog snapshot it was priced from."""
    r = doc.result
    out: dict[str, Any] = {
        "format": "dnnprov/deployment", "version": 2, "instance": doc.name, "kind": doc.kind,
        "status": r.get("status"), "method": r.get("method"), "model": r.get("model"),
        "plan": r["plan"], "time_s": r.get("time_s"), "cost": r.get("cost"),
        "catalog": None if doc.catalog is None else {
            "name": doc.catalog.name, "region": doc.catalog.region, "snapshot": doc.catalog.snapshot},
    }
    if doc.kind == "spot":
        out["launch"] = {"workers": doc.launch_counts(), "kept": doc.kept(),
                         "ps": {"type": doc.ps_type, "count": doc.ps_to_launch()}}
    return out


@dataclass(frozen=True)
class ExportOptions:
    """Options of the exports beyond the plan (each export reads the ones it needs)."""

    launch: LaunchOptions = LaunchOptions()
    function_name: str | None = None
    code: FunctionCode | None = None
    queue_name: str | None = None
    namespace: str = "default"
    kueue_api: str = KUEUE_API


#: File name of each single-file export.
FILE_NAMES = {"ec2-fleet": "ec2-fleet.json", "ec2-run-instances": "ec2-run-instances.json",
              "lambda": "lambda.json", "kueue": "kueue.yaml", "json": "plan.json"}


def export_files(doc: PlanDocument, target: str, options: ExportOptions = ExportOptions()) -> dict[str, str]:
    """The files of ``doc`` exported to ``target`` (one of :data:`TARGETS`): ``{file name: text}``.

    Every target is one file except ``skypilot``: one task file per cluster and ``launch.sh``.
    """
    target = check.choice("target", target, TARGETS)
    if target == "skypilot":
        return skypilot_files(doc)
    if target == "ec2-fleet":
        text = calls_json(doc, ec2_fleet_calls(doc, options.launch))
    elif target == "ec2-run-instances":
        text = calls_json(doc, run_instances_calls(doc, options.launch))
    elif target == "lambda":
        text = calls_json(doc, lambda_calls(doc, options.function_name, options.code))
    elif target == "kueue":
        doc.require_spot()
        text = kueue_yaml(doc, options.queue_name, namespace=options.namespace, api_version=options.kueue_api)
    else:
        text = json.dumps(plan_json(doc), indent=2) + "\n"
    return {FILE_NAMES[target]: text}


def export(doc: PlanDocument, target: str, options: ExportOptions = ExportOptions()) -> str:
    """The text of ``doc`` exported to a single-file ``target`` (every target but ``skypilot``)."""
    if target == "skypilot":
        raise InvalidInputError("target", "the skypilot export is one task file per cluster: "
                                          "use export_files() (CLI: --out DIR)")
    (text,) = export_files(doc, target, options).values()
    return text
