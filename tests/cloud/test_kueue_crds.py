"""The Kueue export against Kueue's own CRDs: OpenAPI schemas and their CEL rules, per release it claims.

The fixture ``kueue-crds-extract.json`` holds the ResourceFlavor, ClusterQueue and
LocalQueue CRD schemas of Kueue v0.14.8 (v1beta1 only), v0.15.8 and v0.16.9 (both) and
commit ff69552e79 (see its ``_source``). Each exported object is checked as the API server
would on create: ``metadata.name`` a DNS-1123 subdomain (cluster-scoped) and namespace a
DNS-1123 label, the ``openAPIV3Schema`` (jsonschema, with Kubernetes' int-or-string), and
every ``x-kubernetes-validations`` rule evaluated by a CEL interpreter (cel-python); rules
on ``oldSelf`` are transition rules, which the API server runs on updates only.
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
from dnnprov.io.catalog import Catalog, CatalogEntry
from dnnprov.io.instances import problem_from_dict, read_instance

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
celpy = pytest.importorskip("celpy", reason="cel-python evaluates the CRDs' CEL rules (test extra)")

CRDS = json.loads((Path(__file__).parent / "fixtures" / "kueue-crds-extract.json").read_text())["releases"]
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Which releases serve each API version the export offers (docs/cloud.md)
CLAIMS = {"kueue.x-k8s.io/v1beta1": ["v0.14.8", "v0.15.8", "v0.16.9"],
          "kueue.x-k8s.io/v1beta2": ["v0.15.8", "v0.16.9", "ff69552e79"]}
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
    return [d for d in yaml.safe_load_all(export(doc, "kueue", ExportOptions(kueue_api=api, **options)))
            if d["apiVersion"].startswith("kueue.x-k8s.io/")]


@pytest.fixture(scope="module")
def table1():
    """spotDNN Table I solved exactly, with the hardware of its types and of the PS."""
    problem = read_instance("embedded:spot/paper-table1.json")
    catalog = Catalog(name="c", region="us-east-1", snapshot="2022-05-31T23:52:09Z", instance_types=(
        CatalogEntry(name="g3.8xlarge", gpus=2, vcpus=32, memory_gb=244.0),
        CatalogEntry(name="g3.16xlarge", gpus=4, vcpus=64, memory_gb=488.0),
        CatalogEntry(name="m5.xlarge", gpus=0, vcpus=4, memory_gb=16.0)))
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
    d["instance_types"]["g3.8xlarge"]["zones"] = [{"zone": "us-east-1a", "capacity": 3},
                                                  {"zone": "us-east-1b", "capacity": 3, "spot_price_per_h": 0.5}]
    d["instance_types"]["g3.16xlarge"]["zones"] = [{"zone": "us-east-1f"}]
    problem = problem_from_dict(d)
    return plan_document(dnnprov.solve(problem, "milp"), problem, table1.catalog)


@pytest.mark.parametrize("api,release", [(api, r) for api, releases in CLAIMS.items() for r in releases])
def test_pool_export_is_a_valid_create_for_each_claimed_release(table1_pools, api: str, release: str) -> None:
    """Per-zone flavors (nodeLabels with the zone) and their quotas pass every claimed release's schema and CEL rules."""
    documents = _export(table1_pools, api)
    counts = table1_pools.counts()
    assert counts["g3.8xlarge"] == 5 and counts["g3.16xlarge"] == 2  # the pools change no solve
    zones = [d["spec"]["nodeLabels"].get("topology.kubernetes.io/zone") for d in documents if d["kind"] == "ResourceFlavor"]
    # g3.16xlarge (4 GPUs) in its pool, g3.8xlarge cheapest pool first (1b at $0.5/h holds 3), g4dn.4xlarge, the PS
    assert zones == ["us-east-1f", "us-east-1b", "us-east-1a", None, None]
    for document in documents:
        check_against_crds(document, release)


def _many_types(n: int):
    catalog = Catalog(name="c", region="us-east-1", snapshot="2026-11-01T00:00:00Z", instance_types=tuple(
        CatalogEntry(name=f"g{i}.xlarge", gpus=1, vcpus=4, memory_gb=16.0) for i in range(n)))
    return PlanDocument(result={"status": "feasible", "kind": "spot", "instance": "many", "plan": {
        "counts": {f"g{i}.xlarge": 1 for i in range(n)}, "ps": 1}}, catalog=catalog)


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
