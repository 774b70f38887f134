"""Bad input gets a specific error under FurcaError and leaks nothing."""

from __future__ import annotations

import pytest

from furca.errors import (
    ConfigError,
    ContextLengthError,
    FurcaError,
    InvalidRequestError,
    ModelLoadError,
    SamplingParamsError,
)
from furca.runtime.engine import Engine


@pytest.fixture(scope="module")
def engine(tiny_engine_model):
    loaded, _ = tiny_engine_model  # context length 256
    with Engine(loaded, max_total_tokens=1024, check_memory=True) as e:
        yield e


V = 300  # >= the tiny vocabulary


def _cases(vocab: int):
    ok = [5, 6, 7]
    return [
        ("empty prompt", dict(prompt=""), InvalidRequestError, "empty"),
        ("empty prompt in a batch", dict(prompt=["fine", ""]), InvalidRequestError, "prompt 1 is empty"),
        ("empty input_ids", dict(input_ids=[]), InvalidRequestError, "input_ids"),
        ("empty input_ids in a batch", dict(input_ids=[ok, []]), InvalidRequestError, "input_ids 1 is empty"),
        ("prompt and input_ids", dict(prompt="hi", input_ids=ok), InvalidRequestError, "not both"),
        ("neither", dict(), InvalidRequestError, "give a prompt"),
        ("prompt of a wrong type", dict(prompt=123), InvalidRequestError, "prompt must be"),
        ("prompt at the context length", dict(input_ids=[5] * 256), ContextLengthError, "256 tokens"),
        ("prompt over the context length", dict(input_ids=[5] * 300), ContextLengthError, "300 tokens"),
        ("prompt + max_new_tokens past the context",
         dict(input_ids=[5] * 200, sampling_params={"max_new_tokens": 100}), ContextLengthError, r"200.*100.*256"),
        ("token id past the vocabulary", dict(input_ids=[5, vocab]), InvalidRequestError, "outside the vocabulary"),
        ("negative token id", dict(input_ids=[-1, 5]), InvalidRequestError, "outside the vocabulary"),
        ("temperature < 0", dict(input_ids=ok, sampling_params={"temperature": -1}), SamplingParamsError, "temperature"),
        ("top_p 0", dict(input_ids=ok, sampling_params={"top_p": 0.0}), SamplingParamsError, "top_p"),
        ("top_k -5", dict(input_ids=ok, sampling_params={"top_k": -5}), SamplingParamsError, "top_k"),
        ("n 0", dict(input_ids=ok, sampling_params={"n": 0}), SamplingParamsError, "n="),
        ("max_new_tokens -1", dict(input_ids=ok, sampling_params={"max_new_tokens": -1}), SamplingParamsError,
         "max_new_tokens"),
        ("unknown key", dict(input_ids=ok, sampling_params={"temprature": 0.5}), SamplingParamsError, "temprature"),
        ("params list of the wrong length", dict(input_ids=[ok, ok], sampling_params=[{}]), InvalidRequestError,
         "2 prompts"),
        ("rid list of the wrong length", dict(input_ids=[ok, ok], rid=["a"]), InvalidRequestError, "rid"),
        ("logprob_start_len past the prompt",
         dict(input_ids=ok, sampling_params={"return_logprob": True, "logprob_start_len": 3}), InvalidRequestError,
         "logprob_start_len"),
        ("stop token id past the vocabulary", dict(input_ids=ok, sampling_params={"stop_token_ids": [vocab]}),
         SamplingParamsError, "stop_token_ids names token id"),
        ("stop token id past 64 bits (issue 12's crash)",
         dict(input_ids=ok, sampling_params={"stop_token_ids": [10**20], "min_new_tokens": 2}), SamplingParamsError,
         "stop_token_ids=100000000000000000000"),
        ("logit_bias key past the vocabulary", dict(input_ids=ok, sampling_params={"logit_bias": {vocab: 1}}),
         SamplingParamsError, "logit_bias names token id"),
        ("bool as a token id", dict(input_ids=[5, True]), InvalidRequestError, "input_ids must be"),
        ("bad one in a good batch",
         dict(input_ids=[ok, ok], sampling_params=[{}, {"min_p": 2.0}]), SamplingParamsError, "min_p"),
    ]


@pytest.mark.parametrize("name, kwargs, error, match", _cases(V), ids=[c[0] for c in _cases(V)])
def test_bad_input_raises_and_leaks_nothing(engine, name, kwargs, error, match):
    before = engine.get_server_info()["stats"]
    with pytest.raises(error, match=match) as info:
        engine.generate(**kwargs)
    assert isinstance(info.value, FurcaError)
    counts = engine.check_memory(idle=True)
    assert counts["free"] + counts["tree"] == counts["capacity"] and counts["locked"] == 0
    assert engine.get_server_info()["stats"] == before  # nothing reached the scheduler


def test_bad_input_async_and_stream_raise_eagerly(engine):
    import asyncio

    with pytest.raises(InvalidRequestError):
        engine.generate(prompt="", stream=True)
    with pytest.raises(SamplingParamsError):
        asyncio.run(engine.async_generate(input_ids=[5], sampling_params={"top_p": 2}))
    engine.check_memory(idle=True)


def test_pool_too_small_for_the_request(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=32) as engine:
        with pytest.raises(ContextLengthError, match="KV pool"):
            engine.generate(input_ids=[5] * 20, sampling_params={"max_new_tokens": 20})
        engine.check_memory(idle=True)


def test_duplicate_rid_in_flight(engine):
    params = {"max_new_tokens": 50, "ignore_eos": True}
    stream = engine.generate(input_ids=[5, 6], sampling_params=params, rid="dup", stream=True)
    next(stream)
    with pytest.raises(InvalidRequestError, match="already in flight"):
        engine.generate(input_ids=[5, 6], rid="dup")
    list(stream)
    assert engine.generate(input_ids=[5, 6], rid="dup", sampling_params={"max_new_tokens": 1}).rid == "dup"
    engine.check_memory(idle=True)


def test_bad_engine_config_and_model_path(tiny_engine_model, tmp_path):
    loaded, _ = tiny_engine_model
    with pytest.raises(ConfigError, match="unknown engine option"):
        Engine(loaded, max_total_tokenz=5)
    with pytest.raises(ConfigError, match="context_length"):
        Engine(loaded, context_length=10_000)
    with pytest.raises(ModelLoadError):
        Engine(str(tmp_path / "no-such-model"))
