"""The router app in-process with no replica listening (a closed port): what it answers
when it has nowhere to send a request."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from furca.errors import ConfigError
from furca.router import RouterConfig, create_router_app
from tests.conftest import wait_until
from tests.server.conftest import free_port


def _router(**kwargs) -> TestClient:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    return TestClient(create_router_app(RouterConfig(workers=(url,), health_interval=0.05, **kwargs)))


def test_no_healthy_replica_is_a_503_with_retry_after():
    with _router() as client:
        wait_until(lambda: client.get("/workers").json()["workers"][0]["last_error"], "a failed health check")
        worker = client.get("/workers").json()["workers"][0]
        assert worker["healthy"] is False and "refused" in worker["last_error"]
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["error"]["message"] == "no healthy replica"
        for path in ("/v1/chat/completions", "/generate", "/v1/models"):
            answer = client.post(path, json={"text": "hi"}) if path != "/v1/models" else client.get(path)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["retry-after"] == "5"
            assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
        metrics = client.get("/metrics").text
        assert f'furca_router_replica_healthy{{replica="{worker["url"]}"}} 0' in metrics


def test_an_oversized_body_is_a_413_before_routing():
    with _router(max_request_bytes=100) as client:
        answer = client.post("/generate", json={"text": "x" * 200})
        assert answer.status_code == 413 and "100 bytes" in answer.json()["error"]["message"]


def test_with_an_api_key_the_router_checks_it_first():
    with _router(api_key="s3cret") as client:
        assert client.get("/workers").status_code == 401  # the replicas' addresses stay hidden
        refused = client.post("/generate", json={"text": "hi"}, headers={"x-api-key": "wrong"})
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "AuthenticationError"
        assert client.get("/workers", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        passed = client.post("/generate", json={"text": "hi"}, headers={"Authorization": "Bearer s3cret"})
        assert passed.status_code == 503  # past the check: routed, and no replica is up
        assert client.get("/health").status_code == 503 and client.get("/metrics").status_code == 200


def test_an_empty_api_key_is_refused():
    with pytest.raises(ConfigError, match="api_key"):
        RouterConfig(workers=("http://127.0.0.1:1",), api_key="")
