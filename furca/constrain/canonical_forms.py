"""The canonical forms of the automaton's states: the states whose masks others share.

A counter or length frame deep in its range behaves the same for the next token
whatever its count, so a state is mapped to the one with such frames at a canonical
count (`canonical`, `canonical_short` for the short tokens, `full_canonical` for the
walks past them, `map_short` filling the walks' tables). `CanonicalForms` is a part of
automaton.LazyAutomaton (its base class): it reads the automaton's configs, stacks,
NFA and accepting flags, interns through it, and keeps its memos (made in
LazyAutomaton.__init__). See DESIGN.md (the module table, automaton.py).
"""

from __future__ import annotations


class CanonicalForms:
    """The canonical-form methods of automaton.LazyAutomaton."""

    def canonical(self, s: int) -> int:
        """The state whose mask s shares. A counter frame (x{m,n}, see nfa.py) with count k,
        m <= k and n - k > ceil(longest token / b) behaves the same for one token whatever
        k is (each body consumes at least b >= 1 bytes, nfa.counter_bytes, so a token of L
        bytes ends at most ceil(L / b) bodies), so such counts are replaced by max(m, 1):
        a long maxLength string needs one mask for its middle, not one per position, and
        a word limit (?:\\S+\\s+){0,99} one for its first words. A
        length frame (nfa.py) with c characters, m <= c and n - c >= longest token +
        the most characters any node of the region still needs (nfa.length_need) is
        alike for one token (a byte starts at most one character, so no count the token
        reaches is past n or dropped by Closures.live): it becomes the frame of the
        region's twin without a maximum (nfa.length_free) at count m, whose walks
        meet no count at all (they saturate at m), so the masks inside such a region
        are one per position in the pattern, not one per count."""
        return self._canonical(s, self._max_token_len, self._canon, self._canon_stack)

    def canonical_short(self, s: int) -> int:
        """canonical(s) with the bound of the short tokens (info.short_len bytes) in place
        of the longest token: the state whose mask s shares for every token of at most
        short_len bytes (the same argument, for those tokens only). masks.py takes the
        short tokens' bits from it and walks the long tokens from s itself."""
        return self._canonical(s, self.info.short_len, self._canon_short, self._canon_stack_short)

    def map_short(self, s: int) -> None:
        """Fills short[s] with canonical_short(s), and full[s], room[s] with
        full_canonical(s) (for the compiled walk, _walk.py)."""
        c = self.canonical_short(s)
        f, r = self.full_canonical(s)
        self.full[s] = f  # after interning: it may have grown the tables
        self.room[s] = r
        self.short[s] = c  # last: short[s] != 0 tells the walks that s is mapped

    def full_canonical(self, s: int) -> tuple[int, int]:
        """(f, room): f is s with every counter frame at or past its minimum at count
        max(min, 1) and every length frame past its minimum with room for its need in the
        region's twin without a maximum (canonical's forms, whatever the room); for every
        byte string of at most `room` bytes, s and f are both live or both dead after it,
        and accepting alike (room 0: f == s, no frame moved). A counter frame (x{m,n}, k
        bodies begun, k >= m, each body at least b bytes) moves by at most one count per b
        bytes, and decides differently from its canonical count only when a body ends at
        count n: within (n - k) * b + 1 bytes that is the last byte at most (the current
        body may end at the first byte, each later one takes b), after which both states
        hold the exit (k >= m) and differ only in whether a body may start again, which
        changes neither liveness nor acceptance (a counted body is never empty). A length
        frame (k - 1 characters) keeps canonical's bound: n - (k - 1) - need bytes. The walks take f at a trie node
        with at most room bytes below it: inside a string of maxLength 128 a run of
        spaces is then walked through one count's states, not one per count."""
        moved, room = [], 1 << 30
        for n, st in self.configs[s]:
            t, r = self._full_stack(st)
            if r < room:
                room = r
            moved.append((n, t))
        if room == 1 << 30:
            return s, 0
        return self.intern(moved, self.accepting[s]), room

    def _full_stack(self, st: int) -> tuple[int, int]:
        """(st with its frames moved as full_canonical, the least room of a moved frame:
        1 << 30 when none moved)."""
        if st == 0:
            return 0, 1 << 30
        hit = self._full_stack_memo.get(st)
        if hit is not None:
            return hit
        frames, nfa = self.stacks.frames, self.nfa
        ret, parent, k = frames[st]
        p, room = self._full_stack(parent)
        if k and ret in nfa.length:  # k - 1 characters
            free = nfa.length_free.get(ret)
            if free is not None:
                _body, _exit, lo, hi = nfa.length[ret]
                r = hi - (k - 1) - nfa.length_need[ret]
                if k > lo and r > 0:
                    room = min(room, r)
                    ret, k = free, lo + 1
        elif k:
            _body, _done, lo, hi = nfa.counter[ret]
            c = max(lo, 1)
            if k >= lo and k != c:
                room = min(room, (hi - k) * nfa.counter_bytes[ret] + 1)
                k = c
        out = (st if (ret, p, k) == frames[st] else self.stacks.push(ret, p, k)), room
        self._full_stack_memo[st] = out
        return out

    def canonical_stack(self, st: int) -> int:
        """st with every counter deep in its range at its canonical count (see canonical)."""
        return self._canonical_stack(st, self._max_token_len, self._canon_stack)

    def _canonical(self, s, bound, memo, stack_memo):
        c = memo.get(s)
        if c is None:
            configs = self.configs[s]
            canon = [(n, self._canonical_stack(st, bound, stack_memo)) for n, st in configs]
            c = s if all(a == b for a, b in zip(canon, configs)) else self.intern(canon, self.accepting[s])
            memo[s] = c
        return c

    def _canonical_stack(self, st, bound, memo):
        """st with every frame whose room exceeds bound bytes at its canonical count."""
        if st == 0:
            return 0
        c = memo.get(st)
        if c is None:
            frames = self.stacks.frames
            ret, parent, k = frames[st]
            p = self._canonical_stack(parent, bound, memo)
            if k and ret in self.nfa.length:  # k - 1 characters
                free = self.nfa.length_free.get(ret)
                if free is not None:
                    _body, _exit, lo, hi = self.nfa.length[ret]
                    if k > lo and hi - (k - 1) >= bound + self.nfa.length_need[ret]:
                        ret, k = free, lo + 1
            elif k:
                _body, _done, lo, hi = self.nfa.counter[ret]
                if k >= lo and hi - k > -(-bound // self.nfa.counter_bytes[ret]):
                    k = max(lo, 1)
            c = st if (ret, p, k) == frames[st] else self.stacks.push(ret, p, k)
            memo[st] = c
        return c
