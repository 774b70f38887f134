"""Shared helpers of the real-client tests: importing a client (skip, or fail under CI),
and a guard that no client reaches past the loopback interface.

Contract:
- ``in_ci()`` is true when the environment variable ``CI`` is set to a true value (CI runs
  ``bash .ci/run`` with ``CI=true``).
- ``import_client(module)`` returns the imported client module. When it is missing, it
  skips the calling test module (a plain ``pytest`` without the ``clients`` extra), or,
  under CI, raises ``MissingClient`` so collection fails: CI installs every client and
  must run every client test.
- ``NetworkGuard`` patches ``socket.getaddrinfo`` and ``socket.socket.connect`` so that a
  name or address that is not loopback is refused (``OSError``) and recorded in
  ``attempts``; tests assert it stays empty (a client phoning home is a failure even when
  the client swallows the error).
"""

from __future__ import annotations

import importlib
import importlib.util
import ipaddress
import os
import socket

import pytest

EXTRA_HINT = "`make test` installs the clients (pip install -e '.[test,clients]' plus the no-deps pins in the Makefile)"


class MissingClient(ImportError):
    """A client package is not installed where CI needs it."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes", "on"}


def client_missing(module: str, why: str = "") -> None:
    """Skip the calling test module, or fail (MissingClient) under CI."""
    msg = f"{module} is not installed{': ' + why if why else ''}; {EXTRA_HINT}"
    if in_ci():
        raise MissingClient(f"CI must run every client test: {msg}")
    pytest.skip(msg, allow_module_level=True)


def import_client(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        client_missing(module, str(e))


def require_installed(module: str) -> None:
    """Like ``import_client`` without importing (for clients run in a subprocess)."""
    if importlib.util.find_spec(module) is None:
        client_missing(module)


def is_loopback(host) -> bool:
    if host is None:
        return True  # a passive / local lookup
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host).strip("[]")
    if host in {"localhost", "localhost.localdomain", ""}:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class NetworkGuard:
    """Refuses and records every lookup or connection that is not loopback."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> "NetworkGuard":
        real_getaddrinfo = socket.getaddrinfo
        real_connect = socket.socket.connect
        real_connect_ex = socket.socket.connect_ex
        guard = self

        def getaddrinfo(host, *args, **kwargs):
            if not is_loopback(host):
                guard.attempts.append(f"resolve {host!r}")
                raise socket.gaierror(socket.EAI_NONAME, f"client tests: no network past loopback ({host})")
            return real_getaddrinfo(host, *args, **kwargs)

        def check(sock, address):
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address[0]):
                guard.attempts.append(f"connect {address!r}")
                raise OSError(f"client tests: no network past loopback ({address[0]})")

        def connect(sock, address):
            check(sock, address)
            return real_connect(sock, address)

        def connect_ex(sock, address):
            check(sock, address)
            return real_connect_ex(sock, address)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        return self
