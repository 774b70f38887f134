"""uniqueItems over free strings (furca/constrain/unique.py, json_schema/distinct.py):
the matcher remembers a watched array's items and masks the tokens completing a repeat.

The masks are checked against the definition, computed here independently of the
watch: a token is allowed when the grammar alone allows it (a plain Matcher of the same
grammar) and the text it makes has no repeated item and does not end inside a used item
of maxLength characters (from there only its closing quote, a repeat, could follow)."""
import json
import random
import re

import jsonschema
import numpy as np
import pytest

from furca.constrain import CompileError, GrammarCompiler
from furca.constrain.json_schema import schema_to_gbnf
from furca.constrain.matcher import Matcher
from furca.constrain.unique import UniqueMatcher

from .conftest import BYTE_EOS, allowed_set, byte_info

UNIQUE = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _items(text: str):
    """(complete items decoded, the open item's body or None) of a string array prefix."""
    done, end = [], 0
    for m in _STRING.finditer(text):
        done.append(json.loads(m.group(0)))
        end = m.end()
    rest = text[end:]
    q = rest.find('"')
    return done, (rest[q + 1:] if q >= 0 else None)


def _definition_allows(text: str, max_len) -> bool:
    done, open_body = _items(text)
    if len(set(done)) < len(done):
        return False
    if open_body is not None and max_len is not None:
        try:
            v = json.loads('"' + open_body + '"')
        except ValueError:
            return True
        return not (len(v) == max_len and v in done)
    return True


def _definition_allows_finite(text: str, values) -> bool:
    """The same over a finite item list: also no item body that only used values
    complete, and no comma once every value is used."""
    done, open_body = _items(text)
    if len(set(done)) < len(done):
        return False
    unused = [v for v in values if v not in done]
    if open_body is not None:
        spelled = [json.dumps(v)[1:-1] for v in unused]
        return any(v.startswith(open_body) for v in spelled)
    after = text[text.rfind('"') + 1:] if done else ""
    return not (after.strip().startswith(",") and not unused)


def _byte_compiler():
    extra = ['","', '"a"', 'a"', 'ab"', '"ab', '","a', '"a","a"', 'a","a"', 'ab', '"]', '",', '"b"', 'b"]', '","ab',
             '","ba']
    return GrammarCompiler(byte_info(extra))


def _check_walks(schema, max_len, seed, walks=30, steps=14, values=None):
    """Random walks over a small alphabet (so items repeat often); at every step the
    mask of every token equals the definition (values: a finite item list's), and
    accept_token agrees with the mask."""
    if values is None:
        def allows(text):
            return _definition_allows(text, max_len)
    else:
        def allows(text):
            return _definition_allows_finite(text, values)
    return _walk_against(_byte_compiler(), schema, b'ab",[]', allows, seed, walks, steps)


def _walk_against(c, schema, chars, allows, seed, walks, steps, finished=None, **compile_kw):
    """The walks of _check_walks over the compiler c's tokens made of chars; allows(text):
    the definition; finished(text): called on each walk that may end (EOS allowed, no
    other token). Returns how many tokens the grammar allowed and the watch masked."""
    info = c.info
    g = c.compile_json_schema(schema, **compile_kw)
    alphabet = [i for i in range(len(info.token_bytes)) if info.token_bytes[i]
                and set(info.token_bytes[i]) <= set(chars)]
    rng = random.Random(seed)
    masked_some = 0
    for _ in range(walks):
        m, plain, text = g.matcher(), Matcher(g), ""
        assert isinstance(m, UniqueMatcher)
        for _ in range(steps):
            bits = allowed_set(m, info)
            ref_bits = allowed_set(plain, info)
            for t in alphabet:
                want = bool(ref_bits[t]) and allows(text + info.token_bytes[t].decode())
                assert bool(bits[t]) == want, (text, info.token_bytes[t], want)
                assert m.fork().accept_token(t) == want, (text, info.token_bytes[t])
                masked_some += bool(ref_bits[t]) and not want
            choices = [t for t in alphabet if bits[t]]
            if not choices:
                assert bits[BYTE_EOS] or m.is_terminated(), ("dead end", text)
                if bits[BYTE_EOS] and finished is not None:
                    finished(text)
                break
            t = rng.choice(choices)
            assert m.accept_token(t) and plain.accept_token(t)
            text += info.token_bytes[t].decode()
    return masked_some


def test_masks_equal_the_definition_over_free_strings():
    assert _check_walks(UNIQUE, None, 0) > 20  # repeats were offered and masked


def test_masks_equal_the_definition_with_max_length_dead_ends():
    schema = {"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True}
    assert _check_walks(schema, 2, 1) > 20


def test_masks_equal_the_definition_over_an_enum():
    """More values than the grammar's own sets take (8): a finite item list, where a
    body only used values complete is a dead end, and so is a comma once all are used."""
    values = ["a", "ab", "b", "ba", "aa", "bb", "aab", "abb", "bab"]
    schema = {"type": "array", "items": {"enum": values}, "uniqueItems": True}
    assert _check_walks(schema, None, 2, walks=40, steps=30, values=values) > 50
    few = ["a", "b", "ab", "ba"]  # the pattern keeps it off the grammar's sets: used up within a walk
    schema = {"type": "array", "items": {"enum": few, "pattern": "^.*$"}, "uniqueItems": True}
    assert _check_walks(schema, None, 3, walks=40, steps=30, values=few) > 50


def test_an_enum_list_used_up_can_only_close():
    values = ["v%d" % i for i in range(10)]
    c = _byte_compiler()
    g = c.compile_json_schema({"type": "array", "items": {"type": "string", "enum": values}, "uniqueItems": True})
    m = g.matcher()
    assert m.accept_string("[" + ",".join('"%s"' % v for v in values[:-1]) + ',"')
    assert not m.fork().accept_string('v1"') and m.fork().accept_string('v9"]')
    assert m.accept_string('v9"')
    assert not m.fork().accept_string(",") and m.accept_string("]") and m.can_terminate()
    with pytest.raises(CompileError, match="accepts no JSON value"):  # 11 distinct items of 10 values
        c.compile_json_schema({"type": "array", "items": {"enum": values}, "uniqueItems": True, "minItems": 11})


def test_masks_equal_the_definition_in_flexible_whitespace():
    c = _byte_compiler()
    g = c.compile_json_schema(UNIQUE, whitespace="flexible")
    m = g.matcher()
    assert m.accept_string('[ "a" ,\n "')
    assert not m.fork().accept_string('a"')
    assert m.fork().accept_string('ab"')


def test_items_repeat_only_across_arrays():
    c = _byte_compiler()
    schema = {"type": "array", "items": {"type": "object", "properties": {"t": UNIQUE}, "required": ["t"],
                                         "additionalProperties": False}}
    g = c.compile_json_schema(schema)
    m = g.matcher()
    assert m.accept_string('[{"t":["x","y"]},{"t":["y","')
    assert not m.fork().accept_string('y"')
    assert m.fork().accept_string('x"]}]')


def test_only_where_every_reading_is_watched():
    """anyOf with an array that allows repeats: a repeat is allowed while that branch
    lives, masked once it has died (a third item)."""
    c = _byte_compiler()
    schema = {"anyOf": [UNIQUE, {"type": "array", "items": {"type": "string"}, "maxItems": 2}]}
    g = c.compile_json_schema(schema)
    assert g.matcher().accept_string('["a","a"]')
    m = g.matcher()
    assert m.accept_string('["a","b","')
    assert not m.fork().accept_string('a"')
    assert not m.fork().accept_string('b"')
    assert m.accept_string('c"]')


def test_canonical_spellings_only():
    c = _byte_compiler()
    g = c.compile_json_schema(UNIQUE)
    for text, ok in [('["\\n"]', True), ('["\\u001f"]', True), ('["\\"\\\\"]', True), ('["é日"]', True),
                     ('["\\u0061"]', False), ('["\\u000a"]', False), ('["\\/"]', False), ('["\\u001F"]', False)]:
        assert g.matcher().accept_string(text) == ok, text
    m = g.matcher()
    assert m.accept_string('["\\n","')
    assert not m.fork().accept_string('\\n"')


def test_rollback_and_fork_keep_the_watch():
    c = _byte_compiler()
    g = c.compile_json_schema(UNIQUE)
    m = g.matcher()
    for ch in '["a","':
        assert m.accept_token(ord(ch))
    f = m.fork()
    assert m.accept_token(ord("b")) and m.accept_token(ord('"'))
    m.rollback(2)
    assert not m.fork().accept_string('a"') and m.accept_string('b"')
    assert not f.fork().accept_string('a"')  # the fork kept its own watch
    m.reset()
    assert m.accept_string('["a"]')


def test_real_tokenizer_masks_equal_the_definition(llama):
    """The whole Llama-3.1 vocabulary at positions where repeats are one token away."""
    info, compiler, tok = llama
    schema = {"type": "array", "items": {"type": "string", "maxLength": 5}, "uniqueItems": True}
    g = compiler.compile_json_schema(schema)
    masked = {}  # prefix -> tokens the grammar allows and the watch masks ('he' + 'llo' is no token)
    for prefix in ['["hello","he', '["hello","', '["a","b","', '["hello","hell']:
        m, plain = g.matcher(), Matcher(g)
        for t in tok.encode(prefix, add_special_tokens=False).ids:
            assert m.accept_token(t) and plain.accept_token(t)
        bits, ref = allowed_set(m, info), allowed_set(plain, info)
        ids = np.flatnonzero(ref[: info.vocab_size])
        for t in ids.tolist():
            data = info.token_bytes[t]
            want = bool(data) and _definition_allows(prefix + data.decode("utf-8", "replace"), 5) \
                if data and b"\\" not in data else bool(bits[t])  # escapes: decoded by the walks below
            assert bool(bits[t]) == want, (prefix, data)
            masked[prefix] = masked.get(prefix, 0) + (not want)
    assert all(masked[p] for p in ['["hello","', '["a","b","', '["hello","hell']), masked


def test_real_tokenizer_walks_are_valid(llama):
    from .generation import closer_tokens, walk
    info, compiler, _ = llama
    closer = closer_tokens(info)
    for schema in [dict(UNIQUE, minItems=3), {"type": "array", "uniqueItems": True, "minItems": 4,
                                               "items": {"type": "string", "maxLength": 1}},
                   {"type": "object", "properties": {"tags": dict(UNIQUE, maxItems=6)}, "required": ["tags"]},
                   {"type": "array", "uniqueItems": True, "minItems": 9, "items": {"enum": [
                       "red", "reddish", "green", "greenish", "blue", "bluish", "re", "gr", "b", "\n"]}},
                   dict(UNIQUE_INTS, minItems=5),
                   {"type": "object", "properties": {"ids": UNIQUE_INTS}, "required": ["ids"],
                    "additionalProperties": False}]:
        g = compiler.compile_json_schema(schema)
        rng = np.random.default_rng(3)
        finished = 0
        for _ in range(6):
            kind, data = walk(g, info, info.eos_token_id, closer, rng, 200)
            assert kind in ("finished", "unfinished"), (kind, data)
            if kind == "finished":
                finished += 1
                jsonschema.validate(json.loads(data), schema)
        assert finished >= 3


def test_gbnf_cannot_carry_the_watch():
    with pytest.raises(CompileError, match="uniqueItems"):
        schema_to_gbnf(UNIQUE)
    with pytest.warns(UserWarning, match="uniqueItems"):
        schema_to_gbnf(UNIQUE, unsupported="warn")


def test_other_items_are_compared_as_values(llama):
    """Items this watch does not take go to unique_values.py's (compared as values)."""
    _info, compiler, _ = llama
    cases = [({"type": "string", "pattern": "^a+$"}, '["aa","a","aa"'),
             ({"type": "integer", "minimum": 1}, "[3,1,3,"),
             ({"type": "string", "format": "email"}, '["a@b.co","a@b.co"'),
             ({"enum": ["a", 1, "b", "c", "d", "e", "f", "g", "h", "i"]}, '["a",1,1,')]
    for items, repeat in cases:
        g = compiler.compile_json_schema({"type": "array", "items": items, "uniqueItems": True})
        assert g.value_sites is not None and g.unique_sites is None
        m = g.matcher()
        assert m.accept_string(repeat[:-1]) and not m.accept_token(compiler.info.token_bytes.index(repeat[-1].encode()))
    g = compiler.compile_json_schema(UNIQUE_INTS, whitespace="flexible")  # bare items and whitespace
    m = g.matcher()
    assert g.value_sites is not None and m.accept_string("[1, 2 ,") and not m.fork().accept_string(" 1]")


UNIQUE_INTS = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}


def _int_definition_allows(text: str) -> bool:
    """Integers: no repeated item, and no open item 0 once 0 is used (it cannot go on)."""
    body = text[1:]
    if body.endswith("]"):
        parts = [p for p in body[:-1].split(",") if p]
        return len(set(parts)) == len(parts)
    parts = body.split(",")
    done, last = parts[:-1], parts[-1]
    return len(set(done)) == len(done) and not (last == "0" and "0" in done)


def test_integer_masks_equal_the_definition():
    c = GrammarCompiler(byte_info(["0,", ",0", "1,", "1,1", "10", "12", ",1]", "1]", "0]", ",2,", "1,0", "-1,"]))
    assert _walk_against(c, UNIQUE_INTS, b"012-,[]", _int_definition_allows, 5, 40, 20) > 50


def test_integer_repeats_and_spellings(llama):
    _info, compiler, _ = llama
    m = compiler.compile_json_schema(UNIQUE_INTS).matcher()
    assert m.accept_string("[0,12,-3,")
    for repeat in ["0,", "12]", "-3,"]:
        assert not m.fork().accept_string(repeat), repeat
    assert not m.fork().accept_string("0")  # 0 again could only be a repeat
    assert not m.fork().accept_string("-0")  # not canonical
    assert m.accept_string("120,-30]") and m.can_terminate()


def test_structural_tags_carry_the_watch():
    """A tool's arguments with a set of strings (the tag's rules are renamed per tag):
    repeats masked inside each call, a new call starts a new set."""
    c = _byte_compiler()
    tags = [{"begin": "<f>", "schema": {"type": "object", "properties": {"s": UNIQUE}, "required": ["s"],
                                        "additionalProperties": False}, "end": "</f>"}]
    g = c.compile_structural_tag(tags, ["<f>"])
    m = g.matcher()
    assert isinstance(m, UniqueMatcher)
    assert m.accept_string('text <f>{"s":["a","')
    assert not m.fork().accept_string('a"')
    assert m.accept_string('b"]}</f> more <f>{"s":["a"]}</f>')
