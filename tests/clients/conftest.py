"""Real clients (SGLang's frontend, openai, langchain-openai, instructor, pydantic-ai,
openai-agents, litellm) against one live ``furca serve`` on the default model.

The server is started once for this package (``tests/server/conftest.py``'s
``ServerProcess``) and stopped when the package's tests are done. Every test that uses it
must leave it idle: nothing running or queued, every KV slot free or evictable, no lock
held. Every test runs under a ``NetworkGuard``: a client that tries to reach anything
past loopback fails its test. Under CI (``CI=true``) a missing client, or a client test
that skips for any reason, is a failure: CI installs the ``clients`` extra.
"""

from __future__ import annotations

import os

# Before any client is imported: litellm would fetch its model cost map at import, and
# LangSmith / the Agents SDK would ship traces to their clouds.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import httpx  # noqa: E402
import pytest  # noqa: E402

from tests.clients.support import NetworkGuard, in_ci  # noqa: E402
from tests.conftest import CLIENT_TIMEOUT  # noqa: E402
from tests.server.conftest import MODEL_NAME, ServerProcess, assert_idle  # noqa: E402


@pytest.fixture(scope="package")
def served():
    """The live server: ``url``, ``api_key``; ``/v1`` is the OpenAI base URL."""
    srv = ServerProcess()
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="package")
def base_url(served) -> str:
    return f"{served.url}/v1"


@pytest.fixture(scope="package")
def api_key(served) -> str:
    return served.api_key


@pytest.fixture(scope="package")
def model() -> str:
    return MODEL_NAME


@pytest.fixture(scope="package")
def http(served):
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=CLIENT_TIMEOUT) as c:
        yield c


@pytest.fixture(autouse=True)
def no_network_past_loopback(monkeypatch):
    guard = NetworkGuard().install(monkeypatch)
    yield guard
    assert not guard.attempts, f"a client tried to reach past loopback: {guard.attempts}"


@pytest.fixture(autouse=True)
def server_left_idle(request):
    """After a test that used the server: nothing running, every slot and lock returned."""
    http = request.getfixturevalue("http") if "served" in request.fixturenames else None
    yield
    if http is not None:
        assert_idle(http)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI a skipped client test is a failure: CI must run them all."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"client test skipped under CI (CI must run every client test): {report.longrepr}"
