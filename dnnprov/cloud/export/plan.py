"""Plan documents: a solve result with the instance it solved and the catalog it priced.

A *plan document* (``dnnprov/plan`` v1) is a solve result (:meth:`Result.to_dict`, what
``dnnprov solve --json`` prints) optionally wrapped with the instance it solved and the
catalog its prices came from::

    {"format": "dnnprov/plan", "version": 1, "result": {...}, "instance": {...}, "catalog": {...}}

A bare result is accepted too. Workers already running (a takeover plan's kept
instances, ``constraints.existing``) are not launched again, nor are the running PS: a
takeover (its result carries ``details.new_ps``) launches only the new PS it asks for, also
when it keeps no worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import MULTI_REGION, Catalog
from dnnprov.io.instances import problem_from_dict
from dnnprov.json_files import read_json_file
from dnnprov.models.spot import SpotModel
from dnnprov.problems.serverless import ServerlessPlatform, ServerlessProblem
from dnnprov.problems.spot import ON_DEMAND_SUFFIX, SpotPlatform, SpotProblem
from dnnprov.problems.validation import checks as check
from dnnprov.result import Result

PLAN_FORMAT = "dnnprov/plan"
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
            raise InvalidInputError(f"{where}.counts.{label}", problem.why_not_a_column(label, set(cols.labels)))
        vector[index[label]] = n
    for i, label in enumerate(cols.labels):
        if vector[i] > cols.upper[i]:
            raise InvalidInputError(
                f"{where}.counts.{label}", f"{vector[i]} instances exceed the quota {int(cols.upper[i])}"
            )
        if vector[i] < cols.lower[i]:
            raise InvalidInputError(
                f"{where}.counts.{label}",
                f"{vector[i]} instances are fewer than the "
                f"{int(cols.lower[i])} running ones the instance keeps (constraints.existing)",
            )
    low, high = problem.constraints.ps_count
    if not low <= ps <= high:
        raise InvalidInputError(
            f"{where}.ps", f"{ps} PS lie outside the instance's range {low}-{high} (constraints.ps_count)"
        )
    model = SpotModel(problem)
    if not bool(model.admissible(vector[None, :], np.array([ps]))[0]):
        workers = int(vector.sum())
        raise InvalidInputError(
            f"{where}.counts",
            f"the plan ({workers} workers) breaks the instance's worker range, "
            "validity domain, vCPU quotas or side constraints (dnnprov show INSTANCE lists them)",
        )


def check_serverless_plan(problem: ServerlessProblem, plan: Mapping[str, Any], where: str = "plan") -> None:
    """Refuse a serverless plan outside ``problem``'s function range, memory grid or PS range."""
    low, high = problem.function_range()
    if not low <= plan["functions"] <= high:
        raise InvalidInputError(
            f"{where}.functions", f"{plan['functions']} functions lie outside the instance's range {low}-{high}"
        )
    grid = problem.memory_grid()
    if plan["memory_mb"] not in grid:
        raise InvalidInputError(
            f"{where}.memory_mb",
            f"{plan['memory_mb']} MB is not on the instance's memory grid "
            f"({grid[0] if grid else '-'}-{grid[-1] if grid else '-'} MB in steps of "
            f"{problem.platform.memory_step_mb})",
        )
    ps_low, ps_high = problem.constraints.ps_count
    if not ps_low <= plan.get("ps", 1) <= ps_high:
        raise InvalidInputError(
            f"{where}.ps", f"{plan.get('ps', 1)} PS lie outside the instance's range {ps_low}-{ps_high}"
        )


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
            raise InvalidInputError(
                "result.plan",
                f"the solve ended with status {r.get('status')!r} and no plan: there is nothing to deploy",
            )
        for key in ("time_s", "cost", "bound", "gap"):
            if r.get(key) is not None:
                check.number(f"result.{key}", r[key])  # finite: NaN or inf would reach the exports
        plan = r["plan"]
        if kind == "spot":
            counts = plan.get("counts")
            if not isinstance(counts, Mapping):
                raise InvalidInputError("result.plan.counts", "must map instance types to counts")
            for label, n in counts.items():
                check.integer(f"result.plan.counts.{label}", n, minimum=0, maximum=check.MAX_QUOTA)
            if sum(counts.values()) > check.MAX_WORKERS:
                raise InvalidInputError(
                    "result.plan.counts",
                    f"{sum(counts.values()):,} workers exceed the limit of {check.MAX_WORKERS:,} of any spot plan",
                )
        else:
            check.integer("result.plan.functions", plan.get("functions"), minimum=1, maximum=check.MAX_FUNCTIONS)
            check.integer("result.plan.memory_mb", plan.get("memory_mb"), minimum=1, maximum=check.MAX_MEMORY_MB)
            if plan.get("local_batch") is not None:
                check.number("result.plan.local_batch", plan["local_batch"], exclusive_minimum=0)
        ps = check.integer("result.plan.ps", plan.get("ps", 1), minimum=1, maximum=check.MAX_PS_COUNT)
        details = r.get("details")
        if isinstance(details, Mapping) and "new_ps" in details:  # a takeover's PS to launch
            check.integer("result.details.new_ps", details["new_ps"], minimum=0, maximum=ps)
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
        """The catalog's region, if the document carries a single-region catalog (a multi-region
        catalog's plan names each type's region: ``TYPE@REGION``, :mod:`.placement`)."""
        return self.catalog.region if self.catalog and self.catalog.region != MULTI_REGION else None

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
        """Workers per column label of the whole plan (zeros dropped); a plan without any is refused."""
        self.require_spot()
        counts = {k: int(v) for k, v in self.result["plan"]["counts"].items() if v}
        if not counts:  # no solve gives it: exported, it was a cluster of the PS alone
            raise InvalidInputError("result.plan.counts", "the plan has no workers: nothing would train")
        return counts

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
        """PS nodes to launch: all of a new cluster's, none of a cluster that keeps workers, and
        for a takeover (``dnnprov replan``, whose result says ``details.new_ps``) only those it adds.

        A takeover keeps the running PS even when it keeps no worker (every one revoked): its
        ``details.new_ps`` decides, not the kept workers.
        """
        details = self.result.get("details")
        if isinstance(details, Mapping) and "new_ps" in details:
            return int(details["new_ps"])
        return 0 if self.kept() else self.ps

    def check_delivery(self, delivered: Mapping[str, int], complete: bool = True) -> None:
        """Refuse a cluster EC2 delivered (an instant fleet chooses its own mix) that the plan's
        problem does not allow: one error naming the field (``delivered.counts.<label>``,
        ``delivered.time_s``, ``delivered.cost``).

        ``delivered`` are the workers launched per column label; with the kept workers they
        make the cluster. Each type's quota is checked on every delivery; once ``complete``
        (every fleet has answered) the whole cluster is checked as a plan of the problem
        (:func:`check_spot_plan`: quotas, vCPU families, worker range) and by the spot model:
        inside its validity domain, its predicted time within the deadline (``slo.time_s``) and
        its cost within the budget (``constraints.budget_usd``), if any.
        """
        problem = self.problem
        if not isinstance(problem, SpotProblem):
            raise InvalidInputError("instance", "checking what a fleet delivered needs the plan's spot instance")
        cluster = dict(self.kept())
        for label, n in delivered.items():
            cluster[label] = cluster.get(label, 0) + int(n)
        cols = problem.columns()
        for label, n in cluster.items():
            if label in cols.labels and n > cols.upper[cols.labels.index(label)]:
                raise InvalidInputError(
                    f"delivered.counts.{label}",
                    f"{n} instances exceed the quota {int(cols.upper[cols.labels.index(label)])}",
                )
        if not complete:
            return
        check_spot_plan(problem, cluster, self.ps, "delivered")
        model = SpotModel(problem)
        ev = model.evaluate(np.array([[cluster.get(label, 0) for label in cols.labels]]), self.ps)
        time_s, cost = float(ev.time_s[0]), float(ev.cost[0])
        if not bool(ev.inside_domain[0]):
            raise InvalidInputError(
                "delivered.counts",
                "the cluster lies outside the loss model's validity domain: no training time can be predicted for it",
            )
        if not time_s <= problem.slo.time_s * (1 + 1e-12):
            raise InvalidInputError(
                "delivered.time_s",
                f"the spot model predicts {time_s:,.0f} s for this cluster, "
                f"beyond the deadline of {problem.slo.time_s:,.0f} s (slo.time_s)",
            )
        budget = problem.constraints.budget_usd
        if budget is not None and cost > budget:
            raise InvalidInputError(
                "delivered.cost",
                f"the spot model predicts ${cost:,.2f} for this cluster, over "
                f"the budget of ${budget:,.2f} (constraints.budget_usd)",
            )

    def require_spot(self) -> None:
        """Refuse a serverless plan where a spot plan is needed."""
        if self.kind != "spot":
            raise InvalidInputError(
                "result.kind", "this export needs a spot plan (a serverless plan exports to lambda or json)"
            )

    @classmethod
    def from_dict(cls, data: object) -> PlanDocument:
        """Read a ``dnnprov/plan`` v1 dict or a bare result dict."""
        if not isinstance(data, Mapping):
            raise InvalidInputError("", f"a plan must be a JSON object, got {type(data).__name__}")
        if data.get("format") == PLAN_FORMAT:
            if data.get("version") != 1:
                raise InvalidInputError(
                    "version", f"this dnnprov reads {PLAN_FORMAT} version 1; got {data.get('version')!r}"
                )
            unknown = set(data) - {"format", "version", "result", "instance", "catalog"}
            if unknown:
                raise InvalidInputError(min(unknown), "unknown field of a plan document")
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


def plan_document(
    result: Result, problem: SpotProblem | ServerlessProblem | None = None, catalog: Catalog | None = None
) -> PlanDocument:
    """Wrap a solve result with its problem and catalog."""
    return PlanDocument(result=result.to_dict(), problem=problem, catalog=catalog)


def load_plan(path: str | Path, problem: SpotProblem | ServerlessProblem | None = None) -> PlanDocument:
    """Read a plan document (or a bare ``dnnprov solve --json`` result) from a file.

    With ``problem`` the plan is checked against it (and carries it) instead of the
    instance the document may hold: quotas, ranges and the memory grid, one error each.
    """
    doc = PlanDocument.from_dict(read_json_file(path))
    return doc if problem is None else PlanDocument(result=doc.result, problem=problem, catalog=doc.catalog)


def hardware(doc: PlanDocument, type_name: str) -> tuple[int | None, int | None, float | None]:
    """GPUs, vCPUs and memory (GiB) of a type from the catalog, else the instance (None: unknown)."""
    if doc.catalog is not None and any(e.name == type_name for e in doc.catalog.instance_types):
        entry = doc.catalog.entry(type_name)
        return entry.gpus, entry.vcpus, entry.memory_gb
    if isinstance(doc.problem, SpotProblem):
        for t in doc.problem.instance_types:
            if t.name == type_name:
                return t.gpus, t.vcpus, None
    return None, None, None


def dump_yaml(documents: list[Any], comment: str = "") -> str:
    """YAML text of ``documents`` (one YAML document each) written by PyYAML's safe dumper.

    Names are data: every string goes through the dumper, which quotes what needs quoting,
    so no value can start a new document, add a key or end a comment. ``comment`` is a
    fixed header of ours; each of its lines becomes a ``#`` line.
    """
    import yaml

    header = "".join(f"# {line}\n" for line in comment.splitlines())
    return header + yaml.safe_dump_all(
        documents, sort_keys=False, default_flow_style=False, explicit_start=len(documents) > 1, allow_unicode=False
    )


def plan_json(doc: PlanDocument) -> dict[str, Any]:
    """The plan with what to launch, stamped with the catalog snapshot it was priced from."""
    r = doc.result
    out: dict[str, Any] = {
        "format": "dnnprov/deployment",
        "version": 2,
        "instance": doc.name,
        "kind": doc.kind,
        "status": r.get("status"),
        "method": r.get("method"),
        "model": r.get("model"),
        "plan": r["plan"],
        "time_s": r.get("time_s"),
        "cost": r.get("cost"),
        "catalog": None
        if doc.catalog is None
        else {"name": doc.catalog.name, "region": doc.catalog.region, "snapshot": doc.catalog.snapshot},
    }
    if doc.kind == "spot":
        out["launch"] = {
            "workers": doc.launch_counts(),
            "kept": doc.kept(),
            "ps": {"type": doc.ps_type, "count": doc.ps_to_launch()},
        }
    return out
