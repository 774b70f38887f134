"""Grammar IR (checked by `prepare.prepare`) -> one byte-level NFA with rule calls (a
recursive transition network).

Nodes are ints. ``edges[n]``: tuple of (lo, hi, target) byte edges; ``eps[n]``: tuple of
targets (tuples, not lists: a tuple of ints leaves the cyclic GC's tracking at its first
collection, where 10^5 lists of a big schema were rescanned by every full collection);
``call``: {call node: (callee start node, return node)}; ``is_end``: the set of
rule-end nodes (return to the caller; at the bottom of the stack: the language may
end). ``is_tail``: return nodes where returning is the same as returning from the
calling rule (tail call: no frame is pushed, so right recursion does not grow the stack),
except a call from the grammar's own rules into a lasting one (build_nfa).
``counter``: large bounded repetitions ``x{m,n}`` (n > COUNTER_THRESHOLD) are not copied
n times: entering pushes a counter frame (entry node, k=1) and runs the body ``x`` (its
end is a rule end); returning with k < n may run the body again with k+1, with k >= m
leaves through the exit node. Only the counts a walk reaches become states.
``length``: length regions ``("len", x, m, n)`` (strings of x with m..n characters):
entering pushes a length frame (entry node, count 1 + characters so far); ``tick``
holds the nodes whose byte edges start a character (each consumed byte from one
adds 1 to the top frame's count; dead past n); x's end is a rule end that returns
through the frame to the exit node only with at least m characters. ``length_free``:
each bounded region's twin entry without the maximum (never entered: the canonical
form of states far from the maximum, see automaton.canonical). Inside a region
repetitions are copies (no counter frame), so its length frame is the top frame
wherever a tick is taken. ``copies``: the chains of at least MIN_CHAIN optional copies
inside a region, each copy the one before it with its nodes shifted (built one after the
other from the same IR), for slices.SliceBounds to move states down a chain.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

from furca.errors import CompileError

from . import ir, key_trie
from .deadline import check as check_deadline
from .ir_bounds import _fewest, _least_bytes
from .prepare import first_refs, nullable_and_productive

MAX_NODES = 2_000_000
MIN_CHAIN = 8  # optional copies inside a length region recorded as a chain (nfa.copies), at least
COUNTER_THRESHOLD = 16  # x{m,n} with n above this (x not nullable) counts on the stack, not in copies


class NFA:
    def __init__(self):
        self.edges: list[tuple] = []
        self.eps: list[tuple] = []
        self.call: dict[int, tuple] = {}  # call node -> (callee rule start node, return node)
        self.counter: dict[int, tuple] = {}  # counter entry -> (body start, exit node, min, max)
        self.counter_bytes: dict[int, int] = {}  # counter entry -> fewest bytes of a body (>= 1)
        # counter entries whose body holds a call, a key trie or a length region (an array's item,
        # not a character or a word): abstract states are cut at their frames (automaton._base)
        self.item_counters: set[int] = set()
        self.length: dict[int, tuple] = {}  # length region entry -> (body start, exit node, min, max or None)
        self.tick: set[int] = set()  # nodes whose byte edges start a character of a length region
        self.length_free: dict[int, int] = {}  # entry of a region with a maximum -> its twin without (masks)
        self.need: dict[int, int] = {}  # node of a region with a maximum -> fewest characters to its end
        self.length_need: dict[int, int] = {}  # entry of a region with a maximum -> the most need of its nodes
        self.is_end: set[int] = set()
        self.rule_start: dict[str, int] = {}
        self.start = 0
        # key trie node -> (narrow classes' target, call of other, whether it has children): key_trie.add_to_nfa
        self.key_trie_nodes: dict[int, tuple] = {}
        # chains of optional copies inside length regions: (first node of the first copy, nodes per copy,
        # copies, fewest characters in a copy), no tick on a UTF-8 continuation byte; copy_chains.py
        self.copies: list[tuple] = []
        self.layout = None  # the _Layout of the lasting rules at node 0 (build_nfa), if kept
        # arrays of distinct string items (ir.Grammar.unique) and the node ranges [start, end)
        # of their rules and item rules, built one after the other (unique.py)
        self.unique: dict[str, tuple] = {}
        # objects in any member order (ir.Grammar.objects); their own rules' spans too (members.py)
        self.objects: dict[str, tuple] = {}
        self.spans: dict[str, tuple[int, int]] = {}

    def new(self):
        self.edges.append(())
        self.eps.append(())
        return len(self.edges) - 1


# _no_cycles: a recursive nested function refers to itself through its closure cell, a
# reference cycle that keeps everything it closes over (a half-built NFA: 10^5 tuples)
# alive until the cyclic GC runs; compiles run with the GC paused, and its first
# collection afterwards would traverse all of it with the GIL held. Setting the name to
# None when done breaks the cycle, so reference counting frees it at once.


def build_nfa(g: ir.Grammar) -> NFA:
    """g must come from prepare(). Fragments are glued onto the node they start from
    (no epsilon per concatenation): frag(e, s) adds e's edges leaving s and returns the
    node where e ends. Loops always go to a fresh node, so edges later added to a
    fragment's end never become reachable from inside the fragment."""
    nfa = NFA()
    edges, eps, new, call = nfa.edges, nfa.eps, nfa.new, nfa.call
    nullable = getattr(g, "nullable", None)
    if nullable is None:
        nullable, _ = nullable_and_productive(g.rules)
    in_len = [0]  # > 0 inside a length region: repetitions are copies
    least: dict = {}  # _least_bytes' memo
    nfa.unique = dict(getattr(g, "unique", None) or {})
    watched = set(nfa.unique) | {v[0] for v in nfa.unique.values()}
    nfa.objects = dict(getattr(g, "objects", None) or {})
    for o, (own, *_rest) in nfa.objects.items():
        watched.add(o)
        watched.update(own)

    def frag(e, s):
        k = e[0]
        if k == "seq":
            check_deadline()
            fresh = False  # s made here: no edges yet (assigned, not concatenated)
            for x in e[1]:
                kx = x[0]
                if kx == "byte":  # inline: most items are bytes (literal keys: runs of them) and calls
                    t = len(edges)
                    r = x[1]
                    if len(r) == 1:
                        lo, hi = r[0]
                        out = ((lo, hi, t),)
                    else:
                        out = tuple([(lo, hi, t) for lo, hi in r])
                    if fresh:
                        edges[s] = out
                    else:
                        edges[s] += out
                        fresh = True
                    edges.append(())
                    eps.append(())
                    s = t
                    continue
                fresh = False
                if kx == "ref":
                    c = len(edges)
                    edges.extend(((), ()))
                    eps.extend(((), ()))
                    eps[s] += (c,)
                    call[c] = (x[1], c + 1)
                    s = c + 1
                    fresh = True
                else:
                    s = frag(x, s)
            if len(edges) >= MAX_NODES:
                raise CompileError(f"grammar too large: more than {MAX_NODES} automaton nodes "
                                   "(large bounded repetitions?)")
            return s
        if k == "byte":
            t = len(edges)
            edges.append(())
            eps.append(())
            r = e[1]
            edges[s] += ((r[0][0], r[0][1], t),) if len(r) == 1 else tuple([(lo, hi, t) for lo, hi in r])
            return t
        if k == "alt":
            check_deadline()
            t = len(edges)
            edges.append(())
            eps.append(())
            for x in e[1]:
                if x[0] == "byte":  # a one-byte branch goes straight to the join
                    r = x[1]
                    edges[s] += ((r[0][0], r[0][1], t),) if len(r) == 1 else tuple([(lo, hi, t) for lo, hi in r])
                else:
                    eps[frag(x, s)] += (t,)
            return t
        if k == "rep":
            x, lo, hi = e[1], e[2], e[3]
            if ((len(e) > 4 or max(lo, hi or 0) > COUNTER_THRESHOLD) and not in_len[0]
                    and not first_refs(x, nullable, set())):
                top = lo if hi is None else hi
                body_start = new()
                nfa.is_end.add(frag(x, body_start))  # the body returns to its counter frame
                entry, done = new(), new()
                eps[s] += (entry,)
                nfa.counter[entry] = (body_start, done, lo, top)
                fewest = _fewest(x, "byte")
                if fewest is None:  # a call, key trie or length region in the body: a bound through them
                    nfa.item_counters.add(entry)
                    fewest = _least_bytes(x, g.rules, least, set(), 0)
                nfa.counter_bytes[entry] = max(1, fewest)
                if hi is None:  # x{lo,}: then x*
                    loop = new()
                    eps[done] += (loop,)
                    eps[frag(x, loop)] += (loop,)
                    return loop
                return done
            cur = s
            for _ in range(lo):
                cur = frag(x, cur)
            if hi is None:
                loop = new()
                eps[cur] += (loop,)
                eps[frag(x, loop)] += (loop,)
                return loop
            if hi == lo:
                return cur
            t = new()
            starts = []
            for _ in range(hi - lo):
                eps[cur] += (t,)
                starts.append(len(edges))
                cur = frag(x, cur)
            eps[cur] += (t,)
            ticks = _fewest(x, "tick") if in_len[0] and len(starts) >= MIN_CHAIN else None
            if ticks:
                stride = len(edges) - starts[-1]
                first = range(starts[0], starts[0] + stride)
                if stride and all(b - a == stride for a, b in zip(starts, starts[1:])) and not any(
                        b0 <= 0xBF and b1 >= 0x80 for n in first if n in nfa.tick for b0, b1, _t in edges[n]):
                    nfa.copies.append((starts[0], stride, len(starts), ticks))
            return t
        if k == "ref":
            c, r = new(), new()
            eps[s] += (c,)
            call[c] = (e[1], r)
            return r
        if k == "tick":
            t = new()
            eps[s] += (t,)
            nfa.tick.add(t)
            return t
        if k == "len":
            body_start = new()
            in_len[0] += 1
            body_end = frag(e[1], body_start)
            nfa.is_end.add(body_end)  # the body returns to its length frame
            in_len[0] -= 1
            most = _region_need(nfa, range(body_start, len(edges)), body_end) if e[3] is not None else 0
            entry, done = new(), new()
            eps[s] += (entry,)
            nfa.length[entry] = (body_start, done, e[2], e[3])
            if e[3] is not None:  # the same region without its maximum: shared masks (automaton.canonical)
                free = new()
                nfa.length[free] = (body_start, done, e[2], None)
                nfa.length_free[entry] = free
                nfa.length_need[entry] = most
            return done
        if k == "keys":
            t = key_trie.add_to_nfa(nfa, e, s)
            if len(edges) >= MAX_NODES:
                raise CompileError(f"grammar too large: more than {MAX_NODES} automaton nodes")
            return t
        raise AssertionError(e)

    def build(names):
        for name in names:
            check_deadline()
            s = new()
            nfa.rule_start[name] = s
            nfa.is_end.add(frag(g.rules[name], s))
            if name in watched:
                nfa.spans[name] = (s, len(edges))
            if len(edges) >= MAX_NODES:
                raise CompileError(f"grammar too large: more than {MAX_NODES} automaton nodes "
                                   "(large bounded repetitions?)")

    try:
        rest = list(g.rules)
        lasting = [n for n in rest if n in g.lasting]
        if lasting:  # laid out first, at node 0: the same nodes in every grammar that has them
            rest = [n for n in rest if n not in g.lasting]
            lasting.sort(key=lambda n: id(g.rules[n]))  # the layout's order: by body, not name
            key = tuple([id(g.rules[n]) for n in lasting])
            layout = _LAYOUTS.get(key)
            if layout is not None and all(g.rules[n] is b for n, b in zip(lasting, layout.bodies)):
                layout.copy_into(nfa, lasting)
            else:
                build(lasting)
                layout = _Layout.of(nfa, [g.rules[n] for n in lasting], lasting)
                if layout is not None and _layout_room(layout.size):
                    _LAYOUTS[key] = layout
            nfa.layout = layout
        build(rest)
    finally:
        frag = build = None  # noqa: F841 - (_no_cycles)
    rule_start, merged, seen = nfa.rule_start, {}, {}
    for c, (name, r) in call.items():
        if not edges[r] and len(eps[r]) == 1:  # else r is its own merge (most calls): no call
            r = _merge_return(nfa, r, seen)
        merged[c] = (rule_start[name], r)
    nfa.call = merged
    nfa.start = nfa.rule_start[g.root]
    nfa.is_tail = _tails(nfa)
    if nfa.layout is not None and not nfa.objects and not nfa.unique:
        # a call from the grammar's own rules into a lasting one (a JSON value, string,
        # number) keeps its frame even in tail position: the lasting rule's states then
        # have a frame of their own to be cut at (automaton.abstract), the same abstract
        # states, and masks, wherever it is called (contexts.ContextSplit.context). Not where a
        # matcher watches objects' keys or arrays' items (members.py, unique.py): their
        # watches read the stacks as the tail calls leave them
        size = nfa.layout.size
        nfa.is_tail -= {r for c, (callee, r) in nfa.call.items() if callee < size <= c}
    return nfa


class _Layout:
    """The nodes of a grammar's lasting rules (ir.Grammar.lasting: bodies that live
    across compiles), built at node 0 by build_nfa, one block per body in the order of
    the bodies' ids: every later grammar with the same bodies copies them (their edges
    are absolute node numbers, valid at node 0 in any NFA; calls name their callee)
    instead of building them again, whatever the rules are called there. Only rules of
    plain nodes qualify: no counter, length region, key trie or chain (tables keyed by
    more than a node's edges).

    A block's nodes are the same at any offset (frag numbers a body's nodes in the order
    it meets them), so (id(body), node - block start) names a node in every layout that
    holds the body: `canon`. When every call of the layout goes to one of its own rules
    (`closed`), the language from such nodes is the same in every grammar: masks.py
    shares the masks of states that lie wholly inside (abstract states of lexemes)."""

    __slots__ = ("bodies", "edges", "eps", "call", "is_end", "starts", "size", "closed", "_bounds", "_ids", "packed")

    @classmethod
    def of(cls, nfa, bodies, names):
        """The layout of nfa as built so far (the lasting rules `names`, bodies in that
        order), or None."""
        if (nfa.counter or nfa.length or nfa.tick or nfa.length_free or nfa.need or nfa.length_need
                or nfa.key_trie_nodes or nfa.copies):
            return None
        lay = cls()
        lay.bodies = bodies  # kept alive: the layout is keyed by their ids
        lay.edges, lay.eps = tuple(nfa.edges), tuple(nfa.eps)
        lay.call, lay.is_end = dict(nfa.call), frozenset(nfa.is_end)
        lay.starts = tuple(nfa.rule_start[n] for n in names)
        lay.size = len(nfa.edges)
        # closed: each callee is a rule of the layout, and the body under that name in
        # any grammar copying it is the same (a body that calls itself names its rule)
        own = set(names)
        lay.closed = all(callee in own for callee, _r in lay.call.values())
        lay._bounds = lay.starts[1:] + (lay.size,)
        lay._ids = tuple(id(b) for b in bodies)
        lay.packed = None  # its edges packed for the row kernel (core_pack.layout_edges), at the first pack
        return lay

    def copy_into(self, nfa, names):
        """Lays the layout out at node 0 of the empty nfa, its blocks under `names`."""
        nfa.edges.extend(self.edges)
        nfa.eps.extend(self.eps)
        nfa.call.update(self.call)
        nfa.is_end.update(self.is_end)
        nfa.rule_start.update(zip(names, self.starts))

    def canon(self, node):
        """(id(body), offset in its block) of a node of the layout, or None past it."""
        if node >= self.size or node < 0:
            return None
        i = bisect_right(self._bounds, node)
        return self._ids[i], node - self.starts[i]


def closed_layout_size(nfa) -> int:
    """The nodes of nfa's closed layout of lasting rules (a state lying wholly below them
    has its abstract masks shared by every grammar: lexeme_masks.py), 0 without one."""
    lay = nfa.layout
    return lay.size if lay is not None and lay.closed else 0


_LAYOUTS: dict = {}  # (id(body) of each lasting rule, in id order) -> _Layout
# kept until either bound: a layout is ~100 bytes a node; one per combination of lasting
# bodies a grammar holds (the 500 sample: 59, of 209 nodes on average, the formats'
# up to ~2,000), built again for each grammar once the bounds are met
MAX_LAYOUTS = 256
MAX_LAYOUT_NODES = 1 << 16
_LAYOUT_NODES = [0]


def _layout_room(size: int) -> bool:
    """Whether a layout of size nodes may join _LAYOUTS (counted in when it may)."""
    if len(_LAYOUTS) >= MAX_LAYOUTS or _LAYOUT_NODES[0] + size > MAX_LAYOUT_NODES:
        return False
    _LAYOUT_NODES[0] += size
    return True


def _region_need(nfa, nodes, end):
    """nfa.need for the nodes of a length region (a range: built in one piece, no call
    or other region inside): the fewest characters (ticks) on a path to the region's
    end `end`. A configuration whose count plus its need passes the maximum
    can never leave the region (automaton.closure drops it). A 0-1 breadth-first
    search over the reversed edges. Returns the largest need."""
    rev = {}
    for n in nodes:
        cost = 1 if n in nfa.tick else 0
        for t in nfa.eps[n]:
            rev.setdefault(t, []).append((n, 0))
        for _lo, _hi, t in nfa.edges[n]:
            rev.setdefault(t, []).append((n, cost))
    need = {end: 0}
    todo = deque([end])
    while todo:
        x = todo.popleft()
        d = need[x]
        for n, c in rev.get(x, ()):
            if need.get(n, d + c + 1) > d + c:
                need[n] = d + c
                if c:
                    todo.append(n)
                else:
                    todo.appendleft(n)
    nfa.need.update(need)
    return max(need.values())


def _merge_return(nfa, r, seen):
    """The node a call may return to instead of r: r's chain of plain epsilon steps (a node
    with no byte edge, no call, no counter, not a rule end and exactly one epsilon
    successor behaves as its successor). Calls whose continuations join (the alternatives
    of a key trie each calling key-rest, then `":"`) then push the same frame, so the
    automaton states inside the callee are shared instead of one set per call site.
    seen: {node: where its chain ends}, filled for every node walked, so the calls of a
    key trie (chains up through every level of the trie) cost one step a node in all,
    not the trie's depth each (9,400 calls, 4% of a Kubernetes schema's compile)."""
    edges, eps, call, counter, is_end, length = nfa.edges, nfa.eps, nfa.call, nfa.counter, nfa.is_end, nfa.length
    path = []
    for _ in range(10_000):
        hit = seen.get(r)
        if hit is not None:
            r = hit
            break
        if edges[r] or len(eps[r]) != 1 or r in call or r in counter or r in is_end or r in length:
            break
        path.append(r)
        r = eps[r][0]
    for x in path:
        seen[x] = r
    return r


def _tails(nfa):
    """Return nodes r from which only rule ends are reachable without consuming or
    calling (a call returning there is a tail call)."""
    tails, done = set(), set()
    edges, call = nfa.edges, nfa.call
    for _, r in call.values():
        if r in done:  # calls whose continuations join (key tries) share their return node
            continue
        done.add(r)
        if edges[r] or r in call:  # a byte or a call right away: not a tail
            continue
        check_deadline()
        seen, todo, ok = {r}, [r], True
        while todo and ok:
            x = todo.pop()
            if nfa.edges[x] or x in nfa.call:
                ok = False
            for y in nfa.eps[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        if ok and any(x in nfa.is_end for x in seen):
            tails.add(r)
    return tails
