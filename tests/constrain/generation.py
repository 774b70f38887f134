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


def byte_neighbours(info):
    """(order, rank): the vocabulary's tokens sorted by their bytes, and each token's place
    in that order. A token's neighbours in it share its longest prefixes: the disallowed
    tokens a probe tries (`walk`) are a mask's near misses, not tokens whose first byte
    is already dead."""
    tb = [_bytes(info, t) for t in range(info.vocab_size)]
    order = np.array(sorted(range(len(tb)), key=tb.__getitem__), dtype=np.int64)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return order, rank


def _bytes(info, t) -> bytes:
    """Token t's bytes; b"" for special tokens and the padding ids past token_bytes."""
    return (info.token_bytes[t] if t < len(info.token_bytes) else None) or b""


def _probe(m, info, allowed, rng, probes, near, out):
    """None, or (failure kind, bytes) where the mask and accept_token disagree at m:
    `probes` random allowed tokens, each accepted by a fork of m, the first of them also
    leaving a non-empty mask (or a terminated matcher: no dead end) of which a random
    token is accepted too (two steps off the walk's path); and the disallowed
    byte-order neighbours (near: byte_neighbours) of `probes` random allowed tokens,
    each refused. A refusal at a grammar limit (the automaton's size) is not a
    disagreement."""
    text = b"".join(out)
    picks = allowed[rng.integers(len(allowed), size=min(probes, len(allowed)))]
    for j, t in enumerate(picks):
        t = int(t)
        f = m.fork()
        if not f.accept_token(t):
            if f.error and "grammar limit" in f.error:
                continue
            return "probe_refused", text + b"<" + (_bytes(info, t) or b"EOS") + b">"
        if j == 0 and not f.is_terminated():
            after = f.get_allowed_tokens()
            if not len(after):
                return "probe_dead_end", text + b"<" + _bytes(info, t) + b">"
            u = int(after[rng.integers(len(after))])  # and one step further off the path
            if not f.accept_token(u) and not (f.error and "grammar limit" in f.error):
                return "probe_refused", text + b"<" + _bytes(info, t) + b"><" + (_bytes(info, u) or b"EOS") + b">"
    if near is None:
        return None
    order, rank = near
    ok = np.zeros(info.vocab_size, dtype=bool)
    ok[allowed[allowed < info.vocab_size]] = True
    for t in picks:
        r = rank[t] if t < len(rank) else None
        if r is None:
            continue
        for d in (-2, -1, 1, 2):
            if not 0 <= r + d < len(order):
                continue
            u = int(order[r + d])
            if ok[u] or not _bytes(info, u):
                continue
            f = m.fork()
            if f.accept_token(u):
                return "probe_accepted", text + b"<" + _bytes(info, u) + b">"
    return None


def walk(g, info, eos, closer, rng, max_steps, probes=0, near=None):
    """One random walk of g's matcher: ("finished", bytes) | ("unfinished", bytes) |
    (failure kind, bytes). probes > 0: at every step also `_probe` (the mask against
    accept_token on tokens the walk does not take)."""
    m = g.matcher()
    out = []
    for step in range(max_steps):
        allowed = m.get_allowed_tokens()
        if not len(allowed):
            return ("finished" if m.is_terminated() else "dead_end"), b"".join(out)
        if probes:
            bad = _probe(m, info, allowed, rng, probes, near, out)
            if bad is not None:
                return bad
        if eos in allowed and (rng.random() < 0.8 or len(allowed) == 1):
            if not m.accept_token(eos):
                return "refused", b"".join(out) + b"<EOS>"
            return ("finished" if m.is_terminated() else "refused"), b"".join(out)
        allowed = allowed[allowed != eos]
        if rng.random() < min(0.9, 0.2 + step / 100):
            near_closers = allowed[closer[allowed]]
            if len(near_closers):
                allowed = near_closers
        t = int(allowed[rng.integers(len(allowed))])
        if not m.accept_token(t):
            kind = "limit" if m.error and "grammar limit" in m.error else "refused"
            return kind, b"".join(out) + b"<" + info.token_bytes[t] + b">"
        out.append(info.token_bytes[t])
    return "unfinished", b"".join(out)
