"""The client tests' own machinery: a missing client skips (fails under CI), and the
network guard refuses and records anything past loopback."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.clients.support import MissingClient, NetworkGuard, import_client, in_ci, is_loopback


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("", False), ("false", False)])
def test_in_ci_reads_the_ci_variable(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_a_missing_client_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no_such_client_pkg is not installed"):
        import_client("no_such_client_pkg")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(MissingClient, match="CI must run every client test"):
        import_client("no_such_client_pkg")


@pytest.mark.parametrize("host, local", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                         ("[::1]", True), ("api.openai.com", False), ("10.0.0.1", False),
                                         ("8.8.8.8", False), (b"127.0.0.2", True)])
def test_is_loopback(host, local):
    assert is_loopback(host) is local


def test_guard_refuses_and_records_past_loopback(monkeypatch):
    guard = NetworkGuard().install(monkeypatch)
    with pytest.raises(httpx.ConnectError):
        httpx.get("http://api.openai.com/v1/models", timeout=5)
    with socket.socket() as s, pytest.raises(OSError, match="no network past loopback"):
        s.connect(("192.0.2.1", 80))
    assert guard.attempts == ["resolve 'api.openai.com'", "connect ('192.0.2.1', 80)"]
    with socket.socket() as server:  # loopback still works
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
    assert len(guard.attempts) == 2
