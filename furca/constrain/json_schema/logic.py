"""Rewrites `not`, `if`/`then`/`else` and the dependency keywords into allOf/anyOf of
schemas furca enforces, when an exact rewrite exists.

    dependentRequired {a: [b, c]}     -> anyOf [a absent, required [a, b, c]]
    dependentSchemas / dependencies   -> anyOf [a absent, required [a] and the schema]
    if I then T else E                -> anyOf [I and T, not(I) and E]
    not S                             -> complement of S, for S built from: booleans, type,
                                         required, const/enum (numbers: the open
                                         intervals between them, integer ranges
                                         under `type: integer`), numeric bounds,
                                         length, item and member count bounds,
                                         pattern, properties, patternProperties,
                                         additionalProperties, propertyNames,
                                         items and contains (each the other's
                                         complement), allOf, anyOf, oneOf (none or
                                         two of them), $ref (inlined by the
                                         compiler first) and `{}`

A schema of several independent keyword groups is the allOf of its groups, so its
complement is the anyOf of theirs: not {type: string, minLength: 5} is "not a string, or
a string shorter than 5" (each group alone constrains only its own type: minLength
holds for every non-string).

"a absent" is `properties: {a: false}`. `x-furca-not-strings` is an internal keyword:
strings other than the listed ones (other types unconstrained). So is
`x-furca-some-member` ([{names, value}]: objects with, for each entry, a member whose
name the `names` schema (a propertyNames schema) and whose value `value` accepts;
witnesses.py builds it): the complement of patternProperties, additionalProperties and
propertyNames (some member with a name they cover and a value they reject). `negate`
returns None when it cannot complement a schema exactly; the caller then reports the
keyword.
"""
from __future__ import annotations

from furca.errors import CompileError

from .difference import NOT_PATTERNS
from .merge import ALL_TYPES, FALSE, is_number, type_set

NOT_STRINGS = "x-furca-not-strings"
SOME_MEMBER = "x-furca-some-member"
# a numeric bound and the bound its negation keeps (draft 6+: numeric exclusive bounds)
_BOUND_NEGATION = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
                   "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}
MAX_ONE_OF_NEGATED = 6  # branches of a negated oneOf (its complement has a part per pair)
_OBJECT_KEYS = {"properties", "required", "additionalProperties", "patternProperties"}
# a count bound -> (the type it constrains, the bound its negation keeps, the step across)
_COUNT_NEGATION = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
                   "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
                   "minProperties": ("object", "maxProperties", -1),
                   "maxProperties": ("object", "minProperties", 1)}
# keywords whose meaning does not depend on the others': negated group by group
_KEY_GROUPS = [frozenset(g) for g in (
    {"type"}, {"const", "enum"}, set(_BOUND_NEGATION), {"pattern"}, _OBJECT_KEYS, {"allOf"},
    {"anyOf"}, {"oneOf"}, {"not"}, {"items"}, {"contains"}, {"propertyNames"},
    *({k} for k in _COUNT_NEGATION))]


def absent(name: str, base: dict) -> dict:
    """Objects without member `name` (keeps 'no properties declared: any members')."""
    out = {"properties": {name: False}}
    if not any(k in base for k in ("properties", "patternProperties", "additionalProperties")):
        out["additionalProperties"] = True
    return out


def dependencies(schema: dict):
    """allOf parts replacing dependencies / dependentRequired / dependentSchemas."""
    parts = []
    for kw in ("dependencies", "dependentRequired", "dependentSchemas"):
        deps = schema.get(kw)
        if not isinstance(deps, dict):
            continue
        for name, dep in deps.items():
            if isinstance(dep, list):
                present = {"required": [name] + [d for d in dep if d != name]}
            else:
                present = {"allOf": [{"required": [name]}, dep]}
            parts.append({"anyOf": [absent(name, schema), present]})
    return parts


def conditional(schema: dict):
    """allOf part replacing if/then/else, or None when `if` cannot be negated."""
    cond = schema["if"]
    then, els = schema.get("then", True), schema.get("else", True)
    neg = negate(cond, schema)
    if neg is None:
        return None
    return {"anyOf": [{"allOf": [cond, then]}, {"allOf": [neg, els]}]}


def merged_branches(part: dict, resolve) -> dict:
    """conditional's anyOf [{allOf [if, then]}, {allOf [not if, else]}] with each branch
    merged now where it merges (resolve: the compiler's resolve_for_merge; else left for
    later): a chain of ifs on one member's values then expands to branches whose
    conflicts merge() sees and drops (`required` type with two consts for it), instead of
    2^n unmerged allOfs."""
    branches = []
    for b in part["anyOf"]:
        try:
            b = resolve(b)
        except CompileError:
            pass
        if b is not FALSE:
            branches.append(b)
    return {"anyOf": branches or [False]}


def negate(s, base=None):
    """A schema accepting exactly the instances `s` rejects, or None."""
    base = base if isinstance(base, dict) else {}
    if s is True or s == {}:
        return False
    if s is False:
        return True
    if not isinstance(s, dict):
        return None
    keys = {k for k in s if k not in ("title", "description", "$comment", "default", "examples")}
    if not keys:
        return False
    groups = [g & keys for g in _KEY_GROUPS if g & keys]
    if len(groups) > 1 and sum(len(g) for g in groups) == len(keys):
        parts = []
        for g in groups:
            n = negate({k: s[k] for k in g}, base)
            if n is None:
                return None
            if n is not False:
                parts += n["anyOf"] if isinstance(n, dict) and list(n) == ["anyOf"] else [n]
        return False if not parts else parts[0] if len(parts) == 1 else {"anyOf": parts}
    if len(keys) == 1 and next(iter(keys)) in _COUNT_NEGATION:
        k = next(iter(keys))
        v = s[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return None
        t, other, step = _COUNT_NEGATION[k]
        if v + step < 0:
            return False  # not of minLength 0: nothing
        return {"type": t, other: v + step}
    if keys == {"items"} and isinstance(s["items"], (dict, bool)):
        n = negate(s["items"], {})  # an array with an item that fails `items`
        return n if n is None or n is False else {"type": "array", "contains": n}
    if keys == {"contains"}:
        n = negate(s["contains"], {})  # an array none of whose items matches
        return None if n is None else {"type": "array", "items": n}
    if keys == {"propertyNames"}:
        n = negate(s["propertyNames"], {})  # an object with a member so named
        return n if n is None or n is False else {"type": "object", SOME_MEMBER: [{"names": n, "value": True}]}
    if keys == {"type"}:
        ts = type_set(s)
        if "number" in ts:
            ts = ts | {"integer"}
        rest = [t for t in ALL_TYPES if t not in ts and not (t == "number" and "integer" in ts)]
        if "integer" in ts and "number" not in ts:
            return None  # non-integer numbers: not expressible as a type list
        return {"type": rest} if rest else False
    if keys == {"not"}:
        return s["not"]
    if keys <= {"const", "enum"}:
        values = [s["const"]] if "const" in s else s["enum"]
        if not isinstance(values, list):
            return None
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not all(v is None or isinstance(v, (str, bool)) for v in values if not any(v is x for x in numbers)):
            return None
        strings = [v for v in values if isinstance(v, str)]
        kept = [v for v in (True, False, None) if not any(v is x for x in values)]
        parts = [{"type": ["object", "array"] + ([] if numbers else ["number", "integer"])}]
        parts.append({"type": "string", NOT_STRINGS: strings} if strings else {"type": "string"})
        if kept:
            parts.append({"enum": kept})
        if numbers and "number" in (type_set(base) or ALL_TYPES):
            parts += _numbers_but(sorted(set(numbers)))  # the open intervals between them
        elif numbers:
            parts += _integers_but(sorted({int(v) for v in numbers if float(v).is_integer()}))
        return {"anyOf": parts}
    if keys and keys <= set(_BOUND_NEGATION) | {"type"}:
        return _negate_bounds(s, keys)
    if keys == {"multipleOf"}:
        return _not_multiple(s["multipleOf"], base)
    if "pattern" in keys and keys <= {"type", "pattern"} and isinstance(s["pattern"], str) \
            and s.get("type", "string") == "string":
        # a string the pattern misses (scalars.py subtracts it); with `type`, or not a string
        # (`pattern` alone holds for every non-string)
        missed = {"type": "string", NOT_PATTERNS: [s["pattern"]]}
        return {"anyOf": [{"type": [t for t in ALL_TYPES if t != "string"]}, missed]} if "type" in keys else missed
    if keys <= {"allOf"}:
        subs = [negate(x, base) for x in s["allOf"]]
        return None if any(x is None for x in subs) else {"anyOf": subs}
    if keys <= {"anyOf"}:
        subs = [negate(x, base) for x in s["anyOf"]]
        return None if any(x is None for x in subs) else {"allOf": subs}
    if keys == {"oneOf"} and isinstance(s["oneOf"], list) and 0 < len(s["oneOf"]) <= MAX_ONE_OF_NEGATED:
        # not exactly one: none of them, or two of them at once
        subs = s["oneOf"]
        negs = [negate(x, base) for x in subs]
        if any(x is None for x in negs):
            return None
        pairs = [{"allOf": [subs[i], subs[j]]} for i in range(len(subs)) for j in range(i + 1, len(subs))]
        return {"anyOf": [{"allOf": negs}] + pairs}
    if keys <= _OBJECT_KEYS | {"type"} and s.get("type", "object") == "object":
        # objects failing: some required member absent, or some member present with a bad value
        props, pats = s.get("properties", {}), s.get("patternProperties", {})
        if not isinstance(props, dict) or not isinstance(pats, dict) or \
                not isinstance(s.get("required", []), list):
            return None
        branches = [absent(r, base) for r in s.get("required", [])]
        for name, sub in props.items():
            n = negate(sub, {})
            if n is None:
                return None
            if n is not False:
                branches.append({"required": [name], "properties": {name: n},
                                 **({} if "properties" in base else {"additionalProperties": True})})
        for p, sub in pats.items():  # a member the pattern names (declared or not) with a bad value
            n = negate(sub, {})
            if n is None:
                return None
            if n is not False:
                branches.append({SOME_MEMBER: [{"names": {"type": "string", "pattern": p}, "value": n}]})
        if "additionalProperties" in s:  # an undeclared member no pattern names, with a bad value
            n = negate(s["additionalProperties"], {})
            if n is None:
                return None
            if n is not False:
                names = {"type": "string"}
                if props:
                    names[NOT_STRINGS] = list(props)
                if pats:
                    names[NOT_PATTERNS] = list(pats)
                branches.append({SOME_MEMBER: [{"names": names, "value": n}]})
        objects = [dict(b, type="object") for b in branches]
        others = [t for t in ALL_TYPES if t != "object"] if "type" in s else []
        if others:
            objects.append({"type": others})
        if not objects:
            return False
        return objects[0] if len(objects) == 1 else {"anyOf": objects}
    return None


def _numbers_but(excluded: list) -> list:
    """Number schemas covering every number but the sorted `excluded` ones (the open
    intervals between them; 3 and 3.0 are one number)."""
    parts = [{"type": "number", "exclusiveMaximum": excluded[0]}]
    for lo, hi in zip(excluded, excluded[1:]):
        if lo != hi:
            parts.append({"type": "number", "exclusiveMinimum": lo, "exclusiveMaximum": hi})
    parts.append({"type": "number", "exclusiveMinimum": excluded[-1]})
    return parts


def _integers_but(excluded: list) -> list:
    """Integer schemas covering every integer but the sorted `excluded` ones (ranges)."""
    if not excluded:
        return [{"type": "integer"}]
    parts = [{"type": "integer", "maximum": excluded[0] - 1}]
    for lo, hi in zip(excluded, excluded[1:]):
        if hi - lo > 1:
            parts.append({"type": "integer", "minimum": lo + 1, "maximum": hi - 1})
    parts.append({"type": "integer", "minimum": excluded[-1] + 1})
    return parts


MAX_LISTED_NON_MULTIPLES = 512  # integers of a bounded range listed by `not multipleOf`


def _not_multiple(m, base: dict) -> dict | None:
    """not of multipleOf `m` beside an integer type with close bounds (hazelcast's odd
    group size: 3..7, not multipleOf 2): every non-number and the range's integers that
    are not multiples, listed. Elsewhere None (the non-integral numbers are no schema)."""
    from fractions import Fraction
    from math import ceil, floor

    if not is_number(m) or m <= 0 or type_set(base) != {"integer"}:
        return None
    lows = [ceil(base["minimum"])] if is_number(base.get("minimum")) else []
    lows += [floor(base["exclusiveMinimum"]) + 1] if is_number(base.get("exclusiveMinimum")) else []
    highs = [floor(base["maximum"])] if is_number(base.get("maximum")) else []
    highs += [ceil(base["exclusiveMaximum"]) - 1] if is_number(base.get("exclusiveMaximum")) else []
    if not lows or not highs or min(highs) - max(lows) > MAX_LISTED_NON_MULTIPLES:
        return None
    step = Fraction(repr(m))
    listed = [i for i in range(max(lows), min(highs) + 1) if Fraction(i) % step]
    others = {"type": [t for t in ALL_TYPES if t not in ("number", "integer")]}
    return {"anyOf": [others, {"enum": listed}]} if listed else others


def _negate_bounds(s: dict, keys) -> dict | None:
    """not of numeric bounds (with `type: number` or no type): a number past one of them,
    or, with the type, any non-number."""
    bounds = {k: s[k] for k in keys if k != "type"}
    if not bounds or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bounds.values()):
        return None  # draft-04's boolean exclusive bounds, or no bound
    if "type" in keys and type_set(s) != {"number"}:
        return None  # integer: the non-integral numbers are no type of their own
    parts = [{"type": "number", _BOUND_NEGATION[k]: v} for k, v in sorted(bounds.items())]
    if "type" in keys:
        parts.append({"type": [t for t in ALL_TYPES if t not in ("number", "integer")]})
    return parts[0] if len(parts) == 1 else {"anyOf": parts}
