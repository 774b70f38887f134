"""Constrained decoding in the engine (furca.constrain through the default grammar
backend) and jump-forward (SGLang's compressed FSM) in the scheduler.

What jump-forward guarantees, and what these tests assert:
- every output (jump-forward on or off) is accepted by the constraint's matcher token by
  token, and, when it stopped, is a whole sentence of the language (fullmatch /
  jsonschema / json.loads / lark);
- the engine's greedy output equals a plain reference loop (transformers, no KV cache,
  the same mask and the same jump-forward rule): so the KV of re-tokenized and forced
  tokens is exactly that of the final token sequence;
- on and off give the same *text* where the constraint leaves nothing to choose, and the
  same *tokens* where the jump-off run already produced, at every jump point, the
  tokens the re-tokenization gives (then both runs see the same sequence). In general
  they differ: with jump-forward off the model picks its own tokenization of forced text
  (any token whose bytes fit), and later choices depend on it.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading

import jsonschema
import lark
import pytest
import torch

from furca.errors import CompileError, InvalidRequestError
from furca.runtime.engine import Engine
from furca.runtime.jump_forward import WINDOW, forced_text, plan_jump
from furca.runtime.sampling_params import SamplingParams

PROMPTS = ["Hello", "The quick brown fox", '{"name": "furca"', "def add(a, b):", "Paris is"]

REGEXES = [
    r'\{"name": "[a-z]{1,8}", "version": [0-9]{1,3}\}',
    r"(yes|no|maybe)",
    r"[0-9]{3}-[0-9]{4}",
    r"The (quick|lazy) (fox|dog) jumps\.",
]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "version": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["llm", "json"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "version", "tags", "ok"],
    "additionalProperties": False,
}

EBNF = 'root ::= greeting " " name "!"\ngreeting ::= "hi" | "hello"\nname ::= "fox" | "dog" | "furca"\n'
LARK = 'start: "(" NUM ("," NUM)? ")"\nNUM: /[0-9]{1,3}/\n'


def backend_of(engine: Engine):
    assert engine.grammar_backend is not None
    return engine.grammar_backend


def walk(engine: Engine, params: dict, output_ids: list[int]):
    """A fresh matcher fed ``output_ids``; asserts every token is accepted."""
    m = backend_of(engine).create_matcher(SamplingParams.from_dict(params))
    for i, t in enumerate(output_ids):
        assert m.accept_token(t), f"token {i} ({t}) rejected: {m.error}; output {output_ids}"
    return m


def check_valid(engine: Engine, params: dict, out, check_text) -> bool:
    """The output is accepted token by token; if it stopped, it is a whole sentence
    (EOS accepted where the grammar may end) and ``check_text(text)`` holds. Returns
    whether it stopped."""
    m = walk(engine, params, out.output_ids)
    reason = out.meta_info["finish_reason"]
    assert reason["type"] in ("stop", "length"), reason
    if reason["type"] == "stop":
        assert m.is_terminated() and out.output_ids[-1] in engine.eos_token_ids
        check_text(out.text)
        return True
    assert len(out.output_ids) == params["max_new_tokens"]
    return False


@pytest.fixture(scope="module", params=[True, False], ids=["jf", "nojf"])
def cengine(request, tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, check_memory=True, enable_jump_forward=request.param) as engine:
        yield engine


@pytest.fixture(scope="module")
def engines(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, check_memory=True) as on, \
            Engine(loaded, max_total_tokens=4096, check_memory=True, enable_jump_forward=False) as off:
        yield on, off


# ----------------------------------------------------------------------- every kind


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_regex_outputs_fullmatch(cengine, temperature):
    params = [{"regex": rx, "temperature": temperature, "seed": i, "max_new_tokens": 60}
              for i, rx in enumerate(REGEXES) for _ in PROMPTS[:2]]
    prompts = [p for _ in REGEXES for p in PROMPTS[:2]]
    outs = cengine.generate(prompts, sampling_params=params)
    for p, out in zip(params, outs):
        assert check_valid(cengine, p, out, lambda t, rx=p["regex"]: re.fullmatch(rx, t) or pytest.fail(t))
    cengine.check_memory(idle=True)


def test_json_schema_outputs_validate(cengine):
    params = [{"json_schema": SCHEMA, "temperature": t, "seed": i, "max_new_tokens": 120}
              for i, t in enumerate([0.0, 0.7, 1.0, 1.0, 1.0])]
    outs = cengine.generate(PROMPTS, sampling_params=params)
    stopped = 0
    for p, out in zip(params, outs):
        stopped += check_valid(cengine, p, out, lambda t: jsonschema.validate(json.loads(t), SCHEMA))
        assert out.text.startswith('{"name":"')
    assert stopped >= 3
    cengine.check_memory(idle=True)


@pytest.mark.parametrize("grammar,check", [
    (EBNF, lambda t: re.fullmatch(r"(hi|hello) (fox|dog|furca)!", t)),
    (LARK, lambda t: re.fullmatch(r"\([0-9]{1,3}(,[0-9]{1,3})?\)", t)),
])
def test_ebnf_and_lark_outputs_parse(cengine, grammar, check):
    params = [{"ebnf": grammar, "temperature": 1.0, "seed": i, "max_new_tokens": 40} for i in range(4)]
    outs = cengine.generate(PROMPTS[:4], sampling_params=params)
    for p, out in zip(params, outs):
        assert check_valid(cengine, p, out, lambda t: check(t) or pytest.fail(repr(t)))
    if grammar == LARK:
        parser = lark.Lark(grammar)
        for out in outs:
            parser.parse(out.text)


def test_choices_and_json_object(cengine):
    choices = ["furca", "radix cache", "json", "quick brown fox"]
    outs = cengine.generate(PROMPTS, sampling_params={"choices": choices, "temperature": 1.0, "seed": 3,
                                                      "max_new_tokens": 20})
    for out in outs:
        assert out.text in choices and out.meta_info["finish_reason"]["type"] == "stop"
    params = [{"json_object": True, "temperature": 0.0 if i == 0 else 0.8, "seed": i, "max_new_tokens": 80}
              for i in range(len(PROMPTS))]
    outs = cengine.generate(PROMPTS, sampling_params=params)
    for p, out in zip(params, outs):
        assert out.text.startswith("{")
        check_valid(cengine, p, out, lambda t: isinstance(json.loads(t), dict) or pytest.fail(t))
    cengine.check_memory(idle=True)


def test_eos_only_where_the_grammar_may_end(cengine):
    # a random model likes EOS (id 2) no more than any other token: the mask decides
    params = {"regex": r"[a-z]{3,6}", "temperature": 1.0, "max_new_tokens": 30}
    for seed in range(6):
        out = cengine.generate("Hello", sampling_params={**params, "seed": seed})
        assert re.fullmatch(r"[a-z]{3,6}", out.text), out.text
        assert out.output_ids[-1] == cengine.eos_token_ids[0]
        m = walk(cengine, params, [])
        for t in out.output_ids[:-1]:
            allowed = set(m.get_allowed_tokens().tolist())
            assert t in allowed
            m.accept_token(t)
        assert cengine.eos_token_ids[0] in set(m.get_allowed_tokens().tolist())


def test_max_new_tokens_mid_json_is_length(cengine):
    for n in (1, 2, 3, 5, 8, 13):
        params = {"json_schema": SCHEMA, "temperature": 0.0, "max_new_tokens": n}
        out = cengine.generate("Hello", sampling_params=params)
        assert out.meta_info["finish_reason"] == {"type": "length", "length": n}
        assert len(out.output_ids) == n
        walk(cengine, params, out.output_ids)
        assert '{"name":"'.startswith(out.text) or out.text.startswith('{"name":"')
    cengine.check_memory(idle=True)


# ----------------------------------------------------------------------- errors, batches, n, abort


@pytest.mark.parametrize("bad", [
    {"regex": "(a"},
    {"regex": r"(?<=a)b"},
    {"json_schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}},
    {"ebnf": "root ::= undefined_rule"},
])
def test_compile_error_rejects_before_queueing(cengine, bad):
    before = cengine.get_server_info()
    with pytest.raises(CompileError):
        cengine.generate(["Hello", "Paris is"], sampling_params=[{"max_new_tokens": 4}, {**bad, "max_new_tokens": 4}])
    info = cengine.get_server_info()
    assert info["num_waiting"] == 0 and info["num_running"] == 0
    assert info["stats"]["prompt_tokens"] == before["stats"]["prompt_tokens"]
    cengine.check_memory(idle=True)
    assert cengine.generate("Hello", sampling_params={"regex": "ok", "max_new_tokens": 4}).text == "ok"


def test_batch_mixes_constrained_and_unconstrained(cengine):
    free = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
    alone = cengine.generate(PROMPTS[:3], sampling_params=free)
    params = [free, {"json_schema": SCHEMA, "temperature": 0, "max_new_tokens": 60}, free,
              {"regex": REGEXES[0], "temperature": 0, "max_new_tokens": 60}, free]
    prompts = [PROMPTS[0], PROMPTS[3], PROMPTS[1], PROMPTS[4], PROMPTS[2]]
    outs = cengine.generate(prompts, sampling_params=params)
    assert [o.output_ids for o in (outs[0], outs[2], outs[4])] == [o.output_ids for o in alone]
    check_valid(cengine, params[1], outs[1], lambda t: jsonschema.validate(json.loads(t), SCHEMA))
    check_valid(cengine, params[3], outs[3], lambda t: re.fullmatch(REGEXES[0], t) or pytest.fail(t))
    assert "jump_forward_tokens" not in outs[0].meta_info and "jump_forward_tokens" in outs[1].meta_info
    cengine.check_memory(idle=True)


def test_n_samples_each_have_their_own_matcher(cengine):
    params = {"json_schema": SCHEMA, "temperature": 1.0, "seed": 11, "n": 4, "max_new_tokens": 120}
    outs = cengine.generate("Hello", sampling_params=params)
    assert len(outs) == 4
    for out in outs:
        check_valid(cengine, params, out, lambda t: jsonschema.validate(json.loads(t), SCHEMA))
    assert len({o.text for o in outs}) > 1  # independent samples, independent matchers
    greedy = cengine.generate("Hello", sampling_params={**params, "temperature": 0, "n": 2})
    assert greedy[0].output_ids == greedy[1].output_ids
    cengine.check_memory(idle=True)


def test_abort_constrained_request(cengine):
    params = {"json_object": True, "temperature": 1.0, "seed": 1, "max_new_tokens": 200}
    stream = cengine.generate("Hello", sampling_params=params, rid="cabort", stream=True)
    first = next(stream)
    cengine.abort("cabort")
    rest = list(stream)
    last = rest[-1] if rest else first
    assert last.finished and last.meta_info["finish_reason"]["type"] in ("abort", "stop")
    cengine.check_memory(idle=True)


def test_stream_deltas_concatenate_to_the_final_text(cengine):
    for i, params in enumerate([{"json_schema": SCHEMA, "temperature": 1.0, "seed": 5, "max_new_tokens": 100},
                                {"regex": REGEXES[0], "temperature": 0, "max_new_tokens": 60},
                                {"json_object": True, "temperature": 0.9, "seed": 2, "max_new_tokens": 60}]):
        deltas = list(cengine.generate(PROMPTS[i], sampling_params=params, stream=True))
        full = cengine.generate(PROMPTS[i], sampling_params=params)
        assert "".join(d.text for d in deltas) == full.text
        assert deltas[-1].meta_info["completion_tokens"] == len(full.output_ids)
    cengine.check_memory(idle=True)


def test_stop_string_inside_forced_text(cengine):
    params = {"regex": r'\{"name": "[a-z]{1,8}"\}', "stop": ["name"], "temperature": 0, "max_new_tokens": 30}
    out = cengine.generate("Hello", sampling_params=params)
    assert out.text == '{"' and out.meta_info["finish_reason"] == {"type": "stop", "matched": "name"}
    cengine.check_memory(idle=True)


# ----------------------------------------------------------------------- jump-forward itself


def reference_constrained(hf_model, engine: Engine, params: dict, prompt_ids: list[int], jump: bool):
    """Greedy decoding by transformers (no cache) under the same mask, with the same
    jump-forward rule as the engine. Returns (output ids, smallest top-2 margin among
    allowed tokens over the sampled steps)."""
    p = SamplingParams.from_dict(params)
    m = backend_of(engine).create_matcher(p)
    tok, vocab = engine.tokenizer, engine.vocab_size
    out: list[int] = []
    min_margin = float("inf")
    floor = [0]  # never re-tokenize before the latest jump's window (req.jump.floor)

    def do_jump(initial: bool) -> None:
        s = forced_text(m) if jump else ""
        if not s:
            return
        window = min(WINDOW, len(out) - floor[0])
        plan = plan_jump(tok, prompt_ids, out, s, vocab, window)
        if plan is None:
            return
        total = len(out) - plan.drop + len(plan.new_ids)
        if total > p.max_new_tokens or (initial and total >= p.max_new_tokens):
            return
        floor[0] = max(floor[0], len(out) - window)
        m.rollback(plan.drop)
        del out[len(out) - plan.drop:]
        for t in plan.new_ids:
            assert m.accept_token(t)
        out.extend(plan.new_ids)

    do_jump(True)
    bitmask = torch.zeros((1, (vocab + 31) // 32), dtype=torch.int32)
    with torch.no_grad():
        while len(out) < p.max_new_tokens:
            logits = hf_model(torch.tensor([prompt_ids + out])).logits[0, -1].float()
            m.fill_bitmask(bitmask, 0)
            allowed = ((bitmask[0].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1).bool().flatten()
            logits = logits.masked_fill(~allowed[: logits.shape[0]], float("-inf"))
            top = logits.topk(2)
            if torch.isfinite(top.values[1]):
                min_margin = min(min_margin, float(top.values[0] - top.values[1]))
            t = int(top.indices[0])
            out.append(t)
            assert m.accept_token(t)
            if m.is_terminated() or len(out) >= p.max_new_tokens:
                break
            do_jump(False)
    return out, min_margin


@pytest.mark.parametrize("kind", ["schema", "regex", "json_object"])
def test_greedy_equals_reference_with_and_without_jump_forward(tiny_engine_model, engines, kind):
    _, hf_model = tiny_engine_model
    constraint = {"schema": {"json_schema": SCHEMA}, "regex": {"regex": REGEXES[0]},
                  "json_object": {"json_object": True}}[kind]
    params = {**constraint, "temperature": 0, "max_new_tokens": 48}
    for engine, jump in zip(engines, (True, False)):
        ids = [engine.tokenizer.encode(p) for p in PROMPTS[:3]]
        outs = engine.generate(input_ids=ids, sampling_params=params)
        for prompt_ids, out in zip(ids, outs):
            ref, margin = reference_constrained(hf_model, engine, params, prompt_ids, jump)
            if margin > 1e-4:
                assert out.output_ids == ref, (jump, out.text, engine.tokenizer.decode(ref))
            if not jump:
                assert out.meta_info["jump_forward_tokens"] == 0
        engine.check_memory(idle=True)


def test_jump_forward_saves_passes_and_keeps_text_where_nothing_is_chosen(engines):
    on, off = engines
    for params in ({"regex": r"The quick brown fox jumps over the lazy dog\.", "max_new_tokens": 40},
                   {"choices": ["radix cache"], "max_new_tokens": 40},
                   {"json_schema": {"type": "object", "properties": {"name": {"const": "furca"}},
                                    "required": ["name"], "additionalProperties": False},
                    "max_new_tokens": 40}):
        a = on.generate("Hello", sampling_params=params)
        b = off.generate("Hello", sampling_params=params)
        assert a.text == b.text and a.meta_info["finish_reason"]["type"] == "stop"
        # everything but the final EOS was forced: no token of a was sampled, except EOS
        assert a.meta_info["jump_forward_tokens"] == len(a.output_ids) - 1
        assert a.output_ids[:-1] == on.tokenizer.encode(a.text)  # the tokenizer's own tokens
        assert len(a.output_ids) <= len(b.output_ids)


def jump_points_are_identity(engine: Engine, params: dict, prompt_ids: list[int], output_ids: list[int]) -> bool:
    """Whether, walking ``output_ids`` (a jump-off run), every point where the jump-on
    engine would jump re-tokenizes to exactly the tokens the run already has next."""
    p = SamplingParams.from_dict(params)
    m = backend_of(engine).create_matcher(p)
    for i in range(len(output_ids) + 1):
        s = forced_text(m)
        if s:
            plan = plan_jump(engine.tokenizer, prompt_ids, output_ids[:i], s, engine.vocab_size)
            total = i + len(plan.new_ids) if plan else 0
            fits = plan is not None and total <= p.max_new_tokens and not (i == 0 and total >= p.max_new_tokens)
            if fits and (plan.drop or output_ids[i:i + len(plan.new_ids)] != plan.new_ids):
                return False
        if i < len(output_ids):
            m.accept_token(output_ids[i])
    return True


def test_on_equals_off_when_retokenization_is_identity(engines):
    on, off = engines
    tok = on.tokenizer
    params = {"regex": r'\{"name": "(furca|json|llm)", "version": [0-9]\}', "temperature": 0, "max_new_tokens": 40}
    for prompt in PROMPTS + ['{"name": "furca", "version": 1}\n', "tags"]:
        ids = tok.encode(prompt)
        b = off.generate(input_ids=ids, sampling_params=params)
        a = on.generate(input_ids=ids, sampling_params=params)
        assert re.fullmatch(params["regex"], a.text) and re.fullmatch(params["regex"], b.text)
        if jump_points_are_identity(off, params, ids, b.output_ids):
            assert a.output_ids == b.output_ids
    # with a random model the jump-off tokens are rarely the tokenizer's own ones, so this
    # often checks nothing; the default model's test below requires an identity case


# ----------------------------------------------------------------------- engine wiring


def test_backend_is_installed_by_default_and_can_be_turned_off(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=512, grammar_backend=False) as engine:
        assert engine.grammar_backend is None
        with pytest.raises(InvalidRequestError, match="constrained decoding not available"):
            engine.generate("x", sampling_params={"regex": "a"})
        engine.check_memory(idle=True)
    with Engine(loaded, max_total_tokens=512) as engine:
        backend = engine.grammar_backend
        assert backend is not None and not backend.is_ready  # tokenizer tables: on first use
        assert engine.generate("x", sampling_params={"regex": "ab", "max_new_tokens": 5}).text == "ab"
        assert backend.is_ready


def test_compile_runs_on_the_callers_thread_never_the_scheduler_or_a_loop(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=512) as engine:
        backend = engine.grammar_backend
        seen = []
        original = backend.compile

        def spy(params):
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            seen.append((threading.current_thread().name, on_loop))
            return original(params)

        backend.compile = spy

        async def main():
            return await engine.async_generate("x", sampling_params={"regex": "[0-9]{2}", "max_new_tokens": 5})

        out = asyncio.run(main())
        assert re.fullmatch("[0-9]{2}", out.text)
        engine.generate("x", sampling_params={"regex": "[a-z]{2}", "max_new_tokens": 5})
        assert seen and all(name != "furca-scheduler" and not on_loop for name, on_loop in seen)


# ----------------------------------------------------------------------- the default model


@pytest.mark.default_model
def test_default_model_json_schema_with_and_without_jump_forward():
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 20},
                             "capital": {"type": "string", "maxLength": 20},
                             "population_millions": {"type": "integer", "minimum": 0, "maximum": 2000}},
              "required": ["name", "capital", "population_millions"], "additionalProperties": False}
    questions = ["Describe France as JSON.", "Describe Japan as JSON.", "Describe Brazil as JSON."]
    params = {"json_schema": schema, "temperature": 0, "max_new_tokens": 64}
    choices = {"choices": ["Paris is the capital of France.", "Tokyo is the capital of Japan.",
                           "Rome is the capital of Italy."], "temperature": 0, "max_new_tokens": 40}
    capitals = ["What is the capital of France?", "What is the capital of Japan?"]
    # all fp32: outputs with and without jump-forward are compared token for token, and bf16
    # products round differently with the batch's shape (near-ties could flip)
    with Engine(max_total_tokens=4096, check_memory=True, dtype="float32") as on:
        tok = on.tokenizer
        chat = lambda q: tok.encode(tok.apply_chat_template([{"role": "user", "content": q}]))  # noqa: E731
        ids, ids2 = [chat(q) for q in questions], [chat(q) for q in capitals]
        a = on.generate(input_ids=ids, sampling_params=params)
        a2 = on.generate(input_ids=ids2, sampling_params=choices)
        on.check_memory(idle=True)
        with Engine(on.loaded, max_total_tokens=4096, check_memory=True, enable_jump_forward=False) as off:
            b = off.generate(input_ids=ids, sampling_params=params)
            b2 = off.generate(input_ids=ids2, sampling_params=choices)
            identity = [jump_points_are_identity(off, params, i, o.output_ids) for i, o in zip(ids, b)]
            identity2 = [jump_points_are_identity(off, choices, i, o.output_ids) for i, o in zip(ids2, b2)]
    for out in a + b:
        assert out.meta_info["finish_reason"]["type"] == "stop", out.text
        jsonschema.validate(json.loads(out.text), schema)
    assert sum(o.meta_info["jump_forward_tokens"] for o in a) > 0
    for x, y in zip(a2, b2):
        assert x.text in choices["choices"] and y.text in choices["choices"]
    assert any(identity2)  # a trained model writes forced words with the tokenizer's own tokens
    for x, y, same in zip(a + a2, b + b2, identity + identity2):
        if same:
            assert x.output_ids == y.output_ids and x.meta_info["jump_forward_tokens"] > 0


# ----------------------------------------------------------------------- jump-forward internals


def test_plan_jump_keeps_the_common_prefix(tiny_engine_model):
    loaded, _ = tiny_engine_model
    tok, vocab = loaded.tokenizer, loaded.config.vocab_size
    prompt = tok.encode("Hello")
    # the output so far is `{"furc` in one-character tokens; forced `a"` merges with them
    out = [t for ch in '{"furc' for t in tok.encode(ch)]
    plan = plan_jump(tok, prompt, out, 'a"', vocab)
    assert plan is not None
    final = out[: len(out) - plan.drop] + plan.new_ids
    assert tok.decode(final) == '{"furca"'
    assert plan.drop == 4 and plan.new_ids == tok.encode('furca"')  # `furca` is one token
    # nothing dropped where the forced text starts a new pre-token
    plan = plan_jump(tok, prompt, tok.encode('{"name'), '": "', vocab)
    assert plan.drop == 0 and plan.new_ids == tok.encode('": "')
    assert plan_jump(tok, prompt, out, "", vocab) is None
    # tokens the model cannot produce (beyond its logits) are never planned
    assert plan_jump(tok, prompt, [], "json", vocab_size=3) is None


def test_rollback_into_the_radix_tree_and_retraction(tiny_engine_model):
    """Re-tokenization that drops tokens already inserted in the radix tree moves the
    request's lock back; a small pool retracts constrained requests midway. Outputs
    stay valid and the KV accounting exact."""
    loaded, hf_model = tiny_engine_model
    params = [{"json_schema": SCHEMA, "temperature": 1.0, "seed": s, "max_new_tokens": 100} for s in range(8)]
    with Engine(loaded, max_total_tokens=4096, check_memory=True) as engine:
        kinds = {"noop": 0, "owned": 0, "tree": 0}
        original = engine.scheduler.cache.rollback_kv

        def spy(req):
            new_len = req.kv.rollback_to
            kinds["noop" if new_len >= req.kv.kv_len else "owned" if new_len >= req.kv.tree_len else "tree"] += 1
            original(req)

        engine.scheduler.cache.rollback_kv = spy
        outs = engine.generate(["Hello"] * 4 + ["Paris is"] * 4, sampling_params=params)
        for p, out in zip(params, outs):
            check_valid(engine, p, out, lambda t: jsonschema.validate(json.loads(t), SCHEMA))
        assert kinds["tree"] > 0 and kinds["owned"] > 0, kinds
        engine.check_memory(idle=True)
    with Engine(loaded, max_total_tokens=150, init_new_token_ratio=0.05, min_new_token_ratio=0.05,
                check_memory=True) as small:
        outs = small.generate(["Hello"] * 4 + ["Paris is"] * 4, sampling_params=params)
        for p, out in zip(params, outs):
            check_valid(small, p, out, lambda t: jsonschema.validate(json.loads(t), SCHEMA))
        assert small.get_server_info()["stats"]["retractions"] > 0
        small.check_memory(idle=True)


# ----------------------------------------------------------------------- jump-forward: streamed ids, logprobs


def forced_flags(engine: Engine) -> dict[str, list[bool]]:
    """Spy on jump-forward: per rid, which output tokens are forced (appended without
    sampling), kept up to date through re-tokenization. Returns the live dict."""
    jf = engine.scheduler.post.jump_forward
    original = jf.apply
    flags: dict[str, list[bool]] = {}

    def spy(req, initial=False):
        f = flags.setdefault(req.rid, [])
        f.extend([False] * (len(req.output_ids) - len(f)))  # sampled since the last call
        n, dropped = len(req.output_ids), req.jump.dropped_tokens
        reason = original(req, initial=initial)
        keep = n - (req.jump.dropped_tokens - dropped)
        del f[keep:]
        f.extend([True] * (len(req.output_ids) - keep))
        return reason

    jf.apply = spy
    return flags


def test_stream_takes_back_ids_that_re_tokenization_replaced(engines):
    """Re-tokenization drops tokens already streamed: the next delta's ``retract`` takes
    them back, so the streamed ids (retractions applied) are the final output ids."""
    on, _ = engines
    num_retracted = 0
    for seed, prompt in enumerate(PROMPTS):
        params = {"json_schema": SCHEMA, "temperature": 1.0 if seed else 0.0, "seed": seed, "max_new_tokens": 100}
        deltas = list(on.generate(prompt, sampling_params=params, stream=True))
        full = on.generate(prompt, sampling_params=params)
        ids: list[int] = []
        for d in deltas:
            assert 0 <= d.retract <= len(ids)
            d.apply_ids(ids)
        assert ids == full.output_ids
        assert "".join(d.text for d in deltas) == full.text
        assert deltas[-1].finished and deltas[-1].meta_info["completion_tokens"] == len(ids)
        num_retracted += sum(d.retract for d in deltas)
    # the case really happens: in "tags", sampled `[` `"` `j` + forced `son"` become `["` `j` `s` `on` `"`
    assert num_retracted > 0
    on.check_memory(idle=True)


def score_as_prompt(engine: Engine, prompt_ids: list[int], output_ids: list[int], k: int):
    """The engine's logprobs of ``output_ids`` scored as the tail of a prompt."""
    out = engine.generate(input_ids=prompt_ids + output_ids, sampling_params={
        "max_new_tokens": 0, "return_logprob": True, "logprob_start_len": len(prompt_ids), "top_logprobs_num": k})
    return out.meta_info["input_token_logprobs"], out.meta_info["input_top_logprobs"]


@pytest.mark.parametrize("constraint", [{"json_schema": SCHEMA}, {"regex": REGEXES[0]}])
def test_return_logprob_jumps_forward_and_scores_forced_tokens_as_prompt_tokens(tiny_engine_model, constraint):
    """A request with logprobs jumps forward too. Each forced token's logprob (and top
    logprobs) is the model's, exactly as when the final text is scored as a prompt;
    sampled tokens keep theirs (after the constraint mask: never below the unmasked)."""
    loaded, _ = tiny_engine_model
    k = 3
    with Engine(loaded, max_total_tokens=4096, check_memory=True) as engine:
        flags = forced_flags(engine)
        for seed, prompt in enumerate(PROMPTS[:3]):
            params = {**constraint, "temperature": 1.0 if seed else 0.0, "seed": seed, "max_new_tokens": 80,
                      "return_logprob": True, "top_logprobs_num": k}
            steps = engine.get_server_info()["stats"]["steps"]
            out = engine.generate(prompt, sampling_params=params, rid=f"lp{seed}")
            steps = engine.get_server_info()["stats"]["steps"] - steps
            meta, n = out.meta_info, len(out.output_ids)
            forced = flags[f"lp{seed}"] + [False] * (n - len(flags[f"lp{seed}"]))
            assert meta["jump_forward_tokens"] > 0 and any(forced)
            assert steps < n  # one forward pass per sampled token at most; forced ones come free
            assert [e[1] for e in meta["output_token_logprobs"]] == out.output_ids
            assert len(meta["output_top_logprobs"]) == n
            prompt_ids = engine.tokenizer.encode(prompt)
            # k + 5 alternatives: two tokens within float noise of each other may swap places
            # at the edge of the top k (seen on a CPU with native bf16)
            scored, scored_top = score_as_prompt(engine, prompt_ids, out.output_ids, k + 5)
            for i, is_forced in enumerate(forced):
                lp, ref = meta["output_token_logprobs"][i][0], scored[i][0]
                if is_forced:
                    assert lp == pytest.approx(ref, abs=1e-4), (i, out.text)
                    top, ref_top = meta["output_top_logprobs"][i], scored_top[i]
                    assert [e[0] for e in top] == pytest.approx([e[0] for e in ref_top[:k]], abs=1e-4)
                    ref_lp = {e[1]: e[0] for e in ref_top}  # each alternative is the model's own
                    assert all(ref_lp.get(t) == pytest.approx(v, abs=1e-4) for v, t, _ in top), (top, ref_top)
                else:
                    assert lp >= ref - 1e-4  # renormalized over the allowed tokens
        engine.check_memory(idle=True)


def test_return_logprob_when_forced_tokens_end_the_request(engines):
    """A request that ends on forced tokens (max_new_tokens, a stop string inside the
    forced text, also before the first pass) gets one more pass to score them: its
    result has one logprob per output token, and prompt logprobs as asked."""
    on, _ = engines
    lp = {"return_logprob": True, "top_logprobs_num": 2}
    cases = [{"json_schema": SCHEMA, "temperature": 0, "max_new_tokens": n, **lp} for n in (8, 13, 20)]
    cases += [{"regex": r'\{"name": "[a-z]{1,8}"\}', "stop": ["name"], "temperature": 0, "max_new_tokens": 30,
               "logprob_start_len": 0, **lp},
              {"regex": r'\{"name": "[a-z]{1,8}", "version": [0-9]\}', "stop": ["version"], "temperature": 0,
               "max_new_tokens": 30, **lp}]
    for params in cases:
        for stream in (False, True):
            res = on.generate("Hello", sampling_params=params, stream=stream)
            if stream:
                deltas = list(res)
                ids: list[int] = []
                for d in deltas:
                    d.apply_ids(ids)
                text, meta = "".join(d.text for d in deltas), deltas[-1].meta_info
            else:
                ids, text, meta = res.output_ids, res.text, res.meta_info
            assert meta["jump_forward_tokens"] > 0
            assert [e[1] for e in meta["output_token_logprobs"]] == ids
            assert len(meta["output_top_logprobs"]) == len(ids)
            assert all(e[0] is not None and e[0] <= 0 for e in meta["output_token_logprobs"])
            if "stop" in params:
                assert meta["finish_reason"] == {"type": "stop", "matched": params["stop"][0]}
                assert text.endswith('"') and params["stop"][0] not in text
            else:
                assert meta["finish_reason"] == {"type": "length", "length": params["max_new_tokens"]}
                assert len(ids) == params["max_new_tokens"]
        if params.get("logprob_start_len") == 0:
            assert len(meta["input_token_logprobs"]) == len(on.tokenizer.encode("Hello"))
    on.check_memory(idle=True)
