"""The context split of token masks: a state inside a rule call shares its abstract state's mask.

A state whose configurations all lie inside one rule call (or one array item) has an
abstract state: the same configurations with the caller cut off (automaton.abstract).
Its mask is the same for every caller and nesting depth, so it is walked once, recording
the trie nodes where the rule returns (a recording walk); a real state's mask is that
mask plus the tokens walked on from those nodes in the caller's state after the return
(xgrammar's adaptive token mask cache, with the context-dependent tokens re-walked).

ContextSplit holds a grammar's caches of that split (state -> context, frame ->
continuation, abstract state -> its recorded part) and the two ways a state's mask is
built from parts: several frames of one lexeme (contexts), and an abstract state whose
configurations hold a lexeme beside the grammar's own (recorded_split). masks.TokenMasks
decides which states go through it (the wide ones) and owns the walks: it passes
compute(s) -> (words, return nodes, trie, base) of s's recording walk, which may itself
come here (recorded_split) for a state with lexeme parts (passed at each call, not kept:
a kept bound method would make every grammar's masks a reference cycle). See DESIGN.md.
"""

from __future__ import annotations

import numpy as np

from .automaton import LazyAutomaton
from .lexeme_masks import lexeme_key, share, shared
from .nfa import closed_layout_size
from .stored_masks import Delta, _base_of, _size, _stored
from .trie_walks import merged_roots, walk_continue, walk_recording

MAX_CONTEXTS = 8  # a state's groups of configurations continued from their own frames (contexts)


class ContextSplit:
    """context(s) / contexts(s): a state's abstract state and continuations;
    abstract_part(ab, compute) / long_part(ab): an abstract state's recorded walk, kept
    (and shared by every grammar for a lexeme); recorded_split(s, compute): an abstract
    state's walk from its lexeme parts. nbytes: the kept parts' size, counted in the
    grammar's mask store (masks.MAX_MASK_BYTES); clear() drops them (the contexts stay:
    they are states)."""

    def __init__(self, automaton: LazyAutomaton, bounded):
        self._a = automaton
        self._info = automaton.info
        self.bounded = bounded  # string_counters.BoundedStrings, or None
        self._ctx: dict[int, tuple | None] = {}  # state -> (abstract state, continuation state) or None
        self._cont: dict[int, int] = {}  # context stack -> state after returning from it
        self._abs: dict[int, tuple] = {}  # abstract state -> (mask words, return nodes, trie, size)
        # abstract state -> (its long tokens' non-zero word indices, those words, return nodes in long_trie)
        self._abs_long: dict[int, tuple] = {}
        self.nbytes = 0
        # the rest states of recorded_split: configurations whose epsilon moves lead into
        # another part, so not closures (walked, never a matcher's state, never searched)
        self.parts: set[int] = set()

    def clear(self) -> None:
        self._abs.clear()
        self._abs_long.clear()
        self.nbytes = 0

    def context(self, s):
        """(abstract state, continuation state) for s, or None.

        C = the innermost call frame or array item's counter frame (automaton._base;
        not a character's or a word's counter) below which every configuration of s
        shares its stack: s is "inside the rule called by C" (or inside an item), and C
        is the context (who called it, and everything under that). The abstract state
        has the same configurations with C replaced by a context frame that returns to
        nowhere: reaching the rule's end there marks the state accepting instead of
        returning. Its mask is the same for every context, so it is computed once
        (automaton states and all) and shared by every caller, every nesting depth.
        The tokens that pass the rule's end are the context-dependent ones: for each
        trie node where the abstract walk reached the end, the rest of its subtree is
        walked from the continuation state (the caller's state after the return)."""
        if s in self._ctx:
            return self._ctx[s]
        res = None
        hit = self._a.abstract(s)  # shared with the automaton's step of the token accepted from s
        if hit is not None:
            ab, base = hit
            res = (ab, self.cont_of(base))
        self._ctx[s] = res
        return res

    def contexts(self, s):
        """(abstract state, continuation states) of a state whose configurations share no
        frame (context gives None), from automaton.abstract_groups: the same lexeme
        reached along several parses (a string value of an object that `dependencies` made
        two alternatives of: its node called from two places), its mask the abstract
        state's continued from each group's return; or a state at the root with no frame
        (a bounded string as the whole document), the same state at the context frame,
        taken where that is a lexeme or the bounded strings' tables serve it (the root's
        end is the document's: no continuation). Walked whole, each was a new walk of the
        vocabulary in every grammar. None otherwise."""
        a = self._a
        root = self.bounded is not None or closed_layout_size(a.nfa) > 0  # else nothing serves a root state
        hit = a.abstract_groups(s, MAX_CONTEXTS, root)
        if hit is None:
            return None
        ab, frames = hit
        if frames == [0]:
            if lexeme_key(a, ab) is None and (self.bounded is None or
                                              self.bounded.locate(ab, self._info.trie, False) is None):
                return None
            return ab, frames
        return ab, [self.cont_of(f) for f in frames]

    def cont_of(self, base):
        """The state after returning from the frame base (a call frame: its return node on
        the stack below it; an item counter frame: the next item or the array's end)."""
        cont = self._cont.get(base)
        if cont is None:
            cont = self._cont[base] = self._a.after_return(base)
        return cont

    def abstract_part(self, ab, compute):
        """((stored words, return nodes, trie, size), free) of abstract state ab's
        recording walk (compute(ab) where nothing holds it): kept per grammar, and shared by every grammar for a lexeme
        (lexeme_masks.py); free is the computed words when they were stored as a copy (a row
        the caller may write to), else None."""
        hit = self._abs.get(ab)
        free = None
        if hit is None:
            key = lexeme_key(self._a, ab)
            hit = shared(key, self._info)
            if hit is None:
                words, roots, trie, base = compute(ab)
                stored = _stored(words.view("<i4"), base)
                if isinstance(stored, tuple):  # stored as a copy of its non-zero words
                    free = words
                hit = (stored, roots, trie, _size(stored) + roots.nbytes)
                if key is not None:
                    share(key, self._info, hit)
            self._abs[ab] = hit
            self.nbytes += hit[3]
        return hit, free

    def long_part(self, ab):
        """(word indices, words, return nodes in info.long_trie) of abstract state ab's
        recording walk over the long tokens (masks.TokenMasks._tiered_mask): kept per
        grammar; a bounded string's body start from its tables."""
        hit = self._abs_long.get(ab)
        if hit is None:
            info = self._info
            got = self.bounded.part(ab, info.long_trie) if self.bounded is not None else None
            if got is not None:
                ab_words, roots = got[0], got[1]
            else:
                ab_words = np.zeros(info.num_words, dtype=np.uint32)
                roots = walk_recording(self._a, ab, info.long_trie, ab_words)
            nz = ab_words.nonzero()[0]  # few words: the long tokens are few (np.flatnonzero: Python code)
            hit = self._abs_long[ab] = (nz, ab_words[nz], roots)
            self.nbytes += nz.nbytes + hit[1].nbytes + roots.nbytes
        return hit

    def writable(self, stored, free):
        """The words (uint32) of a stored mask as a row the caller may write to: free
        (the computed row, when it was stored as a copy of its non-zero words), else a
        copy."""
        if free is not None:
            return free
        if isinstance(stored, tuple):
            words = np.zeros(self._info.num_words, dtype=np.uint32)
            words[stored[0]] = stored[1].view(np.uint32)
            return words
        if type(stored) is Delta:
            return stored.packed().view(np.uint32)
        return stored.view(np.uint32).copy()

    def recorded_split(self, s, compute):
        """(words, return nodes, trie, base) of abstract state s's recording walk as the union of
        its parts, or None where no part is a lexeme. The language of a set of
        configurations is the union of theirs, so s splits into groups: the
        configurations in the closed layout of lasting rules (nfa._Layout) under the same
        innermost frame f of the grammar's own (their own abstract state, with their
        innermost shared frame as its context: when that is a lexeme, its walk is shared
        by every grammar, lexeme_masks.lexeme_key), continued below the nodes where the lexeme
        returns by a recording walk from the state after the return; and the rest,
        walked as one state (not a closure: its configurations' epsilon moves lead into
        the groups, so it is never a matcher's state and never searched). All parts walk
        the lexeme's trie (a slice's rest of the vocabulary, or the whole: every token of
        the slice is in the lexeme's words).

        The "any key" state of a key trie (key_masks.py) is the case this serves: a key
        that is none of the names is inside the key string's lasting rule (a lexeme)
        under the object's own frame, beside the object's own configurations; walked
        whole it was a new ~0.5-2 ms walk of nearly the whole vocabulary per object."""
        a = self._a
        lay = a.nfa.layout
        if lay is None or not lay.closed:
            return None
        frames, size = a.stacks.frames, lay.size
        groups: dict[int, list] = {}
        rest = []
        for n, st in a.configs[s]:
            f = st
            while f > 0 and 0 <= frames[f][0] < size:  # frames returning into the layout
                f = frames[f][1]
            if n < size and f > 0:  # in the layout, under a frame of the grammar's own or the context frame
                groups.setdefault(f if frames[f][0] >= 0 else 0, []).append((n, st))
            else:
                rest.append((n, st))
        if len(groups.get(0, ())) == len(a.configs[s]):  # s is a lexeme itself: its walk is the one to make
            return None
        parts = []
        for f, g in groups.items():
            sub = a.intern(g, False)
            # at the context frame (a lexeme called last, by a tail call): its own walk's
            # returns are s's; else inside the frame, continued after it
            hit = (sub, 0) if f == 0 else a.abstract(sub)
            if hit is not None and lexeme_key(a, hit[0]) is not None:
                parts.append(hit)
            else:
                rest.extend(g)
        if not parts:
            return None
        hits = [self.abstract_part(ab, compute) for ab, _base in parts]
        trie = hits[0][0][2]
        if any(h[0][2] is not trie for h in hits):
            return None
        words = self.writable(hits[0][0][0], hits[0][1])
        for (stored, _r, _t, _z), _free in hits[1:]:
            if isinstance(stored, tuple):
                words[stored[0]] |= stored[1].view(np.uint32)
            else:
                words |= (stored.packed() if type(stored) is Delta else stored).view(np.uint32)
        conts = [self.cont_of(base) if base else None for _ab, base in parts]
        if any(c and a.accepting[c] for c in conts):
            return None  # a rest that may be empty after the return (none on the MaskBench sample): walked whole
        found = []
        for cont, ((_st, roots, _t, _z), _free) in zip(conts, hits):
            if cont is None:  # at the context frame: the lexeme's returns are s's
                found.append(roots)
            elif len(roots) and cont:
                found.append(walk_continue(a, roots, trie, cont, words, record=True))
        if rest:
            t = a.intern(rest, False)
            self.parts.add(t)
            found.append(walk_recording(a, t, trie, words))
        found = [x for x in found if len(x)]
        roots = merged_roots(found) if found else np.zeros(0, dtype=np.int32)
        return words, roots, trie, _base_of(hits[0][0][0])  # the words began as the first part's mask
