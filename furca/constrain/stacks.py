"""The parser stacks of the automaton: interned persistent lists of return frames.

A configuration of the automaton is ``(nfa node, stack id)``. A stack is a chain of
frames ``(return node, parent stack id, count)``: a rule call pushes its return node
with count 0; a counter frame (``x{m,n}`` run on a counter, see nfa.py) pushes the
counter's node with the number of bodies done (>= 1). Stack id 0 is the empty stack.
Equal chains get equal ids, so a stack compares and hashes as one int.

``CUT_RET`` is the return node of the context frame of abstract states (masks.py,
slices.py): returning to it means "the rule ends here" instead of a return to a caller.

Leaf module of the automaton's parts: it imports nothing of furca, so automaton,
masks, slices and slice_proof all build on it.
"""

from __future__ import annotations

MAX_STACK_DEPTH = 512  # nesting bound
CUT_RET = -2  # return node of the context frame of abstract states


class AutomatonLimit(Exception):
    """A state would exceed the automaton's bounds: MAX_CONFIGS configurations,
    MAX_STACK_DEPTH nesting, MAX_STATES states. A matcher that meets it enters its
    error state; a compile that meets it at the start state raises CompileError."""


class Stacks:
    """The interned stacks of one automaton.

    frames[id] -> (return node, parent id, count); depth[id] -> number of frames.
    Grows only (ids stay valid for the automaton's lifetime); not thread-safe by itself:
    the automaton pushes under its lock."""

    def __init__(self):
        self.frames: list[tuple[int, int, int]] = [(-1, -1, 0)]
        self.depth: list[int] = [0]
        self._ids: dict[tuple[int, int, int], int] = {}

    def push(self, ret: int, parent: int, count: int = 0) -> int:
        """The id of the stack ``parent`` with the frame (ret, count) on top (interned).
        Raises AutomatonLimit past MAX_STACK_DEPTH frames."""
        key = (ret, parent, count)
        sid = self._ids.get(key)
        if sid is None:
            depth = self.depth[parent] + 1
            if depth > MAX_STACK_DEPTH:
                raise AutomatonLimit(f"nesting deeper than {MAX_STACK_DEPTH}")
            sid = len(self.frames)
            self.frames.append(key)
            self.depth.append(depth)
            self._ids[key] = sid
        return sid

    def base_of(self, configs) -> int:
        """The longest stack that the stack of every (node, stack) in configs (non-empty)
        extends (0: only the empty one)."""
        base = configs[0][1]
        for _n, st in configs:
            if base == 0:
                break
            if st != base:
                base = self.common_base(base, st)
        return base

    def rebased(self, configs, base: int, onto: int) -> list:
        """configs with the stack `base` (which every stack of configs extends) replaced by
        `onto`: the frames above it pushed again, bottom first. (A loop, not a recursive
        closure: that would be a reference cycle keeping the stacks alive.)"""
        frames, push = self.frames, self.push
        memo = {base: onto}
        out = []
        for n, st in configs:
            chain = []
            while st not in memo:
                chain.append(st)
                st = frames[st][1]
            r = memo[st]
            for x in reversed(chain):
                ret, _parent, k = frames[x]
                r = memo[x] = push(ret, r, k)
            out.append((n, r))
        return out

    def common_base(self, x: int, y: int) -> int:
        """The longest stack that both x and y extend (their lowest common ancestor)."""
        d, fr = self.depth, self.frames
        while d[x] > d[y]:
            x = fr[x][1]
        while d[y] > d[x]:
            y = fr[y][1]
        while x != y:
            x, y = fr[x][1], fr[y][1]
        return x
