"""`Tokenizer.apply_chat_template` with a given template (a server's --chat-template)
and the special tokens' text."""

from __future__ import annotations

import pytest

from furca.errors import InvalidRequestError
from furca.runtime.tokenizer import Tokenizer

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]


def test_render_with_a_given_template(tiny_hf_tokenizer):
    tok = Tokenizer(tiny_hf_tokenizer)
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    model = tok.apply_chat_template(MESSAGES)
    assert model.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    custom = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
              "{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}[assistant]{% endif %}"
              "{{ suffix }}")
    text = tok.apply_chat_template(MESSAGES, chat_template=custom, suffix="!")
    assert text == "<|im_start|>[system]Be brief.[user]Hi![assistant]!"
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert '"name": "f"' in tok.apply_chat_template(MESSAGES, tools=tools, add_generation_prompt=False,
                                                    chat_template=custom)
    assert tok.apply_chat_template(MESSAGES) == model  # the model's template is untouched
    with pytest.raises(InvalidRequestError, match="the chat template rejected"):
        tok.apply_chat_template(MESSAGES, chat_template="{{ raise_exception('no system role') }}")


def test_a_given_template_works_without_a_model_template(tiny_hf_tokenizer):
    tok = Tokenizer(tiny_hf_tokenizer)
    tok.chat_template = None
    with pytest.raises(InvalidRequestError, match="no chat template"):
        tok.apply_chat_template(MESSAGES)
    assert tok.apply_chat_template(MESSAGES, chat_template="{{ messages | length }}") == "2"
