"""Lower bounds of the strings of a grammar IR expression (ir.py), for nfa.build_nfa:
how many bytes (or ticks) a string of it holds at the fewest.

Two bounds, for two uses. `_fewest` is exact or None: a length region's chain of copies
needs each copy's ticks known (copy_chains.py), and None marks a counter's body that holds
a call, a key trie or a length region (nfa.item_counters). `_least_bytes` is a lower bound
through all of them, looking into the called rules: a counter moves one count per that
many bytes at most (automaton.canonical), so an underestimate is safe and an
overestimate is not.
"""

from __future__ import annotations

MAX_LEAST_DEPTH = 200  # _least_bytes' nesting (a bound of 0 below it): Python's recursion limit


def _fewest(e, unit: str, memo=None):
    """The fewest `unit`s ("byte" or "tick") a string of the encoded IR e holds, or None
    when e holds a call, a key trie or a length region (not looked into; a length
    region's body holds no tick: ir.py). Memoised per node: an IR may be a DAG. A
    chain's copies must be plain NFA nodes (whose stacks do not name them), so their
    ticks are known or None; a counter's bytes (automaton.canonical: a body of at least
    b bytes moves one count per b bytes) take None as 1, a bound all the same."""
    k = e[0]
    if k in ("byte", "tick"):
        return int(k == unit)
    if k not in ("seq", "alt", "rep"):
        return None
    memo = {} if memo is None else memo
    key = id(e)
    if key not in memo:
        if k == "rep":
            n = _fewest(e[1], unit, memo)
            memo[key] = None if n is None else e[2] * n
        else:
            ns = [_fewest(x, unit, memo) for x in e[1]]
            memo[key] = None if None in ns else sum(ns) if k == "seq" else min(ns, default=0)
    return memo[key]


def _least_bytes(e, rules, memo, active, depth) -> int:
    """A lower bound of the bytes of any string of the encoded IR e, looking into calls
    (rules: name -> expr), for a counter's body that _fewest does not look into (an
    array's item: a call). A rule met again inside its own bound counts 0, as do a key
    trie and anything past MAX_LEAST_DEPTH nested expressions; a length region takes at
    least its fewest characters. Each an underestimate at worst, so the bound holds
    (automaton.canonical moves a counter by one count per that many bytes). Memoised per
    expression and per rule (memo), across the grammar's counters."""
    k = e[0]
    if k == "byte":
        return 1
    if k not in ("seq", "alt", "rep", "ref", "len") or depth > MAX_LEAST_DEPTH:
        return 0
    key = ("rule", e[1]) if k == "ref" else id(e)
    hit = memo.get(key)
    if hit is not None:
        return hit
    if k == "ref":
        name = e[1]
        if name in active or name not in rules:
            return 0  # not memoised: 0 only inside the rule's own bound
        active.add(name)
        n = _least_bytes(rules[name], rules, memo, active, depth + 1)
        active.discard(name)
    elif k == "seq":
        n = sum(_least_bytes(x, rules, memo, active, depth + 1) for x in e[1])
    elif k == "alt":
        n = min((_least_bytes(x, rules, memo, active, depth + 1) for x in e[1]), default=0)
    elif k == "rep":
        n = e[2] * _least_bytes(e[1], rules, memo, active, depth + 1)
    else:  # "len": its characters, a byte or more each
        n = max(_least_bytes(e[1], rules, memo, active, depth + 1), e[2])
    memo[key] = n
    return n
