"""A live server never reads a grammar file a request names (issue 12).

The session server's cwd is the repository root: a Lark grammar file is planted in a
fresh directory there, and a request imports it. The answer is a 400 naming no path
(the same whether the file exists or not: no existence oracle), with no traceback in
the server's log. Ill-typed structural tags are 400s naming the field, likewise.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from tests.server.conftest import REPO, assert_idle

SECRET = "PLANTED-" + uuid.uuid4().hex[:8]
CHAT = {"messages": [{"role": "user", "content": "Say it."}], "max_tokens": 4, "temperature": 0}


@pytest.fixture
def planted():
    d = REPO / f"_furca_probe_{uuid.uuid4().hex[:8]}"
    d.mkdir()
    try:
        (d / "secret.lark").write_text(f'secret: "{SECRET}"\n')
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _log_from(server, start: int) -> str:
    return server.log_path.read_text(errors="replace")[start:]


def _log_size(server) -> int:
    return len(server.log_path.read_text(errors="replace"))


def _error(r) -> str:
    assert r.status_code == 400, (r.status_code, r.text)
    return r.json()["error"]["message"]


def test_lark_import_of_a_planted_file_is_a_400_without_the_path(http, server, planted):
    start = _log_size(server)
    name = planted.name
    answers = []
    for text in (f"%import .{name}.secret.secret\nstart: secret",
                 f"%import {name}.secret.secret\nstart: secret",
                 f"%import .{name}.missing.secret\nstart: secret"):  # a file that does not exist
        msg = _error(http.post("/v1/chat/completions", json={**CHAT, "ebnf": text}))
        assert name not in msg and str(REPO) not in msg and SECRET not in msg and ".lark" not in msg.replace(
            "common.lark", "")
        answers.append(msg)
    assert len(set(answers)) == 1  # no existence oracle
    r = http.post("/generate", json={"text": "x", "sampling_params": {
        "max_new_tokens": 4, "ebnf": f"%import .{name}.secret.secret\nstart: secret"}})
    assert r.status_code == 400 and name not in r.text and SECRET not in r.text
    log = _log_from(server, start)
    assert "Traceback" not in log and "ERROR" not in log and name not in log
    assert_idle(http)


def test_common_imports_still_work(http):
    r = http.post("/v1/chat/completions", json={**CHAT, "ebnf": '%import common.INT\nstart: "n=" INT'})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"].startswith("n=")


@pytest.mark.parametrize("tag,field", [
    ({"structures": 5, "triggers": ["<a"]}, "structures"),
    ({"structures": [5], "triggers": ["<a"]}, "structures[0]"),
    ({"structures": [{"begin": 1, "schema": {}, "end": "</a>"}], "triggers": ["<a"]}, "structures[0].begin"),
    ({"structures": [{"begin": "<a>", "schema": 3, "end": "</a>"}], "triggers": ["<a"]}, "structures[0].schema"),
    ({"structures": [{"begin": "<a>", "schema": {}, "end": None}], "triggers": ["<a"]}, "structures[0].end"),
    ({"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": "<a"}, "triggers"),
    ({"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": [7]}, "triggers[0]"),
])
def test_ill_typed_structural_tag_is_a_400_naming_the_field(http, server, tag, field):
    start = _log_size(server)
    r = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2, "structural_tag": tag}})
    msg = _error(r)
    assert f"structural_tag: {field} must be" in msg, msg
    new = _log_from(server, start)
    assert "Traceback" not in new and "TypeError" not in new
