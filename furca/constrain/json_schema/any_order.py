"""Objects whose members may come in any order (`member_order="any"`).

The default object grammar (containers.py) accepts the declared members in
`properties` order or required-first order: what models trained on schema-ordered
data write, and what jump-forward can force. A document written by someone else (a
config file, another program's output, a model that reorders) may list its members in
any order, with extra members anywhere. Any order is easy to say and impossible to
keep exact in a grammar alone: "each key at most once" needs the set of keys used so
far, 2^n states for n keys. So the work is split:

- **The grammar** takes any member at any position, and counts only the required
  ones: a rule per subset of the required names seen so far (2^r rules, r <= 
  MAX_REQUIRED), each letting any optional or extra member come again, so `}` is
  reachable exactly when every required name was written.
- **The matcher** watches the object (furca/constrain/members.py): it reads the keys
  written inside it and masks the tokens that would write one again (or go where every
  completion is a used key: a finite key set all of whose names with a prefix are
  used). Keys are written in their canonical spelling (keys.py, scalars.literal), so
  equal names are equal bytes.

Registered in c.g.objects as {object rule: (its own rules, the declared names'
spellings, or None when any other key is allowed, the rules of the extra members' keys,
the body rule the object rule calls between its braces)}.
With patternProperties (and no other extra keys) the names are a finite set but the
patterns' keys are not: their key rules are watched as free keys of their own, so where a
pattern's reading of a key body still lives (the matcher reads that off the state's
stacks) the body is not dead, and where only the declared names' reading lives it is
dead once they are used. That needs every key a pattern takes to have unboundedly many
continuations: patterns without `$` (`_open_ended`). The own rules hold only the
braces, keys, colons, commas and calls: each member's value is a call of a rule of its
own, so a `{` read inside a value never lands in these rules, and a configuration in a
value is inside the object through its stack (the frame that returns to the object rule
after its body: members.py's levels).

Only for what the watch reads exactly: compact whitespace, patternProperties without
`$` (after the finite ones became declared names), no propertyNames, no
min/maxProperties, at most MAX_REQUIRED required names, and not for GBNF output (text
cannot carry the watch).
Other objects keep the two orders.
"""
from __future__ import annotations

from .grammar import EMPTY, NOTHING, alt, lit, rep, seq
from .scalars import literal

MAX_REQUIRED = 6  # 2^6 rules of required subsets at most


def applies(c, patterns, allowed, min_p, max_p, num_req) -> bool:
    """Whether an object with these keywords is built in any order."""
    return (c.member_order == "any" and c.g.watch_unique and c.ws == EMPTY
            and all(_open_ended(p) for p in patterns)
            and allowed is None and min_p == 0 and max_p is None and num_req <= MAX_REQUIRED)


def _open_ended(pattern: str) -> bool:
    """Whether every key the pattern takes goes on into infinitely many others: it has
    no `$` (matching is a search, so whatever follows a match matches too). Then a key
    body the pattern still takes always has an unused completion, whatever keys were
    used; a pattern with `$` could leave a body whose every completion is used."""
    i = pattern.find("$")
    while i >= 0:
        slashes = len(pattern[:i]) - len(pattern[:i].rstrip("\\"))
        if slashes % 2 == 0:  # not an escaped `\$`
            return False
        i = pattern.find("$", i + 1)
    return True


def any_order_object(c, members, extras):
    """The object rule. members: [(name, value IR, required)] (declared, each
    satisfiable); extras: containers._extra_branches' [(key IR, value IR, kind)], the
    ways of an extra member."""
    own = []

    def rule(hint, body):
        r = c.g.define(c.g.new_name(hint), body)
        own.append(r.name)
        return r

    def call(v):  # a value's rule: an inline value's `{` must not land in the object's own rules
        return c.g.define(c.g.new_name("member-value"), v)

    colon, comma = c.colon, c.comma
    required = [(n, v) for n, v, req in members if req]
    optional = [seq(lit(literal(n)), colon, call(v)) for n, v, req in members if not req]
    open_keys = []  # the extra members' key rules: each takes unboundedly many keys
    for key, value, _kind in extras:
        k = rule("member-key", key)
        open_keys.append(k.name)
        optional.append(seq(k, colon, call(value)))
    opt = rule("members-any", alt(*optional)) if optional else None
    req_members = [seq(lit(literal(n)), colon, call(v)) for n, v in required]
    r = len(required)
    full = (1 << r) - 1
    after = {}

    def rest(s):
        """After the members so far, which include the required ones in bit set s."""
        if s not in after:
            tail = alt(*([EMPTY] if s == full else []),
                       *[seq(comma, req_members[k], rest(s | 1 << k)) for k in range(r) if not s >> k & 1])
            body = seq(rep(seq(comma, opt), 0, None), tail) if opt is not None else tail
            after[s] = rule("members-rest", body)
        return after[s]

    first = [seq(req_members[k], rest(1 << k)) for k in range(r)]
    if opt is not None:
        first.append(seq(opt, rest(0)))
    body = rule("members", alt(*first)) if first else NOTHING
    parts = [seq(lit("{"), body, lit("}"))] if body != NOTHING else []
    if r == 0:
        parts.append(lit("{}"))
    obj = rule("object-any", alt(*parts))
    values = tuple(literal(n)[1:-1].encode("utf-8") for n, _v, _r in members)
    if any(kind == "additional" for _k, _v, kind in extras):
        values = None  # any key but the declared ones: every body goes on (free keys)
    c.g.objects[obj.name] = (tuple(own), values, tuple(open_keys), body.name if body != NOTHING else None)
    return obj
