"""propertyNames: the names an object's members may have.

`property_names` reads the keyword's schema (after its `$ref`s) into a `Names`: decoded-
character IR nodes a name must match, all of them (containers.py intersects them with
each patternProperties pattern and subtracts the declared names through
difference.py), and a predicate for the declared names. The forms enforced exactly:
`enum` / `const` (string values; `anyOf` / `oneOf` of such lists: their union, a name in
several oneOf lists left out), `pattern`, `minLength` / `maxLength`, `type: string`,
`false` (no member at all), a schema of other types only (no name), and `anyOf` of
those forms (`oneOf`: the names exactly one part allows), and the internal keywords of negations
(`x-furca-not-strings`, `x-furca-not-patterns`: names other than these, matching none
of those; logic.negate writes them for "some member named otherwise"). Anything else
(a `format`, a `not`, ...) is `unsupported("propertyNames")`.
"""
from __future__ import annotations

import re

from furca.errors import CompileError

from .grammar import alt, rep
from .difference import NOT_PATTERNS, both, either, negation
from .logic import NOT_STRINGS
from .merge import json_equal
from .regex import ANY_CHAR, literal_chars, pattern_chars

_ANNOTATIONS = {"title", "description", "$comment", "examples", "default"}
MAX_ONE_OF = 4  # parts of a oneOf of names (each part's names less the others')
_STRING_KEYS = {"type", "pattern", "minLength", "maxLength", NOT_STRINGS, NOT_PATTERNS} | _ANNOTATIONS


class Names:
    """The allowed names: `nodes` (decoded-char IR, all must match; None: no name at
    all) and `ok(name)`; `key` tells two rules apart in the compiler's cache."""

    __slots__ = ("nodes", "ok", "key")

    def __init__(self, nodes, ok, key):
        self.nodes, self.ok, self.key = nodes, ok, key


NO_NAME = Names(None, lambda name: False, "false")  # propertyNames: false


def property_names(c, schema, where):
    """The Names of a propertyNames schema, or None when it allows every name."""
    for _ in range(32):
        if isinstance(schema, dict) and "$ref" in schema and all(k == "$ref" or k in _ANNOTATIONS for k in schema):
            schema = c.resolve_for_merge(schema, where)
        else:
            break
    if schema is True or schema == {}:
        return None
    if schema is False:
        return NO_NAME
    if not isinstance(schema, dict):
        raise CompileError("%s: must be a schema" % where)
    types = schema.get("type", "string")
    if "string" not in (types if isinstance(types, list) else [types]):
        return NO_NAME  # names are strings: a schema of other types allows none
    finite = _finite_names(c, schema, where)
    if finite is not None:
        names = sorted(set(finite))
        if not names:
            return NO_NAME
        return Names([alt(*(literal_chars(n) for n in names))], set(names).__contains__, ("names", tuple(names)))
    for kw in ("anyOf", "oneOf"):
        if kw in schema and all(k in (kw, "type") or k in _ANNOTATIONS for k in schema):
            union = _union(c, schema[kw], kw, "%s/%s" % (where, kw))
            if union is not None:
                return union
    if not all(k in _STRING_KEYS for k in schema):
        c.unsupported("propertyNames", where.removesuffix("/propertyNames"), "only enum/const, pattern, length bounds and unions of them are enforced")
        return None
    nodes, checks = [], []
    pattern = schema.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            raise CompileError("%s/pattern: must be a string" % where)
        nodes.append(pattern_chars(pattern, where + "/pattern"))
        rx = re.compile(pattern)
        checks.append(lambda n: rx.search(n) is not None)
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    for k, v in (("minLength", lo), ("maxLength", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise CompileError("%s/%s: must be a non-negative integer" % (where, k))
    if lo or hi is not None:
        nodes.append(rep(ANY_CHAR, lo, hi))
        checks.append(lambda n: len(n) >= lo and (hi is None or len(n) <= hi))
    others = [v for v in schema.get(NOT_STRINGS) or () if isinstance(v, str)]
    if others:
        nodes.append(negation(alt(*(literal_chars(n) for n in others))))
        checks.append(lambda n: n not in others)
    missed = [p for p in schema.get(NOT_PATTERNS) or () if isinstance(p, str)]
    if missed:
        nodes.append(negation(either(*(pattern_chars(p, where + "/pattern") for p in missed))))
        rxs = [re.compile(p) for p in missed]
        checks.append(lambda n: not any(rx.search(n) for rx in rxs))
    if not nodes:
        return None
    return Names(nodes, lambda n: all(f(n) for f in checks),
                 ("strings", pattern, lo, hi, tuple(others), tuple(missed)))


def _union(c, parts, kw, where):
    """Names of anyOf / oneOf `parts` (for oneOf, the names exactly one part allows:
    each part's less the others', up to MAX_ONE_OF parts), else None."""
    if not isinstance(parts, list):
        return None
    got = [property_names(c, p, "%s/%d" % (where, i)) for i, p in enumerate(parts)]
    if any(g is None for g in got):
        return None  # a part allows every name
    some = [g for g in got if g.nodes is not None]
    if not some:
        return NO_NAME
    nodes = [both(*g.nodes) for g in some]
    if kw == "oneOf" and len(some) > 1:  # the names of exactly one part
        if len(some) > MAX_ONE_OF:
            return None
        exactly = [both(x, negation(either(*(y for j, y in enumerate(nodes) if j != i)))) for i, x in enumerate(nodes)]
        return Names([either(*exactly)], lambda n: sum(1 for g in some if g.ok(n)) == 1,
                     ("one-of", tuple(g.key for g in some)))
    return Names([either(*nodes)], lambda n: any(g.ok(n) for g in some),
                 ("union", tuple(g.key for g in some)))


def _finite_names(c, schema, where):
    """The string names an enum/const propertyNames allows (anyOf / oneOf of them), or
    None when the schema is not of that form."""
    if "enum" in schema or "const" in schema:
        if not all(k in ("enum", "const", "type") or k in _ANNOTATIONS for k in schema):
            return None
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise CompileError("%s/enum: must be an array" % where)
        if "const" in schema and "enum" in schema:
            values = [v for v in values if any(json_equal(v, w) for w in schema["enum"])]
        return [v for v in values if isinstance(v, str)]
    for kw in ("anyOf", "oneOf"):
        if kw in schema and all(k == kw or k == "type" or k in _ANNOTATIONS for k in schema):
            parts = schema[kw]
            if not isinstance(parts, list):
                return None
            lists = []
            for i, p in enumerate(parts):
                if isinstance(p, dict) and "$ref" in p:
                    p = c.resolve_for_merge(p, "%s/%s/%d" % (where, kw, i))
                names = _finite_names(c, p, "%s/%s/%d" % (where, kw, i)) if isinstance(p, dict) else None
                if names is None:
                    return None
                lists.append(set(names))
            if kw == "anyOf":
                return [n for s in lists for n in s]
            return [n for i, s in enumerate(lists) for n in s if not any(n in t for j, t in enumerate(lists) if j != i)]
    return None
