"""N-gram drafting (prompt lookup): the next tokens of a request are guessed from its own
tokens (prompt + output so far), with no draft model.

`NgramIndex` maps every n-gram of a request's tokens (``min_n <= n <= max_n``) to the
position where it last ended, among the positions that have a successor. To draft, the
last ``n`` tokens are looked up for ``n`` from ``max_n`` down to ``min_n`` (the longest
suffix match wins); the draft is the ``k`` tokens that followed that occurrence. A
continuation that reaches the end of the sequence goes on with the draft itself: the
tokens repeat with the period the match found (a loop of a 2-token period drafts the loop
for ``k`` tokens, not 2).
The index grows incrementally: each new token adds one entry per ``n``. A hit is checked
against the tokens themselves, so an entry made stale by jump-forward re-tokenizing the
output's tail never yields a wrong draft (`rebuild` brings back the missed entries).
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    """Suffix-match drafting over one request's token sequence (see the module docstring).
    Not thread-safe; the scheduler thread owns it."""

    __slots__ = ("min_n", "max_n", "_maps", "_upto")

    def __init__(self, min_n: int, max_n: int):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self._maps: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(min_n, max_n + 1)}
        self._upto = 0  # n-grams ending before this position are indexed

    def rebuild(self) -> None:
        """Forget every entry; the next `propose` indexes the whole sequence again."""
        for m in self._maps.values():
            m.clear()
        self._upto = 0

    def _update(self, tokens: Sequence[int]) -> None:
        last = len(tokens) - 1  # an n-gram ending at the last token has no successor yet
        maps, lo, hi = self._maps, self.min_n, self.max_n
        for i in range(self._upto, last):
            for n in range(lo, min(hi, i + 1) + 1):
                maps[n][tuple(tokens[i - n + 1 : i + 1])] = i
        self._upto = max(self._upto, last)

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """``k`` draft tokens continuing ``tokens`` (its whole sequence so far, which only
        grows between calls unless `rebuild` was called); [] when no suffix of ``min_n``
        tokens or more occurred before."""
        if k <= 0:
            return []
        self._update(tokens)
        size = len(tokens)
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            suffix = tuple(tokens[size - n :])
            end = self._maps[n].get(suffix)
            if end is not None and tuple(tokens[end - n + 1 : end + 1]) == suffix:
                draft = list(tokens[end + 1 : end + 1 + k])
                period = size - 1 - end
                while len(draft) < k:  # past the end: the match's period repeats
                    draft.append(draft[len(draft) - period])
                return draft
        return []
