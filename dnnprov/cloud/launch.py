"""Issuing a plan's EC2 launch calls, in one region or in several (issue 33).

:func:`issue_calls` sends the calls of :func:`dnnprov.cloud.export.run_instances_calls` or
:func:`~dnnprov.cloud.export.ec2_fleet_calls` in order and checks what each launched. A call of a
multi-region plan names its region (``ApiCall.region``) and goes to that region's endpoint:
:class:`RegionalClients` holds one :class:`~dnnprov.cloud.aws.AwsClients` per region, made on
first use (a plain :class:`~dnnprov.cloud.aws.AwsClients` serves one region and refuses a call
to another before anything is sent). What a fleet delivers is read back as the plan's
column labels (``TYPE@REGION`` where the call names its region), and instances to terminate
are terminated in their own regions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dnnprov.cloud.aws import AwsClients, CloudError, RetryPolicy
from dnnprov.cloud.export import ApiCall
from dnnprov.cloud.export.consumers.aws_calls import LAUNCH_OPERATIONS
from dnnprov.errors import InvalidInputError
from dnnprov.io.catalogs.catalog import qualified
from dnnprov.problems.spot import ON_DEMAND_SUFFIX


class RegionalClients:
    """One :class:`AwsClients` per region, made on first use; calls without a region go to ``default_region``."""

    def __init__(
        self, default_region: str | None, *, endpoint_url: str | None = None, retry: RetryPolicy | None = None
    ) -> None:
        self.default_region = default_region
        self.endpoint_url = endpoint_url
        self.retry = retry or RetryPolicy()
        self._by_region: dict[str, AwsClients] = {}

    def for_region(self, region: str | None) -> AwsClients:
        """The clients of ``region`` (``None``: the default region)."""
        region = region or self.default_region
        if region is None:
            raise InvalidInputError("region", "a call names no region and none is configured: pass --region")
        if region not in self._by_region:
            self._by_region[region] = AwsClients(region, endpoint_url=self.endpoint_url, retry=self.retry)
        return self._by_region[region]


def _route(clients: AwsClients | RegionalClients, call: ApiCall) -> AwsClients:
    """The clients ``call`` goes through (one region's clients refuse a call to another)."""
    if isinstance(clients, RegionalClients):
        return clients.for_region(call.region)
    if call.region is not None and call.region != clients.region:
        raise InvalidInputError(
            "calls",
            f"{call.operation} goes to {call.region}, these clients to {clients.region}: "
            "issue a multi-region plan's calls through RegionalClients",
        )
    return clients


@dataclass(frozen=True)
class CallOutcome:
    """What one issued call did: ``dry_run`` ok, or the instance ids launched and how many of each type."""

    call: ApiCall
    dry_run: bool
    instance_ids: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    types: tuple[tuple[str, int], ...] = ()

    def workers(self) -> dict[str, int]:
        """Instances launched per column label (``type``, or ``type:on-demand``; ``type@region``
        when the call names its region, as the columns of a multi-region plan)."""
        p = self.call.params
        on_demand = (
            p.get("TargetCapacitySpecification", {}).get("DefaultTargetCapacityType") == "on-demand"
            if self.call.operation == "CreateFleet"
            else "InstanceMarketOptions" not in p
        )
        region = self.call.region
        return {
            (t if region is None else qualified(t, region)) + (ON_DEMAND_SUFFIX if on_demand else ""): n
            for t, n in self.types
        }


#: Checks what the fleets delivered so far (workers per column label; True once every fleet answered).
DeliveryCheck = Callable[[Mapping[str, int], bool], None]


def issue_calls(
    calls: Sequence[ApiCall],
    clients: AwsClients | RegionalClients,
    *,
    dry_run: bool,
    check_delivery: DeliveryCheck | None = None,
) -> list[CallOutcome]:
    """Issue EC2 calls in order; with ``dry_run`` each carries ``DryRun=True`` (DryRunOperation = success).

    Each call goes to its region's endpoint (:func:`_route`: ``clients`` of one region refuse a
    call naming another, before any call is sent).

    Every launch call (RunInstances, CreateFleet) must carry a ClientToken (the calls of
    :class:`LaunchOptions` with a ``run_id``), so that a call retried after a lost answer, or
    sent again by a resumed run, launches nothing twice; one without is refused before any
    call is sent.

    A real launch stops at the first call that fails, returns errors or launches less than
    it asked for (a fleet's weighted capacity below its target, fewer instances than
    ``MinCount``): :class:`CloudError` then names what is short and the instances already
    launched, so that they can be found and terminated, and no later call (the PS) is sent.

    An instant fleet chooses its own mix among its overrides. After each real CreateFleet,
    ``check_delivery`` (e.g. :meth:`PlanDocument.check_delivery`) gets the workers the fleets
    delivered so far, and whether every fleet has answered; when it refuses them, every
    instance these calls launched is terminated at once (they are not the plan: a cluster
    over a quota, one that misses the deadline or the budget) and :class:`CloudError` names
    the field it broke, the delivered mix and the instances terminated (or, when the
    termination fails, those to terminate by hand). No later call is sent.
    """
    outcomes: list[CallOutcome] = []

    def launched() -> str:
        return _instances_text(outcomes)

    for call in calls:
        if call.service != "ec2":
            raise InvalidInputError("calls", f"only EC2 calls can be issued, got {call.service}:{call.operation}")
        if call.operation in LAUNCH_OPERATIONS and not call.params.get("ClientToken"):
            raise InvalidInputError(
                "calls",
                f"{call.operation} carries no ClientToken: build the calls with a run id "
                "(LaunchOptions.run_id) so that a retried launch is idempotent",
            )
        _route(clients, call)
    for call in calls:
        try:
            if dry_run:
                try:
                    _route(clients, call).call("ec2", call.operation, **call.params, DryRun=True)
                except CloudError as exc:
                    if exc.code != "DryRunOperation":
                        raise
                    outcomes.append(CallOutcome(call, dry_run=True))
                    continue
                raise CloudError(
                    f"aws ec2:{call.operation}",
                    "the endpoint ignored DryRun=True and may have launched instances: check the account",
                )
            response = _route(clients, call).call("ec2", call.operation, **call.params)
        except CloudError as exc:
            if launched():
                raise CloudError(exc.field, f"{exc.problem}; already launched: {launched()}", exc.code) from None
            raise
        ids = tuple(i["InstanceId"] for i in response.get("Instances", []) if "InstanceId" in i)
        ids += tuple(i for group in response.get("Instances", []) for i in group.get("InstanceIds", []))
        errors = tuple(f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in response.get("Errors", []))
        outcomes.append(CallOutcome(call, dry_run=False, instance_ids=ids, errors=errors, types=_types(response)))
        short = _shortfall(call, response)
        if short or errors:
            what = "; ".join(filter(None, [short, *errors]))
            raise CloudError(
                f"aws ec2:{call.operation}",
                f"{what}; nothing more was launched (no PS); already "
                f"launched: {launched() or 'none'}: terminate them or launch the rest",
            )
        if call.operation == "CreateFleet" and check_delivery is not None:
            _check_fleets(outcomes, calls, clients, check_delivery)
    return outcomes


def _types(response: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """Instances per type of a RunInstances or CreateFleet answer, in the answer's order."""
    out: dict[str, int] = {}
    for item in response.get("Instances", []):
        count = 1 if "InstanceId" in item else len(item.get("InstanceIds", []))
        if item.get("InstanceType") and count:
            out[item["InstanceType"]] = out.get(item["InstanceType"], 0) + count
    return tuple(out.items())


def _instances_text(outcomes: Sequence[CallOutcome]) -> str:
    """The instances launched: their ids, grouped by region when the calls name regions."""
    regions: dict[str | None, list[str]] = {}
    for o in outcomes:
        regions.setdefault(o.call.region, []).extend(o.instance_ids)
    named = {r: ids for r, ids in regions.items() if ids}
    if all(r is None for r in named):
        return ", ".join(i for ids in named.values() for i in ids)
    return "; ".join(f"in {r or 'the default region'}: {', '.join(ids)}" for r, ids in named.items())


def _check_fleets(
    outcomes: list[CallOutcome],
    calls: Sequence[ApiCall],
    clients: AwsClients | RegionalClients,
    check_delivery: DeliveryCheck,
) -> None:
    """Run ``check_delivery`` on what the fleets delivered so far; on a refusal terminate every
    instance launched and raise one :class:`CloudError` naming the field, the mix and the instances."""
    fleets = [o for o in outcomes if o.call.operation == "CreateFleet"]
    delivered: dict[str, int] = {}
    for outcome in fleets:
        for label, n in outcome.workers().items():
            delivered[label] = delivered.get(label, 0) + n
    try:
        check_delivery(delivered, len(fleets) == sum(c.operation == "CreateFleet" for c in calls))
    except InvalidInputError as violation:
        ids = [i for o in outcomes for i in o.instance_ids]
        mix = ", ".join(f"{n} x {label}" for label, n in delivered.items()) or "nothing"
        try:
            for o in outcomes:  # each region's instances through its own endpoint
                if o.instance_ids:
                    _route(clients, o.call).call("ec2", "TerminateInstances", InstanceIds=list(o.instance_ids))
            done = f"terminated the {len(ids)} instances launched ({_instances_text(outcomes) or 'none'})"
        except CloudError as exc:
            done = f"could not terminate them ({exc.problem}): terminate {_instances_text(outcomes)} by hand"
        raise CloudError(
            violation.field,
            f"{violation.problem}: EC2 Fleet delivered {mix}, not the plan; {done}; nothing more was launched (no PS)",
        ) from None


def _shortfall(call: ApiCall, response: Mapping[str, Any]) -> str:
    """What a launch delivered below its request ("" when in full)."""
    p = call.params
    if call.operation == "RunInstances":
        got = len(response.get("Instances", []))
        return f"{got} of {p['MinCount']} x {p['InstanceType']} launched" if got < p["MinCount"] else ""
    if call.operation != "CreateFleet":
        return ""
    weights = {
        o["InstanceType"]: o.get("WeightedCapacity", 1.0)
        for config in p["LaunchTemplateConfigs"]
        for o in config.get("Overrides", [])
    }
    capacity = 0.0
    for group in response.get("Instances", []):
        capacity += weights.get(group.get("InstanceType"), 0.0) * len(group.get("InstanceIds", []))
    target = p["TargetCapacitySpecification"]["TotalTargetCapacity"]
    return f"the fleet delivered a capacity of {capacity:g} of its target {target} (GPUs)" if capacity < target else ""
