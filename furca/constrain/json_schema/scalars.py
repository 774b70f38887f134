"""Strings, integers, numbers and enum/const literals."""
from __future__ import annotations

import json
import math
from decimal import Decimal

from furca.errors import CompileError

from .formats import format_body, format_grammar, format_rules, format_text
from .keys import key_not_in
from .difference import ALSO_PATTERNS, NOT_PATTERNS, ONE_OF_PATTERNS, difference
from .logic import NOT_STRINGS
from .merge import ALL_TYPES, literal_type
from .grammar import NOTHING, alt, chars, cls, complement, counted, lit, normalize, rep, seq
from .numeric import NUMBER_UNBOUNDED, int_range, number_range
from .encoding import HEX
from .lengths import bounded_chars
from .prefix import prefixed
from .multiples import MAX_LISTED, integer_multiples
from .regex import one_of_patterns, pattern_chars, pattern_grammar, string_minus

# One character of JSON string content: unescaped (not ", \ or a control) or an escape.
STRING_CHAR = alt(cls(complement(normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))),
                  seq(lit("\\"), alt(cls(chars('"\\/bfnrt')), seq(lit("u"), rep(HEX, 4, 4)))))
STRING = seq(lit('"'), rep(STRING_CHAR, 0, None), lit('"'))
NUMBER = NUMBER_UNBOUNDED
_HUGE = Decimal("1e300")  # bounds beyond this are treated as no bound


def _nonneg_int(schema, key, where):
    v = schema.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (isinstance(v, float) and not v.is_integer()):
        raise CompileError("%s/%s: must be a non-negative integer, got %r" % (where, key, v))
    return int(v)


FORMAT_POSITIONS = 2000  # a format's automaton positions in its product with a pattern


def _format_and_pattern(content, fmt, pattern, grammar, where):
    """JSON-encoded IR of the strings of format `fmt` (its grammar `content`) that
    `pattern` matches: the product of their automata (difference.py, at most its 3,000
    states; uri is ~710 positions, uri-reference ~1,420)."""
    try:
        return difference(content, [], grammar, where, also=[pattern_chars(pattern, where + "/pattern")],
                          node_positions=FORMAT_POSITIONS)
    except CompileError as e:
        raise CompileError("%s: format %r together with pattern cannot be enforced (%s)" % (where, fmt, e)) from None


def string_grammar(c, schema, where):
    ones = schema.get(ONE_OF_PATTERNS)
    if ones is not None:  # only with type string and annotations (exclusive.one_product)
        return seq(lit('"'), c.cached(("one-of-patterns", tuple(ones)),
                                      lambda: one_of_patterns(ones, c.g, where)), lit('"'))
    min_len = _nonneg_int(schema, "minLength", where) or 0
    max_len = _nonneg_int(schema, "maxLength", where)
    if max_len is not None and max_len < min_len:
        raise CompileError("%s: minLength %d > maxLength %d" % (where, min_len, max_len))
    fmt = schema.get("format")
    content = None
    if isinstance(fmt, str):
        try:
            content = format_grammar(fmt)
        except CompileError as e:
            c.unsupported("format", where, str(e))
    pattern = schema.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise CompileError("%s/pattern: must be a string" % where)
    also = [p for p in schema.get(ALSO_PATTERNS) or () if isinstance(p, str)]
    if also and (pattern is None or content is not None):
        c.unsupported("pattern", where, "several patterns with a format" if content is not None else
                      "patterns of allOf without one of their own")
        also = []
    if content is not None and pattern is not None:
        both = c.cached(("format-prefix", fmt, pattern), lambda: prefixed(content, pattern, where + "/pattern"))
        if both is None:
            if min_len or max_len is not None or any(schema.get(k) for k in (NOT_STRINGS, NOT_PATTERNS)) or also:
                raise CompileError("%s: format %r together with pattern and other string keywords cannot be "
                                   "enforced" % (where, fmt))
            return seq(lit('"'), c.cached(("format-and-pattern", fmt, pattern),
                                          lambda: _format_and_pattern(content, fmt, pattern, c.g, where)), lit('"'))
        content, pattern = both, None
        if content == NOTHING:
            return NOTHING
    excluded = [v for v in schema.get(NOT_STRINGS) or () if isinstance(v, str)]
    excluded_patterns = list(schema.get(NOT_PATTERNS) or ())
    plain = pattern is None and content is None and not min_len and max_len is None
    if NOT_STRINGS in schema and plain and not excluded_patterns:
        return key_not_in(c, excluded)  # any string but these: the key tries' form
    if excluded or excluded_patterns or also:
        if content is not None:
            c.unsupported("not" if excluded else "oneOf", where, "strings excluded from a format")
        else:
            return seq(lit('"'), c.cached(
                ("string-minus", pattern, min_len, max_len, tuple(excluded), tuple(excluded_patterns), tuple(also)),
                lambda: string_minus(pattern, min_len, max_len, excluded, excluded_patterns, c.g, where, also)),
                lit('"'))
    if pattern is not None:
        return seq(lit('"'), c.cached(("pattern", pattern, min_len, max_len),
                                      lambda: pattern_grammar(pattern, where + "/pattern", min_len, max_len, c.g)),
                   lit('"'))
    if content is not None:  # decoded characters: written escaped (the regex format's `"` and `\\`)
        if content is format_grammar(fmt) and min_len <= 1 and max_len is None:  # the format alone
            rules = c.cached(("format-rules", fmt, min_len), lambda: format_rules(fmt, c.g, min_len == 1))
            if rules is not None:
                return seq(lit('"'), rules, lit('"'))
            if not min_len:
                return _format_rule(c, fmt)
        content = c.cached(("format", fmt, schema.get("pattern"), min_len, max_len),
                           lambda: bounded_chars(content, min_len, max_len, c.g, where, "format %r" % fmt))
        return seq(lit('"'), content, lit('"'))
    # counted whatever the bounds: its abstract masks then come from tables (string_counters.py)
    return seq(lit('"'), counted(STRING_CHAR, min_len, max_len), lit('"'))


def _format_rule(c, fmt):
    """A string of format `fmt` alone: a call of the format's lasting rule (one body per
    process, formats.format_body: its NFA nodes laid out once, its states' masks shared
    by every grammar of the process), or the quoted format inline where it has none."""
    key = ("format-rule", fmt)
    if key not in c.memo:
        body = format_body(fmt)
        if body is None:
            c.memo[key] = seq(lit('"'), format_text(fmt), lit('"'))
        else:
            c.memo[key] = c.lasting_rule(c.g.new_name("format-" + fmt), body)
    return c.memo[key]


def _bound(schema, key, where):
    v = schema.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CompileError("%s/%s: must be a number, got %r" % (where, key, v))
    if isinstance(v, float) and not math.isfinite(v):
        return None
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    return None if abs(d) >= _HUGE else d


def bounds(schema, where):
    """(lo, lo_strict, hi, hi_strict) from minimum/exclusiveMinimum/maximum/exclusiveMaximum."""
    lo, lo_strict, hi, hi_strict = _bound(schema, "minimum", where), False, _bound(schema, "maximum", where), False
    ex_lo, ex_hi = _bound(schema, "exclusiveMinimum", where), _bound(schema, "exclusiveMaximum", where)
    if ex_lo is not None and (lo is None or ex_lo >= lo):
        lo, lo_strict = ex_lo, True
    if ex_hi is not None and (hi is None or ex_hi <= hi):
        hi, hi_strict = ex_hi, True
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        raise CompileError("%s: the bounds admit no number (minimum %s%s, maximum %s%s)"
                           % (where, lo, " exclusive" if lo_strict else "", hi, " exclusive" if hi_strict else ""))
    return lo, lo_strict, hi, hi_strict


def _multiple_of(schema, where):
    """multipleOf as a Decimal (normalized), None when absent."""
    m = schema.get("multipleOf")
    if m is None:
        return None
    if isinstance(m, bool) or not isinstance(m, (int, float)) or m <= 0:
        raise CompileError("%s/multipleOf: must be a number > 0, got %r" % (where, m))
    return (Decimal(repr(m)) if isinstance(m, float) else Decimal(m)).normalize()


def _integer_step(schema, where):
    """multipleOf as an int >= 2 when it is one, else None."""
    d = _multiple_of(schema, where)
    return int(d) if d is not None and d == d.to_integral_value() and d >= 2 else None


def decimal_places(c, schema, where):
    """multipleOf 10^-k (k >= 0) -> k; None when absent; unsupported otherwise."""
    d = _multiple_of(schema, where)
    if d is None:
        return None
    _, digits, exp = d.as_tuple()
    if digits == (1,) and exp <= 0:
        return -exp
    c.unsupported("multipleOf", where, "only powers of ten <= 1 (0.01, 1, ...), integers (unbounded, from 0, "
                  "or at most %d multiples between bounds) and other fractions between bounds (at most %d "
                  "multiples) are enforced" % (MAX_LISTED, MAX_LISTED))
    return None


def _integer_bounds(schema, where):
    lo, lo_strict, hi, hi_strict = bounds(schema, where)
    ilo = ihi = None
    if lo is not None:
        ilo = int(lo.to_integral_value(rounding="ROUND_FLOOR")) + 1 if lo_strict else int(lo.to_integral_value(rounding="ROUND_CEILING"))
    if hi is not None:
        ihi = int(hi.to_integral_value(rounding="ROUND_CEILING")) - 1 if hi_strict else int(hi.to_integral_value(rounding="ROUND_FLOOR"))
    return ilo, ihi


def _stepped(c, schema, where):
    """The grammar of an integer multipleOf (integer_multiples), or None."""
    k = _integer_step(schema, where)
    if k is None:
        return None
    ilo, ihi = _integer_bounds(schema, where)
    return c.cached(("multiples", k, ilo, ihi), lambda: integer_multiples(k, ilo, ihi, c.g))


def integer_grammar(c, schema, where):
    stepped = _stepped(c, schema, where)
    if stepped is not None:
        return stepped
    decimal_places(c, schema, where)  # every integer is a multiple of 10^-k
    ilo, ihi = _integer_bounds(schema, where)
    if ilo is not None and ihi is not None and ilo > ihi:
        return NOTHING
    return int_range(ilo, ihi)


def _listed_multiples(schema, where):
    """A fractional multipleOf that is no power of ten (0.25) between two bounds: its
    multiples listed (at most MAX_LISTED), each in its shortest decimal spelling with
    any trailing zeros ("2.5", "2.50"; "3", "3.0"), or None."""
    d = _multiple_of(schema, where)
    if d is None or d == d.to_integral_value() or d.as_tuple().digits == (1,):
        return None
    lo, lo_strict, hi, hi_strict = bounds(schema, where)
    if lo is None or hi is None:
        return None
    first, last = (lo / d).to_integral_value(rounding="ROUND_CEILING"), (hi / d).to_integral_value(rounding="ROUND_FLOOR")
    first += 1 if lo_strict and first * d == lo else 0
    last -= 1 if hi_strict and last * d == hi else 0
    if last - first + 1 > MAX_LISTED:
        return None
    spellings = []
    for k in range(int(first), int(last) + 1):
        text = format((k * d).normalize(), "f")
        text = "0" if text == "-0" else text
        zeros = rep(lit("0"), 0, None)
        spellings.append(seq(lit(text), zeros) if "." in text else alt(lit(text), seq(lit(text + ".0"), zeros)))
    return alt(*spellings)


def number_grammar(c, schema, where):
    stepped = _stepped(c, schema, where)  # integral multiples, written as integers
    if stepped is not None:
        return stepped
    listed = _listed_multiples(schema, where)
    if listed is not None:
        return listed
    room = decimal_places(c, schema, where)
    lo, lo_strict, hi, hi_strict = bounds(schema, where)
    if lo is None and hi is None and room is None:
        return NUMBER
    return number_range(lo, lo_strict, hi, hi_strict, room)


# json.dumps with keyword arguments builds a JSONEncoder per call (~2 µs; a property
# name is a literal: 421 in a Kubernetes schema); the encoder holds no state between calls
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
# what that encoder's (Python) encode calls for a str: C, a frame fewer for the most common
# literal, a property name (a process forked after set-up copies the pages of each Python
# function its compile runs)
_ENCODE_STR = json.encoder.encode_basestring


def literal(value) -> str:
    """value's JSON text as json.dumps(value, ensure_ascii=False, separators=(",", ":"),
    allow_nan=False) writes it."""
    return _ENCODE_STR(value) if type(value) is str else _ENCODE(value)


def enum_values(c, schema, where):
    if "const" in schema:
        values = [schema["const"]]
    else:
        values = schema["enum"]
        if not isinstance(values, list):
            raise CompileError("%s/enum: must be an array" % where)
    check = literal_check(c, schema, where)
    excluded = schema.get(NOT_STRINGS, [])
    return literals([v for v in values if check(v) and not (isinstance(v, str) and v in excluded)], where, check)


def literals(values, where, check=None):
    """The JSON texts of `values` (integral numbers also as 1 and 1.0, the second where
    check(1.0) allows it: draft-04's `integer` does not); NOTHING for []."""
    keep = []
    for v in values:
        try:
            keep.append(lit(literal(v)))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() \
                    and abs(v) < 2 ** 53:
                keep.append(lit(str(int(v))))  # 1 and 1.0 are the same JSON number
                if check is None or check(float(v)):
                    keep.append(lit(str(int(v)) + ".0"))
        except ValueError:
            raise CompileError("%s: enum value %r is not JSON" % (where, v))
    return alt(*keep) if keep else NOTHING


# keywords that never make a value invalid (annotations)
_ANNOTATIONS = frozenset(("title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "$id", "id", "$schema"))


def _type_check(types, draft4):
    """A check of a JSON value against `type` (a name or a list of names) as jsonschema's
    type checkers decide it, from the value's own type (merge.literal_type: a boolean is
    no number, an integral float is an integer) except that draft 4's integer is no
    float; None where `types` is not such a name or list (jsonschema decides then, or
    raises its error). No type: every value."""
    if types is None:
        return lambda v: True
    names = [types] if isinstance(types, str) else types
    if not isinstance(names, list) or not all(isinstance(t, str) and t in ALL_TYPES for t in names):
        return None
    allowed = set(names) | ({"integer"} if "number" in names else set())
    floats_integers = not draft4 or "number" in allowed

    def check(v):
        t = literal_type(v)
        return t in allowed and (floats_integers or t != "integer" or not isinstance(v, float))
    return check


def literal_check(c, schema, where):
    """Does a literal satisfy the rest of `schema`? (jsonschema, refs resolved against the
    root.) A rest of `type` alone, the common `{"type": "string", "enum": [...]}`, is
    checked here (_type_check): 132 of the 500 sample's schemas made a jsonschema
    validator in their compile for it, and in a process forked per schema, as the shared
    harness runs them, its code and objects cost them 126 page faults and 7% of their
    time to first mask (paired median; bench/results/constrain.md, session 42)."""
    rest = {k: v for k, v in schema.items() if k not in ("enum", "const", NOT_STRINGS, ALSO_PATTERNS)}
    if schema.get(ALSO_PATTERNS):  # merge.py's internal keyword, as jsonschema reads it
        rest["allOf"] = list(rest.get("allOf", [])) + [{"pattern": p} for p in schema[ALSO_PATTERNS]]
    if not rest:
        return lambda v: True
    if rest.keys() - _ANNOTATIONS <= {"type"}:
        quick = _type_check(rest.get("type"), c.draft4)
        if quick is not None:
            return quick
    import jsonschema

    cls_ = jsonschema.Draft4Validator if c.draft4 else \
        jsonschema.Draft7Validator if c.draft7 else jsonschema.Draft202012Validator
    root = c.root if isinstance(c.root, dict) else {}
    if "$ref" in json.dumps(rest):
        try:
            import referencing
            from referencing.jsonschema import DRAFT4, DRAFT7, DRAFT202012
            spec = DRAFT4 if c.draft4 else DRAFT7 if c.draft7 else DRAFT202012
            res = referencing.Resource(contents=root, specification=spec)
            reg = referencing.Registry().with_resource("urn:furca-root", res)
            # refs in `rest` resolve against the document's root, not against `rest`
            validator = cls_(dict(rest), registry=reg, format_checker=cls_.FORMAT_CHECKER,
                             _resolver=reg.resolver(base_uri="urn:furca-root"))
        except Exception:
            validator = None
    else:
        validator = cls_(rest, format_checker=cls_.FORMAT_CHECKER)

    def check(v):
        if validator is None:
            return True
        try:
            return validator.is_valid(v)
        except Exception:
            return True  # cannot tell: keep the literal (the enum itself still bounds it)
    return check
