"""The Kueue export against Kueue's own CRDs: OpenAPI schemas and their CEL rules, per release it claims.

The fixture ``kueue-crds-extract.json`` holds the ResourceFlavor, ClusterQueue and
LocalQueue CRD schemas of Kueue v0.14.8 (v1beta1 only), v0.15.8 and v0.16.9 (both) and
commit ff69552e79 (see its ``_source``). Each exported object is checked as the API server
would on create: ``metadata.name`` a DNS-1123 subdomain (cluster-scoped) and namespace a
DNS-1123 label, the ``openAPIV3Schema`` (jsonschema, with Kubernetes' int-or-string), and
every ``x-kubernetes-validations`` rule evaluated by a CEL interpreter (cel-python); rules
on ``oldSelf`` are transition rules, which the API server runs on updates only.

The export's Jobs (``batch/v1``, no CRD) are checked by the rules the API server applies to a
Job's counts and pod failure policy, written out from Kubernetes' ``validateJobSpec`` and
``validatePodFailurePolicy`` (pkg/apis/batch/validation/validation.go), and must survive a
spot preemption: a pod with ``DisruptionTarget`` is ignored, not counted as a failure.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

import dnnprov
from dnnprov.cloud.export import KUEUE_APIS, ExportOptions, PlanDocument, export, plan_document
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import Catalog, CatalogEntry
from dnnprov.io.instances import problem_from_dict, read_instance

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
celpy = pytest.importorskip("celpy", reason="cel-python evaluates the CRDs' CEL rules (test extra)")

CRDS = json.loads((Path(__file__).parent / "fixtures" / "kueue-crds-extract.json").read_text())["releases"]
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Which releases serve each API version the export offers (docs/cloud.md)
CLAIMS = {
    "kueue.x-k8s.io/v1beta1": ["v0.14.8", "v0.15.8", "v0.16.9"],
    "kueue.x-k8s.io/v1beta2": ["v0.15.8", "v0.16.9", "ff69552e79"],
}
CEL = celpy.Environment()


def _structural(schema: Any) -> Any:
    """The schema as JSON Schema: Kubernetes' ``x-kubernetes-int-or-string`` allows both types."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("x-kubernetes-int-or-string"):
                node.pop("type", None)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def _cel_failures(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    """Messages of the CEL rules (``x-kubernetes-validations``) that ``value`` breaks, recursively."""
    failures = []
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue
        program = CEL.program(CEL.compile(rule["rule"]))
        result = program.evaluate({"self": celpy.json_to_cel(value)})
        if not isinstance(result, celpy.celtypes.BoolType) or not bool(result):
            failures.append(f"{path}: {rule.get('message', rule['rule'])} ({result!r})")
    if isinstance(value, dict):
        for key, item in value.items():
            sub = schema.get("properties", {}).get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                failures += _cel_failures(sub, item, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            failures += _cel_failures(schema["items"], item, f"{path}[{i}]")
    return failures


def check_against_crds(document: dict[str, Any], release: str) -> None:
    """Raise unless ``document`` is a valid create of its kind and version in ``release``'s CRDs."""
    version = document["apiVersion"].rsplit("/", 1)[1]
    crd = CRDS[release]["kinds"][document["kind"]][version]
    assert crd["served"], f"{document['kind']} {version} is not served by Kueue {release}"
    name, namespace = document["metadata"]["name"], document["metadata"].get("namespace")
    assert len(name) <= 253 and SUBDOMAIN.fullmatch(name), name
    assert namespace is None or (len(namespace) <= 63 and LABEL.fullmatch(namespace)), namespace
    jsonschema.validate(document, _structural(crd["schema"]))
    assert _cel_failures(crd["schema"], document, document["kind"]) == []


def _export(doc, api: str, **options: Any) -> list[dict[str, Any]]:
    return [
        d
        for d in yaml.safe_load_all(export(doc, "kueue", ExportOptions(kueue_api=api, **options)))
        if d["apiVersion"].startswith("kueue.x-k8s.io/")
    ]


#: Kubernetes' limits and values of a pod failure policy (pkg/apis/batch/validation/validation.go).
MAX_RULES, MAX_PATTERNS = 20, 20
ACTIONS, CONDITION_STATUS = {"Count", "FailIndex", "FailJob", "Ignore"}, {"True", "False", "Unknown"}
QUALIFIED_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def job_failures(job: dict[str, Any]) -> list[str]:
    """What the API server refuses in a Job's counts and pod failure policy (empty: valid)."""
    spec, failures = job["spec"], []
    for key in ("parallelism", "completions", "backoffLimit"):
        if not isinstance(spec.get(key, 0), int) or spec.get(key, 0) < 0:
            failures.append(f"spec.{key}: must be a non-negative integer")
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return failures
    if spec["template"]["spec"].get("restartPolicy") != "Never":
        failures.append(
            'spec.template.spec.restartPolicy: only "Never" is supported when podFailurePolicy is specified'
        )
    rules = policy.get("rules", [])
    if len(rules) > MAX_RULES:
        failures.append("spec.podFailurePolicy.rules: too many")
    for i, rule in enumerate(rules):
        where = f"spec.podFailurePolicy.rules[{i}]"
        if rule.get("action") not in ACTIONS or (
            rule.get("action") == "FailIndex" and "backoffLimitPerIndex" not in spec
        ):
            failures.append(f"{where}.action: {rule.get('action')!r} is not supported here")
        if ("onExitCodes" in rule) == bool(rule.get("onPodConditions")):
            failures.append(f"{where}: specify exactly one of onExitCodes and onPodConditions")
        patterns = rule.get("onPodConditions", [])
        if len(patterns) > MAX_PATTERNS:
            failures.append(f"{where}.onPodConditions: too many")
        for j, pattern in enumerate(patterns):
            if not QUALIFIED_NAME.fullmatch(str(pattern.get("type", ""))):
                failures.append(f"{where}.onPodConditions[{j}].type: not a qualified name")
            if pattern.get("status") not in CONDITION_STATUS:
                failures.append(f"{where}.onPodConditions[{j}].status: must be one of {sorted(CONDITION_STATUS)}")
    return failures


def survives_preemption(job: dict[str, Any]) -> bool:
    """Whether the Job's first matching rule for a pod disrupted by a spot reclaim is Ignore
    (rules are tried in order; a disrupted pod carries ``DisruptionTarget=True``)."""
    for rule in job["spec"].get("podFailurePolicy", {}).get("rules", []):
        if {"type": "DisruptionTarget", "status": "True"} in rule.get("onPodConditions", []):
            return rule["action"] == "Ignore"
    return False


@pytest.fixture(scope="module")
def table1():
    """spotDNN Table I solved exactly, with the hardware of its types and of the PS."""
    problem = read_instance("embedded:spot/paper-table1.json")
    catalog = Catalog(
        name="c",
        region="us-east-1",
        snapshot="2022-05-31T23:52:09Z",
        instance_types=(
            CatalogEntry(name="g3.8xlarge", gpus=2, vcpus=32, memory_gb=244.0),
            CatalogEntry(name="g3.16xlarge", gpus=4, vcpus=64, memory_gb=488.0),
            CatalogEntry(name="m5.xlarge", gpus=0, vcpus=4, memory_gb=16.0),
        ),
    )
    return plan_document(dnnprov.solve(problem, "milp"), problem, catalog)


@pytest.mark.parametrize("api,release", [(api, r) for api, releases in CLAIMS.items() for r in releases])
def test_export_is_a_valid_create_for_each_claimed_release(table1, api: str, release: str) -> None:
    """Every Kueue object of the export passes the CRD schema and CEL rules of each release it claims."""
    documents = _export(table1, api, namespace="ml")
    flavors = len(table1.counts()) + 1  # one per (type, market) of the workers, and the PS's own
    assert [d["kind"] for d in documents] == ["ResourceFlavor"] * flavors + ["ClusterQueue", "LocalQueue"]
    for document in documents:
        check_against_crds(document, release)


def test_checker_catches_what_kueue_refuses(table1) -> None:
    """The checker is not vacuous: a flavor missing a covered resource breaks the CEL rule, a bad taint too."""
    documents = _export(table1, KUEUE_APIS[0])
    queue = copy.deepcopy(next(d for d in documents if d["kind"] == "ClusterQueue"))
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    with pytest.raises(AssertionError, match="same number of resources as the coveredResources"):
        check_against_crds(queue, "v0.16.9")
    flavor = copy.deepcopy(documents[0])
    flavor["spec"]["nodeTaints"] = [{"key": "dnnprov.io/role", "value": "ps", "effect": "Sometimes"}]
    with pytest.raises((AssertionError, jsonschema.ValidationError)):
        check_against_crds(flavor, "v0.16.9")


@pytest.fixture(scope="module")
def table1_pools(table1):
    """Table I with g3.8xlarge in two us-east-1 pools of 3 (its 5 spot workers must be split) and g3.16xlarge in one."""
    d = table1.problem.to_dict()
    d["instance_types"]["g3.8xlarge"]["zones"] = [
        {"zone": "us-east-1a", "capacity": 3},
        {"zone": "us-east-1b", "capacity": 3, "spot_price_per_h": 0.5},
    ]
    d["instance_types"]["g3.16xlarge"]["zones"] = [{"zone": "us-east-1f"}]
    problem = problem_from_dict(d)
    return plan_document(dnnprov.solve(problem, "milp"), problem, table1.catalog)


@pytest.mark.parametrize("api,release", [(api, r) for api, releases in CLAIMS.items() for r in releases])
def test_pool_export_is_a_valid_create_for_each_claimed_release(table1_pools, api: str, release: str) -> None:
    """Per-zone flavors (nodeLabels with the zone) and their quotas pass every claimed release's schema and CEL rules."""
    documents = _export(table1_pools, api)
    counts = table1_pools.counts()
    assert counts["g3.8xlarge"] == 5 and counts["g3.16xlarge"] == 2  # the pools change no solve
    zones = [
        d["spec"]["nodeLabels"].get("topology.kubernetes.io/zone") for d in documents if d["kind"] == "ResourceFlavor"
    ]
    # g3.16xlarge (4 GPUs) in its pool, g3.8xlarge cheapest pool first (1b at $0.5/h holds 3), g4dn.4xlarge, the PS
    assert zones == ["us-east-1f", "us-east-1b", "us-east-1a", None, None]
    for document in documents:
        check_against_crds(document, release)


def _many_types(n: int):
    catalog = Catalog(
        name="c",
        region="us-east-1",
        snapshot="2026-11-01T00:00:00Z",
        instance_types=tuple(CatalogEntry(name=f"g{i}.xlarge", gpus=1, vcpus=4, memory_gb=16.0) for i in range(n)),
    )
    return PlanDocument(
        result={
            "status": "feasible",
            "kind": "spot",
            "instance": "many",
            "plan": {"counts": {f"g{i}.xlarge": 1 for i in range(n)}, "ps": 1},
        },
        catalog=catalog,
    )


def test_more_flavors_than_a_resource_group_holds_are_refused() -> None:
    """63 worker flavors and the PS's fill Kueue's 64; one more is refused by dnnprov, as by the CRD itself."""
    documents = _export(_many_types(63), KUEUE_APIS[0])
    for document in documents:
        check_against_crds(document, "v0.16.9")
    with pytest.raises(InvalidInputError, match="^result.plan.counts: the plan needs 65 flavors"):
        _export(_many_types(64), KUEUE_APIS[0])
    queue = copy.deepcopy(next(d for d in documents if d["kind"] == "ClusterQueue"))
    group = queue["spec"]["resourceGroups"][0]
    group["flavors"].append({**group["flavors"][0], "name": "one-more"})
    with pytest.raises(jsonschema.ValidationError, match="is too long"):
        check_against_crds(queue, "v0.16.9")


@pytest.mark.parametrize("api", KUEUE_APIS)
@pytest.mark.parametrize("fixture", ["table1", "table1_pools"])
def test_jobs_survive_spot_preemption(fixture: str, api: str, request: pytest.FixtureRequest) -> None:
    """Every Job is valid for the API server and ignores disruptions, with a few retries for real failures
    (issue 28: ``backoffLimit: 0`` and no pod failure policy let one spot preemption fail a Job for good)."""
    documents = list(
        yaml.safe_load_all(export(request.getfixturevalue(fixture), "kueue", ExportOptions(kueue_api=api)))
    )
    jobs = [d for d in documents if d["kind"] == "Job"]
    assert len(jobs) == sum(d["kind"] == "ResourceFlavor" for d in documents)
    for job in jobs:
        assert job_failures(job) == [] and survives_preemption(job)
        assert job["spec"]["backoffLimit"] >= 1
    for document in documents:
        if document["apiVersion"].startswith("kueue.x-k8s.io/"):
            check_against_crds(document, "v0.16.9")


def test_job_checker_catches_what_kubernetes_refuses(table1) -> None:
    """The Job checker is not vacuous: a restart policy a failure policy refuses, an unknown action,
    a rule with no condition, a bad status; and a policy that counts disruptions does not survive them."""
    (job, *_) = [d for d in yaml.safe_load_all(export(table1, "kueue")) if d["kind"] == "Job"]
    broken = copy.deepcopy(job)
    broken["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    rule = broken["spec"]["podFailurePolicy"]["rules"][0]
    rule["action"] = "Retry"
    rule["onPodConditions"][0]["status"] = "Yes"
    broken["spec"]["podFailurePolicy"]["rules"].append({"action": "FailJob"})
    assert len(job_failures(broken)) == 4
    counted = copy.deepcopy(job)
    counted["spec"]["podFailurePolicy"]["rules"][0]["action"] = "Count"
    assert job_failures(counted) == [] and not survives_preemption(counted)
    del counted["spec"]["podFailurePolicy"]
    assert not survives_preemption(counted)
