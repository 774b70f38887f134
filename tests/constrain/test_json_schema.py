"""JSON Schema -> GBNF: tables of passing and failing texts per construct, property
tests for the numeric grammars, and errors. Languages are checked with the tests'
reference matcher (gbnf_reference.py), which reads the GBNF text back, so the rendered
text itself is what is tested; test_json_schema_ir.py shows the engine compiles the
same rules."""
from __future__ import annotations

import itertools
import json
import re
import warnings
from decimal import Decimal

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from furca.constrain.json_schema import json_object_gbnf, json_value_gbnf, schema_to_gbnf
from .gbnf_reference import Matcher, parse_gbnf
from furca.errors import CompileError

RULE_LINE = re.compile(r"^[a-zA-Z0-9-]+ ::= .+$")


def lang(schema, **kw):
    text = schema_to_gbnf(schema, **kw)
    assert text.startswith("root ::= ")
    for line in text.splitlines():
        assert RULE_LINE.match(line), line
    return Matcher(parse_gbnf(text)).fullmatch


def check(schema, passing, failing, **kw):
    m = lang(schema, **kw)
    for s in passing:
        assert m(s), "should accept %r" % s
    for s in failing:
        assert not m(s), "should reject %r" % s


def c(x):
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def agreed(schema, passing, failing, **kw):
    """check(), with jsonschema agreeing on every label."""
    v = jsonschema.Draft202012Validator(schema)
    assert all(v.is_valid(json.loads(x)) for x in passing) and not any(v.is_valid(json.loads(x)) for x in failing)
    check(schema, passing, failing, **kw)


# ----------------------------------------------------------------- scalars
def test_scalar_types():
    check({"type": "string"}, ['""', '"a b"', '"\\"\\\\\\/\\b\\f\\n\\r\\t"', '"\\u00e9"', '"日本"'],
          ['"a', '"\n"', '"\\x"', '"\\u12"', "1", "null"])
    check({"type": "integer"}, ["0", "-1", "1234567890123"], ["01", "-0x", "1.5", "1e3", "+1", '"1"'])
    check({"type": "number"}, ["0", "-1.5", "1e10", "2.5E-3", "0.0"], ["01", ".5", "1.", "1e", "-"])
    check({"type": "boolean"}, ["true", "false"], ["True", "1"])
    check({"type": "null"}, ["null"], ["None", ""])
    check({"type": ["string", "null"]}, ['"x"', "null"], ["1"])
    check({"type": "string", "nullable": True}, ['"x"', "null"], ["1"])


def test_untyped_keywords_apply_to_their_type_only():
    check({"minLength": 2}, ['"ab"', "1", "null", "[]", "{}"], ['"a"'])
    check({"minimum": 3}, ["3", "4.5", '"x"'], ["2", "2.99"])


def test_string_length_counts_characters_and_escapes_as_one():
    check({"type": "string", "minLength": 2, "maxLength": 3},
          ['"ab"', '"abc"', '"\\n\\t"', '"日本語"', '"\\u0041b"'], ['"a"', '"abcd"', '"\\n"', '"日本語x"'])


def test_pattern_is_unanchored_unless_anchored():
    check({"type": "string", "pattern": "abc"}, ['"abc"', '"xxabcyy"'], ['"ab"', '"acb"'])
    check({"type": "string", "pattern": "^abc$"}, ['"abc"'], ['"abcd"', '"xabc"'])
    check({"type": "string", "pattern": "^a|b$"}, ['"ax"', '"xb"', '"a"'], ['"xa"', '"bx"'])
    check({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}, ['"AB-123"'], ['"ab-123"', '"AB-12"'])


def test_pattern_characters_are_json_encoded():
    check({"type": "string", "pattern": '^"[^a]\\\\$'}, ['"\\"b\\\\"', '"\\"\\n\\\\"', '"\\"\\"\\\\"'],
          ['"\\"a\\\\"', '""b\\\\"'])


def test_pattern_with_length():
    check({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3, "minLength": 2},
          ['"ab"', '"abc"'], ['"a"', '"abcd"', '"AB"'])
    check({"type": "string", "pattern": "^x-\\d*$", "maxLength": 4}, ['"x-"', '"x-12"'], ['"x-123"'])


@pytest.mark.parametrize("pattern, where", [("(a)\\1", "backreference"), ("a(?!b)c", "lookahead"),
                                            ("\\b*word", "nothing to repeat"), ("a^b", "anchor")])
def test_pattern_non_regular_constructs_are_compile_errors(pattern, where):
    with pytest.raises(CompileError, match=re.escape("#/pattern")):
        schema_to_gbnf({"type": "string", "pattern": pattern})


FORMATS = {
    "date": (["2024-02-29", "2023-12-31", "2000-02-29", "0001-01-01", "0400-02-29"],
             ["2023-02-29", "1900-02-29", "2024-13-01", "2024-04-31", "24-01-01", "0000-07-05"]),  # no year 0: Python's date
    "time": (["08:30:06Z", "23:59:59.123+05:30", "23:59:60Z"], ["24:00:00Z", "08:30:06", "08:30:06 PST", "22:59:60Z"]),
    "date-time": (["2024-11-22T08:15:30Z", "1990-05-17t10:00:00.5-01:00"], ["2024-11-22 08:15:30Z", "2024-11-22T08:15:30"]),
    "duration": (["P1Y2M3DT4H5M6S", "PT1M", "P2W", "P1D"], ["P", "PT", "P1H", "PT1D", "P1W2D"]),
    "email": (["jane.doe@example.org", "a+b@[127.0.0.1]", '\\"joe bloggs\\"@x.com'], ["a@", "@b.c", "a..b@c.d", ".a@b.c"]),
    "uuid": (["3f2b8c1e-9a4d-4e6b-8f7a-1c2d3e4f5a6b"], ["3f2b8c1e9a4d4e6b8f7a1c2d3e4f5a6b", "3f2b8c1e-9a4d-4e6b-8f7a-1c2d3e4f5a6"]),
    "uri": (["https://example.com/a?b=c#d", "urn:isbn:123", "mailto:a@b.c"], ["/relative", "http://x.com:abc/", "ht tp://a"]),
    "uri-reference": (["/relative?x", "https://a.b", "#frag"], ["a b", "http://[x"]),
    "ipv4": (["192.168.0.1", "0.0.0.0", "255.255.255.255"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
    "ipv6": (["::1", "2001:db8::8a2e:370:7334", "::ffff:192.0.2.1", "1:2:3:4:5:6:7:8"], ["1:2:3:4:5:6:7:8:9", ":::", "12345::"]),
    "hostname": (["example.com", "a", "a--b.com", "x" * 63 + ".com"], ["-a.com", "a-.com", "a..b", "x" * 64, "xn--X", "a_b"]),
    # labels checked with the uri-template package (jsonschema's checker): each ok one valid there and in RFC 6570
    "uri-template": (["http://x/{a}", "{+path}/x", "x{a:5}", "{a*}", "{.a,b}", "{?x,y}", "{a.b}", "%20{x}", "日本{x}",
                      "{a_1}{b}", "{#a}", "{a:999}", "", "{/a,b:3}"],
                     ["{a", "a}b", "{a:0}", "{}", "x y", "{a:1000}", "{=a}", "{!a}", "{@a}", "{|a}", "{,a}", "{$a}",
                      "{a:3*}", "{a..b}", "%2", "{a.}", "<x>"]),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_formats(fmt):
    ok, bad = FORMATS[fmt]
    check({"type": "string", "format": fmt}, ['"%s"' % s for s in ok], ['"%s"' % s for s in bad])


REGEXES = (["", "^[a-zA-Z0-9_]{3,16}$", "^value1|value2$", "a(b|c)*?d", "\\d+\\.\\d+", "(?:ab)+", "^(?!x)y",
            "[\\w.-]+@x", '"q"', "\\\\", "a{2,5}b{3}c{4,}", "\\bword\\b", "[^\\s]", "日本/x", "\\u00e9\\x41"],
           ["*", "\\", "Invalid regex pattern [", "a{3,2}", "(", ")", "[]", "a**", "^*", "\\b+", "[z-a]", "\\i",
            "(?<n>a)", "a{1,2", "a]", "{1}"])


def test_lookaheads_at_the_start_are_intersections_and_differences():
    """`^(?!X)R`, `^(?=Y)R`, a trailing `(?=Y)` and the tempered `^((?!X).)*$`: the product
    of their automata (maskbench-dev bukkit-plugin, paper-plugin, vega, hugo, vars,
    o5983, catalogue-entry); jsonschema (Python's re) agrees on every label."""
    agreed({"type": "string", "pattern": "^(?!org\\.bukkit\\.)([a-z]+\\.)*[A-Z][a-z]*$"},
           ['"org.x.Main"', '"org.bukkitx.M"', '"Main"'], ['"org.bukkit.Main"', '"org.bukkit.x.Main"', '"main"'])
    agreed({"type": "object", "patternProperties": {"^(?!interactive|name|style).+$": {"type": "integer"}},
            "additionalProperties": False},
           ['{"x":1}', '{"nam":2,"y":3}', '{}'], ['{"name":1}', '{"styles":1}', '{"x":"s"}', '{"":1}'])
    agreed({"type": "string", "pattern": "^(?=[^=]+$)(?!\\s+$)(.|\\n)+$"},
           ['" a "', '"abc"'], ['"a=b"', '"   "', '""'])
    agreed({"type": "string", "pattern": "^(?!^lucene\\.|builtin\\.)(?=.{1,8}$)^[a-z.]+"},
           ['"lucene"', '"abc.d"'], ['"lucene.x"', '"builtin.a"', '"abcdefghi"'])
    agreed({"type": "string", "pattern": "((?:[^/]*/)*)(?=\\.(yaml|yml))"},
           ['"a/b.yaml"', '".yml"', '"x.yamlz"'], ['"b.txt"', '"yaml"'])
    agreed({"type": "string", "pattern": "^((?!mode)(?!Mode).)*$"},
           ['"abc"', '""', '"mod e"', '"xMod"'], ['"amode"', '"Model"', '"a\\nb"'])
    agreed({"type": "string", "pattern": "^(?!abc)[a-z]+$", "maxLength": 4},
           ['"abd"', '"ab"', '"zzzz"'], ['"abcd"', '"abc"', '"zzzzz"'])
    agreed({"type": "string", "pattern": "^(?!a)b|^(?!c)[cd]$"}, ['"bx"', '"d"'], ['"c"', '"ab"', '"cd"'])
    agreed({"oneOf": [{"type": "string", "pattern": "^(?!x)[a-z]+$"}, {"type": "string", "pattern": "^[a-y]+$"}]},
           ['"xy"', '"zz"'], ['"ab"', '"x1"', '"xz"'])
    for pattern in ("a(?!b)c", "^(a(?=b))*$", "^(?=(?!a)b)c", "^((?=a).)*$"):
        with pytest.raises(CompileError, match="lookahead"):
            schema_to_gbnf({"type": "string", "pattern": pattern})


def test_format_with_a_pattern_is_their_product():
    """A format beside a pattern that is not a finite prefix: the product of the format's
    automaton and the pattern's (maskbench-dev o1051, o9517, o64008, stripe-app)."""
    check({"type": "string", "format": "date", "pattern": "^([0-9]{4})(-([0-9]{2}))?(-([0-9]{2}))?$"},
          ['"2020-01-31"', '"1999-12-01"'], ['"2020-13-01"', '"2020"', '"20-01-01"', '"2020-02-30x"'])
    check({"type": "string", "format": "date-time", "pattern": "\\d\\d\\d\\d-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ"},
          ['"2016-01-05T16:51:00Z"'], ['"2016-01-05T16:51:00+01:00"', '"2016-01-05t16:51:00Z"', '"2016-01-05T25:51:00Z"'])
    check({"type": "string", "format": "uri", "pattern": "^https?://.*/.+"},
          ['"https://a.b/c"', '"http://x/y?q=1"'], ['"ftp://a/b"', '"https://a.b/"', '"https://a b/c"', '"https://a/b c"'])
    with pytest.raises(CompileError, match="format 'uri' together with pattern"):
        schema_to_gbnf({"type": "string", "format": "uri", "pattern": "^https?://.*/.+", "maxLength": 64})


def test_format_regex():
    """format "regex": a narrowed ECMA-262 regex syntax that Python's `re` (what
    validators check it with) also compiles; random generations all compile."""
    ok, bad = REGEXES
    for r in ok:
        re.compile(r)
    check({"type": "string", "format": "regex"}, [json.dumps(r, ensure_ascii=False) for r in ok],
          [json.dumps(r, ensure_ascii=False) for r in bad])
    from furca.constrain import GrammarCompiler
    from .conftest import BYTE_EOS, allowed_set, byte_info
    import random
    c = GrammarCompiler(byte_info())
    g = c.compile_json_schema({"type": "string", "format": "regex"})
    alphabet = [b for b in b'"\\^$.|?*+()[]{}-,0123456789abdswBx:=!']
    rng = random.Random(7)
    made = 0
    for _ in range(300):
        m, out = g.matcher(), b""
        for step in range(40):
            bits = allowed_set(m, c.info)
            if bits[BYTE_EOS] and (step > 20 or rng.random() < 0.1):
                break
            choices = [b for b in alphabet if bits[b]]
            if not choices:
                break
            b = rng.choice(choices)
            assert m.accept_token(b)
            out += bytes([b])
        if bits[BYTE_EOS]:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a FutureWarning (nested sets) counts as a failure
                re.compile(json.loads(out))
            made += 1
    assert made > 100


def test_format_regex_groups_nest_to_any_depth():
    """Plain (and with minLength 1) the regex format is rules whose groups call the body
    again: any depth, one copy of each part (the IR form copied the body into every group
    to depth 3: 35,000 IR nodes, ~0.7 s to compile); with a pattern, the IR form."""
    deep = "((?:(a|(?=b)c)+)(d))" + "(" * 6 + "x" + ")" * 6
    re.compile(deep)
    for extra in ({}, {"minLength": 1}):
        check({"type": "string", "format": "regex", **extra}, [json.dumps(deep), '"(a)"', '"[\\\\\\"]"'],
              ['"(a"', '"a)"', '"((a)"', '"(?=a)*"'])
    check({"type": "string", "format": "regex", "pattern": "^a"}, ['"a+"', '"a(b)"'], ['"b"', '"a("'])


def test_format_regex_with_length_bounds_counts_characters():
    """minLength / maxLength count the regex's characters, not its JSON text's: `a\\d` is
    3 characters written as 4 (the format was JSON text, escaped again under a bound:
    `"a\\\\d"` was rejected with minLength 1, xs-app's). The email format's quoted local
    part was JSON text too. Bounds past minLength 1 are length frames: the engine's only."""
    ok, bad = REGEXES
    check({"type": "string", "format": "regex", "minLength": 1},
          [json.dumps(r, ensure_ascii=False) for r in ok if r], [json.dumps(r, ensure_ascii=False) for r in bad + [""]])
    check({"type": "string", "format": "email", "minLength": 1}, ['"\\"joe bloggs\\"@x.com"', '"a@b.co"'],
          ['"\\"\\"@x.com"', '""'])
    from furca.constrain import GrammarCompiler
    from .conftest import BYTE_EOS, byte_info
    c = GrammarCompiler(byte_info())
    for schema, cases in (
            ({"type": "string", "format": "regex", "minLength": 3, "maxLength": 4},
             [('"a\\\\d"', True), ('"\\\\d+"', True), ('"\\"q\\""', True), ('"abc"', True),
              ('"\\\\d"', False), ('"abcde"', False), ('"(?:ab)+"', False), ('"\\\\"', False)]),
            ({"type": "string", "format": "email", "maxLength": 6},
             [('"\\"j\\"@x"', True), ('"a@b.co"', True), ('"\\"joe\\"@x"', False)])):
        g = c.compile_json_schema(schema)
        for text, expected in cases:
            m = g.matcher()
            assert (m.accept_string(text) and m.accept_token(BYTE_EOS)) == expected, (schema, text)


def test_unknown_format_is_ignored_and_unsupported_defined_format_is_an_error():
    check({"type": "string", "format": "int32"}, ['"anything"'], ["1"])
    with pytest.raises(CompileError, match="format"):
        schema_to_gbnf({"type": "string", "format": "iri"})


# ----------------------------------------------------------------- numbers
@settings(max_examples=60, deadline=None)
@given(lo=st.one_of(st.none(), st.integers(-3000, 3000)), span=st.integers(0, 5000),
       has_hi=st.booleans(), xs=st.lists(st.integers(-10000, 10000), min_size=10, max_size=10))
def test_integer_ranges_are_exact(lo, span, has_hi, xs):
    hi = (lo if lo is not None else 0) + span if has_hi else None
    schema = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    m = lang(schema)
    for x in xs + [v for v in (lo, hi) if v is not None] + [v + d for v in (lo, hi) if v is not None for d in (-1, 1)]:
        assert m(str(x)) == ((lo is None or x >= lo) and (hi is None or x <= hi)), (schema, x)


def test_integer_exclusive_and_fractional_bounds():
    check({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, ["1", "9"], ["0", "10", "-1"])
    check({"type": "integer", "minimum": 0.5, "maximum": 2.5}, ["1", "2"], ["0", "3"])
    check({"type": "integer", "minimum": 5, "exclusiveMinimum": True, "maximum": 7},  # draft-4 form
          ["6", "7"], ["5", "8"])


_DEC = st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False)


@settings(max_examples=120, deadline=None)
@given(lo=st.one_of(st.none(), _DEC), hi=st.one_of(st.none(), _DEC), lo_x=st.booleans(), hi_x=st.booleans(),
       xs=st.lists(_DEC, min_size=8, max_size=8), step=st.sampled_from([None, 1, 0.1, 0.01]))
def test_number_ranges_are_exact(lo, hi, lo_x, hi_x, xs, step):
    if lo is not None and hi is not None and (lo > hi or lo == hi and (lo_x or hi_x)):
        return
    schema = {"type": "number"}
    if step is not None:
        schema["multipleOf"] = step
    if lo is not None:
        schema["exclusiveMinimum" if lo_x else "minimum"] = float(lo)
    if hi is not None:
        schema["exclusiveMaximum" if hi_x else "maximum"] = float(hi)
    try:
        m = lang(schema)
    except CompileError as e:  # only when no multiple of step lies in the range
        assert step is not None and "accepts no JSON value" in str(e)
        k = Decimal(repr(step))
        first = (Decimal(repr(float(lo))) / k).to_integral_value(rounding="ROUND_FLOOR") * k
        assert all(not (Decimal(repr(float(lo))) <= first + i * k <= Decimal(repr(float(hi)))) or
                   (first + i * k == Decimal(repr(float(lo))) and lo_x) or (first + i * k == Decimal(repr(float(hi))) and hi_x)
                   for i in range(3))
        return
    probes = list(xs) + [v + d for v in (lo, hi) if v is not None for d in (Decimal(0), Decimal("0.001"), Decimal("-0.001"))]
    for x in probes:
        fx = Decimal(repr(float(x)))
        inside = ((lo is None or (fx > Decimal(repr(float(lo))) if lo_x else fx >= Decimal(repr(float(lo)))))
                  and (hi is None or (fx < Decimal(repr(float(hi))) if hi_x else fx <= Decimal(repr(float(hi)))))
                  and (step is None or fx % Decimal(repr(step)) == 0))
        for text in {format(fx, "f"), format(fx.normalize(), "f"), json.dumps(float(x))}:
            if "e" in text or "E" in text:
                continue
            assert m(text) == inside, (schema, text)


def test_number_bounds_allow_trailing_zeros_and_no_exponent():
    check({"type": "number", "minimum": 1.5, "maximum": 2}, ["1.5", "1.50", "2", "2.0", "2.000", "1.75"],
          ["1.49", "2.01", "1.5e0", "1"])


def test_numbers_bounded_on_one_side_take_an_exponent_that_cannot_cross_the_bound():
    """o57716's `{"type": "number", "minimum": 0}` e-values written 1e-06: any exponent
    past a bound 0 that 0 meets, a non-negative one past another bound (a value like
    1e-400, which parsers round to 0, never crosses it), none when bounded on both sides.
    Labels checked by jsonschema."""
    agreed({"type": "number", "minimum": 0}, ["1e-06", "0e5", "2.5E+3", "0", "3.25"], ["-1e-06", "-2", "-0.5e1"])
    agreed({"type": "number", "exclusiveMinimum": 0}, ["7E2", "1e+3"], ["0e5", "0", "-1e2", "0.0e-1"])
    check({"type": "number", "exclusiveMinimum": 0}, [], ["1e-06", "1e-400"])  # 1e-400 parses as 0.0
    agreed({"type": "number", "exclusiveMaximum": 0}, ["-7E2", "-0.5"], ["0", "1e2"])
    check({"type": "number", "exclusiveMaximum": 0}, [], ["-1e-400"])  # parses as -0.0
    agreed({"type": "number", "minimum": 1.5}, ["2e3", "1.5e0", "1.5E+2", "9"], ["1e-1", "1", "-2e5"])
    agreed({"type": "number", "maximum": 0}, ["-1e5", "-2.5e-3", "0"], ["1e-5", "2E1"])
    agreed({"type": "number", "exclusiveMaximum": -2, "minimum": -100}, ["-3", "-50.5"], ["-1", "-200"])
    # valid, not produced: bounded on both sides; a sign before the exponent past 1.5
    check({"type": "number", "exclusiveMaximum": -2, "minimum": -100}, [], ["-3e1"])
    check({"type": "number", "minimum": 1.5}, [], ["2e-0"])


def test_multiple_of():
    check({"type": "number", "multipleOf": 0.01}, ["1", "1.5", "-2.25", "3.10", "0.070"], ["1.005", "1e2", "0.001"])
    check({"type": "number", "multipleOf": 1}, ["1", "1.0", "-20"], ["1.5"])
    with pytest.raises(CompileError, match=r"#/multipleOf.*'multipleOf'"):
        schema_to_gbnf({"type": "number", "multipleOf": 0.5})


def test_min_greater_than_max_is_an_error():
    with pytest.raises(CompileError, match="bounds"):
        schema_to_gbnf({"type": "number", "minimum": 3, "maximum": 2})


# ----------------------------------------------------------------- objects
def test_ordered_subset_of_properties_with_commas():
    props = {k: {"type": "integer"} for k in "abcde"}
    for required in ([], ["c"], ["a", "e"], list("abcde")):
        m = lang({"type": "object", "properties": props, "required": required})
        for n in range(6):
            for keys in itertools.combinations("abcde", n):
                text = c({k: 1 for k in keys})
                assert m(text) == (set(required) <= set(keys)), (required, text)
        assert not m('{"b":1,"a":1,"c":1,"d":1,"e":1}')  # out of order
        assert not m('{"a":1,,"c":1}') and not m('{,"c":1}') and not m('{"c":1,}')


def test_grammar_is_linear_in_the_number_of_properties():
    props = {"p%d" % i: {"type": "integer"} for i in range(200)}
    text = schema_to_gbnf({"type": "object", "properties": props})
    assert len(text) < 200 * 200


def test_undeclared_members_follow_json_schema_unless_disallowed():
    check({"type": "object"}, ['{"b":[1]}', "{}"], [])  # no declared properties: any members
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    # default: JSON Schema's meaning, undeclared members allowed (after the declared ones)
    check(schema, ['{"a":1}', '{"a":1,"b":2}', '{"b":[]}'], ['{"a":"x"}', '{"a":1,"a":"x"}', '{"b":2,"a":1}'])
    check(schema, ['{"a":1}', '{"a":1,"b":2}'], ['{"a":"x"}'], unsupported="warn")
    # xgrammar strict_mode / OpenAI strict: only declared members
    check({"type": "object", "properties": {}}, ["{}"], ['{"b":[1]}'], allow_extra_properties=False)
    check(schema, ['{"a":1}', "{}"], ['{"a":1,"b":2}', '{"b":2}'], allow_extra_properties=False)


def test_additional_properties_schema_and_declared_names_excluded():
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    check(schema, ['{"ab":1}', '{"ab":1,"a":"x"}', '{"abc":"x","b":"y"}', '{"\\n":"x"}', '{"":"x"}'],
          ['{"ab":"x"}', '{"ab":1,"ab":"x"}', '{"x":1}', '{"a\\u0062":"x"}'])


def test_required_names_not_declared_get_any_value():
    check({"type": "object", "required": ["id"]}, ['{"id":1}', '{"id":{"x":[]}}'], ["{}"])


def test_pattern_properties():
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}
    check(schema, ['{}', '{"x-a":1,"x-b":2}'], ['{"x-a":"s"}', '{"y":1}'])


def test_allof_of_pattern_properties_and_a_closed_part():
    """allOf of patternProperties and another part's additionalProperties (jreleaser's
    `http` announcers): a key the closed part does not declare takes its
    additionalProperties, pattern keys too. Refused where a pattern names a key the
    closed part declares. Labels checked by jsonschema."""
    agreed({"type": "object", "allOf": [{"properties": {"n": {"type": "boolean"}}, "additionalProperties": {"type": "integer"}},
                                        {"patternProperties": {"^x": {"minimum": 5}}, "additionalProperties": {"maximum": 9}}]},
           ['{"xa":7}', '{"n":true,"b":3}', '{"xa":50}', "{}"],
           ['{"xa":3}', '{"b":"s"}', '{"xa":"s"}', '{"b":10}', '{"n":1}'])
    with pytest.raises(CompileError, match="a pattern matches a member the other part declares"):
        schema_to_gbnf({"allOf": [{"properties": {"xa": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
                                  {"patternProperties": {"^x": {"minLength": 2}}}]})


def test_keys_no_pattern_names_take_additional_properties_alone():
    """An undeclared key that no patternProperties pattern names takes
    additionalProperties alone (x-wing's `upgrades`: `^[0-9a-z]+$` keys hold arrays, a
    key with a capital anything); was merged with the patterns' schema."""
    agreed({"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}},
            "additionalProperties": {"type": "string"}},
           ['{"ab":1,"Ab":"s"}', '{"X":"y"}', "{}"], ['{"ab":"s"}', '{"Ab":1}'])
    agreed({"type": "object", "properties": {"Id": {"type": "boolean"}}, "patternProperties": {"^[a-z]": {"type": "integer"}},
            "additionalProperties": {"type": "string"}, "propertyNames": {"maxLength": 3}},
           ['{"Id":true,"abc":1,"ABC":"s"}'], ['{"Id":"s"}', '{"ABCD":"s"}', '{"Ab":1}'])


def test_pattern_keys_by_region_of_the_patterns_naming_them():
    """Several patternProperties of different schemas: a key takes the schemas of the
    patterns that name it (each region of keys apart, extras.py), where before every
    pattern key took all of them merged (o60038's icons: `^/` keys hold strings, `^[^/]`
    keys objects: no key at all before)."""
    agreed({"type": "object", "patternProperties": {"^/": {"type": "string"}, "^[^/]": {"type": "object"}},
            "additionalProperties": False},
           ['{"/a":"x","b":{}}', '{"/":"y"}', "{}"], ['{"/a":{}}', '{"b":"x"}', '{"":1}'])
    agreed({"type": "object", "properties": {"ab": {"type": "integer"}},
            "patternProperties": {"a": {"type": "integer"}, "b": {"minimum": 5}}},
           ['{"ab":5,"xa":1,"xb":"s","abc":6}', '{"b":7}'], ['{"xa":"s"}', '{"xb":3}', '{"ba":4}', '{"ab":"s"}'])


def test_declared_names_a_pattern_matches_with_another_schema():
    """A declared name that a patternProperties pattern also matches takes both schemas
    as a declared member and never comes as an extra member (whose value schema is the
    pattern's alone): the pattern's keys leave it out. Was a CompileError ("cannot keep
    it out of the extra members"), met by 20 schemas of maskbench-dev."""
    schema = {"type": "object", "properties": {"basic": {"type": "string"}, "n": {"minimum": 0}},
              "patternProperties": {".*": {"type": ["string", "integer"]}, "^b": {"maxLength": 3}},
              "additionalProperties": False}
    agreed(schema, ['{"basic":"x"}', '{"n":3}', '{"other":1}', '{"basic":"x","bas":"y","basicx":2,"n0":-1}', "{}"],
           ['{"basic":1}', '{"basic":"long"}', '{"n":-1}', '{"n":null}', '{"basic":"x","basic":2}',
            '{"other":1.5}', '{"bb":"long"}'])
    # the same schema under both: nothing to leave out (the grammar is unchanged)
    agreed({"type": "object", "properties": {"id": {"type": "integer"}},
            "patternProperties": {"^i": {"type": "integer"}}}, ['{"id":1}', '{"id":1,"ix":2}'], ['{"id":"s"}'])


def test_property_names():
    """propertyNames bounds every member's name: declared names it refuses are left out
    (a required one: no object), extra keys are its language less the declared names,
    intersected with each patternProperties pattern. Labels checked by jsonschema."""
    agreed({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
           ["{}", '{"ab":1}', '{"a":1,"b":[]}'], ['{"A":1}', '{"a1":1}', '{"":1}'])
    agreed({"type": "object", "properties": {"id": {"type": "integer"}, "X": {}}, "propertyNames": {"maxLength": 3}},
           ['{"id":1}', '{"id":1,"abc":2}', '{"X":1}'], ['{"id":"s"}', '{"abcd":1}', '{"id":1,"abcd":2}'])
    agreed({"type": "object", "properties": {"a": {"type": "integer"}, "q": {}}, "propertyNames": {"enum": ["a", "b", "c"]},
            "additionalProperties": {"type": "string"}},
           ['{"a":1}', '{"a":1,"b":"x"}', '{"c":"y"}'], ['{"d":"x"}', '{"a":"s"}', '{"b":1}', '{"q":1}'])
    agreed({"type": "object", "propertyNames": {"enum": ["up", "down"]}, "patternProperties": {"^u": {"type": "integer"}},
            "additionalProperties": False}, ['{"up":1}', "{}"], ['{"down":1}', '{"up":"s"}', '{"ux":1}'])
    agreed({"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}}, "propertyNames": {"maxLength": 2},
            "additionalProperties": False}, ['{"ab":1}', "{}"], ['{"abc":1}', '{"AB":1}', '{"ab":"s"}'])
    agreed({"type": "object", "propertyNames": False}, ["{}"], ['{"a":1}'])
    agreed({"type": "object", "propertyNames": {"oneOf": [{"enum": ["a", "b"]}, {"enum": ["b", "c"]}]}},
           ['{"a":1}', '{"c":1}'], ['{"b":1}', '{"d":1}'])
    agreed({"$defs": {"n": {"type": "string", "pattern": "^x"}}, "type": "object", "propertyNames": {"$ref": "#/$defs/n"},
            "properties": {"xa": {"type": "integer"}, "b": {}}},
           ['{"xa":1}', '{"xa":1,"xy":null}'], ['{"b":1}', '{"xa":"s"}', '{"y":1}'])
    with pytest.raises(CompileError, match="no JSON value"):  # a required name propertyNames refuses
        schema_to_gbnf({"type": "object", "required": ["zz"], "propertyNames": {"pattern": "^a"}})
    with pytest.raises(CompileError, match="propertyNames"):
        schema_to_gbnf({"type": "object", "propertyNames": {"format": "email"}})


def test_min_and_max_properties():
    check({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2},
          ['{"a":1}', '{"a":1,"b":2}'], ["{}", '{"a":1,"b":2,"c":3}'])
    check({"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 1}, ['{"a":1}', '{"b":1}'], ["{}"])
    # optional members and extras counted (one rule per next member and count so far);
    # labels checked by jsonschema
    agreed({"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2, "additionalProperties": False},
           ['{"a":1,"b":2}', '{"a":1,"c":2}', '{"a":1,"b":2,"c":3}'], ["{}", '{"b":1}'])
    agreed({"type": "object", "properties": {"xpath": {"type": "string"}, "maven": {"type": "string"}},
            "maxProperties": 1, "minProperties": 1},
           ['{"xpath":"a"}', '{"maven":"b"}', '{"other":1}'], ["{}", '{"xpath":"a","maven":"b"}', '{"xpath":"a","o":1}'])
    agreed({"type": "object", "properties": {"json": {}, "key": {}, "pojo": {}}, "required": ["key"],
            "minProperties": 2, "maxProperties": 2, "additionalProperties": False},
           ['{"json":1,"key":2}', '{"key":1,"pojo":2}'], ['{"key":1}', '{"json":1,"key":2,"pojo":3}', '{"json":1,"pojo":2}'])
    agreed({"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 3},
           ["{}", '{"a":1}', '{"a":1,"b":2,"x":3}', '{"x":1,"y":2,"z":3}'],
           ['{"a":1,"b":2,"x":3,"y":4}', '{"w":1,"x":1,"y":2,"z":3}'])
    agreed({"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 3},
           ['{"a":1,"b":2,"x":3}', '{"x":1,"y":2,"z":3}', '{"a":1,"x":1,"y":2,"z":3}'], ["{}", '{"a":1,"b":2}', '{"x":1}'])
    many = {"type": "object", "properties": {"p%d" % i: {} for i in range(100)}, "maxProperties": 50}
    with pytest.raises(CompileError, match="maxProperties"):  # 100 x 51 rules: over MAX_COUNTED_RULES
        schema_to_gbnf(many)
    got = []
    check(many, ['{"p0":1,"p1":2}'], [], unsupported="warn", warn=got.append)  # the count not enforced
    assert got and "maxProperties" in got[0]
    with pytest.raises(CompileError, match="no JSON value"):  # two required, at most one member
        schema_to_gbnf({"type": "object", "required": ["a", "b"], "properties": {"c": {}}, "maxProperties": 1})


# ----------------------------------------------------------------- arrays
def test_unique_items_over_literals():
    """uniqueItems over an enum/const item list of at most MAX_UNIQUE values: the grammar
    keeps the set of values used (1 and 1.0 are one value). Labels checked by jsonschema."""
    agreed({"type": "array", "uniqueItems": True, "items": {"enum": ["a", "b", "c"]}},
           ["[]", '["a"]', '["c","a"]', '["a","b","c"]'], ['["a","a"]', '["a","b","a"]', '["d"]'])
    agreed({"type": "array", "uniqueItems": True, "minItems": 2, "maxItems": 2,
            "items": {"type": "integer", "enum": [1, 2, 3, "x"]}},
           ["[1,2]", "[3,1]", "[1.0,2]"], ["[1]", "[1,1]", "[1,1.0]", "[1,2,3]", '["x",1]'])
    agreed({"$defs": {"e": {"enum": ["GET", "POST"]}}, "type": "array", "uniqueItems": True, "items": {"$ref": "#/$defs/e"}},
           ['["POST","GET"]'], ['["GET","GET"]'])
    with pytest.raises(CompileError, match="uniqueItems"):  # 9 values: 512 sets, over the limit
        schema_to_gbnf({"type": "array", "uniqueItems": True, "items": {"enum": list(range(9))}})


def test_arrays():
    check({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
          ["[1]", "[1,2,3]"], ["[]", "[1,2,3,4]", '["a"]', "[1,]"])
    check({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
          ["[]", '["a"]', '["a",1]'], ['["a",1,2]', "[1]"])
    check({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "null"}, "minItems": 2},
          ['["a",null]', '["a",null,null]'], ['["a"]', '["a",1]'])
    check({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
           "items": [{"type": "string"}], "additionalItems": {"type": "integer"}}, ['["a",1,2]', "[]"], ['["a","b"]'])


def test_unique_items_is_an_error_unless_trivial():
    with pytest.raises(CompileError, match=r"#/uniqueItems.*'uniqueItems'"):
        schema_to_gbnf({"type": "array", "uniqueItems": True})
    check({"type": "array", "uniqueItems": True, "maxItems": 1}, ["[]", "[1]"], ["[1,2]"])


# ----------------------------------------------------------------- enum, combinators, refs
def test_enum_and_const():
    check({"enum": ["a", 1, None, {"k": [1]}]}, ['"a"', "1", "1.0", "null", '{"k":[1]}'], ['"b"', "2", "true"])
    check({"type": "string", "enum": ["a", 1]}, ['"a"'], ["1"])
    check({"const": "x\"y"}, ['"x\\"y"'], ['"xy"'])


def test_enum_beside_type_alone():
    # an enum's values are checked against the rest of the schema; a rest of `type` alone
    # (and annotations) is checked without a jsonschema validator (scalars._type_check):
    # draft-04's integer is no float, later drafts' takes 1.0; a boolean is no number
    d4 = "http://json-schema.org/draft-04/schema#"
    check({"$schema": d4, "type": "integer", "enum": [1.0, 2, 2.5, "a", True]}, ["2"],
          ["1", "1.0", "2.0", "2.5", '"a"', "true"])
    agreed({"type": "integer", "enum": [1.0, 2, 2.5, "a", True]}, ["1", "1.0", "2", "2.0"], ["2.5", '"a"', "true"])
    agreed({"type": ["string", "null"], "title": "t", "description": "d", "enum": ["a", None, 3, False]},
           ['"a"', "null"], ["3", "false"])
    agreed({"type": "number", "enum": [0, 0.5, True, None]}, ["0", "0.0", "0.5"], ["true", "null"])


def test_type_check_agrees_with_jsonschema():
    from furca.constrain.json_schema.scalars import _type_check

    values = ["a", "", 1, 1.0, 1.5, -0.0, 10 ** 20, True, False, None, [], [1], {}, {"a": 1}]
    types = ["string", "boolean", "null", "array", "object", "number", "integer", ["string", "null"],
             ["integer", "number"], ["boolean", "integer"], []]
    for draft4, cls in ((True, jsonschema.Draft4Validator), (False, jsonschema.Draft7Validator),
                        (False, jsonschema.Draft202012Validator)):
        for t in types:
            quick, v = _type_check(t, draft4), cls({"type": t})
            assert [quick(x) for x in values] == [v.is_valid(x) for x in values], (cls.__name__, t)
    assert _type_check("any", False) is None and _type_check(["string", 3], False) is None  # jsonschema decides


def test_any_of_and_all_of():
    check({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, ["1", '"a"'], ['"ab"', "null"])
    check({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                     {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
          ['{"a":1,"b":"x"}'], ['{"a":1}', '{"b":"x"}'])
    check({"type": "object", "properties": {"a": {"type": "integer"}}, "anyOf": [{"required": ["a"]}]},
          ['{"a":1}'], ["{}"])
    agreed({"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b"}]}, ['"ab"', '"ba"', '"xaxb"'],
           ['"a"', '"b"', "1"])  # was a CompileError: both patterns now (test_all_of_two_patterns)
    with pytest.raises(CompileError, match="allOf"):
        schema_to_gbnf({"allOf": [{"type": "string", "format": "date"}, {"format": "email"}]})
    # unknown keywords validate nothing: two parts' different values merge (was a
    # CompileError; 7 maskbench-dev schemas: translation, x-taplo, _id, help, @type, ...)
    agreed({"allOf": [{"type": "integer", "x-taplo": {"a": 1}}, {"minimum": 0, "x-taplo": {"b": 2}}]}, ["1"], ["-1"])
    # propertyNames of two parts: names valid under both
    agreed({"allOf": [{"type": "object", "propertyNames": {"maxLength": 2}}, {"propertyNames": {"pattern": "^a"}}]},
           ['{"ab":1}', "{}"], ['{"abc":1}', '{"b":1}'])


def test_one_of_branches_are_made_exclusive():
    check({"oneOf": [{"type": "integer"}, {"type": "string"}]}, ["1", '"a"'], ["null"])
    tagged = {"type": "object", "oneOf": [
        {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
        {"properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]}]}
    # "y" is an undeclared (so allowed) member of the first branch, unless extra members are off
    check(tagged, ['{"kind":"a","x":1}', '{"kind":"b","y":"s"}', '{"kind":"a","y":"s"}'],
          ['{"kind":"c"}', '{"kind":"a","x":"s"}', '{"kind":"b","y":1}'])
    check(tagged, ['{"kind":"a","x":1}', '{"kind":"b","y":"s"}'], ['{"kind":"a","y":"s"}'],
          allow_extra_properties=False)
    # overlapping branches: shared types without a proof are dropped (sound, narrower)
    # (numbers: the integers outside the second's range stay; 0.5 is valid but dropped)
    overlapping = {"oneOf": [{"type": "integer"}, {"minimum": 0}]}
    check(overlapping, ['"s"', "null", "{}", "-3"], ["5", "0", "0.5", "-2.5"])
    # objects: each branch forbids what only the other requires
    auth = {"type": "object", "oneOf": [{"required": ["token"]}, {"required": ["email", "key"]}]}
    check(auth, ['{"token":"t"}', '{"email":"e","key":"k"}', '{"token":"t","x":1}'],
          ['{"token":"t","email":"e","key":"k"}', '{"token":"t","key":"k"}', "{}"])
    # numbers bounded by range alone: each branch keeps what lies outside the other's range
    agreed({"type": "number", "oneOf": [{"maximum": 2}, {"maximum": 5}]}, ["3", "5", "2.5"], ["2", "1", "-7", "6"])
    agreed({"oneOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": 10}, {"type": "number", "minimum": 5}]},
           ["0.5", "4.9", "10.5", "11"], ["5", "10", "7", "0", "-1"])
    # an integer branch against a number one: sound, narrower (9.5 satisfies only the
    # second branch, but its numbers keep only what lies outside the first's range)
    check({"oneOf": [{"type": "integer", "minimum": 0}, {"type": "number", "exclusiveMaximum": 10}]},
          ["10", "11", "-1", "-0.5"], ["0", "5", "9", "9.5"])
    # literal strings against strings bounded by pattern/lengths: the literals the other
    # branch accepts leave the literal branch, every literal leaves the other (exact)
    agreed({"type": "string", "oneOf": [{"enum": [""]}, {"_format": "email"}]}, ['"a"', '"x@y.z"'], ['""', "1"])
    agreed({"oneOf": [{"enum": ["a", "zz", 1]}, {"type": "string", "pattern": "^z"}]}, ['"a"', '"zq"', "1"],
           ['"zz"', '"b"', "2"])
    agreed({"oneOf": [{"type": "string", "maxLength": 2}, {"const": "abc"}]}, ['"ab"', '"abc"', '""'], ['"abcd"'])
    # closed objects, each declaring a property the other forbids: each requires it
    closed = {"type": "object", "oneOf": [
        {"additionalProperties": False, "properties": {"key": {"type": "string"}}},
        {"additionalProperties": False, "properties": {"keys": {"type": "array"}}}]}
    agreed(closed, ['{"key":"a"}', '{"keys":[]}'], ["{}", '{"key":"a","keys":[]}', '{"keys":"a"}', '{"x":1}'])
    # a property both declare with disjoint values: both require it (an object without
    # it satisfies both branches)
    tags = {"type": "object", "oneOf": [
        {"properties": {"type": {"enum": ["callback"]}, "value": {"type": "string"}}},
        {"properties": {"type": {"enum": ["field", "value"]}, "value": {"type": ["string", "null"]}}}]}
    agreed(tags, ['{"type":"callback","value":"f"}', '{"type":"field","value":null}', '{"type":"value"}'],
           ['{"value":"v"}', "{}", '{"type":"other"}', '{"type":"callback","value":null}'])
    # object or array branches without a proof: each takes the other's complement (exact;
    # maskbench-dev o25761 failed as "accepts no JSON value")
    services = {"type": "object", "required": ["init", "units"], "oneOf": [
        {"properties": {"init": {"type": "string", "not": {"enum": ["upstart"]}},
                        "units": {"type": "array", "items": {"required": ["name"]}}}},
        {"properties": {"init": {"enum": ["upstart"]},
                        "units": {"type": "array", "items": {"required": ["name", "legacy"]}}}}]}
    agreed(services, ['{"init":"systemd","units":[{"name":"a"}]}', '{"init":"upstart","units":[{"name":"a","legacy":1}]}'],
           ['{"init":"upstart","units":[{"name":"a"}]}', '{"init":"systemd","units":[{"legacy":1}]}', "{}"])
    agreed({"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "array", "minItems": 2}]},
           ['["a"]', '[1,2]', '["a",2]', "[]"], ['["a","b"]', "[1]", "1"])
    got = []
    check(overlapping, ["5", "-3"], [], unsupported="warn", warn=got.append)
    assert got and "oneOf" in got[0]


def test_refs_defs_definitions_pointers_and_escapes():
    schema = {"$defs": {"a/b": {"type": "integer"}, "t~": {"type": "string"}},
              "definitions": {"d": {"type": "null"}},
              "type": "object", "properties": {
                  "x": {"$ref": "#/$defs/a~1b"}, "y": {"$ref": "#/$defs/t~0"}, "z": {"$ref": "#/definitions/d"},
                  "w": {"$ref": "#/properties/x"}, "v": {"$ref": "#/$defs/t%7E0"}}}
    check(schema, ['{"x":1,"y":"s","z":null,"w":2,"v":"t"}', "{}"], ['{"x":"s"}', '{"w":"s"}', '{"v":1}'])


def test_recursive_refs():
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"]}}, "$ref": "#/$defs/node"}
    check(tree, ['{"value":1}', '{"value":1,"children":[{"value":2,"children":[{"value":3}]}]}'],
          ['{"value":1,"children":[{}]}', '{"children":[]}'])
    check({"type": "array", "items": {"$ref": "#"}}, ["[]", "[[],[[]]]"], ["[1]"])


def test_anchor_and_id_refs():
    check({"$id": "http://x.test/root.json", "$defs": {"a": {"$anchor": "A", "type": "integer"},
                                                      "b": {"$id": "b.json", "type": "string"}},
           "type": "array", "prefixItems": [{"$ref": "#A"}, {"$ref": "b.json"}, {"$ref": "http://x.test/b.json"}],
           "items": False}, ['[1,"s","t"]'], ['["s"]'])


def test_pointer_a_nested_id_lacks_is_read_from_the_root():
    """A nested `id` moves the base URI, so "#/definitions/b" inside it means its own
    subschema's definitions, which it lacks; the author meant the root's (maskbench-dev
    o6322: valid instances exist), so the root is searched when the nested one fails."""
    schema = {"definitions": {"a": {"id": "/a", "type": "object", "properties": {"b": {"$ref": "#/definitions/b"}}},
                              "b": {"id": "/b", "type": "integer"}},
              "type": "object", "properties": {"x": {"$ref": "#/definitions/a"}}}
    check(schema, ['{"x":{"b":1}}', "{}"], ['{"x":{"b":"s"}}'])
    with pytest.raises(CompileError, match="cannot resolve"):
        schema_to_gbnf({"definitions": {"a": {"id": "/a", "properties": {"b": {"$ref": "#/definitions/c"}}}},
                        "$ref": "#/definitions/a"})


def test_ref_with_siblings_2020_merges_and_draft7_ignores_them():
    defs = {"$defs": {"s": {"type": "string"}}, "definitions": {"s": {"type": "string"}}}
    check(dict(defs, **{"$ref": "#/$defs/s", "maxLength": 1}), ['"a"'], ['"ab"'])
    check(dict(defs, **{"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#/definitions/s",
                        "maxLength": 1}), ['"ab"'], ["1"])


def test_boolean_schemas_and_empty_schema():
    check(True, ["1", '{"a":[null]}'], ["", "{"])
    check({}, ["1", '{"a":[null]}'], ["nul"])
    with pytest.raises(CompileError, match="accepts no JSON value"):
        schema_to_gbnf(False)
    check({"type": "object", "properties": {"a": False}}, ["{}"], ['{"a":1}'])


def test_integer_multiples():
    """multipleOf an integer k: k rules, one per remainder (multiples.py); listed literals
    between close bounds. Labels checked by jsonschema."""
    agreed({"type": "integer", "multipleOf": 3}, ["0", "3", "-6", "999", "1002"], ["1", "7", "10", "-4", "4.5"])
    check({"type": "integer", "multipleOf": 3}, [], ["03", "-03"])
    agreed({"type": "integer", "minimum": 0, "multipleOf": 12}, ["0", "24", "120", "1200"], ["-12", "25", "13"])
    agreed({"type": "integer", "minimum": 16, "maximum": 100, "multipleOf": 4}, ["16", "20", "100"], ["12", "104", "21", "0"])
    agreed({"type": "number", "multipleOf": 7}, ["0", "14", "-21"], ["15", "7.5"])
    agreed({"type": "integer", "multipleOf": 1000}, ["0", "1000", "-3000", "1234000"], ["100", "1001"])
    with pytest.raises(CompileError, match="multipleOf"):  # a lower bound above 0 and no upper one
        schema_to_gbnf({"type": "integer", "minimum": 5, "multipleOf": 3})
    # a fraction other than 10^-k between bounds: its multiples listed (o74461: a 0-100
    # skill value in quarters), trailing zeros allowed
    agreed({"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.25},
           ["0", "0.25", "2.5", "2.50", "100", "100.0", "99.75", "3"], ["0.3", "100.25", "-0.25", "1.1", "0.125"])
    agreed({"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1.5, "multipleOf": 0.3},
           ["-0.9", "0", "0.3", "0.60"], ["-1.2", "1.5", "0.1"])
    # not multipleOf beside an integer with close bounds (hazelcast's odd CP group size)
    agreed({"anyOf": [{"const": 0}, {"type": "integer", "minimum": 3, "maximum": 7, "not": {"multipleOf": 2}}]},
           ["0", "3", "5", "7"], ["2", "4", "6", "9", "1", "5.5"])
    agreed({"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 9.5, "not": {"multipleOf": 1.5}},
           ["4", "5", "7", "8"], ["2", "3", "6", "9", "10"])
    with pytest.raises(CompileError, match="not"):  # unbounded: the non-multiples are no finite list
        schema_to_gbnf({"type": "integer", "minimum": 3, "not": {"multipleOf": 2}})
    # allOf of two multipleOf: their least common multiple, exact over decimals
    agreed({"allOf": [{"type": "integer", "multipleOf": 4}, {"multipleOf": 6}]},
           ["0", "12", "-24", "120"], ["4", "6", "18", "8"])
    agreed({"type": "number", "minimum": 0, "maximum": 2, "allOf": [{"multipleOf": 0.25}, {"multipleOf": 0.1}]},
           ["0", "0.5", "1.5", "2.0"], ["0.25", "0.1", "0.75", "1.2"])


def test_strings_excluded_from_constrained_strings():
    """`not` of a pattern, and string enums/consts excluded from a string with a pattern
    or length bounds: the difference construction, lengths intersected. Labels checked
    by jsonschema."""
    agreed({"type": "string", "minLength": 1, "not": {"pattern": "^[.,*-]+$"}},
           ['"a"', '"a."', '".a"'], ['""', '"."', '"-.*"', "1"])
    agreed({"not": {"pattern": "^a"}}, ['"b"', '""'], ['"a"', '"ab"', "1", "null"])  # pattern alone holds for 1
    agreed({"not": {"type": "string", "pattern": "^a"}}, ['"b"', '""', "1", "null"], ['"a"', '"ab"'])
    agreed({"type": "string", "pattern": "^[a-z]+[a-z0-9-]*$", "minLength": 2, "maxLength": 8,
            "not": {"enum": ["test", "source"]}},
           ['"tests"', '"ab"', '"tes"'], ['"test"', '"source"', '"a"', '"abcdefghi"', '"Ab"'])
    agreed({"type": "string", "maxLength": 3, "not": {"const": "abc"}}, ['"ab"', '"abd"', '""'], ['"abc"', '"abcd"'])


def test_all_of_two_patterns():
    """allOf of different patterns: the strings every pattern matches (a product of
    their automata, difference.py), with lengths, exclusions and enums beside them.
    Labels checked by jsonschema."""
    agreed({"type": "string", "allOf": [{"pattern": "^[a-z]+$"}, {"pattern": "^.{2,4}$"}]},
           ['"ab"', '"abcd"'], ['"a"', '"abcde"', '"AB"', '"a1"'])
    agreed({"allOf": [{"pattern": "^a"}, {"pattern": "x$"}], "type": "string", "maxLength": 4},
           ['"ax"', '"abcx"', '"a-x"'], ['"xa"', '"a"', '"abcdx"', '"x"'])
    agreed({"allOf": [{"pattern": "^a"}, {"pattern": "x$"}, {"pattern": "b"}], "type": "string"},
           ['"abx"', '"abbx"'], ['"ax"', '"bx"'])
    agreed({"allOf": [{"pattern": "^a"}, {"pattern": "x$"}, {"enum": ["ax", "ab", "abx", "bx"]}]},
           ['"ax"', '"abx"'], ['"ab"', '"bx"'])
    agreed({"type": "string", "allOf": [{"pattern": "^a"}, {"pattern": "x$"}], "not": {"const": "ax"}},
           ['"abx"'], ['"ax"', '"b"'])
    agreed({"allOf": [{"pattern": "^[0-9]+$"}, {"pattern": "^[a-z]+$"}]}, ["1", "null"], ['"1"', '"a"', '""'])


def test_not_of_numbers():
    """`not` of integers under `type: integer` (integer ranges around them, winget's
    InstallerSuccessCodes), of other numbers, of numeric bounds, and of a schema nothing
    satisfies. Labels checked by jsonschema."""
    agreed({"type": "integer", "not": {"enum": [0]}}, ["1", "-1", "10"], ["0", "1.5", '"a"'])
    agreed({"type": "integer", "not": {"enum": [2, 3, 5, 2.0, "x", None]}}, ["1", "4", "6", "-2", "0"],
           ["2", "3", "5"])
    agreed({"type": ["integer", "null"], "not": {"const": 7}}, ["6", "8", "null"], ["7", '"x"', "7.5"])
    agreed({"not": {"minimum": 3}}, ["2", "-1.5", "2.99"], ["3", "3.5", '"a"', "null"])
    agreed({"not": {"type": "number", "minimum": 0, "exclusiveMaximum": 2}},
           ["-1", "2", "2.5", '"a"', "null", "[]"], ["0", "1.5"])
    agreed({"type": "integer", "not": {"maximum": 10, "minimum": 5}}, ["4", "11"], ["5", "10", "7"])
    agreed({"not": {"allOf": [{"type": "string"}, {"type": "number"}]}}, ["1", '"a"', "null"], [])
    agreed({"type": "integer", "not": {"type": "string", "enum": [1, "a"], "minLength": 2}}, ["1", "0"], ['"a"'])  # empty
    # numbers other than these without `type: integer`: the open intervals between them
    # (chrome-manifest's `if: {properties: {manifest_version: {const: 3}}}`)
    agreed({"not": {"enum": [0]}}, ["1", "-0.5", '"0"', "null"], ["0", "0.0"])
    agreed({"not": {"enum": [1, 2.5, "a"]}}, ["1.5", "3", "0", '"b"', "2.6"], ["1", "2.5", '"a"', "1.0"])
    agreed({"type": "object", "properties": {"v": {"type": "number"}, "x": {}},
            "if": {"properties": {"v": {"const": 3}}}, "then": {"required": ["x"]}, "else": {"properties": {"x": False}}},
           ['{"v":3,"x":1}', '{"v":2}', '{"v":3.5}', '{"x":1}'], ['{"v":3}', '{"v":2,"x":1}', '{"v":3.0}'])


def test_not_by_keyword_groups_and_refs():
    """`not` of a schema of several keyword groups (type, enum, counts, bounds, pattern)
    as the anyOf of each group's complement; `not` and `if` of a $ref (avro's
    customTypeReference: a string that is no primitive type name, beside a oneOf that
    names them); counts' complements; allOf parts whose bounds leave no string. Labels
    checked by jsonschema."""
    agreed({"not": {"type": "string", "minLength": 3}}, ['"ab"', '""', "1", "null", "[]"], ['"abc"', '"abcd"'])
    # not oneOf: none of the branches or two at once (o39084's `instanceof` branch, an
    # unknown keyword, takes every value: its oneOf beside `type: string` is "not a string")
    agreed({"not": {"oneOf": [{"type": "string"}, {"maxLength": 2}]}}, ['"ab"', '""'], ['"abc"', "1", "null"])
    agreed({"oneOf": [{"instanceof": "RegExp"}, {"type": "string"},
                      {"type": "array", "minItems": 1, "items": {"oneOf": [{"instanceof": "RegExp"}, {"type": "string"}]}}]},
           ["1", '["a"]', "[]", '[1,"b"]'], ['"s"', "[1]", "[1,2]"])
    agreed({"type": "array", "not": {"minItems": 2}}, ["[]", "[1]"], ["[1,2]", "[1,2,3]"])
    agreed({"not": {"type": "object", "maxProperties": 1}}, ['{"a":1,"b":2}', "[]", "0"], ["{}", '{"a":1}'])
    agreed({"type": "string", "not": {"type": "string", "minLength": 5, "maxLength": 3}}, ['""', '"abcd"'], ["1"])
    agreed({"type": "string", "not": {"pattern": "^a", "maxLength": 2}}, ['"abc"', '"b"', '""'], ['"a"', '"ab"'])
    prim = {"type": "string", "enum": ["int", "long"]}
    avro = {"$defs": {"prim": prim, "custom": {"type": "string", "pattern": "^[a-z]+$", "not": {"$ref": "#/$defs/prim"}}},
            "oneOf": [{"$ref": "#/$defs/prim"}, {"$ref": "#/$defs/custom"}]}
    agreed(avro, ['"int"', '"long"', '"record"', '"in"'], ['"Int"', "1", '""'])
    agreed({"type": "array", "if": {"minItems": 1}, "then": {"minItems": 2}, "else": {"maxItems": 0}},
           ["[]", "[1,2]"], ["[1]"])
    agreed({"allOf": [{"minLength": 4}, {"maxLength": 3}]}, ["1", "null", "[]"], ['"abc"', '"abcd"'])
    agreed({"oneOf": [{"enum": [[1], [1, 2]]}, {"enum": [[1], [3]]}]}, ["[1,2]", "[3]"], ["[1]", "[2]"])
    # a oneOf whose branches are provably disjoint under the types the schema (or another
    # allOf part) allows is negated as their anyOf
    tagged = [{"required": ["k"], "properties": {"k": {"const": "a"}}},
              {"required": ["k"], "properties": {"k": {"const": "b"}}}]
    agreed({"not": {"type": "object", "oneOf": tagged}}, ["1", "{}", '{"k":"c"}', "[]"], ['{"k":"a"}', '{"k":"b"}'])
    agreed({"not": {"allOf": [{"type": "object"}, {"oneOf": tagged}]}}, ["1", "{}", '{"k":"c"}'],
           ['{"k":"a"}', '{"k":"b"}'])
    # without the type every non-object satisfies both: "none or two of them" then
    agreed({"not": {"oneOf": tagged}}, ["1", "{}", '{"k":"c"}', "null"], ['{"k":"a"}', '{"k":"b"}'])


def test_contains_and_the_complements_of_items():
    """`contains`: one alternative per count of items before the witness (below minItems,
    or under maxItems); `not` of items is contains of the complement and back. Labels
    checked by jsonschema."""
    agreed({"type": "array", "contains": {"type": "string"}},
           ['["a"]', '[1,"a"]', '["a",1,2]', '[1,2,"x",3]'], ["[]", "[1]", "[1,2]"])
    agreed({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minItems": 3},
           ["[5,1,1]", "[1,5,1]", "[1,1,5]", "[1,1,1,9]", "[9,9,9]"], ["[5,1]", "[1,1,1]", "[5]", '["a",5,5]'])
    agreed({"type": "array", "items": {"type": "integer"}, "contains": {"const": 0}, "minItems": 2, "maxItems": 3},
           ["[0,1]", "[1,0]", "[1,0,2]", "[0,0,0]"], ["[0]", "[1,2]", "[0,1,2,3]", "[1,2,3]"])
    agreed({"contains": False}, ["1", '"a"'], ["[]", "[1]"])
    agreed({"not": {"items": {"type": "string"}}}, ["[1]", '["a",1]', '[null,"b"]'], ["[]", '["a"]', "1", '"x"'])
    agreed({"type": "array", "not": {"contains": {"type": "string"}}}, ["[]", "[1,2]"], ['["a"]', '[1,"a"]'])
    agreed({"type": "array", "if": {"items": {"type": "string"}}, "then": {"maxItems": 1}, "else": {"minItems": 2}},
           ["[]", '["a"]', "[1,2]", '["a",1]'], ['["a","b"]', "[1]"])
    with pytest.raises(CompileError, match="contains"):
        schema_to_gbnf({"type": "array", "contains": {"type": "string"}, "maxItems": 100})
    with pytest.raises(CompileError, match="minContains"):
        schema_to_gbnf({"type": "array", "contains": {"type": "string"}, "minContains": 2})
    with pytest.raises(CompileError, match="contains.*uniqueItems"):
        schema_to_gbnf({"type": "array", "contains": {"type": "string"}, "uniqueItems": True})
    from furca.constrain import GrammarCompiler
    from .conftest import byte_info
    with pytest.raises(CompileError, match="contains.*uniqueItems"):  # (watched, not a grammar)
        GrammarCompiler(byte_info()).compile_json_schema(
            {"type": "array", "items": {"type": "string"}, "contains": {"const": "a"}, "uniqueItems": True})


def test_not_of_pattern_properties_additional_properties_and_property_names():
    """Their complements are objects with some member named so and valued otherwise
    (x-furca-some-member, witnesses.py): Swagger 2.0's `responses` (not only vendor
    extensions), `not propertyNames`, oneOf of closed objects (each branch takes the
    other's complement instead of losing objects), several such members at once."""
    agreed({"type": "object", "minProperties": 1, "additionalProperties": False,
            "patternProperties": {"^([0-9]{3})$|^(default)$": {"type": "integer"}, "^x-": {}},
            "not": {"type": "object", "additionalProperties": False, "patternProperties": {"^x-": {}}}},
           ['{"200":1}', '{"x-a":1,"200":2}', '{"default":3,"x-b":5}'], ['{}', '{"x-a":1}', '{"200":"s"}', '{"abc":1}'])
    agreed({"not": {"propertyNames": {"maxLength": 3}}}, ['{"abcd":1}', '{"a":1,"abcde":2}'],
           ['{}', '{"abc":1}', "1", '"x"'])
    agreed({"type": "object", "not": {"propertyNames": {"pattern": "^a"}}}, ['{"b":1}', '{"a":1,"b":2}'],
           ["{}", '{"ab":1}'])
    agreed({"type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
            "not": {"additionalProperties": False, "properties": {"a": {}, "b": {}}}},
           ['{"a":1,"c":2}', '{"zz":null}'], ['{"a":1}', "{}", '{"a":1,"b":2}'])
    agreed({"type": "object", "properties": {"a": {"type": ["integer", "string"]}},
            "not": {"patternProperties": {"^a": {"type": "string"}}}},
           ['{"ab":1}', '{"a":1,"ax":"s"}', '{"a":"s","ay":null}'], ['{"a":"s"}', "{}", '{"ab":"x"}', '{"b":1}'])
    agreed({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                      {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": False}]},
           ['{"a":1}', '{"b":2}'], ["{}", '{"a":1,"b":2}', '{"c":1}'])
    # two members needed (or one meeting both), among the declared ones or the extras
    agreed({"type": "object", "properties": {"k": {"type": "string"}},
            "allOf": [{"not": {"propertyNames": {"pattern": "^[a-m]"}}},
                      {"not": {"propertyNames": {"maxLength": 2}}}]},
           ['{"zzz":1}', '{"z":1,"abc":2}', '{"k":"v","nop":3}', '{"k":"v","q":1,"abc":2}'],
           ['{"z":1}', '{"abc":1}', '{"k":"v"}', "{}"])


def test_refs_to_the_draft_metaschemas():
    """A $ref into the draft 4 / 6 / 7 metaschema (Swagger 2.0's `schema` definition
    takes its members' schemas from draft 4's) reads the metaschema that comes with
    jsonschema; other remote documents stay a CompileError."""
    agreed({"type": "object", "properties": {
        "title": {"$ref": "http://json-schema.org/draft-04/schema#/properties/title"},
        "max": {"$ref": "http://json-schema.org/draft-04/schema#/properties/maxLength"},
        "n": {"$ref": "http://json-schema.org/draft-07/schema#/definitions/nonNegativeInteger"}}},
        ['{"title":"t","max":3}', '{"n":0}'], ['{"title":1}', '{"max":-1}', '{"n":-2}', '{"max":1.5}'])
    with pytest.raises(CompileError, match="remote references"):
        schema_to_gbnf({"$ref": "http://example.com/schema.json#/definitions/x"})


def test_one_of_by_enums_a_pattern_narrows():
    """oneOf branches whose discriminating member is an enum merged with a `pattern`
    (xstate's machine schema: every state node's `type` is one enum of five, each branch
    adds `pattern: compound` ...): the literals the pattern leaves are disjoint."""
    base = {"type": "object", "properties": {"type": {"enum": ["atomic", "compound", "final"]}}, "required": ["type"]}
    nodes = [{"allOf": [base, {"properties": {"type": {"pattern": t}, "x": {"type": "integer"}}}]}
             for t in ("atomic", "compound", "final")]
    agreed({"oneOf": nodes}, ['{"type":"atomic"}', '{"type":"final","x":1}'], ['{"type":"other"}', '{"type":"atomic","x":"s"}'])


def test_not_if_then_else_and_dependencies():
    check({"not": {"type": "string"}}, ["1", "null", "{}"], ['"a"'])
    check({"type": "string", "not": {"enum": ["a", "b"]}}, ['"c"', '"ab"', '""'], ['"a"', '"b"'])
    check({"type": "object", "properties": {"a": {}, "b": {}}, "not": {"required": ["a", "b"]}},
          ['{"a":1}', '{"b":1}', "{}"], ['{"a":1,"b":2}'])
    check({"type": "object", "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
           "if": {"properties": {"kind": {"const": "int"}}, "required": ["kind"]},
           "then": {"required": ["n"]}, "else": {"properties": {"n": False}}},
          ['{"kind":"int","n":1}', '{"kind":"str"}', "{}"], ['{"kind":"int"}', '{"kind":"str","n":1}', '{"n":1}'])
    check({"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "dependentRequired": {"a": ["b"]}},
          ['{"a":1,"b":2}', '{"b":2}', '{"c":3}'], ['{"a":1}', '{"a":1,"c":3}'])
    check({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
           "properties": {"a": {}, "b": {"type": "integer"}}, "dependencies": {"a": {"properties": {"b": {"minimum": 5}}}}},
          ['{"a":1,"b":5}', '{"b":1}', '{"a":1}'], ['{"a":1,"b":4}'])
    # an empty `dependencies` says nothing (o62779: was "keyword 'dependencies' is not supported")
    agreed({"type": "object", "properties": {"a": {}}, "dependencies": {}}, ['{"a":1}', "{}"], ["1"])
    # drafts 4 and 6 have no if/then/else: ignored there, as validators do (o3385, o39097)
    for draft, passing, failing in (("draft-04", ['{"a":1}', '{"a":1,"b":2}', "{}"], ["1"]),
                                    ("draft-06", ['{"a":1}'], ["[]"]),
                                    ("draft-07", ['{"a":1,"b":2}', "{}"], ['{"a":1}', "1"])):
        schema = {"$schema": "http://json-schema.org/%s/schema#" % draft, "type": "object",
                  "if": {"required": ["a"]}, "then": {"required": ["b"]}}
        v = jsonschema.validators.validator_for(schema)(schema)
        assert all(v.is_valid(json.loads(x)) for x in passing) and not any(v.is_valid(json.loads(x)) for x in failing)
        check(schema, passing, failing)


def test_if_chains_over_one_member_expand_to_few_branches():
    """allOf of if/then on one member's values, without `required` (minecraft-recipe,
    typo3, ui5 in maskbench-dev): each if holds when the member is absent, so the
    expansion is 2^n branches unless the merge drops those that require the member and
    leave it no value, the negated consts' literals of other types, repeated anyOf lists
    and repeated branches. Was "allOf of anyOf lists expands to 128 branches"."""
    common = {"anyOf": [{"properties": {"group": {"type": "string"}}, "required": ["group"]},
                        {"properties": {"category": {"enum": ["misc", "food"]}}, "required": ["category"]}]}
    kinds = ["k%d" % i for i in range(8)]
    schema = {"type": "object", "properties": {"type": {"type": "string"}, "n": {"type": "integer"}},
              "allOf": [{"if": {"properties": {"type": {"const": k}}},
                         "then": dict(common, properties={"n": {"minimum": i}})} for i, k in enumerate(kinds)]}
    agreed(schema, ['{"type":"k3","n":3,"category":"food"}', '{"type":"k0","n":0,"group":"x"}',
                    '{"type":"other","n":-5}', '{"n":7,"group":"g"}', '{"type":"k7","n":9,"group":"g"}'],
           ['{"type":"k3","n":2,"group":"g"}', '{"n":6,"group":"g"}', '{"type":"k1","n":0,"group":"g"}',
            '{"type":5}', '{"type":"k2","n":2,"category":1}', '{"type":"k2","n":2}', '{"n":7}'])
    # a member both branches require, a $ref's const on one side and a oneOf's on the
    # other: disjoint only once the $ref is inlined (o17383; was "accepts no JSON value")
    def obj(t):
        return {"type": "object", "properties": {"type": {"const": t}}, "required": ["type"]}
    base = {"type": "object", "properties": {"annotation": {"type": "object"}}, "required": ["annotation"]}
    schema = {"definitions": {
        "base": base, "set": {"oneOf": [obj("s1"), obj("s2")]},
        "fn": {"type": "object", "properties": {"type": {"const": "fn"}, "args": {
            "type": "array", "items": {"oneOf": [obj("o"), {"$ref": "#/definitions/set"}]}}}, "required": ["type"]}},
        "oneOf": [{"allOf": [{"$ref": "#/definitions/base"},
                             {"properties": {"annotation": {"oneOf": [obj("d1"), obj("d2")]}}}]},
                  {"allOf": [{"$ref": "#/definitions/base"}, {"properties": {"annotation": {"$ref": "#/definitions/fn"}}}]}]}
    agreed(schema, ['{"annotation":{"type":"d1"}}', '{"annotation":{"type":"fn","args":[{"type":"s2"}]}}'],
           ['{"annotation":{"type":"s1"}}', '{"annotation":{"type":"fn","args":[{"type":"d1"}]}}', "{}"])


# ----------------------------------------------------------------- whitespace, JSON mode
def test_whitespace_modes():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    check(schema, ['{"a":[1,2]}'], ['{ "a":[1,2]}', '{"a": [1, 2]}'])
    check(schema, ['{"a":[1,2]}', '{ "a" : [ 1 ,\n2 ] }', '{\n\t"a":[1,2]    }', "{ }"],
          ['{     "a":[1]}', '{"a":[1,2]}\n'], whitespace="flexible")
    check(schema, ['{  "a":[1]}'], ['{   "a":[1]}'], whitespace="flexible", max_whitespace=2)
    with pytest.raises(CompileError, match="whitespace"):
        schema_to_gbnf(schema, whitespace="any")


def test_json_value_and_object_grammars():
    value = Matcher(parse_gbnf(json_value_gbnf())).fullmatch
    for s in ['{"a":[1,{"b":null}],"c":"\\u00e9"}', "[]", '"x"', "-0.5e3", "true"]:
        assert value(s)
    for s in ["{", "[1,]", "{'a':1}", "01"]:
        assert not value(s)
    obj = Matcher(parse_gbnf(json_object_gbnf(whitespace="flexible"))).fullmatch
    assert obj('{ "a" : [ 1 ] }') and obj("{}") and not obj("[]") and not obj('"x"')


# ----------------------------------------------------------------- errors and modes
@pytest.mark.parametrize("keyword, schema", [
    ("multipleOf", {"type": "number", "multipleOf": 0.25}),
    ("uniqueItems", {"type": "array", "uniqueItems": True}),
    ("contains", {"type": "array", "contains": {"type": "integer"}, "maxItems": 40}),
    ("propertyNames", {"type": "object", "propertyNames": {"format": "email"}}),
    ("if", {"if": {"uniqueItems": True}, "then": {"maxItems": 5}}),
    ("not", {"not": {"type": "array", "uniqueItems": True}}),
    ("unevaluatedProperties", {"type": "object", "unevaluatedProperties": False}),
])
def test_unsupported_keywords_name_keyword_and_location(keyword, schema):
    nested = {"type": "object", "properties": {"p": schema}}
    with pytest.raises(CompileError) as e:
        schema_to_gbnf(nested)
    assert keyword in str(e.value) and "#/properties/p/" + keyword in str(e.value)
    got = []
    schema_to_gbnf(nested, unsupported="warn", warn=got.append)
    assert got and all("ignored" in g for g in got) and any(keyword in g for g in got)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        schema_to_gbnf(nested, unsupported="warn")
    assert any(keyword in str(x.message) for x in w)


def test_annotations_are_ignored_silently():
    got = []
    schema_to_gbnf({"title": "t", "description": "d", "default": 1, "examples": [1], "$comment": "c",
                    "readOnly": True, "deprecated": True, "x-custom": 1, "type": "integer"}, warn=got.append)
    assert got == []


@pytest.mark.parametrize("schema, what", [
    ({"type": "foo"}, "type"),
    ({"type": "object", "required": "a"}, "required"),
    ({"$ref": "#/$defs/missing"}, "missing"),
    ({"$ref": "http://example.com/remote.json"}, "remote"),
    ({"type": "string", "pattern": "("}, "pattern"),
    ({"type": "string", "minLength": 3, "maxLength": 2}, "minLength"),
    ([1, 2], "object or a boolean"),
    ("{not json", "not valid JSON"),
])
def test_invalid_schemas(schema, what):
    with pytest.raises(CompileError, match=re.escape(what)):
        schema_to_gbnf(schema)


def test_schema_as_json_text_and_shared_rules():
    text = schema_to_gbnf(json.dumps({"type": "object", "properties": {
        "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "b": {"type": "object", "properties": {"x": {"type": "integer"}}}}}))
    rhs = [line.split(" ::= ", 1)[1] for line in text.splitlines()]
    assert sum(1 for r in rhs if '\\"x\\":' in r) == 1  # identical subschemas share one rule


# ----------------------------------------------------------------- regex translation against Python's re
PATTERNS = ["^a+b?$", "ab", "^(a|b-)*1$", "^[^a]{2,3}$", "^[a-b]\\d{0,2}$", "x|^y", "^(?:ab|a)(b|)$",
            '^["\\\\]+$', "^\\s\\S$", "^.{2}$", "^[\\w-]+$", "a{2,}", "^$", "^a*(-a+)*$"]


@settings(max_examples=40, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), lo=st.integers(0, 3), span=st.one_of(st.none(), st.integers(0, 4)),
       texts=st.lists(st.text(alphabet='ab-1xy "\\\n\t\u00e9', max_size=7), min_size=10, max_size=10))
def test_pattern_with_lengths_matches_python_re(pattern, lo, span, texts):
    hi = None if span is None else lo + span
    schema = {"type": "string", "pattern": pattern, "minLength": lo}
    if hi is not None:
        schema["maxLength"] = hi
    try:
        m = lang(schema)
    except CompileError as e:
        assert "accepts no JSON value" in str(e)
        return
    for t in texts + ["a", "ab", "aab", "b-1", "y", "x"]:
        expect = re.search(pattern.replace("$", "\\Z"), t, re.ASCII) is not None and lo <= len(t) and (hi is None or len(t) <= hi)
        if "." in pattern and "\n" in t:
            continue  # "." excludes line terminators in both; keep the table simple
        assert m(c(t)) == expect, (schema, t)
