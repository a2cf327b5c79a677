"""Fixtures of the cloud tests (a plugin: ``pytest_plugins = ["conftest_aws"]``).

A moto server in server mode on 127.0.0.1 (one per session, state reset per test), fake
credentials from environment variables, botocore ``Stubber`` clients for the APIs moto
does not implement, the shared real data, and the spec's ResNet-110 reference problem.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

import dnnprov

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FAKE_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
FAKE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# spec/spot.md section 6: name, GPUs, spot $/h, speed samples/s, per-GPU batch
RESNET110 = (
    ("p3.2xlarge", 1, 0.918, 1885.0, 1024),
    ("g4dn.4xlarge", 1, 0.3612, 750.0, 1024),
    ("g3.8xlarge", 2, 0.6840, 1018.0, 512),
    ("g3.16xlarge", 4, 1.5676, 1995.0, 512),
    ("p2.8xlarge", 8, 2.1600, 2115.0, 1024),
)
RESNET110_WORKLOAD = {
    "name": "resnet110-cifar100",
    "param_size_mb": 11.5,
    "bandwidth_req_mb_s": 142.0,
    "alpha_1": 0.8,
    "beta_1": -1.92,
    "gamma_1": 876.5,
    "gamma_2": -0.2,
    "gamma_3": 2507.6,
    "gamma_4": 0.0,
    "gamma_5": 0.5,
    "loss_variant": "no-cc",
}


def _resnet110(
    quotas: tuple[int, ...] = (0, 5, 5, 5, 5), *, loss: float = 0.8, time_s: float = 2600.0, model: str = "reference"
) -> dnnprov.SpotProblem:
    """The authors' reference ResNet-110 problem; the defaults are the paper's Table I situation."""
    types = tuple(
        dnnprov.InstanceType(name=n, gpus=g, quota=q, spot_price_per_h=p, speed_samples_per_s=s, batch_per_gpu=b)
        for (n, g, p, s, b), q in zip(RESNET110, quotas, strict=True)
    )
    workload = dict(RESNET110_WORKLOAD, loss_variant="no-cc" if model == "reference" else "cc")
    return dnnprov.SpotProblem(
        instance_types=types,
        workload=dnnprov.SpotWorkload(**workload),
        slo=dnnprov.SpotSLO(loss=loss, time_s=time_s),
        model=model,
        name=f"resnet110-table1-{model}",
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """A moto server (server mode) on a free port of 127.0.0.1; its base URL."""
    server_module = pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and region in the environment; no profile, file or metadata lookup."""
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def moto_url(moto_server: str, aws_env: None) -> str:
    """The moto server's URL, its state reset for this test."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=60).close()
    return moto_server


@pytest.fixture
def stubbed(aws_env: None) -> Iterator[dict[str, tuple[object, Stubber]]]:
    """``service -> (client, Stubber)`` for pricing, service-quotas, lambda and ec2.

    Each Stubber checks requests and responses against AWS's API model; every queued
    response must be consumed by the end of the test.
    """
    stubs = {}
    for service in ("pricing", "service-quotas", "lambda", "ec2"):
        client = boto3.client(service, region_name="us-east-1")
        stubber = Stubber(client)
        stubber.activate()
        stubs[service] = (client, stubber)
    yield stubs
    for _, stubber in stubs.values():
        stubber.assert_no_pending_responses()
        stubber.deactivate()


@pytest.fixture
def ref_resnet110():
    """The builder of the reference ResNet-110 problem (Table I situation by default)."""
    return _resnet110


@pytest.fixture
def fake_credentials() -> tuple[str, str]:
    """The fake access key id and secret that :func:`aws_env` puts in the environment."""
    return FAKE_KEY_ID, FAKE_SECRET


@pytest.fixture
def shared_data() -> Path:
    """The shared real data folder (skips when a fresh clone does not have it)."""
    if not (SHARED_DATA / "MANIFEST.md").is_file():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it lives beside the repository)")
    return SHARED_DATA
