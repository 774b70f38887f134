"""Whether a key trie's two rules have the shape key_masks.py's split needs, checked
once per pair of rules and shared across grammars.

key_trie.py takes any rules for a trie's `rest` (the key's content after a prefix) and
`other` (a wide character or an escape); the split of a key state into the trie's shared
"any key" mask less the declared names (key_masks.KeyTrieMasks) is exact only when `rest`
derives the closing quote, or a plain character and `rest` again, or what `other`
derives, and `other` starts with no plain character and no quote: the JSON-schema
translator's rules. rules_fit checks it on the automaton (a bisimulation up to the
closing quote, ~1.7 ms); shared_fit shares its answer with every grammar of the process
whose rules have the same NFA shape (_rules_shape, ~110 µs) or, cheaper, the same key in
the closed layout of lasting rules (_layout_shape, ~15 µs).
"""

from __future__ import annotations

import numpy as np

from .key_trie import is_plain, trie_end

MAX_CHECK_PAIRS = 512  # state pairs of rules_fit's bisimulation past which a trie is walked as before
_PLAIN = np.array([b < 0x80 and is_plain(chr(b)) for b in range(256)])  # a key's plain characters
QUOTE = 0x22  # the key's closing quote
MAX_SHAPE_NODES = 512  # NFA nodes of a trie's two rules past which their check is not shared
MAX_SHAPES = 256
_FITS: dict[tuple, bool] = {}  # _rules_shape -> rules_fit, shared by every grammar of the process
_LAYOUT_FITS: dict[tuple, tuple] = {}  # _layout_shape's key -> (rules_fit, the bodies the key names)


def _rules_shape(nfa, rules):
    """The NFA of the rules (rest, other) from their start nodes, numbered in the order
    a breadth-first search meets the nodes (edges, then epsilons, then a call's callee
    and return): equal shapes are the same rules (the JSON-schema translator's, in
    every grammar it builds), so rules_fit's answer, which reads nothing else of the
    grammar up to the closing quote, is shared through _FITS. None for rules with
    counters or length regions, or past MAX_SHAPE_NODES nodes."""
    edges, eps, call, is_end, is_tail = nfa.edges, nfa.eps, nfa.call, nfa.is_end, nfa.is_tail
    counter, length, tick, need = nfa.counter, nfa.length, nfa.tick, nfa.need
    num = {}
    order = []
    for n in rules:
        if n not in num:
            num[n] = len(order)
            order.append(n)
    i = 0
    while i < len(order):  # the first key state of every grammar pays this (~70 us): plain loops
        n = order[i]
        i += 1
        if n in counter or n in length or n in tick or n in need:
            return None
        for t in [t for _lo, _hi, t in edges[n]] + list(eps[n]) + list(call.get(n, ())):
            if t not in num:
                num[t] = len(order)
                order.append(t)
        if len(order) > MAX_SHAPE_NODES:
            return None
    shape = [num[rules[0]], num[rules[1]]]
    for n in order:
        shape.append((tuple([(lo, hi, num[t]) for lo, hi, t in edges[n]]), tuple([num[t] for t in eps[n]]),
                      tuple([num[t] for t in call.get(n, ())]), n in is_end, n in is_tail))
    return tuple(shape)


def _layout_shape(nfa, rules):
    """A key that stands for _rules_shape(nfa, rules) where both rules lie in the
    grammar's closed layout of lasting rules (nfa._Layout), with the bodies it names
    (kept alive with the key, so that their ids are not reused), or None. Every node
    reachable from the rules then lies in the layout's blocks of the bodies they call,
    and a block's nodes are the same in every layout that holds its body (their
    `canon`: body and offset), calls and returns included: so the rules' start nodes
    and the calls of the blocks they reach, in canon form, name the shape, read off the
    layout's calls without the breadth-first walk over the rules' nodes (~120 µs in the
    first key state of every grammar, most of them among the slowest steps)."""
    lay = nfa.layout
    if lay is None or not lay.closed:
        return None
    canon, call = lay.canon, nfa.call
    start = (canon(rules[0]), canon(rules[1]))
    if start[0] is None or start[1] is None:
        return None
    by_body: dict[int, list] = {}
    for c in lay.call:
        by_body.setdefault(canon(c)[0], []).append(c)
    todo, seen, calls = [start[0][0], start[1][0]], set(), []
    while todo:
        b = todo.pop()
        if b in seen:
            continue
        seen.add(b)
        for c in by_body.get(b, ()):
            callee, ret = call[c]
            kc, kr = canon(callee), canon(ret)
            if kc is None or kr is None:
                return None
            calls.append((canon(c), kc, kr))
            todo.append(kc[0])
    bodies = tuple(b for b in lay.bodies if id(b) in seen)
    return ("layout", start, tuple(sorted(calls))), bodies


def shared_fit(a, marks, rules, k, st_k) -> bool:
    """rules_fit of the trie's rules (rest, other) at key trie node k (marks: the NFA's
    key_trie_nodes), shared by every grammar of the process with the same rules: looked
    up by the layout's key (_layout_shape), else by their NFA's shape (_rules_shape),
    else checked here."""
    nfa = a.nfa
    lay = _layout_shape(nfa, rules)
    if lay is not None:
        hit = _LAYOUT_FITS.get(lay[0])
        if hit is not None:
            return hit[0]
    shape = _rules_shape(nfa, rules)  # the same rules in another grammar: checked there
    fits = _FITS.get(shape) if shape is not None else None
    if fits is None:
        fits = rules_fit(a, marks, k, st_k)
        if shape is not None and len(_FITS) < MAX_SHAPES:
            _FITS[shape] = fits
    if lay is not None and len(_LAYOUT_FITS) < MAX_SHAPES:
        _LAYOUT_FITS[lay[0]] = (fits, lay[1])
    return fits


def rules_fit(a, marks, k, st) -> bool:
    """Whether the trie's rules have the shape the split needs (key_masks.py's docstring):
    A = the state after a narrow character (in `rest`) against F, a state that goes
    to E (after the closing quote) on the quote, to F again on a plain character and
    as O (the call of `other`) on every other byte, O taking no quote and no plain
    character. A bisimulation over the automaton's rows from (A, F), pairs of equal
    states closed; F is never accepting and never dead. The languages up to the
    closing quote do not depend on the stack st under the trie (both sides return
    through it at E), so one check serves every stack, and every trie over the same
    two rules."""
    narrow_to, other_call, _inner = marks[k]
    end = trie_end(narrow_to)  # not a node found from k: below a name's node the quote is the name's
    any_key = a.intern(*a.closure(narrow_to, st))
    o = a.intern(*a.closure(other_call, st))
    e = a.intern(*a.closure(end, st))
    a.expand(o)
    row_o = a.trans[o].copy()
    if row_o[QUOTE] or row_o[_PLAIN].any():
        return False
    todo, seen = [(any_key, -1)], set()  # -1: F
    while todo:
        pair = todo.pop()
        if pair in seen:
            continue
        seen.add(pair)
        if len(seen) > MAX_CHECK_PAIRS:
            return False
        u, v = pair
        if u == v:
            continue
        if u == 0 or v == 0 or a.accepting[u] != (v > 0 and a.accepting[v]):
            return False
        a.expand(u)
        if v > 0:
            a.expand(v)
            nxt = zip(a.trans[u].tolist(), a.trans[v].tolist())
        else:
            ru = a.trans[u].tolist()
            nxt = [(ru[b], e if b == QUOTE else -1 if _PLAIN[b] else int(row_o[b])) for b in range(256)]
        todo.extend(set(nxt) - seen)
    return True
