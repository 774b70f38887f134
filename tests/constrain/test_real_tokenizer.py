"""With the Llama-3.1 128k tokenizer: text encoded by the real tokenizer is accepted
token by token (tokens straddling punctuation, UTF-8 split across tokens), special
tokens never allowed, EOS only at the end, masks agree with accept_token, random
walks under the mask fullmatch / parse."""

import json
import random
import re

import numpy as np
import pytest

from .conftest import allowed_set, walk_ids


def accepts(g, info, tok, text, probes=64):
    m = g.matcher()
    ids = tok.encode(text, add_special_tokens=False).ids
    ok = walk_ids(m, ids, info, check_probes=probes, rng=random.Random(len(text)))
    if not ok:
        return False
    bits = allowed_set(m, info)
    if not bits[info.eos_token_id]:
        return False
    assert m.accept_token(info.eos_token_id) and m.is_terminated()
    return True


def test_tokenizer_info(llama):
    info, _, tok = llama
    assert info.vocab_size == 128256
    assert info.token_bytes[tok.token_to_id("Ġthe")] == b" the"
    assert info.token_bytes[info.eos_token_id] is None
    assert all(info.token_bytes[i] is None for i in range(128000, 128256))  # special tokens
    for s in ["日本語🙂", " hello", "\n\n", "{\""]:
        ids = tok.encode(s, add_special_tokens=False).ids
        assert b"".join(info.token_bytes[i] for i in ids) == s.encode()
    # the one blob the matcher's cold accept slices a token out of: every token's bytes
    offs, blob = info.token_offsets, info.token_blob
    assert len(offs) == len(info.token_bytes) + 1 and offs[-1] == len(blob)
    assert all(blob[offs[t]:offs[t + 1]] == (b or b"") for t, b in enumerate(info.token_bytes))


def test_warm_accept_keyed_by_token_id(llama):
    """accept_token's warm step (cached per state and token id) gives each token its own
    successor: after the walks below have cached their steps, a token of the other
    branch still goes its way (what follows it is that branch's), and a token of
    neither is refused."""
    info, compiler, tok = llama
    g = compiler.compile_json_schema({"enum": ["the cat", "the dog!"]})
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    for text in ('"the cat"', '"the cat"', '"the dog!"', '"the dog!"'):  # cold, then warm
        m = g.matcher()
        assert all(m.accept_token(t) for t in enc(text)), text
        assert m.accept_token(info.eos_token_id) and m.is_terminated()
    head = enc('"the')
    for tail, after in ((" cat", '"'), (" dog", "!"), (" cat", '"'), (" cow", None)):
        m = g.matcher()
        assert all(m.accept_token(t) for t in head)
        (t,) = enc(tail)
        assert m.accept_token(t) is (after is not None), tail
        if after is None:
            assert m.is_error()
            continue
        other = {'"': "!", "!": '"'}[after]
        assert m.fork().accept_token(tok.token_to_id(other)) is False  # the other branch's next byte
        assert m.accept_token(tok.token_to_id(after)), (tail, after)


@pytest.mark.parametrize("pattern,texts,bad", [
    (r"[^\x00-\x1f]{1,20}", ["日本語🙂", "naïve café", "🙂🙂🙂"], ["x" * 21]),
    (r'\{"name":"[a-zA-Z ]+","age":\d+\}', ['{"name":"Bob Smith","age":42}'], ['{"name":"Bob","age":}']),
    (r"(\d{3}-){2}\d{4}", ["555-123-4567"], ["555-1234"]),
    (r"(?i)yes|no", ["YES", "no"], ["nope"]),
])
def test_regex_real_tokens(llama, pattern, texts, bad):
    info, compiler, tok = llama
    g = compiler.compile_regex(pattern)
    for t in texts:
        assert accepts(g, info, tok, t), (pattern, t)
    for t in bad:
        assert not accepts(g, info, tok, t, probes=0), (pattern, t)


def test_utf8_split_across_tokens(llama):
    """A character whose bytes span two tokens: the mask after the first half allows
    exactly the continuations, and byte-fallback-like single-byte tokens work."""
    info, compiler, tok = llama
    g = compiler.compile_regex("(日本語🙂)+")
    s = "日本語🙂日本語🙂"
    ids = tok.encode(s, add_special_tokens=False).ids
    assert any(len(info.token_bytes[i]) and not _is_utf8(info.token_bytes[i]) for i in ids), \
        "test needs a token that splits a character"
    assert accepts(g, info, tok, s)
    # feed the same text as single-byte tokens
    byte_tok = {info.token_bytes[i]: i for i in range(128000) if info.token_bytes[i] and len(info.token_bytes[i]) == 1}
    m = g.matcher()
    for b in s.encode():
        assert m.accept_token(byte_tok[bytes([b])])
    assert m.accept_token(info.eos_token_id)


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_special_tokens_never_allowed(llama):
    info, compiler, tok = llama
    m = compiler.compile_regex("(?s).*").matcher()
    bits = allowed_set(m, info)
    valid = [i for i, b in enumerate(info.token_bytes[:128000]) if b and _is_utf8(b)]
    assert bits[valid].all()  # every token that is whole UTF-8 text
    assert bits[:128000].sum() < 128000  # not the ones that can never be part of UTF-8 (e.g. b"\xff")
    assert bits[128000:].sum() == 1 and bits[info.eos_token_id]
    assert not m.accept_token(tok.token_to_id("<|begin_of_text|>"))


def test_gbnf_json_like_straddling(llama):
    """Tokens such as '":"', '",' and '"}' straddle JSON punctuation."""
    info, compiler, tok = llama
    g = compiler.compile_grammar(r'''
        root ::= "{" pair ("," pair)* "}"
        pair ::= str ":" (str | num | root)
        str ::= "\"" [^"\\]* "\""
        num ::= "-"? [0-9]+
    ''')
    for doc in ['{"a":"b","cd":12,"e":{"f":"g h"}}', '{"key":"value with spaces, commas"}']:
        ids = tok.encode(doc, add_special_tokens=False).ids
        assert any(b'"' in info.token_bytes[i] and len(info.token_bytes[i]) > 1 for i in ids)
        assert accepts(g, info, tok, doc)
    assert not accepts(g, info, tok, '{"a":"b",}', probes=0)


def test_random_walks_real(llama):
    info, compiler, tok = llama
    pattern = r"[a-z]{1,8}( [a-z]{1,8}){0,3}\.|\d{1,6}"
    g = compiler.compile_regex(pattern)
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = g.matcher()
        out = b""
        for _step in range(50):
            bm = np.zeros((1, info.num_words), dtype=np.int32)
            m.fill_bitmask(bm)
            allowed = np.flatnonzero(np.unpackbits(bm.view(np.uint8), bitorder="little")[: info.vocab_size])
            assert len(allowed)
            t = int(rng.choice(allowed))
            assert m.accept_token(t)
            if t == info.eos_token_id:
                break
            out += info.token_bytes[t]
        assert m.is_terminated()
        assert re.fullmatch(pattern, out.decode(), re.ASCII), out


def test_json_mode_real(llama):
    info, compiler, tok = llama
    g = compiler.compile_json_schema({})
    doc = {"name": "Zoë 日本", "n": [1, -2.5e3, {"x": None}], "ok": True, "s": "a\"b\\n"}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    assert accepts(g, info, tok, text)
    assert not accepts(g, info, tok, text[:-1], probes=0)


def test_structural_tag_real(llama):
    info, compiler, tok = llama
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    g = compiler.compile_structural_tag([{"begin": "<tool_call>", "schema": schema, "end": "</tool_call>"}],
                                        ["<tool_call>"])
    text = 'Let me check. <tool_call>{"city":"Paris"}</tool_call> Done, it is <b>sunny</b>.'
    assert accepts(g, info, tok, text)
    assert not accepts(g, info, tok, 'x <tool_call>{"town":"Paris"}</tool_call>', probes=0)


def test_from_huggingface_wider_logits(llama):
    info, _, tok = llama
    from transformers import PreTrainedTokenizerFast

    from furca.constrain import GrammarCompiler, TokenizerInfo

    from .tokenizers_cache import tokenizer_json

    path, eos = tokenizer_json("llama3_1")
    hf = PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token=eos)
    wide = TokenizerInfo.from_huggingface(hf, vocab_size=128300)
    assert wide.vocab_size == 128300 and wide.num_words == (128300 + 31) // 32
    assert wide.eos_token_ids == (hf.eos_token_id,) == info.eos_token_ids
    assert wide.token_bytes[:128000] == info.token_bytes[:128000]
    m = GrammarCompiler(wide).compile_regex("(?s).*").matcher()
    bits = allowed_set(m, wide)
    assert not bits[128256:].any() and bits[wide.eos_token_id]
