"""GBNF, Lark, choices and JSON mode with the byte tokenizer: tables of passing and
failing strings, mask == accept_token on every token, random walks that parse."""

import json
import random
import re

import lark
import pytest

from furca.constrain import CompileError, GrammarCompiler

from .conftest import BYTE_EOS, allowed_set, byte_info, walk_ids


def check(g, info, passing, failing, probe=True):
    for s in passing:
        m = g.matcher()
        ids = list(s.encode()) + [BYTE_EOS]
        assert walk_ids(m, ids, info, check_probes=info.vocab_size if probe else 0), f"refused {s!r}: {m.error}"
        assert m.is_terminated()
    for s in failing:
        m = g.matcher()
        assert not walk_ids(m, list(s.encode()) + [BYTE_EOS], info), f"accepted {s!r}"


ARITH = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")"    # recursion through parentheses
number ::= [0-9]+
"""

GBNF_CASES = [
    (ARITH, ["1", "1+2*3", "(1+2)*3", "((((7))))", "1-(2/(3+4))"], ["", "1+", "(1", "1)", "()", "+1"]),
    ('root ::= "a"{2,3} "b"{1} "c"{2,}', ["aabcc", "aaabccc"], ["abcc", "aabc", "aaaabcc"]),
    (r'root ::= [^"\\]* "\x41" "\u00e9" [\t\n]?', ["xyzAé", "Aé\n"], ["\"Aé", "Ae"]),
    ('root ::= list\nlist ::= item ("," item)*\nitem ::= "x" | "[" list? "]"', ["x", "[]", "[x,[x,[]]]", "x,x"],
     ["[", "x,", "[x,]"]),
    ('root ::= ws "a" ws\nws ::= ([ \\t] ws)?', ["a", "  a \t", "\t\ta"], ["", "a a"]),
    ('root ::= A\nA ::= A "x" | "y"', ["y", "yxxx"], ["x", "yy"]),  # immediate left recursion
    ('root ::= "a" root "b" | ""', ["", "ab", "aaabbb"], ["aab", "ba", "abab"]),  # a^n b^n
    ('root ::= . . "!"', ["ab!", "日本!", "🙂x!"], ["a!", "abc!"]),
    ('root ::= "x" # comment here\n  | "y" \n# more\n', ["x", "y"], ["xy"]),
    ('root ::= "a" b\nroot ::= "c"\nb ::= "b"', ["ab", "c"], ["a", "cb"]),
]


@pytest.mark.parametrize("i", range(len(GBNF_CASES)))
def test_gbnf_table(byte_compiler, i):
    text, passing, failing = GBNF_CASES[i]
    check(byte_compiler.compile_grammar(text), byte_compiler.info, passing, failing)


def test_gbnf_random_walks_parse(byte_compiler):
    g = byte_compiler.compile_grammar(ARITH)
    parser = lark.Lark(r"""
        start: expr
        expr: term (("+"|"-") term)*
        term: factor (("*"|"/") factor)*
        factor: /[0-9]+/ | "(" expr ")"
    """, parser="lalr")
    info = byte_compiler.info
    rng = random.Random(1)
    done = 0
    for _ in range(40):
        m = g.matcher()
        out = bytearray()
        for step in range(80):
            bits = allowed_set(m, info)
            allowed = [i for i in range(info.vocab_size) if bits[i]]
            assert allowed
            closers = [t for t in allowed if t in (BYTE_EOS, ord(")"))] if step > 30 else []
            t = rng.choice(closers or allowed)
            assert m.accept_token(t)
            if t == BYTE_EOS:
                break
            out += info.token_bytes[t]
        if m.is_terminated():
            parser.parse(out.decode())
            done += 1
    assert done > 10


LARK_ARITH = r"""
start: expr
?expr: expr "+" term | term
term: NUMBER | "(" expr ")" | NAME
NAME: /[a-z_]+/
%import common.NUMBER
%import common.WS
%ignore WS
"""


def test_lark_table(byte_compiler):
    g = byte_compiler.compile_grammar(LARK_ARITH)
    check(g, byte_compiler.info, ["1", "1 + x", " ( a+ 2.5 )+b ", "1e5+foo"], ["", "1 +", "(1", "A"])
    parser = lark.Lark(LARK_ARITH, parser="lalr")
    for s in ["1", "1 + x", " ( a+ 2.5 )+b "]:
        parser.parse(s)


def test_lark_syntax_kw_and_errors(byte_compiler):
    g = byte_compiler.compile_grammar('start: "a"+', syntax="lark")
    check(g, byte_compiler.info, ["a", "aaa"], ["", "b"])
    with pytest.raises(CompileError, match="Lark grammar"):
        byte_compiler.compile_grammar("start: foo", syntax="lark")
    with pytest.raises(CompileError, match="Lark grammar"):
        byte_compiler.compile_grammar('start: "a" )', syntax="lark")


def test_choices(byte_compiler):
    g = byte_compiler.compile_choices(["yes", "no", "yesterday", "日本"])
    check(g, byte_compiler.info, ["yes", "no", "yesterday", "日本"], ["", "ye", "yess", "n"])
    m = g.matcher()
    assert m.accept_token(ord("n")) and m.jump_forward() == "o"
    with pytest.raises(CompileError, match="empty"):
        byte_compiler.compile_choices([])


def test_json_mode_grammars(byte_compiler):
    """JSON mode: any JSON value (compile_json_schema({})) and any JSON object
    (compile_json_object), compact and with bounded flexible whitespace."""
    g = byte_compiler.compile_json_schema({})
    docs = ['{"a":[1,2.5,-3e+2,{"b":null}],"c":"x\\n\\u00e9\\"日"}', "[]", "true", '"s"', "0", '[[[[[[[[[[[[1]]]]]]]]]]]]']
    check(g, byte_compiler.info, docs, ["{", "[1,]", "01", '{"a"}', '{"a":1,}', "tru", '"\\x"', "[1] [2]"], probe=False)
    for d in docs:
        json.loads(d)
    o = byte_compiler.compile_json_object()
    check(o, byte_compiler.info, ['{}', '{"k":[{}]}'], ["[]", "1", '"x"'], probe=False)
    flex = byte_compiler.compile_json_object(whitespace="flexible", max_whitespace=3)
    check(flex, byte_compiler.info, ['{ "k" : [ 1 , 2 ] }', '{\n  "a":1\n}'], ['{    "k":1}'], probe=False)


def test_json_mode_mask_agrees(byte_compiler):
    g = byte_compiler.compile_json_schema(True)
    check(g, byte_compiler.info, ['{"a":[1,{"b":"c"}],"d":true}'], [])


def test_compile_json_schema_any_and_object(byte_compiler):
    """Integration with furca.constrain.json_schema (the JSON mode grammars)."""
    g = byte_compiler.compile_json_schema({})
    check(g, byte_compiler.info, ['{"a":[1,2.5,{"b":null}],"c":"x"}', "[]", "0"], ["{", "[1,]"], probe=False)
    o = byte_compiler.compile_json_object()
    check(o, byte_compiler.info, ['{}', '{"k":[{}]}'], ["[]", "1"], probe=False)


def test_compiler_cache_keys_and_clear():
    """One CompiledGrammar per (constraint, keywords); clear_cache drops them all."""
    c = GrammarCompiler(byte_info())
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    g = c.compile_json_schema(schema)
    assert c.compile_json_schema(json.dumps(schema)) is g  # a dict and its JSON text: one entry
    strict = c.compile_json_schema(schema, allow_extra_properties=False)
    assert strict is not g
    check(g, c.info, ['{"a":1,"b":2}'], [], probe=False)
    check(strict, c.info, ['{"a":1}'], ['{"a":1,"b":2}'], probe=False)
    r = c.compile_regex("a+")
    assert c.compile_regex("a+") is r
    c.clear_cache()
    assert c.compile_regex("a+") is not r and c.compile_json_schema(schema) is not g


@pytest.mark.parametrize("text,what", [
    ('root ::= foo', "undefined rule 'foo'"),
    ('root ::= "abc', "unterminated string"),
    ('root ::= [abc', "unterminated character class"),
    ('root ::= ("a"', "missing ')'"),
    ('root := "a"', "expected '::='"),
    ('foo ::= "a"', "no root rule"),
    ('root ::= "a"{3,1}', "max < min"),
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= a\na ::= b "x"\nb ::= a "y" | "z"', "left recursion"),
    ('root ::= "a" root', "matches no string"),
])
def test_gbnf_errors(byte_compiler, text, what):
    with pytest.raises(CompileError, match=re.escape(what)):
        byte_compiler.compile_grammar(text, syntax="gbnf")


def test_gbnf_error_position(byte_compiler):
    with pytest.raises(CompileError, match="unbalanced '\\)' at line 2 column 12"):
        byte_compiler.compile_grammar('root ::= a\na ::= "x" |)')
    with pytest.raises(CompileError, match="offset 9"):
        byte_compiler.compile_grammar('root ::= missing')


LARK_JSON = r"""
?start: value
?value: object | array | string | SIGNED_NUMBER | "true" | "false" | "null"
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : string ":" value
string : ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


def test_lark_json_with_common_imports(byte_compiler):
    g = byte_compiler.compile_grammar(LARK_JSON)
    passing = ['{"a": [1, -2.5e3, {"b": null}], "c": "x\\"y"}', "[ ]", ' "s" ', "-7"]
    check(g, byte_compiler.info, passing, ["{", "[1,]", '{"a" 1}', "tru"], probe=False)
    parser = lark.Lark(LARK_JSON, parser="lalr")
    for s in passing:
        parser.parse(s)
