"""The tokens below a trie node from a lasting call's abstract state, kept per grammar.

Key tries' recording continuation walks (masks.TokenMasks._recorded_split, the "any
key" state's walk after its key string; key_masks.KeyTrieMasks._literal_walks, a
declared name's after its literal) enter a member's value at `":`: the same lasting rule
(any JSON value, a string, a number) for every object, whose states carried each
object's frames and were made again per object. `CallMemo.entry` is such a walk's entry
callback (trie_walks.walk_continue): where the walk stops for a row-less state p inside
a call the walk entered, it takes the tokens below p's trie node from the call's
abstract state's walk, kept per (trie, abstract state, node), and walks only the
continuation after the call's return per object. See DESIGN.md ("A lasting call below a
trie node, walked once per grammar").

It holds the automaton and its own caches only (no reference back to TokenMasks, which
owns it: a dropped grammar is freed by reference counts); its bytes (`nbytes`) count in
the owner's mask budget, and `clear` drops them on eviction.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .stacks import CUT_RET
from .trie_walks import walk_continue


class CallMemo:
    """entry(trie, stack, i, words, start, cont_of) for one grammar's automaton."""

    def __init__(self, automaton):
        self._a = automaton
        # (trie id, abstract state, trie node) -> (word indices, words, return nodes)
        self._sub: dict[tuple, tuple] = {}
        self._frames: dict[int, frozenset] = {}  # a walk's start state -> the frames of its stacks
        self.nbytes = 0

    def __len__(self):
        return len(self._sub)

    def clear(self) -> None:
        self._sub.clear()
        self._frames.clear()
        self.nbytes = 0

    def entry(self, trie, stack, i, words, start, cont_of):
        """(where to resume, accepting nodes) for a recording walk from `start` that stopped
        at trie node i for its parent's state p without a row, or (-1, None). When p is
        inside a call that start is not in (p's abstract state ab, automaton.abstract,
        has a base frame none of start's stacks hold: the walk entered the call below
        i's parent x, as `":` enters a member's value), sets the bits of x's whole
        subtree from ab's walk below x, kept per (trie, ab, x): the same for every
        caller, and walks from cont_of(base) (the state after the call's return) below
        the nodes where ab's rule returned, recording where start's own rule returns.
        Exact as TokenMasks._compute_mask_ctx: the tokens below x from p are those from
        ab that stay inside the call plus those from the state after its return."""
        a = self._a
        d = int(trie.dfs_depth[i])
        if d < 2:
            return -1, None
        p = int(stack[d - 1])
        if a.walkable[p]:
            return -1, None
        base = a._base(a.configs[p])  # abstract(p)'s base, without interning its state on a miss
        if not base or a.stacks.frames[base][0] == CUT_RET:
            return -1, None
        frames = self._frames.get(start)
        if frames is None:
            frames = self._frames[start] = self._stack_frames(start)
        if base in frames:
            return -1, None
        ab, base = a.abstract(p)
        x = int(trie.dfs_parent[i])
        key = (id(trie), ab, x)
        sub = self._sub.get(key)
        if sub is None:
            below = np.zeros(len(words), dtype=np.uint32)
            ret = walk_continue(a, np.array([x], dtype=np.int32), trie, ab, below, record=True)
            nz = below.nonzero()[0]
            sub = self._sub[key] = (nz, below[nz], ret)
            self.nbytes += nz.nbytes + sub[1].nbytes + ret.nbytes
        nz, vals, ret = sub
        words[nz] |= vals
        found = None
        cont = cont_of(base) if len(ret) else 0
        if cont:
            found = walk_continue(a, ret, trie, cont, words, record=True, entry=partial(self.entry, cont_of=cont_of))
            if a.accepting[cont]:  # the call was the last thing start's rule had left: it returns there too
                found = np.concatenate([found, ret])
        return int(trie.dfs_end[x]), found

    def _stack_frames(self, s):
        """The frames (stack ids) on the stacks of s's configurations."""
        frames, out = self._a.stacks.frames, set()
        for _n, st in self._a.configs[s]:
            while st > 0 and st not in out:
                out.add(st)
                st = frames[st][1]
        return frozenset(out)
