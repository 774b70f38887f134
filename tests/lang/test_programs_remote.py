"""The test programs through a live ``furca serve`` (started by `Runtime` on a free
port, the default model): via `RuntimeEndpoint` (SGLang's native API) and via
`OpenAI(base_url=...)`. Structure and constraints, not the model's knowledge."""

from __future__ import annotations

import json
import re

import pydantic
import pytest

import furca as sgl
from furca.lang.errors import BackendCapabilityError, BackendRequestError
from tests.conftest import CLIENT_TIMEOUT, READY_TIMEOUT

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def runtime():
    rt = sgl.Runtime(max_total_tokens=16384, log_level="warning", launch_timeout=READY_TIMEOUT)
    yield rt
    rt.shutdown()


@pytest.fixture(scope="module")
def native(runtime):
    return runtime.endpoint


@pytest.fixture(scope="module")
def openai_backend(runtime):
    return sgl.OpenAI("SmolLM2-135M-Instruct", base_url=runtime.url + "/v1")


@pytest.fixture(params=["native", "openai"])
def backend(request, native, openai_backend):
    return native if request.param == "native" else openai_backend


@sgl.function
def few_shot_qa(s, question):
    s += "The following are questions with answers.\n\n"
    s += "Q: What is the capital of France?\nA: Paris\n"
    s += "Q: What is the capital of Germany?\nA: Berlin\n"
    s += "Q: " + question + "\n"
    s += "A:" + sgl.gen("answer", stop="\n", temperature=0, max_tokens=16)


@sgl.function
def multi_turn(s, question_1, question_2):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question_1)
    s += sgl.assistant(sgl.gen("answer_1", max_tokens=12))
    with s.user():
        s += question_2
    with s.assistant():
        s += "Sure. " + sgl.gen("answer_2", max_tokens=12)


def test_few_shot_qa_with_stop(backend):
    state = few_shot_qa.run(question="What is the capital of Japan?", backend=backend)
    assert state["answer"].strip() and "\n" not in state["answer"]
    assert state.text().endswith("A:" + state["answer"])
    states = few_shot_qa.run_batch([{"question": "What is the capital of Spain?"}] * 2, backend=backend,
                                   progress_bar=False)
    assert all("\n" not in st["answer"] for st in states)


def test_multi_turn_messages(backend):
    state = multi_turn.run(question_1="Name a colour.", question_2="Name another one.", temperature=0,
                           backend=backend)
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[4]["content"].startswith("Sure. ")
    assert state["answer_2"] in messages[4]["content"]


def test_native_renders_roles_with_the_models_template(native):
    assert "<|im_start|>" in native.model_info["chat_template"]  # reported by the server
    state = multi_turn.run(question_1="Hi.", question_2="Bye.", temperature=0, backend=native)
    assert state.text().startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")


def test_streaming(backend):
    state = multi_turn.run(question_1="Say hello.", question_2="Again.", stream=True, temperature=0,
                           backend=backend)
    answer = "".join(state.text_iter("answer_1"))
    assert answer == state["answer_1"] and answer
    assert "".join(state.text_iter()) == state.text()  # the whole text, also after the program ended
    assert state.get_meta_info("answer_1")["completion_tokens"] <= 12


@sgl.function
def qa_logprobs(s, question):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=24, return_logprob=True, top_logprobs_num=2,
                               return_text_in_logprobs=True))


def test_streamed_logprobs_through_the_native_api(native):
    """The server streams each event's logprob entries (SGLang's incremental segments);
    `RuntimeEndpoint` puts them back together: the streamed run's meta_info has every
    entry, as the plain run's has."""
    streamed = qa_logprobs.run(question="Name three colors.", stream=True, temperature=0, backend=native)
    answer = "".join(streamed.text_iter("answer"))
    meta = streamed.get_meta_info("answer")
    plain = qa_logprobs.run(question="Name three colors.", temperature=0, backend=native).get_meta_info("answer")
    assert answer == streamed["answer"] and answer
    entries = meta["output_token_logprobs"]
    assert len(entries) == meta["completion_tokens"] == meta["output_token_logprobs_length"] > 1
    assert len(meta["output_top_logprobs"]) == len(entries)
    assert [e[1:] for e in entries] == [e[1:] for e in plain["output_token_logprobs"]]
    assert [e[0] for e in entries] == pytest.approx([e[0] for e in plain["output_token_logprobs"]], abs=0.05)


def test_fork_join(backend):
    @sgl.function
    def tips(s):
        s += "Here are two tips for writing well.\n"
        forks = s.fork(2)
        forks += lambda i: f"Tip {i + 1}:" + sgl.gen("tip", max_tokens=8, stop="\n")
        forks.join()

    state = tips.run(temperature=0.5, backend=backend)
    assert len(state["tip"]) == 2 and all("\n" not in t for t in state["tip"])


def test_select_native_exact_and_by_text(native):
    choices = ["True", "False", "Unknown"]

    @sgl.function
    def tf(s, statement):
        s += "Statement: " + statement + "\nAnswer:" + sgl.select("answer", choices)

    exact = tf.run(statement="Water is wet.", backend=native)
    assert exact["answer"] in choices
    entries = exact.get_meta_info("answer")["input_token_logprobs"]
    assert all(len(e) >= 1 for e in entries)
    native._can_tokenize = False  # a server without /tokenize (older SGLang): align by token text
    try:
        by_text = tf.run(statement="Water is wet.", backend=native)
    finally:
        native._can_tokenize = None
    assert by_text["answer"] == exact["answer"]
    assert by_text.get_meta_info("answer")["normalized_prompt_logprobs"] == pytest.approx(
        exact.get_meta_info("answer")["normalized_prompt_logprobs"], rel=1e-2)  # bf16 linears: batch noise


def test_select_unconditional_on_native(native):
    @sgl.function
    def pick(s):
        s += "The sky is" + sgl.select("c", [" blue", " green"], choices_method=sgl.unconditional_likelihood_normalized)

    meta = pick.run(backend=native).get_meta_info("c")
    assert len(meta["unconditional_token_logprobs"]) == 2


def test_select_through_openai_on_furca_matches_the_native_api(native, openai_backend):
    """`OpenAI(model, base_url=<furca>)` selects through /v1/completions with echo + logprobs
    and finds what the native API finds, with the same scores."""
    choices = ["True", "False", "Unknown"]

    @sgl.function
    def tf(s, statement):
        s += "Statement: " + statement + "\nAnswer:" + sgl.select("answer", choices)

    via_openai = tf.run(statement="Water is wet.", backend=openai_backend)
    exact = tf.run(statement="Water is wet.", backend=native)
    assert via_openai["answer"] == exact["answer"]
    assert via_openai.get_meta_info("answer")["normalized_prompt_logprobs"] == pytest.approx(
        exact.get_meta_info("answer")["normalized_prompt_logprobs"], rel=1e-2)  # bf16 linears: batch noise
    default = sgl.OpenAI("default", base_url=openai_backend.base_url)  # README's model name
    assert tf.run(statement="Water is wet.", backend=default)["answer"] == exact["answer"]


def test_select_on_openai_in_a_chat_turn_is_a_clear_error(openai_backend):
    @sgl.function
    def in_chat(s):
        s += sgl.user("Is water wet?")
        s += sgl.assistant(sgl.select("answer", ["Yes", "No"]))

    with pytest.raises(BackendCapabilityError, match="prompt logprobs"):
        in_chat.run(backend=openai_backend)


def test_constrained_regex_and_dtype(backend):
    @sgl.function
    def typed(s):
        s += "Q: What is the IP address of the Google DNS servers?\nA: " + sgl.gen(
            "ip", regex=r"((25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)", max_tokens=24)
        s += "\nQ: How many hours are in a day?\nA: " + sgl.gen_int("hours", max_tokens=6)

    state = typed.run(temperature=0, backend=backend)
    assert re.fullmatch(r"(\d{1,3}\.){3}\d{1,3}", state["ip"])
    assert isinstance(state["hours"], int)


def test_json_schema_into_a_pydantic_model(backend):

    class Answer(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=16)
        is_capital: bool

    @sgl.function
    def extract(s):
        s += sgl.user("Is Paris a capital? Answer as JSON.")
        s += sgl.assistant(sgl.gen("answer", json_schema=Answer, max_tokens=40, temperature=0))

    state = extract.run(backend=backend)
    assert isinstance(state["answer"], Answer)
    json.loads(state.messages()[-1]["content"])


def test_min_tokens(backend):
    @sgl.function
    def short(s):
        s += sgl.user("Reply with just the word OK.")
        s += sgl.assistant(sgl.gen("a", min_tokens=8, max_tokens=10, temperature=0))

    assert short.run(backend=backend).get_meta_info("a")["completion_tokens"] >= 8


def test_a_failed_server_call_carries_the_servers_message(backend):
    @sgl.function
    def too_long(s):
        s += "Hello" + sgl.gen("a", max_tokens=10**7)

    with pytest.raises(BackendRequestError, match="400") as info:
        too_long.run(backend=backend)
    assert "context" in str(info.value).lower()


def test_server_info_and_flush(native):
    assert sgl.get_server_info(native)["max_total_tokens"] > 0
    assert sgl.flush_cache(native) in (True, False)


PROGRAM_FILE = '''
import furca as sgl

@sgl.function
def greet(s, name):
    s += "Hello, " + name + "! Today is" + sgl.gen("day", max_tokens=4, temperature=0)

if __name__ == "__main__":
    print("MAIN", greet.run(name="Ada")["day"] is not None)
'''


def test_furca_run_sets_the_backend(runtime, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "greet.py"
    path.write_text(PROGRAM_FILE)
    cli = [sys.executable, "-m", "furca.cli", "run"]
    out = subprocess.run(cli + [str(path), "--backend", runtime.url], capture_output=True, text=True,
                         timeout=CLIENT_TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert "MAIN True" in out.stdout
    out = subprocess.run(cli + [str(path), "--backend", runtime.url, "--program", "greet", "--arg", "name=Bo"],
                         capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Hello, Bo! Today is") and '"day"' in out.stderr
    out = subprocess.run(cli + [str(path), "--backend", "nonsense"], capture_output=True, text=True,
                         timeout=CLIENT_TIMEOUT)
    assert out.returncode == 1 and "--backend must be" in out.stderr


def test_a_runtime_is_a_backend_and_sets_as_default(runtime):
    state = few_shot_qa.run(question="What is the capital of Chile?", backend=runtime)
    assert "\n" not in state["answer"]
    sgl.set_default_backend(runtime)
    try:
        assert sgl.get_server_info()["max_total_tokens"] == 16384
    finally:
        sgl.set_default_backend(None)


def test_runtime_that_cannot_start_says_so(tmp_path):
    with pytest.raises(BackendRequestError, match="could not start: .*no-such-model"):
        sgl.Runtime(str(tmp_path / "no-such-model"), launch_timeout=READY_TIMEOUT)
