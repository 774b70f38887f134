"""``gen(token_healing=...)`` on the local engine (default model): on by default, the
variable holds the text after the prompt (the removed prefix left out), off on request."""

from __future__ import annotations

import pytest

import furca as sgl

pytestmark = pytest.mark.default_model

PROMPT = "The url is http:"
GREEDY = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine():
    from furca.runtime.engine import Engine

    with Engine(dtype="float32") as eng:
        yield eng


@sgl.function
def url(s, healing):
    s += PROMPT
    s += sgl.gen("rest", max_tokens=6, temperature=0, ignore_eos=True, token_healing=healing)


def test_gen_heals_by_default_and_not_when_asked(engine):
    ids = engine.tokenizer.encode(PROMPT, add_special_tokens=True)
    healed = engine.generate(input_ids=ids, sampling_params={**GREEDY, "token_healing": True})
    plain = engine.generate(input_ids=ids, sampling_params={**GREEDY, "token_healing": False})
    assert healed.text != plain.text  # the prompt shows the effect
    default = url.run(healing=None, backend=engine)
    off = url.run(healing=False, backend=engine)
    assert default["rest"] == healed.text and default.text() == PROMPT + healed.text
    assert off["rest"] == plain.text
