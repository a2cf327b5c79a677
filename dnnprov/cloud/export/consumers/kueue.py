"""Kueue export of a spot plan: flavors, quotas, queues, the PS Service and one Job per flavor.

Objects, in the order ``kubectl apply`` should create them:

- one ResourceFlavor per (type, market) of the workers, and for a spot type with pools
  (``instance_types.<type>.zones``) one per (type, zone) the plan places it on, as the EC2
  export does (all in the cheapest pool that holds them, else cheapest first within each
  pool's capacity). Flavors are ordered most specific first: most GPUs per node first, a
  type's zone flavors in placement order, then the PS flavor, always its own (``ps-...``,
  on-demand) even when the PS type is also a worker type. Each flavor's ``nodeLabels`` pin
  the instance type (``node.kubernetes.io/instance-type``), the market
  (``karpenter.sh/capacity-type``), the role (``dnnprov.io/role``: ``worker`` or ``ps``)
  and, for a pool, the zone (``topology.kubernetes.io/zone``); the PS flavor's nodes carry
  the taint ``dnnprov.io/role=ps:NoSchedule``, which only the PS pods tolerate;
- a ClusterQueue with one resource group covering ``pods``, ``cpu``, ``memory`` and
  ``nvidia.com/gpu`` whose flavors are listed in that order (Kueue tries a group's flavors
  in list order: a pod selecting only a type fills its pools in placement order), each
  with the pods placed on it as nominal quotas; and a LocalQueue pointing at it;
- a headless Service for the PS pods, and one Indexed Job per flavor (the PS Job first)
  with the queue label, an image placeholder, GPU, CPU and memory requests and a
  nodeSelector equal to its flavor's labels. Workers find the PS at ``DNNPROV_PS_ADDR``.
  A pod lost to a disruption (its spot node reclaimed: condition ``DisruptionTarget``) is
  replaced and not counted (``podFailurePolicy``); other pod failures are retried up to
  :data:`BACKOFF_LIMIT` times before the Job fails.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from dnnprov.cloud.export.names import (
    DNS_LABEL,
    DNS_LABEL_MAX,
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    UniqueNames,
    k8s_name,
    label_value,
    require,
)
from dnnprov.cloud.export.placement import aws_type, plan_region, region_pools, split, worker_regions
from dnnprov.cloud.export.plan import PlanDocument, dump_yaml, hardware, split_label
from dnnprov.errors import InvalidInputError
from dnnprov.problems.validation import checks as check

KUEUE_APIS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
KUEUE_API = KUEUE_APIS[0]  # served from Kueue 0.15, the storage version from 0.16; v1beta1 on request
IMAGE = "registry.example.com/dnnprov/trainer:replace-me"
ROLE_LABEL, TYPE_LABEL, MARKET_LABEL = (
    "dnnprov.io/role",
    "node.kubernetes.io/instance-type",
    "karpenter.sh/capacity-type",
)
PLAN_LABEL, QUEUE_LABEL, ZONE_LABEL = "dnnprov.io/plan", "kueue.x-k8s.io/queue-name", "topology.kubernetes.io/zone"
#: Most flavors a ClusterQueue resource group lists (the CRDs' ``maxItems``, Kueue 0.14 to head).
MAX_FLAVORS = 64
PS_TAINT = {"key": ROLE_LABEL, "value": "ps", "effect": "NoSchedule"}
PS_PORT = 2222
#: An Indexed Job's pods are named (and their hostnames) ``<job>-<index>``: room for a 6-digit index in 63.
JOB_NAME_MAX = 56
#: Share of a node's vCPUs and memory a pod requests; the rest stays for the kubelet and daemons.
POD_SHARE = 0.9
#: Pod failures (not disruptions) a Job retries before it fails: a crashing trainer fails fast.
BACKOFF_LIMIT = 3
#: A pod that fails because its node went away (a spot reclaim, a drain, an eviction, preemption:
#: Kubernetes marks it ``DisruptionTarget``) is replaced without counting against ``backoffLimit``.
POD_FAILURE_POLICY = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}
COMMAND = (
    'echo "dnnprov placeholder: run your $DNNPROV_ROLE process (index $JOB_COMPLETION_INDEX; '
    'PS at $DNNPROV_PS_ADDR:$DNNPROV_PS_PORT)"'
)


def _node_label(field: str, value: str, label: str, what: str) -> str:
    """``value`` as the node label ``label`` must carry it; a value no node can carry is refused."""
    if len(value) > LABEL_VALUE_MAX or LABEL_VALUE.fullmatch(value) is None:
        raise InvalidInputError(
            field,
            f"{value!r} cannot be a Kubernetes label value (at most 63 letters, "
            "digits, '-', '_' and '.', alphanumeric at both ends), so no node carries it "
            f"as {label}: {what}",
        )
    return value


@dataclass(frozen=True)
class _Flavor:
    """The pods of one ResourceFlavor: role, type, market, zone (None: the region) and each pod's hardware."""

    role: str
    type_name: str
    market: str
    zone: str | None
    pods: int
    gpus: int
    vcpus: int | None
    memory_gib: float | None

    def node_labels(self) -> dict[str, str]:
        """The labels its nodes carry (and its pods select)."""
        labels = {TYPE_LABEL: self.type_name, MARKET_LABEL: self.market, ROLE_LABEL: self.role}
        return labels | ({ZONE_LABEL: self.zone} if self.zone else {})

    def key(self) -> str:
        """What its flavor and Job names are made from."""
        return f"{self.role}-{self.type_name}-{self.market}" + (f"-{self.zone}" if self.zone else "")


def _worker_flavors(doc: PlanDocument) -> list[_Flavor]:
    """The workers' flavors, most specific first: most GPUs (then vCPUs, memory) per node, spot before
    on-demand, a type's pools in placement order (the EC2 export's: ``placement.split``)."""
    region = plan_region(doc)
    regions = sorted(worker_regions(doc))
    if len(regions) > 1:
        raise InvalidInputError(
            "result.plan",
            f"the plan's workers lie in {len(regions)} regions ({', '.join(regions)}) and a Kueue cluster "
            "is in one: build the instance from one region's pools (dnnprov build --region R) and solve again",
        )
    flavors = []
    for label, count in doc.counts().items():
        name, market = split_label(label)
        type_name = aws_type(name)  # the plan's region is the cluster's: the node label is the AWS type
        field = f"result.plan.counts.{label}"
        gpus, vcpus, memory = hardware(doc, name)
        if gpus is None:
            raise InvalidInputError(
                "catalog",
                f"the kueue export needs the GPU count of {name}: "
                "wrap the plan with its instance or catalog (--instance / --catalog)",
            )
        _node_label(field, type_name, TYPE_LABEL, "it is no EC2 instance type")
        pools = region_pools(doc, label, region)
        for zone, pods in split(pools, count, label) if pools else [(None, count)]:
            if zone is not None:
                _node_label(f"instance_types.{name}.zones", zone, ZONE_LABEL, "it is no availability zone")
            flavors.append(_Flavor("worker", type_name, market, zone, pods, gpus, vcpus, memory))
    return sorted(flavors, key=lambda f: (-f.gpus, -(f.vcpus or 0), -(f.memory_gib or 0), f.market != "spot"))


def _per_pod(gpus: int, vcpus: int | None, memory_gib: float | None) -> tuple[int, int, int]:
    """GPUs, millicores and MiB a pod requests: its node's GPUs and POD_SHARE of its vCPUs and memory (0: unknown)."""
    return gpus, math.floor((vcpus or 0) * 1000 * POD_SHARE), math.floor((memory_gib or 0) * 1024 * POD_SHARE)


def _quantities(gpus: int, millicores: int, mib: int) -> dict[str, Any]:
    """Kubernetes quantities of nonzero amounts: ``{"cpu": "14400m", "memory": "58982Mi", "nvidia.com/gpu": 1}``."""
    out: dict[str, Any] = {"cpu": f"{millicores}m", "memory": f"{mib}Mi", "nvidia.com/gpu": gpus}
    return {k: v for k, v in out.items() if v not in (0, "0m", "0Mi")}


def kueue_documents(
    doc: PlanDocument, queue_name: str | None = None, *, namespace: str = "default", api_version: str = KUEUE_API
) -> list[dict[str, Any]]:
    """The Kueue and Kubernetes objects of a spot plan (see the module docstring), in apply order."""
    doc.require_spot()
    api_version = check.choice("kueue_api", api_version, KUEUE_APIS)
    namespace = require(
        "namespace",
        namespace,
        DNS_LABEL,
        DNS_LABEL_MAX,
        "a Kubernetes namespace is a DNS-1123 label: lower-case letters, digits and '-', alphanumeric at both ends",
    )
    if queue_name is not None:
        require(
            "queue_name",
            queue_name,
            DNS_SUBDOMAIN,
            LABEL_VALUE_MAX,
            "a queue name is a DNS-1123 subdomain and a label value: lower-case letters, digits, '-' and '.', "
            "alphanumeric at both ends",
        )
    names = UniqueNames(k8s_name)
    queue = queue_name or names(doc.name)
    base = k8s_name(doc.name, 30)
    plan = label_value(doc.name) or "dnnprov"
    service = names(f"{base}-ps")
    workers = _worker_flavors(doc)
    ps_gpus, ps_vcpus, ps_memory = hardware(doc, doc.ps_type)
    ps_type = _node_label("instance.platform.ps_type", doc.ps_type, TYPE_LABEL, "it is no EC2 instance type")
    pods = [*workers, _Flavor("ps", ps_type, "on-demand", None, doc.ps, ps_gpus or 0, ps_vcpus, ps_memory)]
    if len(pods) > MAX_FLAVORS:
        raise InvalidInputError(
            "result.plan.counts",
            f"the plan needs {len(pods)} flavors (one per type, market and "
            f"pool, and the PS's) and a Kueue resource group lists at most {MAX_FLAVORS}",
        )
    flavors, queue_flavors, jobs = [], [], []
    job_names = UniqueNames(k8s_name, JOB_NAME_MAX)
    ps_job = job_names(f"{base}-ps-job")
    ps_addr = f"{ps_job}-0.{service}.{namespace}.svc"
    covered = ["pods", "cpu", "memory", "nvidia.com/gpu"]
    for f in pods:
        flavor = names(f.key())
        node_labels = f.node_labels()
        spec: dict[str, Any] = {"nodeLabels": node_labels}
        if f.role == "ps":
            spec["nodeTaints"] = [PS_TAINT]
        flavors.append(
            {"apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": spec}
        )
        pod_gpus, millicores, mib = _per_pod(f.gpus, f.vcpus, f.memory_gib)
        requests = _quantities(pod_gpus, millicores, mib)
        quota = {
            "pods": f.pods,
            "cpu": f"{f.pods * millicores}m",
            "memory": f"{f.pods * mib}Mi",
            "nvidia.com/gpu": f.pods * pod_gpus,
        }
        queue_flavors.append({"name": flavor, "resources": [{"name": r, "nominalQuota": quota[r]} for r in covered]})
        job = ps_job if f.role == "ps" else job_names(f"{base}-{f.key().removeprefix('worker-')}")
        jobs.append(_job(job, namespace, queue, plan, f.role, f.pods, node_labels, requests, service, ps_addr))
    jobs.sort(key=lambda j: j["metadata"]["labels"][ROLE_LABEL] != "ps")
    documents = flavors + [
        {
            "apiVersion": api_version,
            "kind": "ClusterQueue",
            "metadata": {"name": queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": covered, "flavors": queue_flavors}],
            },
        },
        {
            "apiVersion": api_version,
            "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": namespace},
            "spec": {"clusterQueue": queue},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": namespace},
            "spec": {
                "clusterIP": "None",
                "selector": {PLAN_LABEL: plan, ROLE_LABEL: "ps"},
                "ports": [{"name": "ps", "port": PS_PORT}],
            },
        },
    ]
    return documents + jobs


def _job(
    name: str,
    namespace: str,
    queue: str,
    plan: str,
    role: str,
    count: int,
    node_labels: dict[str, str],
    requests: dict[str, Any],
    service: str,
    ps_addr: str,
) -> dict[str, Any]:
    """An Indexed Job of ``count`` pods on one flavor, suspended until Kueue admits it."""
    labels = {PLAN_LABEL: plan, ROLE_LABEL: role}
    limits = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}
    container = {
        "name": role,
        "image": IMAGE,
        "command": ["sh", "-c", COMMAND],
        "env": [
            {"name": "DNNPROV_ROLE", "value": role},
            {"name": "DNNPROV_PS_ADDR", "value": ps_addr},
            {"name": "DNNPROV_PS_PORT", "value": str(PS_PORT)},
        ],
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    if role == "ps":
        container["ports"] = [{"name": "ps", "containerPort": PS_PORT}]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": service,
        "nodeSelector": node_labels,
        "containers": [container],
    }
    if role == "ps":
        pod["tolerations"] = [{**PS_TAINT, "operator": "Equal"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue, **labels}},
        "spec": {
            "parallelism": count,
            "completions": count,
            "completionMode": "Indexed",
            "suspend": True,
            "backoffLimit": BACKOFF_LIMIT,
            "podFailurePolicy": copy.deepcopy(POD_FAILURE_POLICY),
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def kueue_yaml(
    doc: PlanDocument, queue_name: str | None = None, *, namespace: str = "default", api_version: str = KUEUE_API
) -> str:
    """The :func:`kueue_documents` as one YAML stream (``kubectl apply -f`` takes it)."""
    documents = kueue_documents(doc, queue_name, namespace=namespace, api_version=api_version)
    return dump_yaml(
        documents,
        f"Kueue quotas and Jobs of a dnnprov plan: {sum(doc.counts().values())} workers "
        f"and {doc.ps} PS node(s). Replace the image and command placeholders.",
    )
