"""The EC2 query protocol as the twin (:mod:`dnnprov.control.twin.server`) speaks it.

Requests are form-encoded ``Action=...&Name.N.Member=...`` bodies; answers are XML in the
2016-11-15 namespace, errors ``<Response><Errors><Error>`` as EC2 sends them (botocore's
``ClientError.response['Error']['Code']`` reads the code). Nothing here holds state.
"""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"
XML_TYPE = "text/xml;charset=UTF-8"
#: Spot request status codes (EC2's names).
FULFILLED, MARKED, RECLAIMED, BY_USER = (
    "fulfilled",
    "marked-for-termination",
    "instance-terminated-no-capacity",
    "instance-terminated-by-user",
)
STATUS_MESSAGES = {
    FULFILLED: "Your spot request is fulfilled.",
    MARKED: "Your Spot Instance has been marked for termination because there is no Spot capacity available "
    "that matches your request.",
    RECLAIMED: "Your Spot Instance was terminated because there is no Spot capacity available that matches your "
    "request.",
    BY_USER: "Spot Instance terminated due to user-initiated termination.",
}
#: The filters of DescribeSpotInstanceRequests the twin answers (``tag:KEY`` besides).
SPOT_FILTERS = (
    "instance-id",
    "spot-instance-request-id",
    "state",
    "status-code",
    "launched-availability-zone",
    "launch.instance-type",
    "tag-key",
    "type",
    "product-description",
)
Params = list[tuple[str, str]]


def parse_params(body: bytes, query: str = "") -> Params:
    """The request's parameters, query string first, then the form body (order kept)."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if body:
        pairs += parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return pairs


def encode_params(params: Params) -> bytes:
    """The form body of ``params``."""
    return urlencode(params).encode()


def first(params: Params, name: str, default: str | None = None) -> str | None:
    """The first value of parameter ``name``."""
    return next((v for k, v in params if k == name), default)


def replaced(params: Params, values: Mapping[str, str]) -> Params:
    """``params`` with each name of ``values`` set to its value (added when absent)."""
    out = [(k, values[k]) if k in values else (k, v) for k, v in params]
    out += [(k, v) for k, v in values.items() if all(k != name for name, _ in params)]
    return out


def indexed(params: Params, prefix: str) -> list[str]:
    """The values of ``PREFIX.1``, ``PREFIX.2``, ... (in index order)."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)$")
    found = [(int(m.group(1)), v) for k, v in params if (m := pattern.match(k))]
    return [v for _, v in sorted(found)]


def tag_specifications(params: Params) -> dict[str, dict[str, str]]:
    """``TagSpecification.N.ResourceType`` -> its tags (``Tag.M.Key``/``Value``)."""
    groups: dict[str, dict[str, dict[str, str]]] = {}
    for key, value in params:
        m = re.match(r"^TagSpecification\.(\d+)\.(ResourceType|Tag\.(\d+)\.(Key|Value))$", key)
        if m is None:
            continue
        spec = groups.setdefault(m.group(1), {"": {}})
        if m.group(2) == "ResourceType":
            spec[""]["type"] = value
        else:
            spec.setdefault(m.group(3), {})[m.group(4)] = value
    out: dict[str, dict[str, str]] = {}
    for spec in groups.values():
        tags = out.setdefault(spec[""].get("type", "instance"), {})
        for index, tag in spec.items():
            if index and "Key" in tag:
                tags[tag["Key"]] = tag.get("Value", "")
    return out


def filters(params: Params) -> dict[str, list[str]]:
    """``Filter.N.Name`` -> its ``Filter.N.Value.M`` values."""
    names = {m.group(1): v for k, v in params if (m := re.match(r"^Filter\.(\d+)\.Name$", k))}
    return {name: indexed(params, f"Filter.{n}.Value") for n, name in names.items()}


def credential_scope(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(region, service) of a SigV4 ``Authorization`` header, as moto reads them."""
    auth = headers.get("Authorization") or headers.get("authorization") or ""
    m = re.search(r"Credential=[^/]*/[^/]*/([^/]+)/([^/,]+)/", auth)
    return (m.group(1), m.group(2)) if m else (None, None)


def iso(base: datetime, seconds: float) -> str:
    """``base + seconds`` as EC2 writes times (``2023-08-27T00:02:00.000Z``)."""
    moment = (base + timedelta(seconds=seconds)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def request_id() -> str:
    """A fresh request id (EC2's are UUIDs)."""
    return str(uuid.uuid4())


def error(code: str, message: str, status: int = 400) -> tuple[int, list[tuple[str, str]], bytes]:
    """An EC2 error answer: ``(status, headers, body)``."""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{request_id()}</RequestID></Response>"
    )
    return status, [("Content-Type", XML_TYPE)], body.encode()


def insufficient_capacity(type_name: str, zone: str | None) -> tuple[int, list[tuple[str, str]], bytes]:
    """EC2's refusal of a launch beyond capacity (HTTP 500, ``InsufficientInstanceCapacity``)."""
    where = f"the Availability Zone you requested ({zone})" if zone else "the region you requested"
    return error(
        "InsufficientInstanceCapacity",
        f"We currently do not have sufficient {type_name} capacity in {where}. Our system will be "
        "working on provisioning additional capacity.",
        500,
    )


def launched(body: bytes) -> list[tuple[str, str | None]]:
    """(instance id, zone) of each instance of a RunInstances answer."""
    root = ET.fromstring(body)
    out = []
    for item in root.iterfind("./{*}instancesSet/{*}item"):
        instance_id = item.findtext("{*}instanceId")
        if instance_id:
            out.append((instance_id, item.findtext("./{*}placement/{*}availabilityZone")))
    return out


def with_twin_times(body: bytes, times: Mapping[str, tuple[str, str | None, bool]]) -> bytes:
    """A RunInstances or DescribeInstances answer with the twin's times: for each instance of
    ``times`` (id -> launch time, end time or None, reclaimed), ``launchTime``, and for an ended
    one the state reason (``Server.SpotInstanceTermination`` when reclaimed) and its time."""
    root = ET.fromstring(body)
    changed = False
    for item in root.iterfind(".//{*}instancesSet/{*}item"):
        known = times.get(item.findtext("{*}instanceId") or "")
        if known is None:
            continue
        launched, ended, reclaimed = known
        for child in item:
            name = child.tag.rsplit("}", 1)[-1]
            if name == "launchTime":
                child.text, changed = launched, True
            elif name == "reason" and ended is not None:
                stamp = ended.replace("T", " ").split(".")[0]
                child.text = f"{'Service' if reclaimed else 'User'} initiated ({stamp} GMT)"
            elif name == "stateReason" and ended is not None and reclaimed:
                for part in child:
                    part.text = {
                        "code": "Server.SpotInstanceTermination",
                        "message": "Server.SpotInstanceTermination: Spot instance termination",
                    }.get(part.tag.rsplit("}", 1)[-1], part.text)
    if not changed:
        return body
    if root.tag.startswith("{"):
        ET.register_namespace("", root.tag[1:].split("}", 1)[0])
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


@dataclass(frozen=True)
class SpotRequest:
    """One spot instance request as DescribeSpotInstanceRequests shows it."""

    request_id: str
    instance_id: str
    type_name: str
    zone: str | None
    state: str
    status_code: str
    update_time: str
    create_time: str
    spot_price: str
    tags: Mapping[str, str]

    def matches(self, name: str, values: Sequence[str]) -> bool:
        """Whether the request passes filter ``name`` (one of the values, ``*`` and ``?`` as wildcards)."""
        if name.startswith("tag:"):
            have: Iterable[str] = [self.tags[name[4:]]] if name[4:] in self.tags else []
        else:
            have = {
                "instance-id": [self.instance_id],
                "spot-instance-request-id": [self.request_id],
                "state": [self.state],
                "status-code": [self.status_code],
                "launched-availability-zone": [self.zone or ""],
                "launch.instance-type": [self.type_name],
                "tag-key": list(self.tags),
                "type": ["one-time"],
                "product-description": ["Linux/UNIX"],
            }[name]
        patterns = [re.compile("^" + re.escape(v).replace(r"\*", ".*").replace(r"\?", ".") + "$") for v in values]
        return any(p.match(h) for p in patterns for h in have)

    def xml(self) -> str:
        """The request's ``<item>``."""
        tags = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in self.tags.items())
        zone = escape(self.zone or "")
        return (
            f"<item><spotInstanceRequestId>{self.request_id}</spotInstanceRequestId>"
            f"<spotPrice>{escape(self.spot_price)}</spotPrice><type>one-time</type><state>{self.state}</state>"
            f"<status><code>{self.status_code}</code><updateTime>{self.update_time}</updateTime>"
            f"<message>{escape(STATUS_MESSAGES.get(self.status_code, ''))}</message></status>"
            f"<launchSpecification><instanceType>{escape(self.type_name)}</instanceType>"
            f"<placement><availabilityZone>{zone}</availabilityZone></placement></launchSpecification>"
            f"<instanceId>{self.instance_id}</instanceId><createTime>{self.create_time}</createTime>"
            f"<productDescription>Linux/UNIX</productDescription>"
            f"<launchedAvailabilityZone>{zone}</launchedAvailabilityZone>"
            f"<instanceInterruptionBehavior>terminate</instanceInterruptionBehavior>"
            f"<tagSet>{tags}</tagSet></item>"
        )


def spot_requests_answer(requests: Sequence[SpotRequest]) -> tuple[int, list[tuple[str, str]], bytes]:
    """A DescribeSpotInstanceRequests answer listing ``requests``."""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeSpotInstanceRequestsResponse xmlns="{NAMESPACE}">'
        f"<requestId>{request_id()}</requestId><spotInstanceRequestSet>"
        + "".join(r.xml() for r in requests)
        + "</spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>"
    )
    return 200, [("Content-Type", XML_TYPE)], body.encode()


def select_spot_requests(
    requests: Sequence[SpotRequest], params: Params
) -> list[SpotRequest] | tuple[int, list[tuple[str, str]], bytes]:
    """The requests a DescribeSpotInstanceRequests asks for, or EC2's error for a bad filter or id."""
    wanted = indexed(params, "SpotInstanceRequestId")
    known = {r.request_id for r in requests}
    missing = [w for w in wanted if w not in known]
    if missing:
        return error(
            "InvalidSpotInstanceRequestID.NotFound", f"The spot instance request ID '{missing[0]}' does not exist"
        )
    chosen = [r for r in requests if not wanted or r.request_id in wanted]
    for name, values in filters(params).items():
        if name not in SPOT_FILTERS and not name.startswith("tag:"):
            return error("InvalidParameterValue", f"The filter '{name}' is invalid")
        chosen = [r for r in chosen if r.matches(name, values)]
    return chosen
