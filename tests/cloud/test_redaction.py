"""Secrets never leave in an AWS error: redaction by value, against a real HTTP endpoint.

A small EC2-shaped server on 127.0.0.1 answers every request with an error whose message
echoes the caller's secret key and session token (neither shaped like an access key id)
and the access key id, as some endpoints and proxies do. Nothing of them may reach the
exception or the CLI's error line.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dnnprov.cli import main
from dnnprov.cloud.aws import AwsClients, CloudError, RetryPolicy, redact

pytest_plugins = ["conftest_aws"]

SECRET = "not/shaped+like-a-key_0123456789"
TOKEN = "IQoJb3JpZ2luX2VjE-session/token=="


class _Echo(BaseHTTPRequestHandler):
    """Answers with an EC2 error that quotes the request's credentials back."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        auth = self.headers.get("Authorization", "")
        key_id = auth.split("Credential=")[1].split("/")[0] if "Credential=" in auth else "?"
        message = (
            f"bad signature for secret {SECRET} (url-encoded {urllib.parse.quote(SECRET, safe='')}), "
            f"token {self.headers.get('X-Amz-Security-Token')}, key {key_id}"
        )
        body = (
            f"<Response><Errors><Error><Code>InvalidParameterValue</Code><Message>{message}</Message>"
            "</Error></Errors><RequestID>r-1</RequestID></Response>"
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def echo_server(aws_env, monkeypatch) -> Iterator[str]:
    """The echoing server's URL; the session holds SECRET and TOKEN."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_error_echoing_credentials_is_redacted_by_value(echo_server, fake_credentials):
    """The secret key, the session token (as is and URL-encoded) and the key id are removed."""
    clients = AwsClients("us-east-1", endpoint_url=echo_server, retry=RetryPolicy(attempts=1))
    with pytest.raises(CloudError) as info:
        clients.call("ec2", "DescribeInstanceTypes")
    text = str(info.value)
    assert "bad signature for secret" in text and info.value.code == "InvalidParameterValue"
    for secret in (SECRET, urllib.parse.quote(SECRET, safe=""), TOKEN, fake_credentials[0]):
        assert secret not in text
    assert text.count("<redacted>") == 4
    assert {SECRET, TOKEN, fake_credentials[0]} <= clients.secrets()


def test_cli_error_line_holds_no_secret(echo_server, fake_credentials, capsys, tmp_path):
    """`dnnprov catalog fetch` against the endpoint: one error line, no credential in it."""
    code = main(
        [
            "catalog",
            "fetch",
            "--region",
            "us-east-1",
            "--types",
            "g4dn.xlarge",
            "--endpoint-url",
            echo_server,
            "--out",
            str(tmp_path / "c.json"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and "<redacted>" in captured.err
    for secret in (SECRET, TOKEN, fake_credentials[0]):
        assert secret not in captured.err + captured.out
    assert not (tmp_path / "c.json").exists()


def test_redact_leaves_short_values_and_other_text():
    """Values shorter than 4 characters are not redacted (they would garble the text)."""
    assert redact("a b abcd", ["ab", "abcd"]) == "a b <redacted>"
