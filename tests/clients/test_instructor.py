"""instructor (``from_openai``) against ``furca serve`` in ``Mode.TOOLS`` (a forced tool
call) and ``Mode.JSON_SCHEMA`` (``response_format: json_schema``): one attempt
(``max_retries=1``), so a reply that needs re-asking fails the test; partial streaming
(instructor's jiter path) ends in the same object."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.clients.support import import_client
from tests.conftest import CLIENT_TIMEOUT

instructor = import_client("instructor")
import openai  # noqa: E402

pytestmark = pytest.mark.default_model

ASK = [{"role": "user", "content": "Name a fruit and its color."}]


class Fruit(BaseModel):
    name: str = Field(max_length=12)
    color: Literal["red", "green", "yellow"]
    ripe: bool


def make_client(base_url: str, api_key: str, mode):
    return instructor.from_openai(openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT),
                                  mode=mode)


@pytest.mark.parametrize("mode_name", ["TOOLS", "JSON_SCHEMA"])
def test_response_model_in_one_attempt(base_url, api_key, model, mode_name):
    client = make_client(base_url, api_key, getattr(instructor.Mode, mode_name))
    fruit, completion = client.chat.completions.create_with_completion(
        model=model, messages=ASK, response_model=Fruit, max_tokens=48, temperature=0, max_retries=1)
    assert isinstance(fruit, Fruit)
    message = completion.choices[0].message
    if mode_name == "TOOLS":  # the schema went out as a forced tool call and came back as one
        assert completion.choices[0].finish_reason == "tool_calls"
        assert [c.function.name for c in message.tool_calls] == ["Fruit"]
        assert Fruit.model_validate_json(message.tool_calls[0].function.arguments).model_dump() == fruit.model_dump()
    else:
        assert completion.choices[0].finish_reason == "stop" and not message.tool_calls
        assert Fruit.model_validate_json(message.content).model_dump() == fruit.model_dump()


@pytest.mark.parametrize("mode_name", ["TOOLS", "JSON_SCHEMA"])
def test_partial_stream_ends_in_the_whole_object(base_url, api_key, model, mode_name):
    client = make_client(base_url, api_key, getattr(instructor.Mode, mode_name))
    whole = client.chat.completions.create(model=model, messages=ASK, response_model=Fruit, max_tokens=48,
                                           temperature=0, max_retries=1)
    partials = list(client.chat.completions.create_partial(
        model=model, messages=ASK, response_model=Fruit, max_tokens=48, temperature=0, max_retries=1))
    assert len(partials) > 1
    assert partials[-1].model_dump() == whole.model_dump()  # greedy: the same object either way
