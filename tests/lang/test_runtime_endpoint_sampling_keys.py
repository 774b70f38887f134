"""`gen(stop_regex=...)` through `RuntimeEndpoint` against a live ``furca serve`` (the
default model): the pattern reaches ``/generate`` and cuts the text where it first
matches; a bad pattern is the server's 400 naming it."""

from __future__ import annotations

import re

import pytest

import furca as sgl
from furca.lang.errors import BackendRequestError
from tests.conftest import READY_TIMEOUT

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def native():
    rt = sgl.Runtime(max_total_tokens=4096, log_level="warning", launch_timeout=READY_TIMEOUT)
    yield rt.endpoint
    rt.shutdown()


@sgl.function
def story(s, stop_regex):
    s += "Once upon a time, in a small village by the sea, there lived"
    s += sgl.gen("rest", max_tokens=40, temperature=0, stop_regex=stop_regex, ignore_eos=True)


def test_gen_stop_regex_on_runtime_endpoint(native):
    free = story.run(stop_regex=None, backend=native)["rest"]
    pattern = r"[,.;!?\n]"  # one character: the first match is the leftmost one
    m = re.search(pattern, free)
    assert m, free
    state = story.run(stop_regex=pattern, backend=native)
    assert state["rest"] == free[:m.start()]
    assert state.get_meta_info("rest")["finish_reason"] == {"type": "stop", "matched": pattern}
    streamed = story(stop_regex=[pattern], stream=True, backend=native)
    assert "".join(streamed.text_iter("rest")) == free[:m.start()]


def test_bad_stop_regex_is_the_servers_400(native):
    with pytest.raises(BackendRequestError) as e:
        story.run(stop_regex="(unclosed", backend=native)
    assert e.value.status_code == 400 and "(unclosed" in str(e.value)
