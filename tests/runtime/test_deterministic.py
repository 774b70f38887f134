"""``Engine(deterministic=True)``: the same requests give bitwise the same tokens and
logprobs alone, in one batch, interleaved with other traffic, with a small chunked-prefill
size and from the radix cache (greedy and seeded sampling), on a tiny random Llama and on
the default model; without it, this CPU's products change with the batch."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from furca.errors import ConfigError
from furca.runtime import batch_invariant
from furca.runtime.config import EngineConfig
from furca.runtime.engine import Engine


def sampling(i: int, n: int) -> dict:
    """Even requests greedy, odd ones seeded sampling (top-p on some, top-k on others)."""
    params = {"max_new_tokens": n, "ignore_eos": True, "return_logprob": True}
    if i % 2 == 0:
        return {**params, "temperature": 0}
    extra = {"top_p": 0.9} if i % 4 == 1 else {"top_k": 20}
    return {**params, "temperature": 0.9, "seed": 1000 + i, **extra}


def token_prompts(vocab: int, n: int = 16, seed: int = 0) -> list[list[int]]:
    """Mixed lengths; half share a 20-token prefix (cache hits inside one batch too)."""
    rng = random.Random(seed)
    toks = lambda k: [rng.randrange(3, vocab) for _ in range(k)]  # noqa: E731  (0-2 are specials)
    shared = toks(20)
    return [shared + toks(rng.randrange(1, 12)) if i % 2 else toks(rng.randrange(3, 40)) for i in range(n)]


def signature(outs) -> list[tuple[list[int], list[str]]]:
    """Tokens and the exact bits of their logprobs (``float.hex``)."""
    return [(o.output_ids, [float(e[0]).hex() for e in o.meta_info["output_token_logprobs"]]) for o in outs]


def generate(engine: Engine, prompts: list, params: list[dict]) -> list:
    key = "input_ids" if isinstance(prompts[0], list) else "prompt"
    return engine.generate(**{key: prompts}, sampling_params=params)


def scenarios(model, prompts: list, n: int, deterministic: bool = True, chunk: int = 4) -> dict[str, list]:
    """Signatures of the same requests alone, batched, cache-hit, interleaved, chunked."""
    params = [sampling(i, n) for i in range(len(prompts))]
    common = dict(max_total_tokens=4096, deterministic=deterministic, check_memory=True, dtype="float32")
    out = {}
    with Engine(model, disable_radix_cache=True, **common) as engine:
        out["alone"] = signature([generate(engine, [p], [sp])[0] for p, sp in zip(prompts, params)])
    with Engine(model, **common) as engine:
        out["batch"] = signature(generate(engine, prompts, params))
        again = generate(engine, prompts, params)
        assert all(o.meta_info["cached_tokens"] > 0 for o in again)
        out["cache_hit"] = signature(again)
        engine.check_memory(idle=True)
    # other traffic of other lengths around each request; at most 5 run at once, so
    # requests join and leave mid-decode (mixed prefill + decode steps)
    others = [p[::-1] + p[:3] for p in prompts]
    mixed = [x for pair in zip(others, prompts) for x in pair]
    mixed_params = [x for i, sp in enumerate(params) for x in ({**sampling(i + 1, n + i % 3 + 1)}, sp)]
    with Engine(model, max_running_requests=5, **common) as engine:
        out["interleaved"] = signature(generate(engine, mixed, mixed_params)[1::2])
    with Engine(model, chunked_prefill_size=chunk, disable_radix_cache=True, **common) as engine:
        out["chunked"] = signature(generate(engine, prompts, params))
    return out


def assert_all_equal(results: dict[str, list]) -> None:
    ref = results["alone"]
    for name, sig in results.items():
        for i, (a, b) in enumerate(zip(ref, sig)):
            assert a == b, f"request {i}: {name} differs from alone:\n{a}\n{b}"


def test_tiny_llama_is_batch_invariant(tiny_engine_model):
    loaded, _ = tiny_engine_model
    prompts = token_prompts(loaded.config.vocab_size)
    results = scenarios(loaded, prompts, n=8)
    assert len(results["alone"]) == 16 and all(len(ids) == 8 for ids, _ in results["alone"])
    assert_all_equal(results)


def _library_varies_with_rows() -> bool:
    """Whether this CPU's fp32 product gives row 0 other bits when more rows come along
    (the default model's MLP down-projection shape)."""
    torch.manual_seed(0)
    w, x = torch.randn(576, 1536), torch.randn(64, 1536)
    full = F.linear(x, w)[0]
    return any(not torch.equal(F.linear(x[:m], w)[0], full) for m in range(1, 64))


@pytest.fixture(scope="module")
def default_model():
    """The default model loaded once; each engine below shares its weights."""
    from furca.runtime.loader import load_model

    return load_model(None, dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def default_prompts() -> list[str]:
    subjects = ["the sea", "a cat", "Paris", "rain", "a robot", "chess", "bread", "the moon"]
    return [f"Write one short sentence about {s}." if i % 2 else f"Here is a fact about {s}:" for i, s in
            enumerate(subjects + subjects[::-1])]


@pytest.mark.default_model
@pytest.mark.slow
def test_default_model_is_batch_invariant(default_model, default_prompts):
    results = scenarios(default_model, default_prompts, n=2, chunk=3)
    assert_all_equal(results)


@pytest.mark.default_model
def test_default_model_differs_without_deterministic(default_model, default_prompts):
    """The comparison above is not vacuous here: without deterministic mode, batching
    changes some logprob's bits (where this CPU's products vary with the row count)."""
    if not _library_varies_with_rows():
        pytest.skip("this CPU's fp32 products do not vary with the row count")
    params = [sampling(i, 2) for i in range(len(default_prompts))]
    with Engine(default_model, max_total_tokens=4096, disable_radix_cache=True) as engine:
        alone = signature([generate(engine, [p], [sp])[0] for p, sp in zip(default_prompts, params)])
        batch = signature(generate(engine, default_prompts, params))
    assert alone != batch


def test_invariant_linear_rows_do_not_depend_on_the_batch():
    torch.manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        w, b, x = torch.randn(576, 1536, dtype=dtype), torch.randn(576, dtype=dtype), torch.randn(40, 1536)
        full = batch_invariant.linear(x, w, b)
        assert full.dtype == x.dtype and full.shape == (40, 576)
        torch.testing.assert_close(full, F.linear(x.to(dtype), w, b).to(x.dtype), rtol=2e-2, atol=2e-1)
        for m in (1, 3, 16, 17, 33):
            for i in (0, m - 1):
                assert torch.equal(batch_invariant.linear(x[i:m], w, b)[0], full[i])


def test_invariant_mode_is_per_thread_and_restored():
    assert not batch_invariant.enabled()
    with batch_invariant.mode(True):
        assert batch_invariant.enabled()
        with batch_invariant.mode(False):
            assert not batch_invariant.enabled()
        assert batch_invariant.enabled()
    assert not batch_invariant.enabled()


@pytest.mark.parametrize("kwargs, field", [
    (dict(attention_backend="torch"), "attention_backend"),
    (dict(quantization="int8"), "quantization"),
    (dict(dtype="float16"), "dtype"),
    (dict(kv_cache_dtype="float16"), "kv_cache_dtype"),
])
def test_unsupported_combinations_are_config_errors(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        EngineConfig(deterministic=True, **kwargs)
    EngineConfig(**kwargs)  # fine without deterministic
    with pytest.raises(ConfigError, match="deterministic must be true or false"):
        EngineConfig(deterministic="yes")


def test_effective_config_names_the_invariant_backend(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=512, deterministic=True) as engine:
        eff = engine.effective_config()
    assert eff["deterministic"] is True and eff["attention_backend"] == "invariant"


def test_a_quantized_checkpoint_is_a_config_error(tiny_gguf):
    """quantization='auto' keeps a GGUF file's own quantization: the loaded model is
    checked, and the error names what to change."""
    path, _ = tiny_gguf
    with pytest.raises(ConfigError, match=r"model is quantized \(.*\).*quantization='none'"):
        Engine(str(path), deterministic=True, max_total_tokens=512)
