"""The abstract mask of a state inside a key trie, from the mask of "any key" shared by
every prefix of the trie.

An object that allows keys besides its declared ones has a key trie (key_trie.py): a
quoted key that is none of the names. A state at a key position holds the trie node of
the prefix p read so far (with the configurations of `other`, called from it: a wide
character or an escape) and the declared keys' own configurations (a literal key and its
value). Walked as it is, every prefix is a new state of several configurations whose
first mask walks the tokens that leave the key (a closing quote, `":`, the value): on
the MaskBench instances Snowplow sp_138 met 510 such abstract states with 12 distinct
masks among them.

The trie's part of such a state, K_p, derives exactly the keys of the trie's `rest` rule
(any key content, then the closing quote) except those that spell a name: its language
is that of A, the state after one plain character that is no child (the trie's one
`narrow` target, then `rest`: one state for every prefix of the trie, under the trie's
own stack), less the strings that start with z = (a name's part after p) + '"'. A token
either never closes the key (then A allows it exactly when K_p does: the key can still
become no name) or closes it at its first unescaped quote, and K_p refuses it exactly
when the key it closed is a name. So

    mask(state) = (mask(A) less the tokens below the trie nodes z) | mask(the rest of the state)

with masks taken as a state's abstract walk gives them (the words, and the trie nodes
where its rule returned). mask(A) is walked once per trie and stack, with the object's
own frame cut (_any_key: the same for every context of the object, each context's
continued after the object's end); the rest of the
state (the declared keys' literals) is narrow, and is walked over the same trie so that
the return nodes of both parts index one trie.

That needs the trie's two rules to be what the JSON-schema translator makes them: `rest`
derives the closing quote, or a plain character and `rest` again, or what `other`
derives, and `other` starts with no plain character and no quote. key_trie.py does not
require it (its rules are any rules), so it is checked on the automaton (key_rules.py: a
bisimulation of A against that shape, up to the closing quote, ~1.7 ms), once per pair of
rules in the process (later grammars find it by their layout's key, ~15 µs, or by the
rules' NFA shape, ~110 µs); a trie whose rules do not fit is walked as before.

The walks of the prefixes' states become cheap (A's words copied, a few subtrees cleared,
D's narrow walk: ~0.2 ms against ~0.5 for the whole state); the first state of a trie
pays A's walk and D's. A is walked through its lexeme part (contexts.ContextSplit.recorded_split),
and D's configurations on literal bytes (a name's rest) without automaton states
(_literal_walks). With the row kernel, the split and everything after A's lookup are two
kernel calls (_key_kernels.py: core_rows.Core.key_split, key_words); this module's walks
serve the rest (no kernel, or a walk the kernel leaves to Python). See DESIGN.md
("Key-trie states") for the A/Bs.
"""

from __future__ import annotations

import numpy as np

from .bitmask import clear_ids
from .core_rows import filled
from .key_rules import QUOTE, shared_fit
from .stacks import CUT_RET, AutomatonLimit
from .trie_walks import joined, merged_roots, walk_continue, walk_recording

# the tries whose "any key" words a compile makes (KeyTrieMasks.prepare): 97% of the 500
# sample's grammars have at most 8; a few have ~85 (a trie per object of a large schema),
# where making them all measured level and put the TTFM p99 up ~20%
PREPARED_TRIES = 8


class KeyTrieMasks:
    """split(s) -> parts or None / words(s, parts, compute): the abstract mask of a state
    at a key trie node built from the trie's shared "any key" state (see the module
    docstring). None where it does not apply: no trie node or several, or rules that do
    not fit."""

    def __init__(self, automaton):
        self._a = automaton
        self._marks = automaton.nfa.key_trie_nodes
        self._tails: dict[tuple, list] = {}  # (trie node, token trie) -> _closers
        self._plain: dict[tuple, tuple] = {}  # (NFA node, token trie) -> _plain_run
        self._roots: dict[int, list] = {}  # token trie -> its root's child on each byte (-1: none)
        self._any: dict[tuple, tuple] = {}  # (narrow target, stack) -> (words, return nodes, trie)
        self._fits: dict[tuple, bool] = {}  # (rest's start, other's start) -> key_rules.rules_fit
        self._mark_arr = None  # the key trie nodes as a bool array over the NFA's nodes (split, with the row kernel)
        self._other_ret = None  # per NFA node: where a key trie node's call of `other` returns (-1: none)
        self.nbytes = 0  # of the cached "any key" masks

    def clear(self) -> None:
        self._any.clear()
        self.nbytes = 0

    def split(self, s):
        """(trie node k, its stack, the configurations D) of s, or None: exactly one
        configuration sits on a key trie node, and the trie's rules fit (key_rules.rules_fit). D
        is every configuration but k's own and those inside k's call of `other` (their
        stack holds the frame of that call above k's stack): the declared keys' and any
        other alternative's, walked as they are; (node, stack) pairs, or with the row
        kernel their int64 keys (node << 32 | stack), which words() hands back to it."""
        if self._a.core is not None:  # in the kernel's tables, without the configurations' tuple
            return self._split_compiled(s)
        return self._split_configs(s)

    def _split_configs(self, s):
        """split(s) from s's configurations (without the row kernel)."""
        a, marks = self._a, self._marks
        configs = a.configs[s]
        hit = None
        for n, st in configs:
            if n in marks:
                if hit is not None:
                    return None
                hit = (n, st)
        if hit is None:
            return None
        k, st_k = hit
        if not self._fit(k, st_k):
            return None
        nfa = a.nfa
        other_ret = nfa.call[marks[k][1]][1]  # where k's call of other returns
        frames = a.stacks.frames
        rest = []
        for n, st in configs:
            if n == k and st == st_k:
                continue
            x = st
            while x:  # inside k's call of other: a frame (other's return, st_k) below
                ret, parent, _c = frames[x]
                if parent == st_k and ret == other_ret:
                    break
                x = parent
            else:
                rest.append((n, st))
        return k, st_k, tuple(rest)

    def _split_compiled(self, s):
        """split(s) from the row kernel's tables (core_rows.Core.key_split): D as the
        int64 keys (node << 32 | stack) words() hands to the kernel again."""
        a = self._a
        if self._mark_arr is None:
            nfa = a.nfa
            self._mark_arr = np.zeros(len(nfa.edges), np.bool_)
            self._mark_arr[list(self._marks)] = True
            self._other_ret = filled(len(nfa.edges), -1, np.int32)
            for k, (_narrow_to, other_call, _inner) in self._marks.items():
                self._other_ret[k] = nfa.call[other_call][1]
        hit = a.core.key_split(a, s, self._mark_arr, self._other_ret)
        if hit is None:
            return None
        kk, rest = hit
        k, st_k = kk >> 32, kk & 0xFFFFFFFF
        if not self._fit(k, st_k):
            return None
        return k, st_k, rest

    def _fit(self, k, st_k) -> bool:
        """Whether the rules of trie node k's trie fit (key_rules.shared_fit), kept per pair of rules."""
        narrow_to, other_call, _inner = self._marks[k]
        nfa = self._a.nfa
        rules = (nfa.call[nfa.eps[narrow_to][0]][0], nfa.call[other_call][0])  # (rest, other)
        fits = self._fits.get(rules)
        if fits is None:
            fits = shared_fit(self._a, self._marks, rules, k, st_k)
            self._fits[rules] = fits
        return fits

    def words(self, s, parts, compute, cont_of=None):
        """(words, return nodes, trie, base) of s's abstract walk from parts = split(s),
        base being the read-only "any key" words (int32) it began as (masks.Delta);
        compute(state) -> (words, return nodes, trie) of a state's own recording walk
        (masks.TokenMasks); cont_of(frame) -> the state after returning from it
        (_any_key)."""
        a = self._a
        k, st_k, rest = parts
        any_words, any_roots, trie = self._any_key(self._marks[k][0], st_k, compute, cont_of)
        closers = self._closers(k, trie)
        words = any_words.copy()
        if type(rest) is np.ndarray:  # split in the row kernel: the walks in its one call
            roots = a.core.key_words(a, words, any_roots, closers, rest, trie)
            if roots is not None:
                return words, roots, trie, any_words.view("<i4")
            words = any_words.copy()  # the kernel stopped (a walk that needs Python): walked here
            rest = tuple([(x >> 32, x & 0xFFFFFFFF) for x in rest.tolist()])
        roots = any_roots
        end, tok_start, tok_ids = trie.dfs_end, trie.tok_start, trie.tok_ids
        for x in closers:
            stop = int(end[x])
            ids = tok_ids[tok_start[x] : tok_start[stop]]
            if len(ids):
                clear_ids(words, ids)
            if len(roots):
                roots = roots[(roots < x) | (roots >= stop)]
        if rest:
            extra = np.zeros(words.shape, words.dtype)
            more, others = self._literal_walks(rest, trie, extra)  # the declared names' literals
            if others:
                more.append(walk_recording(a, a.intern(others, False), trie, extra))
            words |= extra
            more = [x for x in more if len(x)]
            if more:
                roots = merged_roots([roots] + more)
        return words, roots, trie, any_words.view("<i4")

    def prepare(self, compute, cont_of) -> None:
        """Makes the "any key" words of up to PREPARED_TRIES tries whose rules fit, at the
        context frame (the automaton's cut stack: each object's own part, the same in
        every context, _any_key), so that no step pays them. Called once, at the compile
        (masks.TokenMasks.prepare_keys). Each costs ~0.1-0.2 ms; made in a step it was
        most of that step (on the 500 sample's first instances in one process, 467 of
        the 1,316 steps over 200 µs made one, ~220 of their ~310 µs outside the kernels).
        The tries in reverse build order: an inline object's trie is built before its
        parent's, a definition's behind a $ref after the root's, so neither order puts
        the first trie an instance meets first in every schema (against build order, level:
        1,538 / 1,593 forked first-instance steps over 200 µs). A state past a limit stops
        it: the step that needs that state meets the limit as before."""
        a = self._a
        done = set()
        try:
            for k, (narrow_to, _other, _inner) in reversed(self._marks.items()):
                if narrow_to in done:
                    continue
                if len(done) == PREPARED_TRIES:
                    break
                done.add(narrow_to)
                if self._fit(k, a.cut):
                    self._any_key(narrow_to, a.cut, compute, cont_of)
        except AutomatonLimit:
            pass

    def _any_key(self, narrow_to, st, compute, cont_of):
        """(words, return nodes, trie) of the "any key" state (after a narrow character)
        of the trie at stack st, kept per (narrow_to, st), its words read-only (the masks
        made from them may refer to them: masks.Delta). Where st holds a frame of the
        grammar's own (automaton._base: the object's call, under its counter frames), the
        words are those of the same state with that frame cut (its object's keys, values
        and end, shared by every object over the same trie, whatever its context: Github
        and Kubernetes schemas meet the same trie from several places and nesting
        depths), continued below the nodes where the object ended from the state after
        the frame's return (as masks.TokenMasks._compute_mask_ctx): exact, the tokens
        from the state being those that stay inside the object plus those that leave it."""
        key = (narrow_to, st)
        hit = self._any.get(key)
        if hit is not None:
            return hit
        a = self._a
        base = a._base([(narrow_to, st)]) if cont_of is not None else 0
        if not base or a.stacks.frames[base][0] == CUT_RET:
            hit = compute(a.intern(*a.closure(narrow_to, st)))
        else:
            cut = a.stacks.rebased([(narrow_to, st)], base, a.cut)[0][1]
            words, roots, trie = self._any_key(narrow_to, cut, compute, cont_of)
            words = words.copy()
            found = np.zeros(0, dtype=np.int32)
            cont = cont_of(base) if len(roots) else 0
            if cont:
                found = walk_continue(a, roots, trie, cont, words, record=True)
                if a.accepting[cont]:  # the object was the last thing s's rule had left
                    found = joined([found, roots])
            hit = (words, found, trie)  # int32: walk_continue's records and the roots
        hit[0].setflags(write=False)
        self._any[key] = hit
        self.nbytes += hit[0].nbytes + hit[1].nbytes
        return hit

    def _literal_walks(self, configs, trie, words):
        """Sets in words the tokens that the configurations on literal bytes allow;
        returns (the lists of return nodes found, the configurations not on a literal).
        A configuration whose node takes one byte, whose successors' closures are the next
        such node alone, spells a literal (a declared name's rest, its closing quote and
        colon): the tokens along it are found by walking the token trie down its bytes,
        without automaton states, and the first state the literal reaches (the value's
        start) continues the walk below that trie node (a recording continuation walk).
        The literal's plain part, the same under every stack, is walked once per node and
        trie (_plain_run); the language of a set of configurations is the union of
        theirs, so each is walked on its own; the caller walks the others as one state."""
        a = self._a
        edges = a.nfa.edges
        tok_start, tok_ids = trie.tok_start, trie.tok_ids
        one_byte = self._one_byte
        found, others = [], []
        one = np.uint32(1)
        for node, st in configs:
            if not one_byte(node):
                others.append((node, st))
                continue
            bits, x, n = self._plain_run(node, trie)
            for w, b in bits:
                words[w] |= b
            while x >= 0:
                b, t = edges[n][0][0], edges[n][0][2]
                x = self._child(trie, x, b)
                if x < 0:
                    break
                configs_t, accept = a.closure(t, st)
                if not configs_t and not accept:
                    break  # dead after this byte
                for k in range(int(tok_start[x]), int(tok_start[x + 1])):
                    tid = int(tok_ids[k])
                    words[tid >> 5] |= one << np.uint32(tid & 31)
                if not accept and len(configs_t) == 1 and configs_t[0] == (t, st) and one_byte(t):
                    n = t
                    continue  # still on the literal
                if accept:  # the rule returns here
                    found.append(np.array([x], dtype=np.int32))
                if configs_t:
                    s = a.intern(configs_t, accept)
                    found.append(walk_continue(a, np.array([x], dtype=np.int32), trie, s, words, record=True))
                break
        return found, others

    def _one_byte(self, n) -> bool:
        """Whether NFA node n's only edge reads one byte value (and n counts nothing)."""
        es = self._a.nfa.edges[n]
        return len(es) == 1 and es[0][0] == es[0][1] and n not in self._a.nfa.tick

    def _plain_run(self, node, trie):
        """(bits, x, n) for the literal from node (one byte): the trie walked down its
        bytes while each byte leads to a plain one-byte node, whose closure under any
        stack is itself alone (closures.Closures.closure: no epsilon, call, end, counter,
        length or need), so the walk goes on there whatever the configuration's stack;
        bits: ((word, bits), ...) of the tokens met on the way; x: the trie node reached
        and n the node whose byte is not taken yet (x = -1: no token goes further).
        Cached per (node, trie): the declared names' literals come back in every key
        state of their object (another prefix's names, another stack, the keys left)."""
        key = (node, id(trie))
        hit = self._plain.get(key)
        if hit is not None:
            return hit
        nfa = self._a.nfa
        edges, eps, is_end, call, counter, length, need = (nfa.edges, nfa.eps, nfa.is_end, nfa.call, nfa.counter,
                                                           nfa.length, nfa.need)
        tok_start, tok_ids = trie.tok_start, trie.tok_ids
        acc: dict[int, int] = {}
        x, n = 0, node
        while True:
            b, t = edges[n][0][0], edges[n][0][2]
            if (eps[t] or t in is_end or t in call or t in counter or t in length or t in need
                    or not self._one_byte(t)):
                break  # t's closure may hold more than t, or depend on the stack: walked per configuration
            y = self._child(trie, x, b)
            if y < 0:
                x = -1
                break
            for k in range(int(tok_start[y]), int(tok_start[y + 1])):
                tid = int(tok_ids[k])
                acc[tid >> 5] = acc.get(tid >> 5, 0) | 1 << (tid & 31)
            x, n = y, t
        hit = self._plain[key] = (tuple((w, np.uint32(v)) for w, v in acc.items()), x, n)
        return hit

    def _closers(self, k, trie):
        """The DFS nodes of trie spelling (a name's rest after trie node k) + '"': the
        key trie and the token trie walked together, so only the names' rests that start
        some token are followed. Cached per (k, trie)."""
        key = (k, id(trie))
        hit = self._tails.get(key)
        if hit is not None:
            return hit
        edges, marks = self._a.nfa.edges, self._marks
        out = []
        todo = [(k, 0)]
        while todo:
            u, x = todo.pop()
            es = edges[u]
            if not any(lo == QUOTE for lo, _hi, _t in es):  # no closing quote: the prefix is a name
                y = self._child(trie, x, QUOTE)
                if y >= 0:
                    out.append(y)
            for lo, hi, t in es:
                if lo == hi and lo != QUOTE and t in marks:
                    y = self._child(trie, x, lo)
                    if y >= 0:
                        todo.append((t, y))
        hit = self._tails[key] = np.array(out, dtype=np.int32)
        return hit

    def _child(self, trie, x, b):
        """The child of DFS node x of trie on byte b, or -1 (the root's children through
        the trie's root_child, others by a scan of the siblings)."""
        if x == 0:
            table = self._roots.get(id(trie))
            if table is None:
                table = self._roots[id(trie)] = trie.root_child.tolist()
            return table[b]
        byte, end = trie.dfs_byte, trie.dfs_end
        c, stop = x + 1, int(end[x])
        while c < stop and byte[c] < b:
            c = int(end[c])
        return c if c < stop and byte[c] == b else -1
