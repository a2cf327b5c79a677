"""What a hostile or careless client found (audit a2): repeated single-valued headers, replays
of accepted jobs while the tenant is full, jobs the worker would refuse, and errors naming
fields the body does not have. The real `dnnprov serve` on a loopback port."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

httpx = pytest.importorskip("httpx", reason="httpx is in the test extra")
pytest.importorskip("fastapi", reason="the service extra (fastapi, uvicorn) is in the test extra")

from service_helpers import TABLE1, server, slow_instance, wait_for  # noqa: E402 - needs the importorskip above

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
SERVERLESS = "embedded:serverless/paper-table3-resnet50.json"
SLOW = {"instance": slow_instance(10), "method": "enumerate", "max_plans": 10**9, "time_limit_s": 30}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Tenants alice and bob, one long and one short worker, 2 places a lane (so 1 per tenant)."""
    tmp = tmp_path_factory.mktemp("hostile")
    (tmp / "tokens").write_text(f"alice {ALICE}\nbob {BOB}\n")
    with server(tmp, "--workers", "1", "--max-pending", "2", "--token-file", str(tmp / "tokens")) as (url, _, _):
        yield url


def client_of(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def error_of(answer: httpx.Response) -> tuple[int, str]:
    """The status and the field of an error answer (one JSON error, never a traceback)."""
    assert "Traceback" not in answer.text
    return answer.status_code, answer.json()["error"]["field"]


@pytest.mark.parametrize("tokens", [("wrong-token-0123456789abcdef", ALICE), (ALICE, BOB), (ALICE, ALICE)])
def test_a_repeated_authorization_is_refused(url: str, tokens: tuple[str, str]) -> None:
    """Two Authorization headers: 400, whichever they are. The last one used to count, so a wrong
    token before a good one passed, and alice's and bob's tokens read bob's jobs (a proxy in front
    may have checked the first)."""
    headers = [("Authorization", f"Bearer {token}") for token in tokens]
    answer = httpx.get(f"{url}/v1/jobs", headers=headers)
    assert error_of(answer) == (400, "Authorization")
