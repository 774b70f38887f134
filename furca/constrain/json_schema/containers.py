"""Objects (arrays: arrays.py).

Objects: declared properties in the order `properties` gives them, or required ones
first in `required` order (see `_orders`), each optional one may be left out, commas
stay right; the grammar stays linear in the number of properties (see
`_members_grammar`). Then extra members (additionalProperties /
patternProperties), after the declared ones, as the benchmark serialises them.
An object without an explicit `additionalProperties` admits extra members, as JSON
Schema says; with allow_extra_properties=False it admits none (xgrammar's strict_mode,
OpenAI's strict outputs).
"""
from __future__ import annotations

import re

from furca.errors import CompileError

from ..deadline import check as check_deadline
from .grammar import EMPTY, NOTHING, Ref, Seq, alt, lit, opt, rep, seq
from .merge import canon, merge
from .difference import NotOpenEnded
from .extras import extra_branches, pattern_schema_of
from .logic import SOME_MEMBER
from .names import property_names
from .witnesses import extras_end, meet, some_member_object, witness_ways
from .scalars import _nonneg_int, literal
from .orders import two_orders_body
from . import any_order
from .prefix import pattern_words


def _members_grammar(c, members, extra, where, end=None):
    """Body between the braces (no surrounding whitespace), non-empty.

    members: [(member_ir, required)] in order; extra: IR of one extra member or None;
    end: (the extra members alone, the extra members after a declared one) when they
    are not the plain ones (witnesses.extras_end).
    A_i = first member chosen at i or later (no comma before it);
    B_i = the rest after something was emitted (each member with a leading comma).
    """
    comma = c.comma
    extra = _shared(c, extra)
    tail = rep(seq(comma, extra), 0, None) if extra is not None else EMPTY
    only_extras = seq(extra, tail) if extra is not None else NOTHING
    if end is not None:
        only_extras, tail = end
    n = len(members)
    first_req = next((i for i, (_, r) in enumerate(members) if r), n)
    needed = {i + 1 for i in range(min(first_req + 1, n))}
    b = [None] * (n + 1)
    b[n] = tail
    for i in range(n - 1, -1, -1):
        check_deadline()
        m, req = members[i]
        item = seq(comma, m)
        b[i] = seq(item if req else opt(item), b[i + 1])
        if i in needed and i < n - 1 and _big(b[i]):
            b[i] = c.g.share(c.g.new_name("obj-rest"), b[i])
    # A_n: only extras (non-empty)
    a = only_extras
    for i in range(min(first_req, n - 1) if n else -1, -1, -1):
        m, req = members[i]
        here = seq(m, b[i + 1])
        a = here if req else alt(here, a)
    return a


def _big(node):
    return isinstance(node, Seq) and len(node.items) > 2


def object_grammar(c, schema, where, witnesses=()):
    """witnesses: [(names, value)], requirements the extra members must meet (an extra
    member named in `names`, None: any, with a value `value` accepts; witnesses.py)."""
    if not witnesses and SOME_MEMBER in schema:
        props, _ = _declare_finite_patterns(c, schema.get("properties", {}), schema.get("patternProperties", {}),
                                            where)
        declared = list(props) + [r for r in schema.get("required", []) if r not in props]
        return some_member_object(c, schema, where, declared, lambda s, ws: object_grammar(c, s, where, ws)
                                  if ws else c.value(s, where))
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise CompileError("%s/properties: must be an object" % where)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise CompileError("%s/required: must be an array of strings" % where)
    patterns = schema.get("patternProperties", {})
    if not isinstance(patterns, dict):
        raise CompileError("%s/patternProperties: must be an object" % where)
    props, patterns = _declare_finite_patterns(c, props, patterns, where)
    if "additionalProperties" in schema:
        additional = schema["additionalProperties"]
        if not isinstance(additional, (bool, dict)):
            raise CompileError("%s/additionalProperties: must be a schema" % where)
    elif "properties" in schema or "patternProperties" in schema:
        additional = c.allow_extra
    else:  # an object schema that declares no properties admits any members
        additional = True
    ws, colon = c.ws, c.colon
    allowed = property_names(c, schema["propertyNames"], where + "/propertyNames") \
        if "propertyNames" in schema else None

    # declared members (+ required names that are not declared)
    names = list(props) + [r for r in required if r not in props]
    members, finals, values = [], {}, {}
    for name in names:
        if allowed is not None and not allowed.ok(name):
            if name in required:
                return NOTHING
            continue
        if name in props:
            sub = props[name]
        else:
            # a required name `properties` does not declare: its schema is the pattern's or
            # additionalProperties' when given, else any value (even with allow_extra_properties=False)
            sub = _undeclared(name, patterns, schema.get("additionalProperties", True), where)
        matching = [p for p in patterns if _search(p, name, where)]
        for p in matching:
            sub = merge(sub, c.resolve_for_merge(patterns[p], where), "%s/patternProperties/%s" % (where, p))
        finals[name] = sub
        v = c.value(sub, "%s/properties/%s" % (where, _esc(name)), hint=name)
        req = name in required
        if v == NOTHING:
            if req:
                return NOTHING
            continue
        members.append((seq(lit(literal(name)), colon, v), req, name))
        values[name] = v
    pattern_schema = pattern_schema_of(c, patterns, where)
    # a declared name a pattern matches, whose value schema is not the extra members':
    # the pattern's keys leave it out (else it could come again as an extra member)
    clash = {p: [n for n, sub in finals.items() if _search(p, n, where) and canon(sub) != canon(pattern_schema)]
             for p in patterns}
    min_p = _nonneg_int(schema, "minProperties", where) or 0
    max_p = _nonneg_int(schema, "maxProperties", where)
    num_req = sum(1 for _, r, _ in members if r)
    watched = not witnesses and any_order.applies(c, patterns, allowed, min_p, max_p, num_req,
                                                  additional is not False or bool(patterns))
    try:  # a watched object's free keys must never all get used
        extras = extra_branches(c, names, patterns, additional, where, pattern_schema, clash, allowed,
                                open_ended=watched)
    except NotOpenEnded:  # some are finite: the schema orders, exact
        watched = False
        extras = extra_branches(c, names, patterns, additional, where, pattern_schema, clash, allowed)
    extra = alt(*[seq(key, colon, value) for key, value, _kind in extras]) if extras else None
    if witnesses:
        return _witness_object(c, schema, where, witnesses, members, extra, allowed, additional, patterns,
                               pattern_schema, clash, names)
    if watched and (extras or c.member_order == "any"):
        return any_order.any_order_object(c, [(n, values[n], r) for _, r, n in members], extras, min_p, max_p)
    if all(r for _, r, _ in members) and (min_p or max_p is not None):
        # every declared member is present: count the extra members exactly
        k = len(members)
        lo, hi = max(0, min_p - k), (None if max_p is None else max_p - k)
        if hi is not None and (hi < lo or hi < 0):
            return NOTHING
        if extra is not None:
            extra = _shared(c, extra)
            return alt(*[_counted_object(c, [m for m, _, _ in ms], extra, lo, hi)
                         for ms in _orders(members, required)])
        if lo > 0:
            return NOTHING
        min_p, max_p = 0, None
    if (min_p > num_req and not (min_p == 1 and not num_req)) or \
            (max_p is not None and not (extra is None and len(members) <= max_p)):
        # the count varies (optional members, extras): count them, in `properties` order
        if max_p is not None and max_p < max(num_req, min_p):
            return NOTHING
        bound = max(min_p, 1) if max_p is None else max_p
        if len(members) * (bound + 1) > MAX_COUNTED_RULES:
            c.unsupported("maxProperties" if max_p is not None else "minProperties", where,
                          "counting %d members up to %d takes over %d rules" % (len(members), bound, MAX_COUNTED_RULES))
            bound = None
        extra = _shared(c, extra) if extra is not None else None
        if bound is None:  # unsupported="warn": the count is not enforced
            body = _members_grammar(c, [(m, r) for m, r, _ in members], extra, where)
            return alt(seq(lit("{"), ws, lit("}")) if num_req == 0 else NOTHING,
                       seq(lit("{"), ws, body, ws, lit("}")) if body != NOTHING else NOTHING)
        body = _counted_members(c, [(m, r) for m, r, _ in members], extra, max(min_p, 1), max_p)
        nonempty = seq(lit("{"), ws, body, ws, lit("}")) if body != NOTHING else NOTHING
        empty = seq(lit("{"), ws, lit("}")) if num_req == 0 and min_p == 0 else NOTHING
        return alt(empty, nonempty)
    extra = _shared(c, extra)
    orders = _orders(members, required)
    if len(orders) == 2:
        tail = rep(seq(c.comma, extra), 0, None) if extra is not None else EMPTY
        body = two_orders_body(c, orders[0], orders[1], extra, tail)
    else:
        body = _members_grammar(c, [(m, r) for m, r, _ in members], extra, where)
    nonempty = seq(lit("{"), ws, body, ws, lit("}")) if body != NOTHING else NOTHING
    empty = seq(lit("{"), ws, lit("}")) if num_req == 0 and min_p == 0 else NOTHING
    return alt(empty, nonempty)


def _witness_object(c, schema, where, witnesses, members, extra, allowed, additional, patterns, pattern_schema,
                    clash, names):
    """The objects of object_grammar whose extra members meet `witnesses`: a witness's
    member is one of the extras' ways with the names met and the values merged with
    the witness's (witnesses.py)."""
    if extra is None:
        return NOTHING

    def one_way(wnames, wvalue):
        # a FALSE value leaves its way out (extra_branches skips values without a grammar)
        ways = extra_branches(c, names, patterns, additional, where, pattern_schema, clash, meet(allowed, wnames),
                               also=wvalue)
        return alt(*[seq(key, c.colon, value) for key, value, _kind in ways])

    ways = witness_ways(c, witnesses, where, one_way)
    if not ways:
        return NOTHING
    if (_nonneg_int(schema, "minProperties", where) or 0) > 1 or "maxProperties" in schema:
        # (minProperties 1 holds already: a witness is a member)
        c.unsupported("not", where, "a member named otherwise beside minProperties/maxProperties")
    body = _members_grammar(c, [(m, r) for m, r, _ in members], extra, where,
                            end=extras_end(c, _shared(c, extra), ways, len(witnesses)))
    return seq(lit("{"), c.ws, body, c.ws, lit("}")) if body != NOTHING else NOTHING


def _orders(members, required):
    """The member orders the grammar accepts: `properties` order (undeclared required
    names last), and, when it differs, required names first in `required` order then
    the optional ones in `properties` order (the order writers who list the required
    members first produce, and the order a merged `required` gives)."""
    pos = {name: i for i, name in enumerate(required)}
    if sum(1 for m in members if m[2] in pos) < 2:
        return [members]
    req_first = sorted(members, key=lambda m: (0, pos[m[2]]) if m[2] in pos else (1, 0))
    if [m[2] for m in req_first] == [m[2] for m in members]:
        return [members]
    return [members, req_first]


def _shared(c, extra):
    """One rule for the extra member, shared by every order's grammar."""
    if extra is None or isinstance(extra, Ref):
        return extra
    return c.g.share(c.g.new_name("extra-member"), extra)


def _declare_finite_patterns(c, props, patterns, where):
    """patternProperties whose pattern matches a finite set of names ("^(a|b)$") ->
    declared properties (each merged with the name's own schema): the same instances,
    and the names leave the extra members' keys."""
    finite = {p: pattern_words(p, "%s/patternProperties" % where) for p in patterns}
    if not any(finite.values()):
        return props, patterns
    props = dict(props)
    for p, words in finite.items():
        for w in sorted(words or ()):
            sub = c.resolve_for_merge(patterns[p], where)
            props[w] = merge(c.resolve_for_merge(props[w], where), sub, "%s/patternProperties/%s" % (where, p)) \
                if w in props else sub
    return props, {p: s for p, s in patterns.items() if not finite[p]}


MAX_COUNTED_RULES = 4096  # members x (count bound + 1): rules of a counted member chain


def _counted_members(c, members, extra, lo, hi):
    """Body between the braces: `members` ([(ir, required)], in order, each optional one
    may be left out) then extra members, lo..hi members in all (lo >= 1, hi None: no
    bound). One rule per (next member, count so far), counts at lo or more merged when
    there is no upper bound: n x (bound + 1) rules at most."""
    comma, n = c.comma, len(members)
    cap = lo if hi is None else hi
    memo = {}

    def sep(k):
        return comma if k else EMPTY

    def tail(k):  # extras only, k members so far
        if hi is None and k >= lo:
            return alt(EMPTY, seq(sep(k), extra, rep(seq(comma, extra), 0, None))) if extra is not None else EMPTY
        parts = [EMPTY] if k >= lo else []
        if extra is not None and (hi is None or k < hi):
            parts.append(seq(sep(k), extra, rest(n, k + 1)))
        return alt(*parts) if parts else NOTHING

    def rest(i, k):
        key = (i, min(k, cap))
        if key not in memo:
            check_deadline()
            if i == n:
                body = tail(k)
            else:
                m, req = members[i]
                here = seq(sep(k), m, rest(i + 1, k + 1)) if hi is None or k < hi else NOTHING
                body = alt(here, rest(i + 1, k)) if not req else here
            memo[key] = c.g.share(c.g.new_name("obj-count"), body) if body not in (NOTHING, EMPTY) else body
        return memo[key]

    return rest(0, 0)


def _counted_object(c, members, extra, lo, hi):
    """All `members` (in order) then lo..hi extra members."""
    ws, comma = c.ws, c.comma
    parts = []
    if not members:
        if lo == 0:
            parts.append(seq(lit("{"), ws, lit("}")))
        if hi is None or hi >= 1:
            body = seq(extra, rep(seq(comma, extra), max(lo - 1, 0), None if hi is None else hi - 1))
            parts.append(seq(lit("{"), ws, body, ws, lit("}")))
        return alt(*parts)
    body = seq(members[0], *[seq(comma, m) for m in members[1:]], rep(seq(comma, extra), lo, hi))
    return seq(lit("{"), ws, body, ws, lit("}"))


def _esc(name):
    return name.replace("~", "~0").replace("/", "~1")


def _search(pattern, name, where):
    try:
        return re.search(pattern, name) is not None
    except re.error as e:
        raise CompileError("%s/patternProperties: bad regex %r (%s)" % (where, pattern, e))


def _undeclared(name, patterns, additional, where):
    for p, s in patterns.items():
        if _search(p, name, where):
            return True  # merged with the pattern's schema by the caller
    return additional
