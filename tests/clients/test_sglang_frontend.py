"""SGLang's own frontend (``pip install sglang --no-deps`` plus the few packages its
frontend imports) against ``furca serve``: the programs of ``sglang.test.test_programs``,
unmodified, through ``sgl.RuntimeEndpoint``.

``sglang`` is imported in a worker process of its own (``sglang_programs.py``): importing
it patches transformers and sets cache variables, which must not leak into this session.
The worker runs one program per test, so the server is checked idle between programs.
Programs that check an answer a 135M model cannot give run with ``check_answer=False``
where they have that switch; the others are left out, each with its reason (LEFT_OUT).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.clients.support import require_installed

require_installed("sglang")

pytestmark = pytest.mark.default_model

RUNNER = Path(__file__).with_name("sglang_programs.py")

# program -> keyword arguments (SGLang's own switch where the program has one)
PROGRAMS = {
    "test_mt_bench": {},
    "test_select": {"check_answer": False},
    "test_decode_json_regex": {},
    "test_expert_answer": {"check_answer": False},
    "test_parallel_decoding": {},
    "test_stream": {},
    "test_stream_logprobs": {},
    "test_regex": {},
    "test_dtype_gen": {},
}
LEFT_OUT = {
    "test_decode_json": "samples at temperature 1 (no switch) strings under SGLang's REGEX_STR, whose \\s admits "
                        "tab, CR, VT and FF, which json.loads rejects inside a string: it passes or fails by the draw "
                        "(test_decode_json_regex, the same program at temperature 0, runs)",
    "test_few_shot_qa": "asserts the capitals of the US, Japan, UK and China; no check_answer switch",
    "test_decode_int": "asserts 24 hours a day and 365 days a year; no check_answer switch",
    "test_tool_use": "asserts 257 * 983 and eval()s the model's expression; no check_answer switch",
    "test_react": "asserts the answer Finland / United States; no check_answer switch",
    "test_parallel_encoding": "fork join mode concate_and_append calls /concate_and_append_request, "
                              "which neither SGLang's server nor furca serves",
    "test_image_qa": "needs an image and a vision model",
    "test_gen_min_new_tokens": "counts tokens with sglang.srt's get_tokenizer, whose imports pull SGLang's server "
                               "stack (torchvision, which would bring another torch)",
    "test_completion_speculative": "speculative API calls (num_api_spec_tokens): OpenAI backend only",
    "test_chat_completion_speculative": "speculative API calls (num_api_spec_tokens): OpenAI backend only",
}
PROGRAM_TIMEOUT_S = 600.0


class Worker:
    """``sglang_programs.py`` reading program names from its stdin; a thread moves its
    output lines to a queue."""

    def __init__(self, url: str, api_key: str):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen([sys.executable, str(RUNNER), url, api_key or ""], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.noise: list[str] = []
        self.read("ready", timeout=PROGRAM_TIMEOUT_S)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, key: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                self.noise.append(line.rstrip())  # warnings and logs of the frontend
                continue
            if isinstance(obj, dict) and key in obj:
                return obj
        raise AssertionError(f"sglang worker gave no {key!r} line in {timeout:.0f} s (exit {self.proc.poll()}):\n"
                             + "\n".join(self.noise[-40:]))

    def run(self, name: str, kwargs: dict) -> dict:
        spec = name + (":" + ",".join(f"{k}={v}" for k, v in kwargs.items()) if kwargs else "")
        self.proc.stdin.write(spec + "\n")
        self.proc.stdin.flush()
        return self.read("passed", timeout=PROGRAM_TIMEOUT_S)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def worker(served):
    w = Worker(served.url, served.api_key)
    yield w
    w.close()


def installed_programs() -> set[str]:
    """The ``test_*`` functions of the installed ``sglang.test.test_programs`` (read as
    source, so this process never imports sglang)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    source = Path(spec.submodule_search_locations[0], "test", "test_programs.py").read_text()
    return {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_program_is_run_or_left_out_with_a_reason():
    """A new SGLang release with a new program shows up here, not silently unrun."""
    assert set(PROGRAMS).isdisjoint(LEFT_OUT)
    assert installed_programs() == set(PROGRAMS) | set(LEFT_OUT)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program(worker, name):
    result = worker.run(name, PROGRAMS[name])
    assert result["name"] == name
    assert result["passed"], f"{name} failed through RuntimeEndpoint:\n{result['error']}"
