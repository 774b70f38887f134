"""The slice search's horizon form: states taken alike for the next L slice characters.

slices.SliceBounds._search looks at most L = sl.max_level (16) slice characters ahead of
the state it measures, so the states it meets may be taken in a coarser form than the
automaton's canonical one (automaton.canonical: alike for a whole token, up to
info.max_token_len bytes): any form in which two states behave alike for L characters.
SliceHorizon gives the search two such forms, each cached per L:

- form(s, L): counter and length frames with room for L characters at their canonical
  count (automaton.canonical with L characters in place of the longest token): a
  maxLength 50-128 string is searched as one state for every count, not a new state per
  character;
- down(y, L): the configurations of y in a chain of copies of a length region moved
  down the chain (copy_chains.CopyChains.down) while that holds for L characters: a
  word limit inside a maxLength string is searched on its first copies.

A search that takes its states in either form caps its result at L (past L characters
the form does not hold). Exactness and measurements: DESIGN.md, the slice search's
horizon and chains of copies; tests/constrain/test_maxstep_horizon.py and
test_maxstep_copies.py check masks against brute force near and far from the bounds.
"""

from __future__ import annotations

from .automaton import LazyAutomaton
from .slice_proof import SliceProof
from .stacks import AutomatonLimit


class SliceHorizon:
    """form(s, L) and down(y, L) over one automaton; its SliceProof supplies the chains
    of copies and the byte classes of a counter's body."""

    def __init__(self, automaton: LazyAutomaton, proof: SliceProof):
        self._a = automaton
        self._proof = proof
        self._chains = proof.chains  # chains of copies in length regions (copy_chains.py)
        self._near: dict[int, dict] = {}  # L -> {state: (its form for L characters, moved)} (form)
        self._near_stacks: dict[int, dict] = {}  # L -> {stack: _near_stack(stack, L)}
        self._whole: dict[int, bool] = {}  # counter body start -> _whole_bodies(it)
        self._shifted: dict[int, dict] = {}  # L -> {state: down(state, L)}

    def form(self, y: int, L: int) -> tuple[int, bool]:
        """(the form of y for a search that looks at most L slice characters ahead,
        whether it moved a frame that automaton.canonical keeps: the search's result is
        then capped at L). It is automaton.canonical's argument with L characters in
        place of the longest token (_near_stack), taken of y in its canonical form
        (slices.SliceBounds._search): a maxLength 50 or 128 string (a counter) has room
        for 16 characters at most of its counts, not for a token of 128 bytes, and the
        search stepped through one new state per count (16 levels, ~270
        configuration-set moves, ~5 ms); in this form the count after a character is
        the count before it. Asked of every state the search meets, not only of the
        state it measures: a string's first character (count 1 below minLength 2) holds
        no frame to move, the counts after it do."""
        memo = self._near.setdefault(L, {})
        hit = memo.get(y)
        if hit is None:
            a = self._a
            configs = a.configs[y]
            cut, moved = [], False
            for n, st in configs:
                c, flag = self._near_stack(st, L)
                cut.append((n, c))
                moved = moved or flag
            c = y if all(x == z for x, z in zip(cut, configs)) else a.intern(cut, a.accepting[y])
            hit = memo[y] = (c, moved)
        return hit

    def _near_stack(self, st: int, L: int) -> tuple:
        """(st with every frame that behaves alike for any L slice characters at its
        canonical count, whether some frame was so replaced that automaton.canonical_stack
        keeps). A counter frame (x{m,n}, k bodies) with m <= k and n - k > h takes count
        max(m, 1) (automaton.canonical): h = L when every first byte of its body starts
        a character (no 0x80-0xBF: each body then starts on a character of its own, so L
        characters run at most L bodies), else 4L (a body consumes at least a byte);
        with m - k > h too it takes count 1 (no exit and no maximum within h bodies: a
        minLength 22 string). A length frame (k - 1 characters; its ticks count characters) with room
        n - (k - 1) >= L + nfa.length_need takes the twin without a maximum at count
        m + 1 (automaton.canonical)."""
        if not st:
            return 0, False
        memo = self._near_stacks.setdefault(L, {})
        hit = memo.get(st)
        if hit is None:
            a = self._a
            nfa, tok = a.nfa, a.info.max_token_len
            ret, parent, k = a.stacks.frames[st]
            p, flag = self._near_stack(parent, L)
            if k and ret in nfa.length:
                free = nfa.length_free.get(ret)
                if free is not None:
                    _body, _exit, lo, hi = nfa.length[ret]
                    room, need = hi - (k - 1), nfa.length_need[ret]
                    if k > lo and room >= L + need:
                        flag = flag or room < tok + need
                        ret, k = free, lo + 1
            elif k:
                body, _done, lo, hi = nfa.counter[ret]
                h = L if self._whole_bodies(body) else 4 * L
                if k >= lo and hi - k > h:
                    flag = flag or hi - k <= tok
                    k = max(lo, 1)
                elif lo - k > h and hi - k > h:  # below the minimum: no exit within the horizon
                    flag, k = True, 1
            c = st if (ret, p, k) == a.stacks.frames[st] else a.stacks.push(ret, p, k)
            hit = memo[st] = (c, flag)
        return hit

    def down(self, y: int, L: int) -> int:
        """y with its configurations in a chain of copies moved down (copy_chains.CopyChains.down) when that
        holds for L characters (L // ticks copies more): the state alike for L
        characters. A 30-word limit inside a maxLength string (`(\\S+\\s+){0,29}\\S+`,
        its words copied in a length region) was searched through a new state per word:
        16 levels, ~400 configuration-set moves on fresh nodes (~25 ms)."""
        memo = self._shifted.setdefault(L, {})
        hit = memo.get(y)
        if hit is None:
            a = self._a
            configs = a.configs[y]
            down = self._chains.down(configs, L)
            hit = y if down is None else a.intern(down[0], a.accepting[y])
            memo[y] = hit
        return hit

    def _whole_bodies(self, body: int) -> bool:
        """Whether no first byte of a counter body (from its start node `body`) is a
        UTF-8 continuation byte (0x80-0xBF): each body then starts a character."""
        hit = self._whole.get(body)
        if hit is None:
            bits = 0
            try:
                for n, _st in self._proof.closure_unit(body, None):
                    bits |= self._proof.node_bytes(n)
            except AutomatonLimit:
                bits = -1
            hit = self._whole[body] = not bits >> 0x80 & 0xFFFFFFFFFFFFFFFF
        return hit
