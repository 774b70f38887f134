"""Interpreter mechanics on a scripted backend (no model): text, gens, params, roles,
variables, fork/join, streaming, run_batch and the errors a program author sees."""

from __future__ import annotations

import asyncio
import json
import dataclasses
import sys
import subprocess

import pydantic
import pytest

import furca as sgl
from furca.lang import REGEX_INT
from furca.lang.ir import Select
from furca.lang.errors import BackendCapabilityError, NoBackendError, ProgramError, ProgramFailedError, VariableNotSetError

from .fakes import FakeBackend


@pytest.fixture
def fake():
    backend = FakeBackend()
    sgl.set_default_backend(backend)
    yield backend
    sgl.set_default_backend(None)


def test_import_furca_loads_no_torch():
    code = ("import sys, furca, furca.lang, furca.lang.tracer, furca.lang.backends.local, "
            "furca.lang.backends.runtime_endpoint, furca.lang.backends.runtime, furca.lang.backends.openai_backend; "
            "furca.gen; furca.function; furca.RuntimeEndpoint; furca.OpenAI; furca.Runtime; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_text_gen_and_meta_info(fake):
    @sgl.function
    def qa(s, question):
        s += "Q: " + question + "\n"
        s += "A:" + sgl.gen("answer", stop="\n", temperature=0)

    state = qa.run(question="why?")
    assert state["answer"] == "<gen 0>"
    assert state.text() == "Q: why?\nA:<gen 0>"
    assert state.get_meta_info("answer")["completion_tokens"] == len("<gen 0>")
    req = fake.requests[0]
    assert req.text == "Q: why?\nA:"
    assert req.params.stop == ("\n",) and req.params.temperature == 0
    assert req.params.max_new_tokens == 128  # run's default


def test_run_defaults_and_gen_overrides(fake):
    @sgl.function
    def two(s):
        s += sgl.gen("a") + sgl.gen("b", max_tokens=7, temperature=0.5, stop=["x", "y"])

    two.run(max_new_tokens=3, temperature=0.1, stop="z")
    a, b = (r.params for r in fake.requests)
    assert (a.max_new_tokens, a.temperature, a.stop) == (3, 0.1, ("z",))
    assert (b.max_new_tokens, b.temperature, b.stop) == (7, 0.5, ("x", "y"))


def test_requests_are_immutable(fake):
    @sgl.function
    def one(s):
        s += sgl.gen("a")

    one.run()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fake.requests[0].text = "changed"


def test_dtype_becomes_a_regex_and_converts():
    replies = iter(["42", "3.5", "True", '"Paris"'])
    backend = FakeBackend(reply=lambda req: next(replies))

    @sgl.function
    def typed(s):
        s += sgl.gen_int("i") + sgl.gen("f", dtype=float) + sgl.gen("b", dtype=bool) + sgl.gen_string("s")

    state = typed.run(backend=backend)
    assert state["i"] == 42 and state["f"] == 3.5 and state["b"] is True and state["s"] == "Paris"
    assert state.text() == '423.5True"Paris"'  # the text keeps what the model wrote
    i_params, f_params, b_params, s_params = (r.params for r in backend.requests)
    assert i_params.regex == REGEX_INT
    assert i_params.stop == (" ", "\n") and f_params.stop == (" ", "\n")
    assert b_params.regex == r"(True|False)" and s_params.regex.startswith('\\"')


def test_dtype_value_that_does_not_parse_is_an_actionable_error():
    backend = FakeBackend(reply=lambda req: "twelve")

    @sgl.function
    def typed(s):
        s += sgl.gen_int("n", max_tokens=2)

    with pytest.raises(ProgramError, match="not a valid int.*max_tokens"):
        typed.run(backend=backend)


def test_json_schema_from_pydantic_class_parses_instance():
    class City(pydantic.BaseModel):
        name: str
        population: int

    backend = FakeBackend(reply=lambda req: '{"name": "Paris", "population": 2100000}')

    @sgl.function
    def extract(s):
        s += "City: " + sgl.gen("city", json_schema=City)

    state = extract.run(backend=backend)
    assert isinstance(state["city"], City) and state["city"].population == 2100000
    assert '"population"' in backend.requests[0].params.json_schema


def test_grammar_is_sent_as_ebnf(fake):
    @sgl.function
    def g(s):
        s += sgl.gen("x", grammar='root ::= "a" | "b"')

    g.run()
    assert fake.requests[0].params.ebnf == 'root ::= "a" | "b"'
    assert fake.requests[0].params.constraint == ("ebnf", 'root ::= "a" | "b"')


def test_two_constraints_are_rejected():
    with pytest.raises(ProgramError, match="at most one"):
        sgl.gen("x", regex="a+", json_schema={"type": "string"})


def test_roles_render_with_the_template_and_messages(fake):
    @sgl.function
    def chat(s, q):
        s += sgl.system("Be brief.")
        s += sgl.user(q)
        s += sgl.assistant(sgl.gen("a1"))
        with s.user():
            s += "again"
        with s.assistant():
            s += sgl.gen("a2")

    state = chat.run(q="hi")
    assert state.messages() == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "<gen 0>"}, {"role": "user", "content": "again"},
        {"role": "assistant", "content": "<gen 1>"},
    ]
    assert state.text() == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n<gen 0><|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"
        "<|im_start|>assistant\n<gen 1><|im_end|>\n"
    )
    # the gen saw the assistant turn opened, as a chat API would
    req = fake.requests[0]
    assert req.text.endswith("<|im_start|>assistant\n") and req.open_role == "assistant"
    assert [m.role for m in req.messages] == ["system", "user"]


def test_begin_end_forms_and_nested_roles(fake):
    @sgl.function
    def ok(s):
        s += sgl.user_begin() + "x" + sgl.user_end()

    assert ok.run().messages() == [{"role": "user", "content": "x"}]

    @sgl.function
    def nested(s):
        s += sgl.user_begin() + sgl.assistant("y")

    with pytest.raises(ProgramError, match="cannot nest"):
        nested.run()


def test_var_scope_and_reading_unset_variables(fake):
    @sgl.function
    def scoped(s):
        s += "before "
        with s.var_scope("inside"):
            s += "a" + sgl.gen("g") + "b"
        s += " after"

    state = scoped.run()
    assert state["inside"] == "a<gen 0>b"
    with pytest.raises(VariableNotSetError, match="'missing' was never set.*inside"):
        state["missing"]

    @sgl.function
    def reads_unset(s):
        s += "x" + s["nope"]

    with pytest.raises(VariableNotSetError, match="nope"):
        reads_unset.run()


def test_select_needs_choices():
    with pytest.raises(ProgramError, match="non-empty list of choices"):
        sgl.select("x", [])
    with pytest.raises(ProgramError, match="non-empty list of choices"):
        sgl.select("x")
    assert isinstance(sgl.gen("x", choices=["a", "b"]), Select)


def test_select_appends_the_decision(fake):
    fake.scores = {"yes": [-2.0], "no": [-0.5]}

    @sgl.function
    def yn(s):
        s += "Answer: " + sgl.select("a", ["yes", "no"])

    state = yn.run()
    assert state["a"] == "no" and state.text() == "Answer: no"
    assert state.get_meta_info("a")["normalized_prompt_logprobs"] == [-2.0, -0.5]


def test_fork_join_gathers_variables_and_caches_the_prefix(fake):
    @sgl.function
    def tree(s):
        s += "Shared prefix. "
        forks = s.fork(3)
        forks += lambda i: f"Branch {i}: " + sgl.gen("idea")
        forks.join()
        s += "Ideas: " + ", ".join(s["idea"])

    state = tree.run()
    assert fake.cached == ["Shared prefix. "]
    assert sorted(state["idea"]) == sorted(f"<gen {i}>" for i in range(3))
    texts = sorted(r.text for r in fake.requests)
    assert texts == [f"Shared prefix. Branch {i}: " for i in range(3)]


def test_fork_with_list_and_indexing_and_concat(fake):
    @sgl.function
    def enc(s):
        s += "Q. "
        forks = s.fork(2)
        forks += ["first ", "second "]
        forks[1] += sgl.gen("x")
        forks.join(mode="concate_and_append")
        s += "end"

    state = enc.run()
    assert state.text() == "Q. first second <gen 0>end"


def test_copy_joins_back(fake):
    @sgl.function
    def prog(s):
        s += "base "
        with s.copy() as c:
            c += "side " + sgl.gen("side")
        s += "main"

    state = prog.run()
    assert state.text() == "base main"
    assert state["side"] == ["<gen 0>"]


def test_n_samples_become_a_list(fake):
    @sgl.function
    def many(s):
        s += sgl.gen("x", n=3)

    state = many.run()
    assert state["x"] == ["<gen 0>#0", "<gen 0>#1", "<gen 0>#2"]


def test_stream_text_iter_and_var():
    backend = FakeBackend(reply=lambda req: "hello world")

    @sgl.function
    def prog(s):
        s += "> " + sgl.gen("out")

    state = prog.run(stream=True, backend=backend)
    assert "".join(state.text_iter()) == "> hello world"
    state = prog.run(stream=True, backend=backend)
    pieces = list(state.text_iter("out"))
    assert "".join(pieces) == "hello world"
    assert state["out"] == "hello world"


def test_text_async_iter():
    backend = FakeBackend(reply=lambda req: "abc")

    @sgl.function
    def prog(s):
        s += sgl.gen("out")

    async def collect():
        state = prog.run(stream=True, backend=backend)
        return [piece async for piece in state.text_async_iter("out", return_meta_data=True)]

    pieces = asyncio.run(collect())
    assert "".join(p for p, _ in pieces) == "abc"
    assert pieces[-1][1] == {"completion_tokens": 3}


def test_run_batch_in_order_with_progress_and_generator(fake, capsys):
    @sgl.function
    def echo(s, x):
        s += x + sgl.gen("y")

    states = echo.run_batch([{"x": str(i)} for i in range(8)], num_threads=4, progress_bar=True)
    assert [st.text()[0] for st in states] == [str(i) for i in range(8)]
    assert "8/8" in capsys.readouterr().err
    gen = echo.run_batch([("a",), ("b",)], generator_style=True, progress_bar=False)
    assert [st.text()[0] for st in gen] == ["a", "b"]


def test_run_batch_precaches_a_long_constant_prefix(fake):
    prefix = "You are a careful assistant that answers in one word. " * 3

    @sgl.function
    def prog(s, q):
        s += prefix + "Q: " + q + "\nA:" + sgl.gen("a")

    prog.run_batch([{"q": "x"}, {"q": "y"}], progress_bar=False)
    # the items' shared prefix, cut back to a word boundary (where BPE splits it the same way)
    assert fake.cached == [prefix + "Q:"]


def test_program_errors_reach_the_caller(fake):
    @sgl.function
    def bad(s):
        s += sgl.gen("a")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        bad.run()

    def failing(req):
        raise BackendCapabilityError("cannot do that")

    backend = FakeBackend(reply=failing)

    @sgl.function
    def uses(s):
        s += sgl.gen("a") + sgl.gen("b")

    with pytest.raises(BackendCapabilityError, match="cannot do that"):
        uses.run(backend=backend)
    states = uses.run_batch([{}, {}], backend=backend, progress_bar=False)
    assert isinstance(states[0].error(), BackendCapabilityError)
    with pytest.raises(ProgramFailedError, match="cannot do that"):
        states[0]["b"]


def test_no_backend_is_an_actionable_error():
    sgl.set_default_backend(None)

    @sgl.function
    def prog(s):
        s += sgl.gen("a")

    with pytest.raises(NoBackendError, match="set_default_backend"):
        prog.run()


def test_bind_and_positional_args(fake):
    @sgl.function
    def prog(s, a, b="B"):
        s += a + b

    assert prog.bind(b="x").run(a="1").text() == "1x"
    assert prog("2").text() == "2B"
    with pytest.raises(ProgramError, match="no argument"):
        prog.bind(c=1)


def test_appending_a_non_text_value_says_what_to_do(fake):
    @sgl.function
    def prog(s):
        s += 5

    with pytest.raises(ProgramError, match="str\\(\\)"):
        prog.run()


def test_reading_a_variable_after_a_failed_gen_does_not_hang():
    calls = []

    def reply(req):
        calls.append(req)
        if len(calls) == 1:
            raise BackendCapabilityError("first gen fails")
        return "fine"

    @sgl.function
    def prog(s):
        s += sgl.gen("a")
        s += sgl.gen("b")  # submitted after the failure; never runs
        s += "value: " + s["b"]

    with pytest.raises(BackendCapabilityError, match="first gen fails"):
        prog.run(backend=FakeBackend(reply=reply))
    assert len(calls) == 1


def test_pydantic_schema_forbids_undeclared_members():
    class Inner(pydantic.BaseModel):
        x: int

    class Outer(pydantic.BaseModel):
        inner: Inner
        tags: list[str]

    schema = json.loads(sgl.gen("o", json_schema=Outer).params.json_schema)
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Inner"]["additionalProperties"] is False
    open_schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert "additionalProperties" not in json.loads(sgl.gen("o", json_schema=open_schema).params.json_schema)
