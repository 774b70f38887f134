"""Closures over the NFA: where configurations ``(nfa node, stack)`` go without consuming.

A closure follows epsilon edges, rule calls (push a return frame; a tail call pushes
none), rule ends (return through the top frame), counter frames (x{m,n}: run the body
again or leave) and length frames (a region's character count: leave only past its
minimum). ``Closures`` computes them for one grammar over the automaton's interned
stacks (stacks.py) and caches them: per (node, stack), and per node for the part that
stays above any stack (`relative`, which big grammars need: closures of thousands of
epsilon steps were otherwise recomputed for every new stack). It also gives a node's byte
classes (`template`) and the stack after a byte (`byte_stack`: a length region counts
characters). It knows nothing of states; the automaton (automaton.py) interns what it
returns. See DESIGN.md.
"""

from __future__ import annotations

from .deadline import check as check_deadline
from .nfa import NFA
from .stacks import CUT_RET, Stacks


def _node_template(edges):
    """((start, stop, target nodes), ...) over the byte classes of one node's edges (a
    tuple: cached for every node a walk reaches, and tuples of ints leave the GC's tracking)."""
    if len(edges) == 1:
        lo, hi, t = edges[0]
        return ((lo, hi + 1, (t,)),)
    cuts = sorted({lo for lo, _h, _t in edges} | {hi + 1 for _l, hi, _t in edges})
    pos = {c: i for i, c in enumerate(cuts)}
    classes = [set() for _ in range(len(cuts) - 1)]  # per interval [cuts[i], cuts[i + 1])
    for lo, hi, t in edges:  # each edge covers a run of intervals: O(edges + covered), not O(intervals x edges)
        for j in range(pos[lo], pos[hi + 1]):
            classes[j].add(t)
    return tuple((cuts[j], cuts[j + 1], tuple(sorted(c))) for j, c in enumerate(classes) if c)


def return_through(nfa: NFA, ret: int, k: int):
    """Where a rule end goes through the frame (ret, k): ((next node, count pushed again or
    None), ...). A length frame (k - 1 characters) leaves to its exit past its minimum; a
    counter frame (k bodies done) runs the body again with k + 1 below its maximum and
    leaves at or past its minimum; a call frame (k = 0) returns to ret."""
    if not k:
        return ((ret, None),)
    if ret in nfa.length:
        _body, exit_, lo, _hi = nfa.length[ret]
        return ((exit_, None),) if k > lo else ()
    body, done, lo, hi = nfa.counter[ret]
    return ((body, k + 1),) * (k < hi) + ((done, None),) * (k >= lo)


class Closures:
    """closure(node, stack) / closure_of(pairs) / relative(node) / template(node) /
    byte_stack(node, stack) / live(configs) for one grammar's NFA, cached. Growing the
    caches happens under the automaton's lock (its callers hold it)."""

    def __init__(self, nfa: NFA, stacks: Stacks):
        self.nfa, self.stacks = nfa, stacks
        self._closure_cache = {}  # (node, stack) -> closure
        self._rel_cache = {}  # NFA node -> relative
        self._tmpl: dict[int, tuple] = {}  # NFA node -> ((lo, hi + 1, target nodes), ...)

    def closure(self, node, stack):
        """(configs with byte edges, accept) reachable from (node, stack) without consuming."""
        key = (node, stack)
        hit = self._closure_cache.get(key)
        if hit is not None:
            return hit
        nfa = self.nfa
        edges, eps, is_end, call, counter = nfa.edges, nfa.eps, nfa.is_end, nfa.call, nfa.counter
        length = nfa.length
        if not eps[node] and node not in is_end and node not in call and node not in counter and node not in length:
            live = edges[node] and (node not in nfa.need or self.live((key,)))
            res = ((key,) if live else (), False)  # a plain node (e.g. inside a UTF-8 sequence)
            self._closure_cache[key] = res
            return res
        check_deadline()  # a compile past its deadline stops here (nothing cached yet)
        # the part that stays above `stack` is the same for every stack (relative(), cached
        # per node); only returns below it depend on the stack (followed here, iteratively)
        push, stacks, cache = self.stacks.push, self.stacks.frames, self._closure_cache
        rel_out, returns = self.relative(node)
        if not returns:  # the closure stays above `stack` (distinct (node', frames): distinct pairs)
            out = self._on_stack(rel_out, stack)
            res = cache[key] = (tuple(self.live(out) if self.nfa.need else out), False)
            return res
        out, accept = [], False
        seen = set()
        work = [key]
        while work:
            n0, st0 = work.pop()
            if (n0, st0) in seen:
                continue
            seen.add((n0, st0))
            if (n0, st0) != key:
                sub = cache.get((n0, st0))
                if sub is not None:
                    out.extend(sub[0])
                    accept |= sub[1]
                    continue
            rel_out, returns = self.relative(n0)
            out.extend(self._on_stack(rel_out, st0))
            if returns:
                if st0 == 0:
                    accept = True
                    continue
                ret, parent, k = stacks[st0]
                if ret == CUT_RET:  # an abstract state's context: the rule ends here
                    accept = True
                    continue
                for nxt, again in return_through(nfa, ret, k):
                    work.append((nxt, parent if again is None else push(ret, parent, again)))
        out = dict.fromkeys(out)
        if self.nfa.need:
            out = self.live(out)
        res = (tuple(out), accept)
        cache[key] = res
        return res

    def live(self, configs):
        """configs without those in a length region whose count plus nfa.need passes the
        region's maximum (they can never leave it: a state of only such configurations
        would be a dead end that masks allow)."""
        need, length, frames = self.nfa.need, self.nfa.length, self.stacks.frames
        out = []
        for n, st in configs:
            d = need.get(n)
            if d is not None:
                ret, _parent, k = frames[st]
                hi = length[ret][3]
                if hi is not None and k - 1 + d > hi:
                    continue
            out.append((n, st))
        return out

    def _on_stack(self, rel_out, stack):
        """relative()'s ((node', frames), ...) as configurations: each frames pushed on stack."""
        push = self.stacks.push
        mat, out = {(): stack}, []
        for n, rel in rel_out:
            st = mat.get(rel)
            if st is None:
                st = stack
                for ret, k in rel:
                    st = push(ret, st, k)
                mat[rel] = st
            out.append((n, st))
        return out

    def relative(self, node):
        """The stack-independent part of node's closure: ((node', frames), ...), returns)
        where frames are the (return node, count) pairs pushed above the caller's stack
        (bottom first), and returns: whether node's rule can end without consuming (pop
        the caller's top frame). Cached per NFA node."""
        hit = self._rel_cache.get(node)
        if hit is not None:
            return hit
        check_deadline()
        nfa = self.nfa
        edges, eps, call, is_end, is_tail, counter = nfa.edges, nfa.eps, nfa.call, nfa.is_end, nfa.is_tail, nfa.counter
        length = nfa.length
        if not eps[node] and node not in call and node not in counter and node not in is_end and node not in length:
            res = self._rel_cache[node] = (((node, ()),) if edges[node] else (), False)  # a plain node
            return res
        out, returns = [], False
        start = (node, ())
        seen = {start}
        todo = [start]
        cache = self._rel_cache
        while todo:
            n, rel = todo.pop()
            if not rel and n != node:
                sub = cache.get(n)
                if sub is not None:  # (n, ()) explores exactly what n's own closure did
                    out.extend(sub[0])
                    returns |= sub[1]
                    continue
            if edges[n]:
                out.append((n, rel))
            nxt = [(t, rel) for t in eps[n]]
            c = call.get(n)
            if c is not None:
                callee, ret = c
                nxt.append((callee, rel if ret in is_tail else rel + ((ret, 0),)))
            if n in counter:
                body, done, lo, hi = counter[n]
                nxt.append((body, rel + ((n, 1),)))
                if lo == 0:
                    nxt.append((done, rel))
            if n in length:
                nxt.append((length[n][0], rel + ((n, 1),)))
            if n in is_end:
                if not rel:
                    returns = True
                else:
                    ret, k = rel[-1]
                    parent = rel[:-1]
                    for t, again in return_through(nfa, ret, k):
                        nxt.append((t, parent if again is None else parent + ((ret, again),)))
            for x in nxt:
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
        res = (tuple(dict.fromkeys(out)), returns)
        cache[node] = res
        return res

    def template(self, node):
        """node's byte classes: ((start, stop, target nodes), ...), cached per NFA node."""
        tmpl = self._tmpl.get(node)
        if tmpl is None:
            tmpl = self._tmpl[node] = _node_template(self.nfa.edges[node])
        return tmpl

    def closure_of(self, pairs):
        """(configs, accept): the union of the closures of (node, stack) pairs."""
        configs, accept = set(), False
        for n, st in pairs:
            c, a = self.closure(n, st)
            configs.update(c)
            accept |= a
        return configs, accept

    def byte_stack(self, n, st):
        """The stack after a byte consumed from NFA node n with stack st: st, or for a
        node that starts a character of a length region (nfa.tick) st with its top
        length frame counting one more character; -1 when that passes the region's
        maximum (or st is None: a stack-free walk cannot tell)."""
        if n not in self.nfa.tick:
            return st
        if st is None:
            return -1
        ret, parent, k = self.stacks.frames[st]
        _body, _exit, lo, hi = self.nfa.length[ret]
        if hi is None:  # no maximum: counts past the minimum are all alike
            return st if k > lo else self.stacks.push(ret, parent, k + 1)
        return -1 if k > hi else self.stacks.push(ret, parent, k + 1)
