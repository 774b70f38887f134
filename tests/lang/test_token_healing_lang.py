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


@sgl.function
def chat(s, question):
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=4, temperature=0))


def test_gen_right_after_the_assistant_marker_is_not_healed(engine):
    """The template's own "...assistant\\n" is tokenized as in training: nothing is backed
    up there (prompt_tokens is the whole prompt), though the prompt's "\\n" could merge."""
    state = chat.run(question="What is 2+2?", backend=engine)
    full = state.text()
    assert state["answer"]
    prompt = full[:full.rindex(state["answer"])]
    ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    assert prompt.endswith("\n")
    assert state.get_meta_info("answer")["prompt_tokens"] == len(ids)
