"""A server that cannot start exits: non-zero status, one line on stderr naming the reason,
no traceback, instead of serving 503 forever (a supervisor can then restart or report it).

Each case runs ``python -m furca.server`` (what ``furca serve`` runs) to its end; the
generous CLIENT_TIMEOUT only catches a server that would never exit."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from tests.conftest import CLIENT_TIMEOUT
from tests.server.conftest import REPO, _runtime_fixtures, free_port


def _serve(*argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "furca.server", *argv, "--log-level", "warning"]
    if "--port" not in argv:
        cmd += ["--port", str(free_port())]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)


def _reason(proc: subprocess.CompletedProcess) -> str:
    """The last stderr line, after checking the process failed cleanly."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("furca serve: "), proc.stderr[-3000:]
    return last


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama saved as an HF directory (weights, config, tokenizer)."""
    fx = _runtime_fixtures()
    tok = fx.build_tiny_hf_tokenizer()
    out = tmp_path_factory.mktemp("startup") / "tiny-llama"
    fx.build_tiny_hf_model("llama", len(tok), seed=1).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_missing_model_path_exits_with_its_reason(tmp_path):
    missing = tmp_path / "no-such-model"
    reason = _reason(_serve(str(missing)))
    assert "model path not found" in reason and str(missing) in reason


def test_unsupported_architecture_exits_with_its_reason(tiny_model_dir, tmp_path):
    model = tmp_path / "foo-model"
    model.mkdir()
    for f in tiny_model_dir.iterdir():
        (model / f.name).symlink_to(f)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    config["architectures"] = ["FooBarForCausalLM"]
    (model / "config.json").unlink()
    (model / "config.json").write_text(json.dumps(config))
    reason = _reason(_serve(str(model)))
    assert "FooBarForCausalLM" in reason and "not supported" in reason


def test_port_in_use_exits_before_loading(tiny_model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        reason = _reason(_serve(str(tiny_model_dir), "--port", str(port), "--device", "cpu"))
    assert f"cannot listen on 127.0.0.1:{port}" in reason and "in use" in reason
