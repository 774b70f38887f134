"""allOf: merge two subschemas into one whose instances are exactly those valid for both.

Works on schemas whose top-level `$ref` was already inlined by the caller. Keywords
merge pairwise (types intersect, bounds tighten, properties merge per key taking the
other side's additionalProperties / patternProperties into account, required unions,
anyOf lists multiply out). What cannot be merged exactly raises CompileError.
`FALSE` (the boolean schema false) marks an unsatisfiable result.
"""
from __future__ import annotations

import json
import re

from furca.errors import CompileError

from .difference import ALSO_PATTERNS

FALSE = False
MAX_ANYOF_PRODUCT = 64  # branches kept of an allOf of two anyOf lists
MAX_ANYOF_PAIRS = 1024  # pairs of branches merged to find them
ALL_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


# json.dumps with keyword arguments builds a JSONEncoder per call (Python code); one kept
_CANON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode


def canon(x) -> str:
    """x's JSON text as json.dumps(x, sort_keys=True, ensure_ascii=False, separators=(",",
    ":")) writes it."""
    return _CANON(x)


def json_equal(a, b) -> bool:
    """JSON equality (1 == 1.0, True != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def type_set(schema: dict):
    """The set of JSON types a schema's `type` (and `nullable`) allows; None = all."""
    t = schema.get("type")
    if t is None:
        return None
    ts = {t} if isinstance(t, str) else set(t)
    if schema.get("nullable") is True:
        ts.add("null")
    return ts


def intersect_types(a, b):
    """The types both of two type sets (None: every type) allow."""
    if a is None:
        return b
    if b is None:
        return a
    out = a & b
    if "integer" in a and "number" in b or "number" in a and "integer" in b:
        out.add("integer")
    return out


def normalize_bounds(s: dict) -> dict:
    """Draft-4 boolean exclusiveMinimum/Maximum -> numeric form (draft 6+)."""
    if isinstance(s.get("exclusiveMinimum"), bool) or isinstance(s.get("exclusiveMaximum"), bool):
        s = dict(s)
        for ex, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(s.get(ex), bool):
                if s.pop(ex) and bound in s:
                    s[ex] = s.pop(bound)
    return s


def normalize_schema(s, draft7: bool):
    """Draft-4 boolean bounds -> numeric; arrays in 2020-12 form: tuple-form `items` ->
    `prefixItems` + `items` (from additionalItems); draft 7 ignores `prefixItems`."""
    if not isinstance(s, dict):
        return s
    s = normalize_bounds(s)
    if "items" in s or "prefixItems" in s or "additionalItems" in s:
        s = dict(s)
        if draft7:
            s.pop("prefixItems", None)
        if isinstance(s.get("items"), list):
            s["prefixItems"] = s.pop("items")
            if "additionalItems" in s:
                s["items"] = s.pop("additionalItems")
        s.pop("additionalItems", None)
    return s


def merge(a, b, where: str):
    """A schema equivalent to allOf [a, b]; FALSE when nothing satisfies both."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return FALSE
    if "$ref" in a or "$ref" in b:
        # nested subschemas (properties, items, ...) keep their refs: defer the merge
        # to when that subschema is compiled (the caller inlines top-level refs)
        return {"allOf": [a, b]}
    a, b = normalize_bounds(a), normalize_bounds(b)
    out = dict(a)
    lists = []  # anyOf / oneOf on both sides: expanded last, after the checks that drop the merge
    for k, vb in b.items():
        if k not in out:
            out[k] = vb
            continue
        va = out[k]
        if k in ("anyOf", "oneOf"):
            lists.append((k, va, vb))
            continue
        if k not in ("properties", "anyOf", "oneOf") and (va is vb or canon(va) == canon(vb)):
            continue  # (properties are merged below: not serialised here, a whole subtree each)
        if k == "pattern" and isinstance(va, str) and isinstance(vb, str):
            also = list(out.get(ALSO_PATTERNS, []))  # the strings both patterns match (difference.py)
            out[ALSO_PATTERNS] = also + ([vb] if vb not in also else [])
            continue
        handler = _MERGERS.get(k)
        if handler is None:
            if k in ANNOTATION_LIKE or k not in _VALIDATION:
                continue  # annotations and unknown keywords validate nothing: either value
            raise CompileError("%s: allOf cannot merge two different %r values" % (where, k))
        out[k] = handler(va, vb, where)
    if "properties" in a or "properties" in b or "additionalProperties" in a or "additionalProperties" in b:
        _merge_object(out, a, b, where)
    if "prefixItems" in a or "prefixItems" in b:
        _merge_arrays(out, a, b, where)
    ts = intersect_types(type_set(a), type_set(b))
    if ts is not None:
        out.pop("nullable", None)
        if not ts:
            return FALSE
        out["type"] = sorted(ts)
    req = out.get("required")
    if isinstance(req, list) and any(out.get("properties", {}).get(r) is False for r in req):
        # a required member that no value may take (two parts' consts for it): no object
        # (if/then chains over one member's values expand to such branches)
        keep = set(type_set(out) or ALL_TYPES) - {"object"}
        if not keep:
            return FALSE
        out["type"] = sorted(keep)
    if "enum" in a and "enum" in b:
        vals = [x for x in a["enum"] if any(json_equal(x, y) for y in b["enum"])]
        out["enum"] = vals
    if "const" in out and "enum" in out:
        if not any(json_equal(out["const"], y) for y in out["enum"]):
            return FALSE
        del out["enum"]
    if "const" in a and "const" in b and not json_equal(a["const"], b["const"]):
        return FALSE
    if ts is not None and isinstance(out.get("enum"), list):
        # literals of the types the other part allows (integral numbers are numbers too)
        out["enum"] = [v for v in out["enum"] if literal_type(v) in ts or
                       literal_type(v) == "integer" and "number" in ts]
    if ts is not None and "const" in out and not (literal_type(out["const"]) in ts or
                                                  literal_type(out["const"]) == "integer" and "number" in ts):
        return FALSE
    if out.get("enum") == []:
        return FALSE
    for k, va, vb in lists:
        out[k] = _anyof(va, vb, where)
    if isinstance(out.get("anyOf"), list) and "type" in out:
        # anyOf branches of other types than the type beside them (a negation's anyOf
        # merged into a typed schema): dropped, and a single one left merged in
        ts = value_types(out)
        live = [x for x in out["anyOf"] if _may_be(x, ts)]
        if not live:
            return FALSE
        if len(live) == 1:
            del out["anyOf"]
            return merge(out, live[0], where)
        out["anyOf"] = live
    for lo_k, hi_k, t in _COUNT_BOUNDS:
        lo, hi = out.get(lo_k), out.get(hi_k)
        if is_number(lo) and is_number(hi) and lo > hi and not any(
                is_number(s.get(lo_k)) and is_number(s.get(hi_k)) and s[lo_k] > s[hi_k] for s in (a, b)):
            # the bounds of two parts leave no string (array, object): the other types stay
            # (one schema's own minLength > maxLength is an invalid schema: CompileError)
            keep = set(type_set(out) or ALL_TYPES) - {t}
            if not keep:
                return FALSE
            out["type"] = sorted(keep)
            del out[lo_k], out[hi_k]
    return out


_COUNT_BOUNDS = (("minLength", "maxLength", "string"), ("minItems", "maxItems", "array"),
                 ("minProperties", "maxProperties", "object"))


def value_types(s) -> set:
    """The JSON types schema s may accept, by its literals (enum/const) or `type` (all for
    neither); "integer" and "number" come together."""
    if s is True:
        return set(ALL_TYPES)
    if s is False:
        return set()
    lits = [s["const"]] if "const" in s else s.get("enum")
    ts = {literal_type(v) for v in lits} if isinstance(lits, list) else type_set(s)
    if ts is None:
        return set(ALL_TYPES)
    return ts | {"number"} if "integer" in ts else ts | {"integer"} if "number" in ts else ts


def _may_be(x, ts) -> bool:
    """Whether schema x may accept a value of one of the types ts (False: it cannot; a
    $ref's target is not read)."""
    return x is not False and (not isinstance(x, dict) or "$ref" in x or bool(value_types(x) & ts))


def literal_type(v) -> str:
    """The JSON type of a literal value (integral numbers "integer")."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or isinstance(v, float) and v.is_integer():
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _max(x, y, where):
    return max(x, y)


def _min(x, y, where):
    return min(x, y)


def _required(x, y, where):
    return list(x) + [k for k in y if k not in x]


def _same(x, y, where):
    if canon(x) != canon(y):
        raise CompileError("%s: allOf cannot intersect two different values (%s, %s)" % (where, canon(x)[:60], canon(y)[:60]))
    return x


def _anyof(x, y, where):
    """anyOf x and anyOf y: the anyOf of every pair merged, the pairs nothing satisfies
    dropped (if/then chains over one member's values leave few). At most
    MAX_ANYOF_PAIRS pairs are merged and MAX_ANYOF_PRODUCT branches kept."""
    if canon(x) == canon(y):
        return x  # A and A: A (if/then chains repeat one anyOf in several thens)
    if len(x) * len(y) > MAX_ANYOF_PAIRS:
        raise CompileError("%s: allOf of anyOf lists expands to %d branches (limit %d)"
                           % (where, len(x) * len(y), MAX_ANYOF_PAIRS))
    out, seen = [], set()
    for p in x:
        for q in y:
            m = merge(p, q, where)
            if m is not FALSE and (key := canon(m)) not in seen:
                seen.add(key)
                out.append(m)
                if len(out) > MAX_ANYOF_PRODUCT:
                    raise CompileError("%s: allOf of anyOf lists expands to over %d satisfiable branches (%d x %d)"
                                       % (where, MAX_ANYOF_PRODUCT, len(x), len(y)))
    return out or [False]


def _items(x, y, where):
    if isinstance(x, list) or isinstance(y, list):
        raise CompileError("%s: allOf cannot merge tuple-form items" % where)
    return merge(x, y, where)


def _merge_arrays(out, a, b, where):
    pa, pb = a.get("prefixItems", []), b.get("prefixItems", [])
    ia, ib = a.get("items", True), b.get("items", True)
    n = max(len(pa), len(pb))
    out["prefixItems"] = [merge(pa[i] if i < len(pa) else ia, pb[i] if i < len(pb) else ib, "%s/prefixItems/%d" % (where, i))
                          for i in range(n)]
    if "items" in a or "items" in b:
        out["items"] = merge(ia, ib, where + "/items")


def _pattern_props(x, y, where):
    out = dict(x)
    for k, v in y.items():
        out[k] = merge(out[k], v, where) if k in out else v
    return out


def _common_multiple(x, y, where: str):
    """multipleOf x and multipleOf y: multipleOf their least common multiple, exact over
    the decimals written (4 and 6 -> 12; 0.25 and 0.1 -> 0.5)."""
    from fractions import Fraction
    from math import gcd, lcm

    fx, fy = (Fraction(repr(v)) if is_number(v) and v > 0 else None for v in (x, y))
    if fx is None or fy is None:
        raise CompileError("%s: multipleOf must be a number > 0, got %r and %r" % (where, x, y))
    m = Fraction(lcm(fx.numerator, fy.numerator), gcd(fx.denominator, fy.denominator))
    if m.denominator == 1:
        return int(m)
    if Fraction(repr(float(m))) != m:
        raise CompileError("%s: allOf cannot merge multipleOf %r and %r (their least common multiple %s "
                           "is no short decimal)" % (where, x, y, m))
    return float(m)


_MERGERS = {
    "minimum": _max, "exclusiveMinimum": _max, "minLength": _max, "minItems": _max, "minProperties": _max,
    "maximum": _min, "exclusiveMaximum": _min, "maxLength": _min, "maxItems": _min, "maxProperties": _min,
    "required": _required, "items": _items, "prefixItems": lambda x, y, w: x,
    "anyOf": _anyof, "oneOf": _anyof, "patternProperties": _pattern_props,
    "type": lambda x, y, w: x, "nullable": lambda x, y, w: x and y,
    "enum": lambda x, y, w: x, "const": lambda x, y, w: x,
    "properties": lambda x, y, w: x, "additionalProperties": lambda x, y, w: x,
    "pattern": _same, "format": _same, "uniqueItems": lambda x, y, w: x or y, "multipleOf": _common_multiple,
    "$defs": lambda x, y, w: x, "definitions": lambda x, y, w: x,
    "x-furca-not-strings": lambda x, y, w: list(x) + [v for v in y if v not in x],
    "x-furca-not-patterns": lambda x, y, w: list(x) + [v for v in y if v not in x],
    "x-furca-also-patterns": lambda x, y, w: list(x) + [v for v in y if v not in x],
    "x-furca-some-member": lambda x, y, w: list(x) + [v for v in y if canon(v) not in {canon(u) for u in x}],
    "allOf": lambda x, y, w: list(x) + list(y),
    "not": lambda x, y, w: {"anyOf": [x, y]},  # not x and not y == not (x or y)
    "propertyNames": lambda x, y, w: merge(x, y, w),  # names valid under both
}
# Every keyword that validates (JSON Schema drafts 4 to 2020-12, OpenAPI's nullable,
# furca's internal ones): two different values of another keyword merge to either.
_VALIDATION = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "contains", "items", "prefixItems", "additionalItems", "unevaluatedItems", "maxProperties",
    "minProperties", "required", "properties", "patternProperties", "additionalProperties", "propertyNames",
    "unevaluatedProperties", "dependentRequired", "dependentSchemas", "dependencies", "allOf", "anyOf", "oneOf",
    "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef", "contentEncoding", "contentMediaType",
    "contentSchema", "nullable", "x-furca-not-strings", "x-furca-not-patterns", "x-furca-also-patterns",
    "x-furca-some-member",
}
ANNOTATION_LIKE = {"title", "description", "default", "examples", "example", "$comment", "$schema", "$id", "id",
                    "readOnly", "writeOnly", "deprecated", "$anchor", "discriminator", "markdownDescription"}


def _pattern_match(pattern, name):
    try:
        return re.search(pattern, name) is not None
    except re.error:
        raise CompileError("cannot evaluate patternProperties pattern %r" % pattern)


def constraint_for(side: dict, key: str, where: str):
    """The schema `side` imposes on property `key` (None = none)."""
    props = side.get("properties", {})
    if key in props:
        return props[key]
    pats = [v for p, v in side.get("patternProperties", {}).items() if _pattern_match(p, key)]
    if pats:
        out = pats[0]
        for v in pats[1:]:
            out = merge(out, v, where)
        return out
    return side.get("additionalProperties")


def _closed(side: dict) -> bool:
    """Does `side`'s additionalProperties constrain undeclared members? (true / {} do not)"""
    return "additionalProperties" in side and side["additionalProperties"] not in (True, {})


def _patterns_under_closed(out: dict, patterned: dict, closed: dict, where: str) -> None:
    """allOf of a side with patternProperties and a closed side without: a name the
    closed side does not declare takes its additionalProperties, so each pattern's schema
    is merged with it (names no pattern matches take both additionalProperties, merged
    by the caller). Exact unless a name the closed side declares matches a pattern: the
    merged pattern schema would then hold that name to the closed side's
    additionalProperties, which its own `properties` entry replaces there."""
    extra = closed["additionalProperties"]
    pats = patterned["patternProperties"]
    if any(_pattern_match(p, k) for p in pats for k in closed.get("properties", {})):
        raise CompileError("%s: allOf cannot merge patternProperties with another additionalProperties (a pattern "
                           "matches a member the other part declares)" % where)
    out["patternProperties"] = {p: merge(v, extra, "%s/patternProperties/%s" % (where, p)) for p, v in pats.items()}


def _merge_object(out: dict, a: dict, b: dict, where: str):
    if ("patternProperties" in a and _closed(b)) or ("patternProperties" in b and _closed(a)):
        if "patternProperties" in a and "patternProperties" in b:
            if canon(a["patternProperties"]) != canon(b["patternProperties"]):
                raise CompileError("%s: allOf cannot merge patternProperties with another additionalProperties"
                                   % where)
        else:
            _patterns_under_closed(out, *((a, b) if "patternProperties" in a else (b, a)), where)
    names = list(a.get("properties", {})) + [k for k in b.get("properties", {}) if k not in a.get("properties", {})]
    props = {}
    for k in names:
        ca, cb = constraint_for(a, k, where), constraint_for(b, k, where)
        if ca is None:
            props[k] = cb
        elif cb is None:
            props[k] = ca
        else:
            props[k] = merge(ca, cb, "%s/properties/%s" % (where, k))
    if props:
        out["properties"] = props
    ad_a, ad_b = a.get("additionalProperties"), b.get("additionalProperties")
    if ad_a is not None and ad_b is not None:
        out["additionalProperties"] = merge(ad_a, ad_b, where + "/additionalProperties")
    elif ad_a is not None or ad_b is not None:
        out["additionalProperties"] = ad_a if ad_a is not None else ad_b
