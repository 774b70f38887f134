"""Chains of copies inside a length region (nfa.copies): inside a region repetitions
are copies, so `(\\S+\\s+){0,29}\\S+` under maxLength 300 is 29 copies of the word, each
the one before it with its NFA nodes shifted by the copy's size (nfa.py builds them one
after the other from the same IR). States that differ only by which copies their
configurations are in behave alike while they stay clear of the chain's end; the slice
search (slices.SliceBounds: down) and the refutation probe (slice_proof.SliceProof:
jump) move states along a chain instead of stepping through fresh copies. The
exactness arguments are at down and jump."""

from __future__ import annotations

from bisect import bisect_right


def shift(configs, start: int, end: int, by: int) -> list:
    """configs with the nodes in [start, end) moved by `by` nodes (copies x stride)."""
    return [(n + by if start <= n < end else n, st) for n, st in configs]


class CopyChains:
    """The chains of one NFA (first node, nodes per copy, copies, fewest characters of a
    copy), sorted, and where a node lies in them."""

    def __init__(self, copies):
        chains = self.chains = sorted(copies)
        self._starts = [c[0] for c in chains]
        ends, most = [], 0
        for b, stride, count, _t in chains:
            most = max(most, b + stride * count)
            ends.append(most)
        self._ends = ends  # the furthest end of the chains up to each one (nested chains)
        self._at: dict[int, tuple | None] = {}  # node -> at(node)

    def __bool__(self) -> bool:
        return bool(self.chains)

    def at(self, n: int):
        """(the index in self.chains of the outermost chain of copies whose nodes hold n,
        its copy of n), or None."""
        hit = self._at.get(n, False)
        if hit is False:
            hit, starts, ends, chains = None, self._starts, self._ends, self.chains
            for k in range(bisect_right(starts, n) - 1, -1, -1):
                if ends[k] <= n:
                    break
                b, stride, count, _t = chains[k]
                if n < b + stride * count:
                    hit = (k, (n - b) // stride)
            self._at[n] = hit
        return hit

    def span(self, configs):
        """(chain, lowest copy, highest copy) of the configurations in the chain of the
        first one that lies in a chain, or None."""
        at, chain, lo, hi = self.at, None, 0, 0
        for n, _st in configs:
            c = at(n)
            if c is not None and (chain is None or c[0] == chain):
                lo, hi = (c[1], c[1]) if chain is None else (min(lo, c[1]), max(hi, c[1]))
                chain = c[0]
        return None if chain is None else (chain, lo, hi)

    def down(self, configs, L: int):
        """(configs with those in one chain's copies moved down by the same number of
        copies so that the lowest is in copy 1, the chain's nodes from copy 1 on (first,
        end), the shift in nodes), or None when there is nothing to move or the highest
        copy j has j + L // ticks + 5 > the chain's copies (ticks: the fewest characters
        of a copy).

        The copies are the same NFA (each the next one's nodes shifted by the copy's
        size), with their ticks and needs alike (every copy may leave the chain at its
        end); a configuration's successors in the chain are in its copy or later (loops
        go to fresh nodes), a copy takes at least `ticks` characters and a slice
        character at most one tick (nfa.py: no tick takes a UTF-8 continuation byte);
        inside a length region there are no calls, so no stack names a copy's node. So
        for L characters the highest copy stays 3 copies before the chain's end (where
        the copies differ), the moved configurations go where the others go, moved
        down, and configurations from outside the chain reach its first copy at most (the
        chain is entered there, at a tick: one character)."""
        got = self.span(configs)
        if got is None or got[1] < 2:
            return None
        chain, lo, hi = got
        b, stride, count, ticks = self.chains[chain]
        if hi + L // ticks + 5 > count:
            return None
        by = (lo - 1) * stride
        end = b + stride * count
        return shift(configs, b + stride * lo, end, -by), b + stride, end, by

    def jump(self, prev, u, p: int):
        """u, or u moved further up a chain of copies when u, the unit after one
        repetition of p bytes from prev (slice_proof.SliceProof._probe), is prev with its
        configurations in one chain moved one copy up, all of them p + 2 copies or more
        into the chain: then the next repetitions move it up one copy each (the copies
        are alike, see down; configurations outside the chain reach none of its copies,
        since u holds no configuration in its first p + 1) as long as the highest copy
        stays p + 3 copies clear of the chain's end. A probe of "a " walks the 30 words
        of `(\\S+\\s+){0,29}\\S+` in a maxLength string to their end in a few repetitions,
        not 30 over fresh copies."""
        got = self.span(prev)
        if got is None or got[1] < p + 2 or len(prev) != len(u):
            return u
        chain, lo, hi = got
        b, stride, count, _t = self.chains[chain]
        start, end = b + stride * lo, b + stride * count
        m = count - p - 3 - hi
        if m <= 1 or tuple(sorted(shift(prev, start, end, stride))) != u:
            return u
        return tuple(sorted(shift(prev, start, end, m * stride)))
