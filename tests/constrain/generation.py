"""Soundness by generation: random token walks under a grammar's masks, and the check
of a finished walk's text against an independent validator (json.loads, jsonschema).

Used by test_generation_sound.py (the vendored 100-schema sample) and by
bench/constrain_fuzz.py (every schema of maskbench-dev)."""
from __future__ import annotations

import json
from decimal import Decimal

import numpy as np

CLOSERS = b'"}],'


def closer_tokens(info):
    """Boolean array over the vocabulary: the token holds a closing byte (`"` `}` `]` `,`)."""
    return np.array([bool(b) and any(c in b for c in CLOSERS) for b in
                     (tb or b"" for tb in info.token_bytes[:info.vocab_size])], dtype=bool)


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


class Duplicate(Exception):
    pass


def _pairs(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Duplicate(next(k for k in keys if keys.count(k) > 1))
    return dict(pairs)


def declared_names(schema) -> set:
    """Every name some `properties` of the schema declares."""
    names, todo = set(), [schema]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            if isinstance(x.get("properties"), dict):
                names.update(x["properties"])
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return names


def check_text(data: bytes, validator, declared=frozenset()):
    """(kind, detail) of what is wrong with a finished walk's bytes, or None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return "bad_utf8", str(e)
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except ValueError as e:
        return "invalid_json", str(e)
    duplicate = None
    try:
        json.loads(text, object_pairs_hook=_pairs)
    except Duplicate as e:
        # a name no `properties` declares may come twice where the keys are not watched
        # (a grammar of free keys cannot forbid it); JSON only says names SHOULD differ.
        # The value as parsers read it (the last one kept) must still be valid: a repeat
        # must not make up a count (minProperties)
        name = e.args[0]
        duplicate = ("duplicate_declared" if name in declared else "duplicate_free"), repr(name)
    if validator is not None:
        err = next((e for e in validator.iter_errors(value) if not _float_artifact(e)), None)
        if err is not None:
            where = "/".join(map(str, err.absolute_path))
            return "not_valid", f"{err.message[:300]} at {where}" + (f" (key {duplicate[1]} twice)" if duplicate else "")
    return duplicate


def _float_artifact(err) -> bool:
    """jsonschema's multipleOf divides floats: 1093041464.58 / 0.01 is 109304146458.00002,
    so it calls a multiple of 0.01 none. Decimal arithmetic on the numbers as written
    (repr round-trips them) decides instead."""
    if err.validator != "multipleOf" or not isinstance(err.instance, (int, float)) or isinstance(err.instance, bool):
        return False
    step = err.validator_value
    if not isinstance(step, (int, float)) or isinstance(step, bool) or not step:
        return False
    return Decimal(repr(err.instance)) % Decimal(repr(step)) == 0


def make_validator(schema):
    """jsonschema's validator for the schema's draft (2020-12 when it names none), formats
    checked; raises when jsonschema cannot use the schema."""
    import jsonschema
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    v.is_valid(None)  # resolves what a first use resolves: an unresolvable $ref raises here
    return v


def walk(g, info, eos, closer, rng, max_steps):
    """One random walk of g's matcher: ("finished", bytes) | ("unfinished", bytes) |
    (failure kind, bytes)."""
    m = g.matcher()
    out = []
    for step in range(max_steps):
        allowed = m.get_allowed_tokens()
        if not len(allowed):
            return ("finished" if m.is_terminated() else "dead_end"), b"".join(out)
        if eos in allowed and (rng.random() < 0.8 or len(allowed) == 1):
            if not m.accept_token(eos):
                return "refused", b"".join(out) + b"<EOS>"
            return ("finished" if m.is_terminated() else "refused"), b"".join(out)
        allowed = allowed[allowed != eos]
        if rng.random() < min(0.9, 0.2 + step / 100):
            near = allowed[closer[allowed]]
            if len(near):
                allowed = near
        t = int(allowed[rng.integers(len(allowed))])
        if not m.accept_token(t):
            return "refused", b"".join(out) + b"<" + info.token_bytes[t] + b">"
        out.append(info.token_bytes[t])
    return "unfinished", b"".join(out)
