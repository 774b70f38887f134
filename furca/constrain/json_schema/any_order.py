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
continuations: patterns without `$`, or whose automaton reaches a cycle from every live
state (`_open_ended`). The own rules hold only the
braces, keys, colons, commas and calls: each member's value is a call of a rule of its
own, so a `{` read inside a value never lands in these rules, and a configuration in a
value is inside the object through its stack (the frame that returns to the object rule
after its body: members.py's levels).

minProperties / maxProperties: the rules after the members so far are one per (required
subset, count so far), the count held at minProperties when no maximum is left to count
to (2^r x (bound + 1) <= MAX_COUNTED_RULES). Since the watch keeps the keys distinct, the
count is the parsed object's. That is why schema order builds these objects too where a
free key sits beside a minProperties the required names and one member do not meet: the
two-order grammar counts `{"a":1,"a":2}` as two members, and a JSON parser keeps one.

Only for what the watch reads exactly: compact whitespace, open-ended patternProperties
(after the finite ones became declared names), no propertyNames, at most
MAX_REQUIRED required names, and not for GBNF output (text cannot carry the watch).
Other objects keep the two orders (and, with free keys and minProperties over 1, may
write a free key twice: the count is then not sound; propertyNames, a `$` pattern or
flexible whitespace beside minProperties, rare).
"""
from __future__ import annotations

from furca.errors import CompileError

from .difference import NotOpenEnded, difference
from .extras import EXACT_LIMIT
from .grammar import EMPTY, NOTHING, Grammar, alt, lit, rep, seq
from .regex import pattern_chars
from .scalars import literal

MAX_REQUIRED = 6  # 2^6 rules of required subsets at most
MAX_COUNTED_RULES = 1024  # required subsets x (count bound + 1): rules of a counted object


def applies(c, patterns, allowed, min_p, max_p, num_req, free) -> bool:
    """Whether an object with these keywords is built in any order: in member_order
    "any" where the watch reads it exactly; in schema order too where the watch is needed
    for soundness, minProperties beyond what the required names and one member give with
    free keys beside (a free key written twice would count twice in the grammar, once in
    the parsed object: `{"a":1,"a":2}` is one member)."""
    if not (c.g.watch_unique and c.ws == EMPTY and all(_open_ended(c, p) for p in patterns)
            and allowed is None and num_req <= MAX_REQUIRED):
        return False
    bound = min_p if max_p is None else max_p
    if (1 << num_req) * (bound + 1) > MAX_COUNTED_RULES:
        return False
    if c.member_order == "any":
        return True
    return free and min_p > max(num_req, 1)  # (free: extra members may come; none -> schema orders)


def _open_ended(c, pattern: str) -> bool:
    """Whether every key the pattern takes goes on into infinitely many others. Without
    `$` it does (matching is a search: whatever follows a match matches too); with one,
    where every live state of its automaton reaches a cycle (`^[a-z_]+$`, not
    `^[a-z]{1,8}$`). Then a key body the pattern still takes always has an unused
    completion, whatever keys were used."""
    i = pattern.find("$")
    while i >= 0:
        slashes = len(pattern[:i]) - len(pattern[:i].rstrip("\\"))
        if slashes % 2 == 0:  # not an escaped `\$`
            return c.cached(("open-ended", pattern), lambda: _reaches_cycles(pattern))
        i = pattern.find("$", i + 1)
    return True


def _reaches_cycles(pattern: str) -> bool:
    try:
        difference(pattern_chars(pattern, "#"), [], Grammar(), "#", limit=EXACT_LIMIT, open_ended=True)
    except (NotOpenEnded, CompileError):
        return False
    return True


def any_order_object(c, members, extras, lo=0, hi=None):
    """The object rule. members: [(name, value IR, required)] (declared, each
    satisfiable); extras: containers._extra_branches' [(key IR, value IR, kind)], the
    ways of an extra member; lo..hi members in all (minProperties, maxProperties; the
    watch keeps them distinct, so the count is the parsed object's)."""
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
    if not extras and lo > len(members):
        return NOTHING  # distinct names only: fewer than minProperties
    opt = rule("members-any", alt(*optional)) if optional else None
    req_members = [seq(lit(literal(n)), colon, call(v)) for n, v in required]
    r = len(required)
    full = (1 << r) - 1
    after = {}

    def rest(s, k):
        """After k members, which include the required ones in bit set s (k is held at
        lo once no upper bound is left to count to)."""
        if hi is None:
            k = min(k, lo)
        if (s, k) not in after:
            left = r - bin(s).count("1")
            more = hi is None or k < hi
            if hi is not None and k + left > hi:
                body = NOTHING
            else:
                ends = [EMPTY] if s == full and k >= lo else []
                nexts = [seq(comma, req_members[j], rest(s | 1 << j, k + 1))
                         for j in range(r) if not s >> j & 1] if more else []
                if hi is None and k >= lo:  # the optional and extra members come again
                    tail = alt(*ends, *nexts)
                    body = seq(rep(seq(comma, opt), 0, None), tail) if opt is not None else tail
                else:
                    if opt is not None and more:
                        nexts.append(seq(comma, opt, rest(s, k + 1)))
                    body = alt(*ends, *nexts)
            after[(s, k)] = rule("members-rest", body) if body != NOTHING else NOTHING
        return after[(s, k)]

    first = [seq(req_members[j], rest(1 << j, 1)) for j in range(r)] if hi is None or hi > 0 else []
    if opt is not None and (hi is None or hi > 0):
        first.append(seq(opt, rest(0, 1)))
    first = [f for f in first if f != NOTHING]
    body = rule("members", alt(*first)) if first else NOTHING
    parts = [seq(lit("{"), body, lit("}"))] if body != NOTHING else []
    if r == 0 and lo == 0:
        parts.append(lit("{}"))
    if not parts:
        return NOTHING
    obj = rule("object-any", alt(*parts))
    values = tuple(literal(n)[1:-1].encode("utf-8") for n, _v, _r in members)
    if any(kind == "additional" for _k, _v, kind in extras):
        values = None  # any key but the declared ones: every body goes on (free keys)
    c.g.objects[obj.name] = (tuple(own), values, tuple(open_keys), body.name if body != NOTHING else None)
    return obj
