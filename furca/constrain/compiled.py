"""CompiledGrammar: a grammar compiled against one tokenizer, shared by every request
(the automaton, its mask store, the nesting-limit checks); `matcher()` makes the
per-request Matcher (matcher.py)."""

from __future__ import annotations

import numpy as np

from .automaton import AutomatonLimit, LazyAutomaton
from .masks import TokenMasks
from .matcher import Matcher
from .members import ObjectSites
from .unique import UniqueMatcher, UniqueSites
from .unique_values import VALUES, ValueSites
from .slices import SliceBounds
from .stacks import MAX_STACK_DEPTH

NEAR_DEPTH = 64  # a state this deep (frames) or deeper gets its mask checked against the nesting limit
SHALLOW_ROOM = MAX_STACK_DEPTH - NEAR_DEPTH  # frames left in a state shallower than that: more than this


class CompiledGrammar:
    """A grammar compiled against one tokenizer, made by `GrammarCompiler`.

    Thread-safe to share between requests: every request gets its own `Matcher` from
    `matcher()`. The automaton grows lazily (states, transition rows and token masks are
    computed on first use and cached for every later request), so a long-lived grammar
    gets faster and bigger with use (see `memory_size_bytes`).

    Attributes
    ----------
    info : TokenizerInfo
        The tokenizer it was compiled for.
    source : str
        The kind of constraint it came from ("regex", "grammar", "json_schema", ...).
    automaton : LazyAutomaton
        The states and transition rows (internal).
    masks : TokenMasks
        The token masks of the automaton's states (internal).
    """

    def __init__(self, automaton: LazyAutomaton, source: str = ""):
        self.automaton = automaton
        self.masks = TokenMasks(automaton, SliceBounds(automaton))
        self.info = automaton.info
        self.source = source
        self._room: dict[int, int] = {}  # state -> frames left below MAX_STACK_DEPTH (states >= NEAR_DEPTH deep)
        self._push_per_byte: int | None = None  # the most frames one byte can push (computed when first needed)
        self._token_len: np.ndarray | None = None  # token id -> byte length (0: special / none)
        self._at_limit: dict[int, np.ndarray] = {}  # state -> mask_by_steps(state)
        # arrays of distinct strings the matcher watches (uniqueItems, unique.py); None: none
        kinds = [v[-1] for v in automaton.nfa.unique.values()]
        self.unique_sites = UniqueSites(automaton) if any(k != VALUES for k in kinds) else None
        # arrays of distinct items compared as values (objects, numbers, ...: unique_values.py)
        self.value_sites = ValueSites(automaton) if VALUES in kinds else None
        # objects in any member order the matcher watches (members.py); None: none
        self.object_sites = ObjectSites(automaton) if automaton.nfa.objects else None

    def mask_by_steps(self, state: int) -> np.ndarray:
        """The packed mask (int32 words) of ``state`` computed by stepping every token from
        it: a token is allowed when its step neither dies nor raises AutomatonLimit (EOS
        where ``state`` accepts). For states at the nesting limit, whose mask walk raises
        (it builds every byte's successor, and an opening byte's is past the limit) while
        most tokens (a closing bracket, a scalar) are still fine. Slow (a Python step per
        token, ~0.5 s for a 128k vocabulary the first time), cached per state; only
        outputs nested ~512 deep get there."""
        hit = self._at_limit.get(state)
        if hit is not None:
            return hit
        a, info = self.automaton, self.info
        words = np.zeros(info.num_words, dtype=np.uint32)
        for t, data in enumerate(info.token_bytes):
            if data:
                try:
                    if a.step(state, data):
                        words[t >> 5] |= np.uint32(1 << (t & 31))
                except AutomatonLimit:
                    pass
        packed = words.view("<i4")
        if a.accepting[state]:
            packed |= info.eos_mask
        self._at_limit[state] = packed
        return packed

    def limit_check(self, state: int) -> tuple[int, int] | None:
        """``(room, frames per byte)`` when a token from ``state`` could reach the nesting
        limit: ``room`` frames are left below MAX_STACK_DEPTH and one consumed byte pushes
        at most ``frames per byte`` (so a token of ``k`` bytes pushes at most ``k x`` that);
        None when no token can (the state is shallower than NEAR_DEPTH, or even the
        longest token cannot push ``room`` frames).

        The mask of a state comes from its abstract state, without the caller's frames, so
        near the limit it can allow a token whose step raises AutomatonLimit; the matcher
        re-checks such tokens (`Matcher.fill_bitmask`). Frames per byte: the longest chain
        of frames one closure pushes (the most ``(return, count)`` pairs of any NFA node's
        relative closure), computed over the whole NFA once, the first time a state is
        NEAR_DEPTH deep, so grammars that never nest that deep never pay for it. Assumes
        a state shallower than NEAR_DEPTH cannot reach the limit with one token (the
        longest token x frames per byte < MAX_STACK_DEPTH - NEAR_DEPTH: 448 frames)."""
        room = self._room.get(state)
        if room is None:
            a = self.automaton
            if a.core is not None:  # from the kernel's tables, without the configurations' tuple
                depth = a.core.depth(a, state)
            else:
                configs, depths = a.configs[state], a.stacks.depth
                depth = depths[configs[0][1]] if len(configs) == 1 else max((depths[st] for _n, st in configs), default=0)
            room = self._room[state] = MAX_STACK_DEPTH - depth
        if room > SHALLOW_ROOM:
            return None
        per_byte = self._push_per_byte
        if per_byte is None:
            a = self.automaton
            with a.lock:  # the relative closures grow the automaton's caches
                per_byte = max((len(rel) for n in range(len(a.nfa.edges)) for _t, rel in a.closures.relative(n)[0]),
                               default=0)
                self._token_len = np.array([len(b) if b else 0 for b in a.info.token_bytes], dtype=np.int64)
            self._push_per_byte = per_byte
        if per_byte * self.info.max_token_len < room:
            return None
        return room, per_byte

    def matcher(self) -> "Matcher":
        """A new matcher at the grammar's start.

        Returns
        -------
        matcher : Matcher
            An independent matcher (nothing accepted, no error).
        """
        if self.unique_sites is None and self.object_sites is None and self.value_sites is None:
            return Matcher(self)
        return UniqueMatcher(self)

    @property
    def num_states(self) -> int:
        """The number of automaton states built so far (grows with use)."""
        return self.automaton.num_states

    def memory_size_bytes(self) -> int:
        """The memory the grammar holds now: the transition rows in use, the stored token
        masks and the arrays of its row kernel, if it has one (core_rows.Core.nbytes); all
        grow with use, the masks are bounded per grammar.

        Returns
        -------
        size : int
            Bytes.
        """
        a = self.automaton
        # transition rows in use (the table may be reserved larger, see automaton._grow), masks, kernel
        core = 0 if a.core is None else a.core.nbytes()
        return int(a.num_states * a.trans.shape[1] * a.trans.itemsize + self.masks.mask_bytes + core)


# Persistent history: one node per accepted step, a plain tuple (state, terminated,
# parent node, depth), so fork is O(1) and rollback(n) n hops; a tuple costs an accept
# ~45 ns to build against ~260 ns for a __slots__ object's __init__.
