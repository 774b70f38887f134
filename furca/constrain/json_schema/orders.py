"""Object members in either of two orders, as one deterministic grammar.

containers.py accepts the declared members in `properties` order and, when it
differs, in required-first order (`required` order, then the optional ones in
`properties` order). An alternation of the two member grammars would be ambiguous
(a member list both orders allow would be followed along both, doubling the
automaton's states inside every value). Here the key sequence is read once: a state
is where the members so far leave each order (its next position, or out of it).
While both orders still fit, the state is a pair (i, j), at most one per member;
once one order no longer fits, the rest is that order's own member chain (each
member optional or required, then the extra members). Every next key names one
member, so one path is followed: the grammar stays deterministic over keys.
"""
from __future__ import annotations

from .grammar import Seq, alt, opt, seq


def two_orders_body(c, first, second, extra, tail):
    """Body between the braces (non-empty), members of `first` or `second` order.

    first, second: [(member_ir, required, name)], the same members; extra: IR of one
    extra member (a rule) or None; tail: the extra members after the declared ones
    (each with its leading comma)."""
    comma = c.comma
    chains = [_Chain(c, first, tail), _Chain(c, second, tail)]
    pos = [{m[2]: k for k, m in enumerate(order)} for order in (first, second)]
    orders = (first, second)
    both = {}

    def allowed(o, i):
        """Members that may come next in order `o` from position i (up to its next required one)."""
        out = []
        for k in range(i, len(orders[o])):
            out.append(orders[o][k][2])
            if orders[o][k][1]:
                break
        return out

    def step(i, j, lead):
        """Alternatives from the both-fit state (i, j); lead: a comma before the next member."""
        a1, a2 = allowed(0, i), allowed(1, j)
        parts = []
        for name in a1 + [x for x in a2 if x not in a1]:
            k1, k2 = pos[0][name], pos[1][name]
            ir = first[k1][0]
            if name in a1 and name in a2:
                rest = state(k1 + 1, k2 + 1)
            elif name in a1:
                rest = chains[0].rest(k1 + 1)
            else:
                rest = chains[1].rest(k2 + 1)
            parts.append(seq(comma, ir, rest) if lead else seq(ir, rest))
        if not any(m[1] for m in first[i:]):  # every required member is out: may stop here
            if lead:
                parts.append(tail)
            elif extra is not None:
                parts.append(seq(extra, tail))
        return alt(*parts)

    def state(i, j):  # positions only grow: no state refers back to itself
        if (i, j) not in both:
            both[(i, j)] = c.g.share(c.g.new_name("obj-both"), step(i, j, True))
        return both[(i, j)]

    try:
        return step(0, 0, False)
    finally:
        # step and state call each other through closure cells: a cycle holding `chains`,
        # hence the compiler and all its nodes, until the cyclic GC's next pass (0.1 s on a
        # big schema, inside the request's first mask); break it so refcounting frees them
        step = state = None  # noqa: F841


# A rest of up to this many items stays inline where it is used (fewer automaton
# states to tell apart than a rule per position); a longer one becomes a rule, so the
# grammar stays linear in the number of members.
_INLINE_ITEMS = 24


class _Chain:
    """rest(k): the members of `order` from position k on (each with its leading comma,
    optional ones optional), then the tail; long ones become rules, built on demand."""

    def __init__(self, c, order, tail):
        self.c, self.order, self.tail = c, order, tail
        self.memo = {len(order): tail}

    def rest(self, k):
        if k in self.memo:
            return self.memo[k]
        top = k
        while top + 1 not in self.memo:
            top += 1
        for i in range(top, k - 1, -1):  # from the last one built back to k
            if i in self.memo:
                continue
            m, req, _ = self.order[i]
            item = seq(self.c.comma, m)
            node = seq(item if req else opt(item), self.memo[i + 1])
            if isinstance(node, Seq) and len(node.items) > _INLINE_ITEMS:
                node = self.c.g.share(self.c.g.new_name("obj-rest"), node)
            self.memo[i] = node
        return self.memo[k]
