"""Finite schemas: a schema whose instances are bounded by a `const` / `enum` list.

When a schema carries `const` or `enum` (at its top level, or in one of its `allOf`
parts, following top-level `$ref`s), its instances are a subset of those literals,
whatever its other keywords say. `finite_values` then returns exactly the literals
the whole schema validates, checked with the `jsonschema` validator of the schema's
draft (refs resolved against the document root, formats asserted). This enforces
keywords the grammar translator cannot build (`not` of any schema, `propertyNames`,
`uniqueItems`, `contains`, `dependencies`, if/then/else, ...) exactly, since each
candidate is a concrete JSON value.

`finite_values` returns None (the caller compiles the schema the ordinary way) when
the schema is not bounded that way, when it carries nothing beyond what the
ordinary enum path checks, or when the validator cannot evaluate it (furca's internal `x-furca-not-strings` below
the top, a remote
`$ref`, an unknown draft): it never guesses.
"""
from __future__ import annotations

import json
import re

from .difference import ALSO_PATTERNS, NOT_PATTERNS, ONE_OF_PATTERNS
from .logic import NOT_STRINGS

# Keys the ordinary enum path (scalars.enum_values) handles by itself.
_PLAIN = {"enum", "const", "type", "nullable"}
_MAX_REF_HOPS = 32


def candidates(c, schema: dict):
    """The literal list bounding `schema` (its const/enum, else an allOf part's), or None."""
    own = _literals(schema)
    if own is not None:
        return own
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return None
    for part in parts:
        for _ in range(_MAX_REF_HOPS):
            if not (isinstance(part, dict) and isinstance(part.get("$ref"), str) and c.refs is not None):
                break
            try:
                part = c.refs.resolve(part["$ref"], "#")[1]
            except Exception:  # noqa: BLE001 - an unresolvable ref: the ordinary path reports it
                return None
        if isinstance(part, dict):
            lits = _literals(part)
            if lits is not None:
                return lits
    return None


def finite_values(c, schema: dict, annotations):
    """(literals, check) or None: the literals of `schema`'s const/enum bound that the
    whole schema validates (possibly []), and the validator's verdict on a value
    (`scalars.literals` asks it whether an integral number may also be spelled 1.0: not
    where draft-04 says `integer`); None: see the module docstring."""
    if all(k in _PLAIN or k in annotations for k in schema):
        return None
    values = candidates(c, schema)
    if values is None:
        return None
    # the rewrites' internal keyword (logic.py) means nothing to jsonschema: applied here
    # at the top; anywhere deeper the schema takes the ordinary path
    excluded = schema.get(NOT_STRINGS, [])
    schema = {k: v for k, v in schema.items() if k != NOT_STRINGS}
    is_valid = _quick(c, schema)
    if is_valid is not None:  # flat: only the literals are nested
        if any(k in schema for k in _INTERNAL):
            return None
    else:
        text = json.dumps(schema)
        if any(k in text for k in _INTERNAL):
            return None
        validator = _validator(c, schema)
        if validator is None:
            return None
        is_valid = validator.is_valid
    keep = []
    for v in values:
        if isinstance(v, str) and v in excluded:
            continue
        try:
            ok = is_valid(v)
        except Exception:  # noqa: BLE001 - the validator cannot evaluate it: do not guess
            return None
        if ok and not any(_same_json(v, k) for k in keep):
            keep.append(v)
    return keep, _safe(is_valid)


def _safe(is_valid):
    def check(v):
        try:
            return is_valid(v)
        except Exception:  # noqa: BLE001 - it validated the value itself: keep the spelling
            return True
    return check


_INTERNAL = (NOT_STRINGS, NOT_PATTERNS, ALSO_PATTERNS, ONE_OF_PATTERNS)
_QUICK = frozenset(("enum", "const", "type", "pattern", "minLength", "maxLength"))


def _quick(c, schema: dict):
    """jsonschema's verdict on a literal of `schema` without building a validator, where
    the only keywords its draft reads are _QUICK's (the others it ignores): the value's
    type by the draft's type checker (draft 4: 1.0 is no integer), a string's pattern by
    `re.search` and its length in code points, as jsonschema's own keywords do; an
    enum's or const's own literal meets it. A validator costs ~20 µs to build: Azure
    Pipelines' service-schema asked for 56,889, each a distinct merge of a task's
    `enum` with another branch's `pattern` (oneOf exclusivity), 1.2 s of its 3.4 s
    compile. None where another keyword counts (a validator then decides)."""
    env = _environment(c)
    if env is None or ("enum" in schema and "const" in schema):
        return None
    cls_ = env[0]
    known = cls_.VALIDATORS
    if any(k in known and k not in _QUICK for k in schema):
        return None
    types = schema.get("type")
    types = None if types is None else types if isinstance(types, list) else [types]
    pattern, lo, hi = schema.get("pattern"), schema.get("minLength"), schema.get("maxLength")
    is_type = cls_.TYPE_CHECKER.is_type

    def is_valid(v):
        if types is not None and not any(is_type(v, t) for t in types):
            return False
        if isinstance(v, str):
            if pattern is not None and not re.search(pattern, v):
                return False
            if (lo is not None and len(v) < lo) or (hi is not None and len(v) > hi):
                return False
        return True
    return is_valid


def _literals(schema):
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    return None


def _same_json(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b)


def _validator(c, schema: dict):
    """A jsonschema validator for `schema` under the root document's draft, or None."""
    env = _environment(c)
    if env is None:
        return None
    cls_, reg = env
    try:
        return cls_(schema, registry=reg, format_checker=cls_.FORMAT_CHECKER,
                    _resolver=reg.resolver(base_uri="urn:furca-root"))
    except Exception:  # noqa: BLE001 - no validator for this schema: the ordinary path decides
        return None


def _environment(c):
    """(validator class, registry holding the root document) of a compile, made once
    for it (a schema of many oneOf branches asks for ~57,000 validators), or None."""
    uris = len(c.refs.by_uri) if c.refs is not None else 0  # a known remote document read since: anew
    known = c.finite_env
    if known is not None and known[0] == uris:
        return known[1]
    env = None
    try:
        import jsonschema
        import referencing
        import referencing.jsonschema

        root = c.root if isinstance(c.root, dict) else {}
        # a nested $id: refs there resolve against another base, no environment
        if c.refs is None or not any(ptr != "#" for ptr in c.refs.by_uri.values()):
            cls_ = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
            spec = referencing.jsonschema.specification_with(
                cls_.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT202012)
            doc = {k: v for k, v in root.items() if k not in ("$id", "id")}  # refs resolve inside this document
            env = cls_, referencing.Registry().with_resource("urn:furca-root", referencing.Resource(doc, spec))
    except Exception:  # noqa: BLE001 - no validator for this document: the ordinary path decides
        env = None
    c.finite_env = uris, env
    return env
