"""`RuntimeEndpoint` picks the chat template the server reports in /get_model_info;
only a server that does not report one (SGLang) sends it to the model's files."""

from __future__ import annotations

import httpx
import pytest

from furca.lang.backends.runtime_endpoint import RuntimeEndpoint

FILE_TEMPLATE = "{% for m in messages %}FILE {{ m.role }}: {{ m.content }}\n{% endfor %}"
SERVER_TEMPLATE = "{% for m in messages %}{{ bos_token }}{{ m.role }}: {{ m.content }}{{ eos_token }}{% endfor %}"


@pytest.fixture
def endpoint(monkeypatch, tmp_path):
    """``endpoint(model_info) -> RuntimeEndpoint`` over a mock transport."""
    (tmp_path / "chat_template.jinja").write_text(FILE_TEMPLATE)
    real_client = httpx.Client

    def make(info: dict, **kwargs):
        info = {"model_path": str(tmp_path), **info}
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=info))
        monkeypatch.setattr(httpx, "Client", lambda **kw: real_client(transport=transport, **kw))
        return RuntimeEndpoint("http://server.test", **kwargs)

    return make


def _render(ep: RuntimeEndpoint) -> tuple[str, str]:
    return ep.chat_format().markers((), "user")


def test_the_servers_template_and_special_tokens(endpoint):
    ep = endpoint({"chat_template": SERVER_TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"})
    assert _render(ep) == ("<s>user: ", "</s>")


def test_a_server_without_a_template_means_chatml_not_local_files(endpoint, caplog):
    ep = endpoint({"chat_template": None, "bos_token": None, "eos_token": None})
    with caplog.at_level("WARNING", logger="furca.lang"):
        begin, _ = _render(ep)
    assert begin == "<|im_start|>user\n" and "ChatML" in caplog.text


def test_a_server_that_does_not_say_falls_back_to_the_model_files(endpoint):
    assert _render(endpoint({}))[0] == "FILE user: "


def test_the_argument_wins(endpoint):
    ep = endpoint({"chat_template": SERVER_TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"},
                  chat_template="{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    assert _render(ep) == ("[user]", "")
