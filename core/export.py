"""Deployable forms of a plan: EC2 launch calls, Lambda settings, SkyPilot, Kueue, JSON.

A *plan document* (``dnnprov/plan`` v1) is a solve result (:meth:`Result.to_dict`, what
``dnnprov solve --json`` prints) optionally wrapped with the instance it solved and the
catalog its prices came from::

    {"format": "dnnprov/plan", "version": 1, "result": {...}, "instance": {...}, "catalog": {...}}

A bare result is accepted too. Workers already running (a takeover plan's kept
instances, ``constraints.existing``) are not launched again, and neither is the PS then.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dnnprov import _checks as check
from dnnprov.catalog import Catalog
from dnnprov.errors import InvalidInputError
from dnnprov.instance_io import problem_from_dict
from dnnprov.result import Result
from dnnprov.serverless import ServerlessPlatform, ServerlessProblem
from dnnprov.spot import ON_DEMAND_SUFFIX, SpotPlatform, SpotProblem

TARGETS = ("ec2-fleet", "ec2-run-instances", "lambda", "skypilot", "kueue", "json")
PLAN_FORMAT = "dnnprov/plan"
CALLS_FORMAT = "dnnprov/aws-calls"
KUEUE_API = "kueue.x-k8s.io/v1beta1"
FEASIBLE = ("optimal", "feasible", "limit")


def split_label(label: str) -> tuple[str, str]:
    """Column label -> ``(type name, market)``: ``"g3.8xlarge:on-demand"`` -> on-demand."""
    if label.endswith(ON_DEMAND_SUFFIX):
        return label.removesuffix(ON_DEMAND_SUFFIX), "on-demand"
    return label, "spot"


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
        plan = r["plan"]
        if kind == "spot":
            counts = plan.get("counts")
            if not isinstance(counts, Mapping):
                raise InvalidInputError("result.plan.counts", "must map instance types to counts")
            for label, n in counts.items():
                check.integer(f"result.plan.counts.{label}", n, minimum=0)
        else:
            for key in ("functions", "memory_mb"):
                check.integer(f"result.plan.{key}", plan.get(key), minimum=1)
        check.integer("result.plan.ps", plan.get("ps", 1), minimum=1)
        if self.problem is not None:
            expected = SpotProblem if kind == "spot" else ServerlessProblem
            if not isinstance(self.problem, expected):
                raise InvalidInputError("instance", f"a {kind} result needs a {kind} instance")
            if isinstance(self.problem, SpotProblem):
                labels = set(self.problem.columns().labels)
                for label in plan["counts"]:
                    if label not in labels:
                        raise InvalidInputError(f"result.plan.counts.{label}", "not a column of the instance")

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
        """Whether the PS nodes are launched too (not for a takeover of a running cluster)."""
        return not self.kept()

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


def load_plan(path: str | Path) -> PlanDocument:
    """Read a plan document (or a bare ``dnnprov solve --json`` result) from a file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InvalidInputError(str(path), f"cannot read file: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(str(path), f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return PlanDocument.from_dict(data)


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
    return [_run_instances(doc, options, doc.ps_type, doc.ps, "on-demand", "ps")]


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


def lambda_calls(doc: PlanDocument, function_name: str | None = None) -> list[ApiCall]:
    """Lambda settings of a serverless plan: memory and timeout, reserved concurrency = functions."""
    if doc.kind != "serverless":
        raise InvalidInputError("result.kind", "the lambda export needs a serverless plan")
    plan = doc.result["plan"]
    platform = doc.problem.platform if isinstance(doc.problem, ServerlessProblem) else ServerlessPlatform()
    name = function_name or doc.name
    return [
        ApiCall("lambda", "UpdateFunctionConfiguration", {
            "FunctionName": name, "MemorySize": int(plan["memory_mb"]),
            "Timeout": min(900, math.ceil(platform.timeout_s))}),
        ApiCall("lambda", "PutFunctionConcurrency", {
            "FunctionName": name, "ReservedConcurrentExecutions": int(plan["functions"])}),
    ]


def calls_json(doc: PlanDocument, calls: list[ApiCall]) -> str:
    """The ``dnnprov/aws-calls`` v1 JSON text of ``calls``."""
    return json.dumps({"format": CALLS_FORMAT, "version": 1, "plan": doc.name, "region": doc.region,
                       "calls": [c.to_dict() for c in calls]}, indent=2) + "\n"


# --------------------------------------------------------------------- YAML exports
def to_yaml(value: Any, indent: int = 0) -> str:
    """Block YAML for dicts, lists and scalars (strings are JSON-quoted, which YAML reads)."""
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        lines = []
        for key, item in value.items():
            head = f"{pad}{_yaml_key(key)}:"
            if isinstance(item, (Mapping, list)) and item:
                lines.append(head + "\n" + to_yaml(item, indent + 2))
            else:
                lines.append(f"{head} {to_yaml(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "[]"
        lines = []
        for item in value:
            if isinstance(item, (Mapping, list)) and item:
                body = to_yaml(item, indent + 2)
                lines.append(f"{pad}- {body[indent + 2:]}")
            else:
                lines.append(f"{pad}- {to_yaml(item)}")
        return "\n".join(lines)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def _yaml_key(key: object) -> str:
    text = str(key)
    return text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", text) else json.dumps(text)


def _dns_name(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "dnnprov"


def skypilot_yaml(doc: PlanDocument) -> str:
    """SkyPilot task YAML: one document per instance type and market (and the PS)."""
    infra = f"aws/{doc.region}" if doc.region else "aws"
    tasks = []
    base = _dns_name(doc.name).replace(".", "-")
    for label, count in doc.launch_counts().items():
        type_name, market = split_label(label)
        tasks.append({"name": f"{base}-{type_name.replace('.', '-')}-{market}", "num_nodes": count,
                      "resources": {"infra": infra, "instance_type": type_name, "use_spot": market == "spot"},
                      "envs": {"DNNPROV_PLAN": doc.name, "DNNPROV_ROLE": "worker"}})
    if doc.launches_ps():
        tasks.append({"name": f"{base}-ps", "num_nodes": doc.ps,
                      "resources": {"infra": infra, "instance_type": doc.ps_type, "use_spot": False},
                      "envs": {"DNNPROV_PLAN": doc.name, "DNNPROV_ROLE": "ps"}})
    header = (f"# SkyPilot tasks for plan {doc.name} (dnnprov): one cluster per document.\n"
              "# Launch each with `sky launch -c NAME` on its own; a multi-document file given to\n"
              "# `sky jobs launch` is a pipeline, which a parameter-server cluster is not.\n")
    return header + "\n---\n".join(to_yaml(t) for t in tasks) + "\n"


def kueue_yaml(doc: PlanDocument, queue_name: str | None = None) -> str:
    """Kueue ResourceFlavors (one per type and market) and a ClusterQueue with the plan's quotas.

    Quotas cover the whole plan's workers: GPUs always, CPUs and memory when the catalog
    (or the instance) gives them for every type. The PS is not a Kueue workload here.
    """
    counts = doc.counts()
    flavors, rows = [], []
    for label, count in counts.items():
        type_name, market = split_label(label)
        gpus, vcpus, memory = _hardware(doc, type_name)
        flavor = _dns_name(f"{type_name}-{market}")
        flavors.append({"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
                        "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": type_name,
                                                "karpenter.sh/capacity-type": market}}})
        rows.append((flavor, count, gpus, vcpus, memory))
    covered = ["nvidia.com/gpu"]
    if all(r[3] is not None for r in rows):
        covered.insert(0, "cpu")
    if all(r[4] is not None for r in rows):
        covered.insert(len(covered) - 1, "memory")
    queue_flavors = []
    for flavor, count, gpus, vcpus, memory in rows:
        quota = {"cpu": count * (vcpus or 0), "memory": _quantity(count * (memory or 0.0)), "nvidia.com/gpu": count * gpus}
        queue_flavors.append({"name": flavor, "resources": [{"name": r, "nominalQuota": quota[r]} for r in covered]})
    queue = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": _dns_name(queue_name or doc.name)},
             "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": covered, "flavors": queue_flavors}]}}
    header = f"# Kueue quotas for plan {doc.name} (dnnprov): {sum(counts.values())} workers.\n"
    return header + "\n---\n".join(to_yaml(d) for d in [*flavors, queue]) + "\n"


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
        "format": "dnnprov/deployment", "version": 1, "instance": doc.name, "kind": doc.kind,
        "status": r.get("status"), "method": r.get("method"), "model": r.get("model"),
        "plan": r["plan"], "time_s": r.get("time_s"), "cost_usd": r.get("cost"),
        "catalog": None if doc.catalog is None else {
            "name": doc.catalog.name, "region": doc.catalog.region, "snapshot": doc.catalog.snapshot},
    }
    if doc.kind == "spot":
        out["launch"] = {"workers": doc.launch_counts(), "kept": doc.kept(),
                         "ps": {"type": doc.ps_type, "count": doc.ps if doc.launches_ps() else 0}}
    return out


def export(doc: PlanDocument, target: str, *, launch: LaunchOptions = LaunchOptions(),
           function_name: str | None = None, queue_name: str | None = None) -> str:
    """The text of ``doc`` exported to ``target`` (one of :data:`TARGETS`)."""
    target = check.choice("target", target, TARGETS)
    if target == "ec2-fleet":
        return calls_json(doc, ec2_fleet_calls(doc, launch))
    if target == "ec2-run-instances":
        return calls_json(doc, run_instances_calls(doc, launch))
    if target == "lambda":
        return calls_json(doc, lambda_calls(doc, function_name))
    if target == "skypilot":
        doc.require_spot()
        return skypilot_yaml(doc)
    if target == "kueue":
        return kueue_yaml(doc, queue_name)
    return json.dumps(plan_json(doc), indent=2) + "\n"
