"""Grammar IR -> one byte-level NFA with rule calls (a recursive transition network).

Checks on the way (each a CompileError naming the rule and where it is): undefined rule,
grammar that matches nothing, left recursion that is not immediate (immediate left
recursion ``A ::= A x | y`` is rewritten to ``A ::= y x*``).

Nodes are ints. ``edges[n]``: tuple of (lo, hi, target) byte edges; ``eps[n]``: tuple of
targets (tuples, not lists: a tuple of ints leaves the cyclic GC's tracking at its first
collection, where 10^5 lists of a big schema were rescanned by every full collection);
``call``: {call node: (callee start node, return node)}; ``is_end``: the set of
rule-end nodes (return to the caller; at the bottom of the stack: the language may
end). ``is_tail``: return nodes where returning is the same as returning from the
calling rule (tail call: no frame is pushed, so right recursion does not grow the stack).
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
wherever a tick is taken.
"""

from __future__ import annotations

from collections import deque

from furca.errors import CompileError

from . import ir, key_trie
from .deadline import check as check_deadline

MAX_NODES = 2_000_000
COUNTER_THRESHOLD = 16  # x{m,n} with n above this (x not nullable) counts on the stack, not in copies


class NFA:
    def __init__(self):
        self.edges: list[tuple] = []
        self.eps: list[tuple] = []
        self.call: dict[int, tuple] = {}  # call node -> (callee rule name, return node)
        self.counter: dict[int, tuple] = {}  # counter entry -> (body start, exit node, min, max)
        self.length: dict[int, tuple] = {}  # length region entry -> (body start, exit node, min, max or None)
        self.tick: set[int] = set()  # nodes whose byte edges start a character of a length region
        self.length_free: dict[int, int] = {}  # entry of a region with a maximum -> its twin without (masks)
        self.need: dict[int, int] = {}  # node of a region with a maximum -> fewest characters to its end
        self.length_need: dict[int, int] = {}  # entry of a region with a maximum -> the most need of its nodes
        self.is_end: set[int] = set()
        self.rule_start: dict[str, int] = {}
        self.start = 0

    def new(self):
        self.edges.append(())
        self.eps.append(())
        return len(self.edges) - 1


# _no_cycles: a recursive nested function refers to itself through its closure cell, a
# reference cycle that keeps everything it closes over (a half-built NFA: 10^5 tuples)
# alive until the cyclic GC runs; compiles run with the GC paused, and its first
# collection afterwards would traverse all of it with the GIL held. Setting the name to
# None when done breaks the cycle, so reference counting frees it at once.


def _where(g, name):
    pos = g.positions.get(name)
    return f"rule {name!r}" + (f" (defined at offset {pos})" if pos is not None else "")


def _derives(e, known, empty):
    """Whether e derives the empty string (empty=True; known: the nullable rules) or
    some string (empty=False; known: the productive rules)."""
    k = e[0]
    if k == "byte":
        return not empty and bool(e[1])
    if k == "seq":  # loops, not all() / any() over generators: the UTF-8 classes make these wide
        for x in e[1]:
            if x[0] == "byte":
                if empty or not x[1]:
                    return False
            elif not _derives(x, known, empty):
                return False
        return True
    if k == "alt":
        for x in e[1]:
            if x[0] == "byte":
                if not empty and x[1]:
                    return True
            elif _derives(x, known, empty):
                return True
        return False
    if k == "rep":
        return e[2] == 0 or _derives(e[1], known, empty)
    if k == "len":
        return (e[2] == 0 or not empty) and _derives(e[1], known, empty)
    if k == "tick":
        return True
    if k == "keys":  # a quote first; then a non-name's closing quote or one of its two rules
        return not empty and (e[4] or e[2][1] in known or e[3][1] in known)
    return e[1] in known


def _nullable_and_productive(rules, calls=None):
    """(nullable rule names, productive rule names) of `rules` ({name: expr}); calls:
    {name: [its ("ref", ...) exprs]} when known (else collected here). A worklist: a rule
    is looked at again only when a rule it calls became nullable or productive."""
    if calls is None:
        calls = {n: _scan(e, [])[1] for n, e in rules.items()}
    callers: dict = {}
    for n, acc in calls.items():
        for r in acc:
            callers.setdefault(r[1], set()).add(n)
    nullable, productive = set(), set()
    todo = list(rules)
    while todo:
        check_deadline()
        n = todo.pop()
        e = rules[n]
        changed = False
        if n not in nullable and _derives(e, nullable, True):
            nullable.add(n)
            changed = True
        if n not in productive and _derives(e, productive, False):
            productive.add(n)
            changed = True
        if changed:
            todo.extend(callers.get(n, ()))
    return nullable, productive


def _scan(e, acc):
    """(clean, acc): appends every ("ref", name, pos) in e to acc; clean: _simplify leaves
    e as it is when every rule it calls is productive (no empty class, no NOTHING, no
    x{m,0} inside)."""
    k = e[0]
    if k == "byte":
        return bool(e[1]), acc
    if k == "ref":
        acc.append(e)
        return True, acc
    if k == "rep":
        return _scan(e[1], acc)[0] and e[3] != 0, acc
    if k == "len":
        return _scan(e[1], acc)[0], acc
    if k == "tick":
        return True, acc
    if k == "keys":
        acc += (e[2], e[3])
        return True, acc
    items = e[1]
    clean = bool(items) or k == "seq"
    for x in items:
        t = x[0]
        if t == "byte":
            if not x[1]:
                clean = False
        elif t == "ref":
            acc.append(x)
        elif not _scan(x, acc)[0]:
            clean = False
    return clean, acc


def _simplify(e, productive):
    """Drops what can never match (calls to unproductive rules, empty classes)."""
    k = e[0]
    if k == "byte":
        return e if e[1] else ir.NOTHING
    if k == "ref":
        return e if e[1] in productive else ir.NOTHING
    if k == "seq":
        check_deadline()
        items = [_simplify(x, productive) for x in e[1]]
        if any(x == ir.NOTHING for x in items):
            return ir.NOTHING
        return ir.seq(items) if items else ir.EMPTY
    if k == "alt":
        check_deadline()
        items = [x for x in (_simplify(x, productive) for x in e[1]) if x != ir.NOTHING]
        return ir.alt(items) if items else ir.NOTHING
    if k == "rep":
        x = _simplify(e[1], productive)
        if x == ir.NOTHING:
            return ir.EMPTY if e[2] == 0 else ir.NOTHING
        if e[3] == 0:
            return ir.EMPTY
        return ("rep", x, e[2], e[3])
    if k == "len":
        x = _simplify(e[1], productive)
        return ir.NOTHING if x == ir.NOTHING else ("len", x, e[2], e[3])
    if k == "keys" and not (e[2][1] in productive and e[3][1] in productive):
        return _simplify(key_trie.expand(e), productive)
    return e


def _remove_immediate_left_recursion(name, e):
    alts = e[1] if e[0] == "alt" else [e]
    rec, base = [], []
    for a in alts:
        items = a[1] if a[0] == "seq" else [a]
        if items and items[0][0] == "ref" and items[0][1] == name:
            rec.append(ir.seq(items[1:]))
        else:
            base.append(a)
    if not rec:
        return e
    if not base:
        return ir.NOTHING
    return ir.seq([ir.alt(base), ("rep", ir.alt(rec), 0, None)])


def _first_refs(e, nullable, acc):
    """Rule refs that can be reached before any byte is consumed. Returns nullable(e)."""
    k = e[0]
    if k == "byte":
        return False
    if k == "ref":
        acc.add(e[1])
        return e[1] in nullable
    if k == "seq":
        for x in e[1]:
            if not _first_refs(x, nullable, acc):
                return False
        return True
    if k == "alt":
        r = False
        for x in e[1]:
            r |= _first_refs(x, nullable, acc)
        return r
    if k == "rep":
        return _first_refs(e[1], nullable, acc) or e[2] == 0
    if k == "len":
        return _first_refs(e[1], nullable, acc) and e[2] == 0
    return k != "keys"  # a tick: nullable; a key trie: a quote first


def prepare(g: ir.Grammar) -> ir.Grammar:
    """Resolves, simplifies and checks a grammar; returns the rules reachable from root
    (in g's order) with ``.nullable``, the set of their nullable names. Each rule is walked
    once for its calls (_scan); only a rule holding something that never matches, or
    calling a rule that never completes, is rebuilt (_simplify)."""
    rules, calls, clean = {}, {}, {}
    for name, e in g.rules.items():
        check_deadline()
        e2 = _remove_immediate_left_recursion(name, e)
        clean[name], acc = _scan(e2, [])
        for r in acc if e2 is e else _scan(e, [])[1]:
            if r[1] not in g.rules:
                raise CompileError(f"undefined rule {r[1]!r} referenced at offset {r[2]} (in {_where(g, name)})")
        rules[name], calls[name] = e2, acc
    if g.root not in rules:
        raise CompileError(f"grammar has no root rule {g.root!r}")
    nullable, productive = _nullable_and_productive(rules, calls)
    if g.root not in productive:
        raise CompileError(f"the grammar matches no string ({_where(g, g.root)} can never complete)")
    # keep what root reaches; simplifying drops no nullable derivation (those call only
    # productive rules), so `nullable` stays exact for what is kept
    reach, todo = {g.root}, [g.root]
    while todo:
        check_deadline()
        n = todo.pop()
        acc = calls[n]
        if not clean[n] or any(r[1] not in productive for r in acc):
            rules[n] = _simplify(rules[n], productive)
            acc = _scan(rules[n], [])[1]
        for r in acc:
            if r[1] not in reach:
                reach.add(r[1])
                todo.append(r[1])
    rules = {n: e for n, e in rules.items() if n in reach}
    nullable &= reach
    first = {n: set() for n in rules}
    for n, e in rules.items():
        check_deadline()
        _first_refs(e, nullable, first[n])
    _check_left_recursion(g, rules, first)
    out = ir.Grammar(rules, g.root, g.positions)
    out.nullable = nullable
    return out


def _check_left_recursion(g, rules, first):
    """CompileError naming the cycle when the "calls before consuming" graph (first:
    {rule: rules it may call before any byte}) has one. Depth-first with an explicit
    stack, so call chains of any length are checked."""
    state = {}  # 1: on the path, 2: done
    for top in rules:
        if top in state:
            continue
        state[top] = 1
        path, its = [top], [iter(first[top])]
        while its:
            m = next(its[-1], None)
            if m is None:
                state[path.pop()] = 2
                its.pop()
                continue
            st = state.get(m)
            if st == 1:
                cyc = path[path.index(m):] + [m]
                raise CompileError("left recursion is not supported (only the immediate form A ::= A x | y is "
                                   f"rewritten): {' -> '.join(cyc)} ({_where(g, m)})")
            if st is None:
                check_deadline()
                state[m] = 1
                path.append(m)
                its.append(iter(first[m]))


def build_nfa(g: ir.Grammar) -> NFA:
    """g must come from prepare(). Fragments are glued onto the node they start from
    (no epsilon per concatenation): frag(e, s) adds e's edges leaving s and returns the
    node where e ends. Loops always go to a fresh node, so edges later added to a
    fragment's end never become reachable from inside the fragment."""
    nfa = NFA()
    edges, eps, new, call = nfa.edges, nfa.eps, nfa.new, nfa.call
    nullable = getattr(g, "nullable", None)
    if nullable is None:
        nullable, _ = _nullable_and_productive(g.rules)
    in_len = [0]  # > 0 inside a length region: repetitions are copies

    def frag(e, s):
        k = e[0]
        if k == "seq":
            check_deadline()
            for x in e[1]:
                kx = x[0]
                if kx == "byte":  # inline: most items are bytes and calls
                    t = len(edges)
                    edges.append(())
                    eps.append(())
                    r = x[1]
                    edges[s] += ((r[0][0], r[0][1], t),) if len(r) == 1 else tuple((lo, hi, t) for lo, hi in r)
                    s = t
                elif kx == "ref":
                    c = len(edges)
                    edges.extend(((), ()))
                    eps.extend(((), ()))
                    eps[s] += (c,)
                    call[c] = (x[1], c + 1)
                    s = c + 1
                else:
                    s = frag(x, s)
            if len(edges) >= MAX_NODES:
                raise CompileError(f"grammar too large: more than {MAX_NODES} automaton nodes "
                                   "(large bounded repetitions?)")
            return s
        if k == "byte":
            t = new()
            edges[s] += tuple((lo, hi, t) for lo, hi in e[1])
            return t
        if k == "alt":
            check_deadline()
            t = new()
            for x in e[1]:
                if x[0] == "byte":  # a one-byte branch goes straight to the join
                    edges[s] += tuple((lo, hi, t) for lo, hi in x[1])
                else:
                    eps[frag(x, s)] += (t,)
            return t
        if k == "rep":
            x, lo, hi = e[1], e[2], e[3]
            if max(lo, hi or 0) > COUNTER_THRESHOLD and not in_len[0] and not _first_refs(x, nullable, set()):
                top = lo if hi is None else hi
                body_start = new()
                nfa.is_end.add(frag(x, body_start))  # the body returns to its counter frame
                entry, done = new(), new()
                eps[s] += (entry,)
                nfa.counter[entry] = (body_start, done, lo, top)
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
            for _ in range(hi - lo):
                eps[cur] += (t,)
                cur = frag(x, cur)
            eps[cur] += (t,)
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

    try:
        for name, e in g.rules.items():
            check_deadline()
            s = new()
            nfa.rule_start[name] = s
            nfa.is_end.add(frag(e, s))
            if len(edges) >= MAX_NODES:
                raise CompileError(f"grammar too large: more than {MAX_NODES} automaton nodes "
                                   "(large bounded repetitions?)")
    finally:
        frag = None  # noqa: F841 - (_no_cycles)
    rule_start, merged, seen = nfa.rule_start, {}, {}
    for c, (name, r) in call.items():
        if not edges[r] and len(eps[r]) == 1:  # else r is its own merge (most calls): no call
            r = _merge_return(nfa, r, seen)
        merged[c] = (rule_start[name], r)
    nfa.call = merged
    nfa.start = nfa.rule_start[g.root]
    nfa.is_tail = _tails(nfa)
    return nfa


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
    tails = set()
    for _, r in nfa.call.values():
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
