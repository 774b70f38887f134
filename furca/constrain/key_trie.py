"""The IR's key trie, ``("keys", names, rest, other, is_open)``: a quoted JSON key that is
none of `names`, built into the NFA straight from the names.

What it means (`expand` writes it as ordinary IR): the opening quote, then at each trie
node the alternatives, in this order: the closing quote when the prefix so far is not a
name; each child character (in the order the names first reach it) followed by its
child's alternatives; one plain ASCII character that is no child, then the rule `rest`
(the rest of any key and its closing quote); the rule `other` (a wide character or an
escape, then `rest`). Every name is plain ASCII (0x20-0x7F, no quote or backslash): the
JSON-schema translator (json_schema/keys.py) sends other name sets through ordinary IR.
`is_open`: some trie node is not a name (the trie derives a string without its rules).

Why: a Kubernetes schema has ~85 such tries (~3,800 trie nodes). As ordinary IR, each
trie node is an `alt` of `seq`s that `lower`, `prepare` (scans, the nullable and
productive worklist) and `build_nfa` (a fragment per expression, then a merge of each
call's return) each walk, and ~7 NFA nodes (57% of a Kubernetes schema's 50,700).
`add_to_nfa` builds an NFA of the same language with one NFA node per trie node (the
rest shared, see there), in one loop; tests/constrain/test_key_tries.py checks the
language and the masks against `expand`'s.
"""

from __future__ import annotations

from .deadline import check as check_deadline

_PLAIN_ASCII = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7F))  # ASCII written as itself in a key
_QUOTE = ("byte", ((0x22, 0x22),))


def is_plain(ch: str) -> bool:
    """A character a JSON key spells as itself, one byte: printable ASCII but `"` and `\\`."""
    return " " <= ch < "\x80" and ch not in '"\\'


def plain_ascii_except(codes) -> tuple:
    """The plain ASCII code points without the sorted `codes` (all plain): sorted,
    disjoint, non-adjacent (lo, hi) ranges."""
    out = []
    i, n = 0, len(codes)
    for lo, hi in _PLAIN_ASCII:
        while i < n and codes[i] <= hi:
            if codes[i] > lo:
                out.append((lo, codes[i] - 1))
            lo = codes[i] + 1
            i += 1
        if lo <= hi:
            out.append((lo, hi))
    return tuple(out)


def trie_of(names) -> dict:
    """{child character: node}, None -> True where the prefix is a name."""
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[None] = True
    return trie


def keys(names, rest: str, other: str):
    """The IR expression of the trie of `names` (a tuple of plain ASCII names) whose
    leaving branches call the rules `rest` and `other`."""
    names = tuple(names)
    if not all(is_plain(ch) for name in names for ch in name):
        raise ValueError("key trie names must be plain ASCII (no quote, backslash or control character)")
    found = set(names)
    is_open = "" not in found or any(name[:i] not in found for name in names for i in range(1, len(name)))
    return ("keys", names, ("ref", rest, 0), ("ref", other, 0), is_open)


def expand(e):
    """The same language as ordinary IR (seq / alt / byte / ref)."""
    _k, names, rest, other, _open = e

    def below(node):
        kids = [k for k in node if k is not None]
        parts = [] if None in node else [_QUOTE]
        for ch in kids:
            o = ord(ch)
            parts.append(("seq", [("byte", ((o, o),)), below(node[ch])]))
        narrow = plain_ascii_except(sorted(ord(k) for k in kids))
        if narrow:
            parts.append(("seq", [("byte", narrow), rest]))
        parts.append(other)
        return ("alt", parts)

    try:
        return ("seq", [_QUOTE, below(trie_of(names))])
    finally:
        below = None  # noqa: F841 - a recursive closure: break its cycle (compiles run with the GC paused)


def trie_end(narrow_to: int) -> int:
    """The end node of the trie whose narrow classes go to NFA node narrow_to
    (key_trie_nodes' first field): where every closing quote of a key that is no name
    goes, and both rule calls return (add_to_nfa's node layout)."""
    return narrow_to - 1


def trie_nodes(nfa) -> dict:
    """{trie node: (narrow classes' target, call of other, whether it has children)} over
    every key trie that add_to_nfa built into nfa (slice_proof.SliceProof reads them: see
    there)."""
    return nfa.key_trie_nodes


def add_to_nfa(nfa, e, s: int) -> int:
    """Adds the trie `e` leaving NFA node s; returns the node where it ends. The NFA of
    `expand(e)` would give every trie node its own join, narrow-class target and two call
    sites (~7 NFA nodes); here the trie nodes share them: one end node (every closing
    quote and both calls return there), one target of every narrow class (then the call
    of `rest`) and one call of `other`, so a trie node is one NFA node with its byte
    edges and an epsilon to that call. The automaton's configurations are the nodes with
    byte edges (closures.py), so its states are the same either way: the trie nodes and
    the called rules' nodes, under the same return frame (build_nfa merged every return
    of the expansion into the trie's end)."""
    _k, names, rest, other, _open = e
    edges, eps, call = nfa.edges, nfa.eps, nfa.call
    base = len(edges)
    # base: the trie's root (after the opening quote); +1 the end; +2 the narrow classes'
    # target, +3 its call of rest, +4 that call's return; +5 the call of other, +6 its return
    root, end, narrow_to, rest_call, other_call = base, base + 1, base + 2, base + 3, base + 5
    edges.extend(((),) * 7)
    eps.extend(((), (), (rest_call,), (), (end,), (), (end,)))
    call[rest_call] = (rest[1], rest_call + 1)
    call[other_call] = (other[1], other_call + 1)
    edges[s] += ((0x22, 0x22, root),)
    to_other = (other_call,)  # one tuple for every trie node's epsilon
    quote = ((0x22, 0x22, end),)  # the closing quote of a prefix that is no name
    narrow_of = {}  # the children's characters -> the narrow class's edges (one tuple per set)
    # every trie node: its edges are the closing quote (not at a name), one per child (a
    # trie node) and plain ASCII to narrow_to; its epsilon calls other (trie_nodes: inner
    # nodes and leaves apart)
    marks = nfa.key_trie_nodes
    inner, leaf = (narrow_to, other_call, True), (narrow_to, other_call, False)
    todo = [(trie_of(names), root)]
    while todo:
        check_deadline()
        node, at = todo.pop()
        while True:  # the last child next (as if pushed and popped): the node order of a stack walk
            if len(node) == 1 and None not in node:  # most trie nodes: one child, not a name
                for ch in node:
                    pass
                u = len(edges)
                edges.append(())
                eps.append(())
                o = ord(ch)
                narrow = narrow_of.get(ch)
                if narrow is None:
                    narrow = narrow_of[ch] = tuple([(lo, hi, narrow_to) for lo, hi in plain_ascii_except((o,))])
                edges[at] = quote + ((o, o, u),) + narrow
                eps[at] = to_other
                marks[at] = inner
                node, at = node[ch], u
                continue
            out = [] if None in node else [quote[0]]
            kids = [k for k in node if k is not None]
            for ch in kids:
                u = len(edges)
                edges.append(())
                eps.append(())
                o = ord(ch)
                out.append((o, o, u))
            key = kids[0] if len(kids) == 1 else tuple(sorted(kids))
            narrow = narrow_of.get(key)
            if narrow is None:
                narrow = narrow_of[key] = tuple([(lo, hi, narrow_to)
                                                 for lo, hi in plain_ascii_except(sorted(ord(k) for k in kids))])
            edges[at] = tuple(out) + narrow
            eps[at] = to_other
            marks[at] = inner if kids else leaf
            if not kids:
                break
            for ch, (_lo, _hi, u) in zip(kids[:-1], out[-len(kids):-1]):
                todo.append((node[ch], u))
            node, at = node[kids[-1]], out[-1][2]
    return end
