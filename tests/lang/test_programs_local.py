"""SGLang's frontend test programs (sglang/test/test_programs.py), their mechanics on
the default model through the in-process Engine. Structure and constraints are
asserted, never the model's knowledge.

Constrained programs (dtype, regex, json_schema, grammar) need the engine's grammar
backend: `Engine()` always has one, and an engine without it fails them (never a skip).
The examples run here too, on the same engine.
"""

from __future__ import annotations

import json
import re

import pydantic
import pytest

import furca as sgl
from furca.lang.backends.local import LocalBackend

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def engine():
    from furca.runtime.engine import Engine

    # all fp32: scores are compared across batch shapes to 1e-4, and bf16 products (what
    # Engine() picks on a CPU with native bf16) round differently with the batch's shape
    with Engine(dtype="float32") as eng:
        sgl.set_default_backend(eng)
        yield eng
        sgl.set_default_backend(None)


@pytest.fixture
def constrained(engine):
    assert engine.grammar_backend is not None, "Engine() has no grammar backend: constrained programs cannot run"
    return engine


class CountingEngine:
    """Forwards to the engine, counting generate calls and their batch sizes."""

    def __init__(self, engine):
        self._engine = engine
        self.tokenizer = engine.tokenizer
        self.calls: list[int] = []

    def generate(self, *args, **kwargs):
        ids = kwargs.get("input_ids")
        self.calls.append(len(ids) if ids and isinstance(ids[0], list) else 1)
        return self._engine.generate(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@sgl.function
def few_shot_qa(s, question):
    s += "The following are questions with answers.\n\n"
    s += "Q: What is the capital of France?\nA: Paris\n"
    s += "Q: What is the capital of Germany?\nA: Berlin\n"
    s += "Q: What is the capital of Italy?\nA: Rome\n"
    s += "Q: " + question + "\n"
    s += "A:" + sgl.gen("answer", stop="\n", temperature=0, max_tokens=16)


def test_few_shot_qa_with_stop(engine):
    state = few_shot_qa.run(question="What is the capital of Japan?")
    answer = state["answer"]
    assert answer.strip() and "\n" not in answer
    assert state.text().endswith("A:" + answer)
    meta = state.get_meta_info("answer")
    assert meta["finish_reason"]["type"] in ("stop", "length") and meta["completion_tokens"] <= 16

    states = few_shot_qa.run_batch(
        [{"question": q} for q in ("What is the capital of Spain?", "What is the capital of Peru?")],
        temperature=0.1, progress_bar=False,
    )
    assert [len(st["answer"].strip()) > 0 and "\n" not in st["answer"] for st in states] == [True, True]


def test_multi_turn_roles_use_the_models_template(engine):
    @sgl.function
    def answer_mt(s, question_1, question_2):
        s += sgl.system("You are a helpful assistant.")
        s += sgl.user(question_1)
        s += sgl.assistant(sgl.gen("answer_1", max_tokens=16))
        with s.user():
            s += question_2
        with s.assistant():
            s += sgl.gen("answer_2", max_tokens=16)

    state = answer_mt.run(question_1="Name a colour.", question_2="Name another one.", temperature=0)
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    raw = [{"role": m["role"], "content": m["content"]} for m in messages]
    raw[2]["content"], raw[4]["content"] = state["answer_1"], state["answer_2"]
    assert state.text() == engine.tokenizer.apply_chat_template(raw, add_generation_prompt=False)


def test_select_scores_every_option_exactly_in_one_batched_call(engine):
    counting = CountingEngine(engine)
    backend = LocalBackend(counting)
    choices = ["True", "False", "Unknown"]

    @sgl.function
    def true_or_false(s, statement):
        s += "Determine whether the statement below is True, False, or Unknown.\n"
        s += "Statement: The capital of France is Pairs.\nAnswer: True\n"
        s += "Statement: " + statement + "\n"
        s += "Answer:" + sgl.select("answer", choices)

    state = true_or_false.run(statement="The capital of Germany is Berlin.", backend=backend)
    assert state["answer"] in choices and state.text().endswith("Answer:" + state["answer"])
    assert counting.calls == [3]  # one call, all options
    meta = state.get_meta_info("answer")
    prefix = state.text()[: -len(state["answer"])]
    for choice, entries, score in zip(choices, meta["input_token_logprobs"], meta["normalized_prompt_logprobs"]):
        # the scored tokens spell the option (the first may carry the prefix's last characters)
        assert (prefix + choice).endswith("".join(e[2] for e in entries))
        # the same logprobs as scoring the whole sequence from its first token
        ids = backend.encode(prefix + choice)
        full = engine.generate(input_ids=ids, sampling_params={
            "max_new_tokens": 0, "return_logprob": True, "logprob_start_len": 0})
        tail = [e[0] for e in full.meta_info["input_token_logprobs"][-len(entries):]]
        assert tail == pytest.approx([e[0] for e in entries], abs=1e-4)
        assert score == pytest.approx(sum(tail) / len(tail), abs=1e-4)


@pytest.mark.parametrize("method", [sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized])
def test_select_with_other_choice_methods(engine, method):
    @sgl.function
    def pick(s):
        s += "The sky on a clear day is" + sgl.select("c", [" blue", " green", " a colour"], choices_method=method)

    state = pick.run()
    assert state["c"] in (" blue", " green", " a colour")
    assert len(state.get_meta_info("c")["input_token_logprobs"]) == 3


def test_expert_answer_reads_a_variable_mid_program(engine):
    @sgl.function
    def expert_answer(s, question):
        s += "Question: " + question + "\n"
        s += "A good person to answer this question is" + sgl.gen("expert", stop=[".", "\n"], max_tokens=12) + ".\n"
        s += "For example," + s["expert"] + " would answer that " + sgl.gen("answer", stop=".", max_tokens=16) + "."

    state = expert_answer.run(question="What is the capital of France?", temperature=0)
    assert "." not in state["expert"] and "\n" not in state["expert"]
    assert "For example," + state["expert"] + " would answer that " + state["answer"] + "." in state.text()


def test_parallel_decoding_with_fork_and_join(engine):
    fork_size = 3

    @sgl.function
    def parallel_decoding(s, topic):
        s += "Act as a helpful assistant.\nUSER: Give some tips for " + topic + ".\n"
        s += f"ASSISTANT: Okay. Here are {fork_size} concise tips, each under 8 words:\n"
        for i in range(1, 1 + fork_size):
            s += f"{i}." + sgl.gen(max_tokens=12, stop=[".", "\n"]) + ".\n"
        forks = s.fork(fork_size)
        for i in range(fork_size):
            forks[i] += f"Now, I expand tip {i + 1} into a detailed paragraph:\nTip {i + 1}:"
            forks[i] += sgl.gen("detailed_tip", 16, stop=["\n\n"])
        forks.join()
        s += "Here are these tips with detailed explanation:\n"
        for i in range(fork_size):
            s += f"Tip {i + 1}:" + forks[i]["detailed_tip"] + "\n"
        s += "\nIn summary," + sgl.gen("summary", max_tokens=16)

    state = parallel_decoding.run(topic="writing a good blog post", temperature=0.3)
    assert isinstance(state["summary"], str)
    assert len(state["detailed_tip"]) == fork_size  # gathered into the parent, one per branch
    for tip in state["detailed_tip"]:
        assert tip in state.text()


def test_fork_branches_reuse_the_cached_prefix(engine):
    intro = "A shared introduction that every branch reuses from the radix cache. " * 4

    @sgl.function
    def forked(s):
        s += intro
        forks = s.fork(3)
        forks += lambda i: f"Branch {i}:" + sgl.gen("x", max_tokens=4)
        forks.join()
        return forks

    state = forked.run(temperature=0)
    shared = len(engine.tokenizer.encode(intro))
    cached = [branch.get_meta_info("x")["cached_tokens"] for branch in state.ret_value]
    assert all(c >= shared - 2 for c in cached), (cached, shared)


def test_streaming_text_iter(engine):
    @sgl.function
    def qa(s, question):
        s += sgl.system("You are a helpful assistant.")
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=24))

    state = qa(question="Say something about the sea.", stream=True, temperature=0)
    pieces = list(state.text_iter())
    assert "".join(pieces) == state.text() and len(pieces) > 2

    state = qa(question="Say something about the sea.", stream=True, temperature=0)
    answer = "".join(state.text_iter("answer"))
    assert answer == state["answer"] and answer
    assert state.get_meta_info("answer")["completion_tokens"] <= 24


def test_min_tokens(engine):
    @sgl.function
    def short(s):
        s += sgl.user("Reply with just the word OK.")
        s += sgl.assistant(sgl.gen("a", min_tokens=10, max_tokens=12, temperature=0))

    state = short.run()
    assert state.get_meta_info("a")["completion_tokens"] >= 10


def test_n_samples(engine):
    @sgl.function
    def names(s):
        s += "A name for a cat:" + sgl.gen("name", n=3, max_tokens=6, temperature=1.0)

    state = names.run()
    assert isinstance(state["name"], list) and len(state["name"]) == 3


def test_run_batch_computes_a_long_constant_prefix_once(engine):
    prefix = ("You are a careful assistant. Read the question, think about it, and answer in one word only. "
              "Never explain. Never add punctuation. ") * 3

    @sgl.function
    def one_word(s, q):
        s += prefix + "Question: " + q + "\nAnswer:" + sgl.gen("a", max_tokens=2, temperature=0)

    engine.flush_cache()
    prefix_len = len(engine.tokenizer.encode(prefix + "Question: "))
    states = one_word.run_batch([{"q": f"What is {i} plus {i}?"} for i in range(16)], progress_bar=False)
    cached = [st.get_meta_info("a")["cached_tokens"] for st in states]
    assert all(c >= prefix_len - 2 for c in cached), (cached, prefix_len)


def test_gen_stop_regex_on_the_local_engine(engine):
    @sgl.function
    def story(s, stop_regex):
        s += "Once upon a time, in a small village by the sea, there lived"
        s += sgl.gen("rest", max_tokens=40, temperature=0, stop_regex=stop_regex, ignore_eos=True)

    free = story.run(stop_regex=None)["rest"]
    pattern = r"[,.;!?\n]"  # one character: the first match is the leftmost one
    m = re.search(pattern, free)
    assert m, free
    state = story.run(stop_regex=pattern)
    assert state["rest"] == free[:m.start()]
    assert state.get_meta_info("rest")["finish_reason"] == {"type": "stop", "matched": pattern}
    streamed = story(stop_regex=[pattern, r"zz+z"], stream=True)
    assert "".join(streamed.text_iter("rest")) == free[:m.start()]


# -- constrained decoding (runs once Engine() has a grammar backend) -----------------------


def test_decode_int(constrained):
    @sgl.function
    def decode_int(s):
        s += "The number of hours in a day is " + sgl.gen_int("hours") + "\n"
        s += "The number of days in a year is " + sgl.gen_int("days", max_tokens=8) + "\n"

    state = decode_int.run(temperature=0.1, max_new_tokens=8)
    assert isinstance(state["hours"], int) and isinstance(state["days"], int)


def test_decode_json_with_dtype_and_regex(constrained):
    @sgl.function
    def decode_json(s):
        s += "Generate a JSON object to describe the basic city information of Paris.\n"
        with s.var_scope("json_output"):
            s += "{\n"
            s += '  "name": ' + sgl.gen_string(max_tokens=16) + ",\n"
            s += '  "population": ' + sgl.gen_int(max_tokens=12) + ",\n"
            s += '  "area": ' + sgl.gen(dtype=int, max_tokens=12) + ",\n"
            s += '  "latitude": ' + sgl.gen(regex=sgl.lang.REGEX_FLOAT, stop=[" ", "\n"], max_tokens=12) + "\n"
            s += "}"

    state = decode_json.run(temperature=0)
    obj = json.loads(state["json_output"])
    assert isinstance(obj["name"], str) and isinstance(obj["population"], int)


def test_regex(constrained):
    regex = r"((25[0-5]|2[0-4]\d|[01]?\d\d?).){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)"

    @sgl.function
    def regex_gen(s):
        s += "Q: What is the IP address of the Google DNS servers?\n"
        s += "A: " + sgl.gen("answer", temperature=0, regex=regex, max_tokens=24)

    assert re.fullmatch(regex, regex_gen.run()["answer"])


def test_dtype_gen(constrained):
    @sgl.function
    def dtype_gen(s):
        s += "Q: What is the full name of DNS?\nA: The full name is " + sgl.gen("str_res", dtype=str, max_tokens=16) + "\n"
        s += "Q: Which year was DNS invented?\nA: " + sgl.gen("int_res", dtype=int, max_tokens=8) + "\n"
        s += "Q: What is the value of pi?\nA: " + sgl.gen("float_res", dtype=float, max_tokens=8) + "\n"
        s += "Q: Is the sky blue?\nA: " + sgl.gen("bool_res", dtype=bool) + "\n"

    state = dtype_gen.run()
    assert isinstance(state["int_res"], int) and isinstance(state["float_res"], float)
    assert isinstance(state["bool_res"], bool) and isinstance(state["str_res"], str)


def test_json_schema_into_a_pydantic_model(constrained):

    from typing import Literal

    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=16)
        country: Literal["France", "Germany", "Italy"]
        is_capital: bool

    @sgl.function
    def extract(s):
        s += sgl.user("Describe Paris as JSON with its name, country and whether it is a capital.")
        s += sgl.assistant(sgl.gen("city", json_schema=City, max_tokens=48, temperature=0))

    state = extract.run()
    assert isinstance(state["city"], City)
    assert City.model_validate_json(state.messages()[-1]["content"]) == state["city"]


def test_grammar(constrained):
    @sgl.function
    def yes_no(s):
        s += "Is water wet? " + sgl.gen("a", grammar='root ::= "yes" | "no"', max_tokens=4)

    assert yes_no.run()["a"] in ("yes", "no")


# -- the examples, on this module's engine (their main() uses the default backend) ----------

EXAMPLES = ["quickstart", "agent_loop", "tree_of_thought", "batch_job", "json_extraction"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(engine, name, capsys):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the example's annotations through it
    spec.loader.exec_module(module)
    sgl.set_default_backend(engine)
    module.main()
    assert capsys.readouterr().out.strip()


def test_select_unconditional_scores_one_token_options(engine):
    """A one-token option scored alone is one ``[None, id, text]`` entry, straight from
    the engine (no backend-side patching)."""
    from furca.lang.backends.base import SelectRequest

    backend = LocalBackend.for_engine(engine)
    choices = (" blue", " green")
    assert all(len(backend.encode(c)) == 1 for c in choices)
    decision = backend.select(SelectRequest("The sky is", choices, sgl.unconditional_likelihood_normalized))
    uncond = decision.meta_info["unconditional_token_logprobs"]
    entries = decision.meta_info["input_token_logprobs"]
    assert [[e[1] for e in u] for u in uncond] == [[e[1] for e in opt] for opt in entries]
    assert all(len(u) == 1 and u[0][0] is None and u[0][2] == c for u, c in zip(uncond, choices))
