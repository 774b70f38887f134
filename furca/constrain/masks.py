"""Token masks of automaton states: computed once per state, stored, copied afterwards.

TokenMasks receives the automaton (automaton.LazyAutomaton) and the slice bounds over
it (slices.SliceBounds); it reads the automaton's tables and grows them through its
public methods (intern, closure_of, expand), under the automaton's lock. A state's
mask is a walk of the token trie over the transition table (trie_walks.py: numba DFS in
_walk.py, or numpy level by level; dead states prune whole subtrees), with the vocabulary slices of
token_slices.TokenSlice taken whole where the slice bounds prove them allowed. A state
inside a rule call shares the mask of its abstract state (the rule's context cut off)
and re-walks only the tokens that leave the rule (contexts.py, which also takes an
abstract state with configurations inside a lexeme under a frame of its own grammar
from the lexeme's walk shared by every grammar, lexeme_masks.py, continued after its
returns); a state at a key trie node takes its trie's shared "any key" mask less the
name closers (key_masks.py). Masks are stored packed, or sparse when few words are
non-zero, in a store bounded per grammar. See DESIGN.md.
"""

from __future__ import annotations

import numpy as np

from . import _walk
from .automaton import LazyAutomaton
from .contexts import ContextSplit
from .gcpause import GC_PAUSE
from .key_masks import KeyTrieMasks
from .nfa import closed_layout_size
from .slices import SliceBounds
from .stored_masks import Delta, _base_of, _size, _stored, write_stored
from .string_counters import BoundedStrings
from .trie_walks import walk_compiled, walk_continue, walk_numpy, walk_recording

MAX_MASK_BYTES = 256 << 20  # per compiled grammar
try:  # numpy's C count (np.count_nonzero and ndarray.all are Python code, whose pages a
    # process forked after set-up copies at their first call)
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # pragma: no cover - another numpy layout
    _count_nonzero = np.count_nonzero


def _takes_all(row, byte_list) -> bool:
    """Whether the transition row takes every byte of byte_list (no dead successor)."""
    return _count_nonzero(row[byte_list]) == len(byte_list)


class TokenMasks:
    """mask(s) / write_mask(s, out): the packed int32 token bitmask of state s (EOS set
    exactly when s accepts). Computed under the automaton's lock on first use; readers
    of a cached mask take no lock. mask_bytes: the store's size (masks, abstract
    masks, "any key" words), bounded by MAX_MASK_BYTES. split: the context split
    (contexts.ContextSplit) of the wide states. bounded: the bounded strings' tables
    (string_counters.BoundedStrings), or None."""

    def __init__(self, automaton: LazyAutomaton, slices: SliceBounds):
        self._a = automaton
        self._info = automaton.info
        self.slices = slices
        self._canon = automaton.canonical if automaton.nfa.counter or automaton.nfa.length else None  # states that share a mask
        info = automaton.info
        self._tiered = self._canon is not None and 0 < info.short_len < info.max_token_len  # see _tiered_mask
        self._store: dict[int, object] = {}  # canonical state -> packed row or (word indices, words)
        # state -> its stored mask, for Matcher.fill_bitmask's warm path: filled by the
        # matcher for states whose mask needs no nesting-limit check, cleared by _evict
        self.warm: dict[int, object] = {}
        self.zeros = info.zero_words  # what the warm path copies into a row before a sparse mask's words
        self._store_bytes = 0
        # abstract states at a key trie node: from the trie's shared "any key" walk (key_masks.py)
        self._keys = KeyTrieMasks(automaton) if automaton.nfa.key_trie_nodes else None
        # abstract states inside bounded strings (a counter over one character): from the
        # tokenizer's tables (string_counters.py); None without counters or numba
        self.bounded = BoundedStrings.of(automaton)
        # a wide state's abstract state and continuations, and the abstract states' kept walks
        self.split = ContextSplit(automaton, self.bounded)

    @property
    def mask_bytes(self) -> int:
        """The size of the stored masks, the abstract states' kept walks and the key tries'
        "any key" words: bounded by MAX_MASK_BYTES."""
        keys = self._keys.nbytes if self._keys is not None else 0
        return self._store_bytes + self.split.nbytes + keys

    def prepare_keys(self) -> None:
        """The key tries' "any key" words made now, at the compile (KeyTrieMasks.prepare);
        without numba's walks the key tries' states are walked as they are, and nothing
        is made."""
        keys = self._keys
        if keys is None or _walk.get_walk_range() is None:
            return
        with self._a.lock:
            keys.prepare(self._compute_recorded, self.split.cont_of)

    # ---- the mask store ---------------------------------------------------------------
    def _cached_mask(self, s: int):
        """The stored mask of s: a packed int32 row, or (word indices, words) when at most
        SPARSE_WORDS words are non-zero (most states of a schema allow few tokens).
        The store is bounded by MAX_MASK_BYTES (oldest half dropped, recomputed on use)."""
        if self._canon is not None:
            s = self._canon(s)
        m = self._store.get(s)
        if m is None:
            with self._a.lock:
                m = self._store.get(s)
                if m is None:
                    GC_PAUSE.enter()  # a new mask grows the automaton: see gcpause.py
                    try:
                        short = self._a.canonical_short(s) if self._tiered else s
                        if short == s:
                            m = self._compute_mask_ctx(s)
                        else:  # short's bits for the short tokens: its stored words are the base
                            m = _stored(self._tiered_mask(s, short), _base_of(self._store.get(short)))
                    finally:
                        GC_PAUSE.exit()
                    size = _size(m)
                    if self.mask_bytes + size > MAX_MASK_BYTES:
                        self._evict()
                    self._store[s] = m
                    self._store_bytes += size
        return m

    def _evict(self):
        """Drops the oldest half of the stored masks and every abstract mask."""
        self.warm.clear()
        for k in list(self._store)[: len(self._store) // 2 + 1]:
            self._store_bytes -= _size(self._store.pop(k))
        self.split.clear()
        if self._keys is not None:
            self._keys.clear()

    def _tiered_mask(self, s, short):
        """s's mask from short = canonical_short(s) != s: every token of at most
        info.short_len bytes is allowed in s exactly when it is in short (the frames
        canonical_short moved have more room than such a token can use), so those bits
        are short's mask (stored once for every such count); the long tokens, the few
        whose bytes could reach a bound, are walked from s over their own trie (inside a
        rule call: from s's abstract state, shared by every caller, and its continuation,
        as _compute_mask_ctx)."""
        info = self._info
        words = self.mask(short).view(np.uint32) & ~info.long_words
        words &= ~info.eos_mask.view(np.uint32)
        fns = _walk.get_walk_range()
        ctx = self.split.context(s) if fns is not None else None
        if ctx is None:
            if _walk.get_walk() is not None:
                walk_compiled(self._a, s, info.long_trie, words)
            else:
                walk_numpy(self._a, s, info.long_trie, words)
        else:  # as _compute_mask_ctx, over the long tokens: their abstract walk is shared
            ab, cont = ctx
            nz, vals, roots = self.split.long_part(ab)
            words[nz] |= vals
            if len(roots) and cont:
                walk_continue(self._a, roots, info.long_trie, cont, words)
        packed = words.view("<i4")
        if self._a.accepting[s]:
            packed |= info.eos_mask
        return packed

    def mask(self, s: int) -> np.ndarray:
        """Packed int32 bitmask (info.num_words) of the tokens allowed in state s."""
        m = self._cached_mask(s)
        if type(m) is tuple:
            out = np.zeros(self._info.num_words, dtype=np.int32)
            out[m[0]] = m[1]
            return out
        if type(m) is Delta:
            out = m.packed()
            out.setflags(write=False)
            return out
        return m

    def write_mask(self, s: int, out: np.ndarray):
        """Writes s's mask into the int32 row out (len >= num_words; the rest zeroed).
        Returns the stored form it wrote (see _stored)."""
        m = self._cached_mask(s)
        write_stored(m, out)
        return m


    # ---- context-independent masks (xgrammar's adaptive token mask cache: contexts.py) --
    def _wide(self, s) -> bool:
        """Whether s may allow many tokens: the NFA nodes of its configurations take "a"
        and " " or "a" and "0" (the slices' pre-checks, on the nodes' byte classes, before
        any row is built: a JSON string, or a pattern's alphabet such as `[a-z0-9_-]`).
        Only such states go through their abstract state: a narrow state's walk is short,
        and its abstract state is rarely met again (on the MaskBench instances 94% of the
        abstract states served one real state), so the context split (interning the
        abstract state, a recording walk, a continuation walk) cost more than it shared.
        A pattern's state walks tens of thousands of tokens and is met again wherever its
        rule is called from a new context: inside the items of an array with maxItems,
        near the bound every item's count is part of the real state (Github_easy o9925:
        ~2.3 ms a item, ~0.15 ms since; the 500 sample with every instance timed, as the
        shared harness does: sum of steps -4%, p99 -5 to -6%). A state that takes "a"
        and "A" and lies wholly in the closed layout of lasting rules is wide too: its abstract
        state's mask is shared by every grammar of the process (lexeme_masks.py), such as
        a `uri` format's scheme letters, a ~28,000-token walk otherwise made again in each
        context (states of letters alone elsewhere: bench/prototypes/wide_letters). With
        the row kernel, from its tables (core_rows.Core.wide)."""
        core = self._a.core
        if core is not None:
            return core.wide(self._a, s)
        node_bytes = self.slices.proof.node_bytes
        bits = 0
        lasting = closed_layout_size(self._a.nfa)
        inside = True
        for n, _st in self._a.configs[s]:
            bits |= node_bytes(n)
            inside = inside and n < lasting
        return bool(bits >> 0x61 & (bits >> 0x20 | bits >> 0x30 | bits >> 0x41 & inside) & 1)

    def _compute_mask_ctx(self, s):
        """s's mask in its stored form (_stored): the context-independent part (its
        abstract state's, shared) plus the context-dependent tokens re-walked from the
        continuation state. A state that adds nothing to its abstract state's mask (no
        token leaves the rule, or no continuation; not accepting) stores the abstract
        state's mask itself: the stored masks are never written to."""
        fns = _walk.get_walk_range()
        wide = fns is not None and self._wide(s)
        split = self.split
        ctx = split.context(s) if wide else None
        if ctx is None:
            ctx = split.contexts(s) if wide else None
            if ctx is None:
                packed, base = self._compute_mask(s, narrow=fns is not None and not wide)
                return _stored(packed, base)
            ab, conts = ctx
        else:
            ab, conts = ctx[0], (ctx[1],)
        hit, free = split.abstract_part(ab, self._recorded_walk)  # free: a row holding the abstract mask that nothing stores
        stored, roots, trie, _ = hit
        walk = len(roots) and any(conts)
        accepting = self._a.accepting[s]
        if not walk and not accepting:
            return stored  # the abstract state's mask as it is (never written to)
        words = split.writable(stored, free)
        if walk:
            for cont in conts:
                if cont:
                    walk_continue(self._a, roots, trie, cont, words)
        packed = words.view("<i4")
        if accepting:
            packed |= self._info.eos_mask
        return _stored(packed, _base_of(stored))

    def _recorded_walk(self, s):
        """(words, return nodes, trie, base) of s's recording walk (an abstract state's):
        the compute of contexts.ContextSplit."""
        return self._compute_mask(s, record=True)

    def _compute_recorded(self, s):
        """_recorded_walk without the base: the compute of key_masks.KeyTrieMasks."""
        return self._compute_mask(s, record=True)[:3]

    def _slice_level(self, s, row):
        """The level (token_slices.TokenSlice.levels) of the first slice whose strings of its
        length all stay alive from s, or None. A state that takes "a" and " " tries the
        JSON string slice, and where some JSON string character kills it at once (depth
        0: a pattern's narrower alphabet) the alphabets with a space; one that takes no
        space, the narrower alphabets (a pattern's); each only where s takes every byte
        that starts one of its characters (a depth of at least one), largest first."""
        info = self._info
        if row[0x61] and row[0x20]:  # cheap pre-check: "a" and " " live
            depth = 0
            for sl in info.slices():
                level, depth = self._level_of(s, sl)
                if level is not None:
                    return level
            if depth:
                return None
            candidates = [sl for sl in info.space_slices() if _takes_all(row, sl.first_byte_list)]
        elif row[0x61] and row[0x30]:  # "a" and "0", no space: a pattern's alphabet (every class holds both)
            candidates = [sl for sl in info.class_slices() if _takes_all(row, sl.first_byte_list)]
        else:
            return None
        for sl in candidates:
            level, _depth = self._level_of(s, sl)
            if level is not None:
                return level
        return None

    def _level_of(self, s, sl):
        """(the level of slice sl that s allows whole, or None; s's depth in sl)."""
        depth = self.slices.slice_depth(s, sl)
        if 0 < depth < sl.max_level and self.slices.tight(s, sl, depth):  # a bound that near: exactly that deep
            return sl.exact(depth), depth
        return next((lv for lv in sl.levels if depth >= lv[0]), None), depth

    def _compute_mask(self, s, record=False, narrow=False):
        """s's mask as (packed int32 words, base), or with record (an abstract state's
        recording walk) as (uint32 words, return nodes, trie, base). base: read-only
        packed words the mask began as (a key trie's "any key" words, a slice level's
        bits, a split's first part), which _stored may keep it as a Delta against; or None.
        narrow: s is not _wide (its nodes do not take "a" and a space or a digit), so no
        slice level applies (each needs s's row to allow "a" and " " or "0") and s's row is
        left to the compiled walk, which makes it inside its call (not made first through
        `expand`, a call from Python into the row kernel and back: ~8 µs against ~3)."""
        a, info = self._a, self._info
        # the key tries' masks are recording walks (numba's walk_range): without numba,
        # such a state is walked as it is
        parts = self._keys.split(s) if self._keys is not None and _walk.get_walk_range() is not None else None
        if parts is not None:  # at a key trie node: from the trie's shared "any key" walk
            words, roots, trie, base = self._keys.words(s, parts, self._compute_recorded, self.split.cont_of)
            if record:
                return words, roots, trie, base
            packed = words.view("<i4")
            if a.accepting[s]:
                packed |= info.eos_mask
            return packed, base
        if record and self.bounded is not None:  # a bounded string's body start: from the tables
            hit = self.bounded.part(s, self._info.trie)
            if hit is not None:
                return hit
        if record:  # from its lexeme parts, where it has some
            split = self.split.recorded_split(s, self._recorded_walk)
            if split is not None:
                return split
        trie, words, keep, base = info.trie, None, None, None
        if s != 0 and not narrow:
            a.expand(s)
            level = self._slice_level(s, a.trans[s])
            if level is not None:
                _L, bits, trie, keep = level
                words = bits.view(np.uint32).copy()
                base = bits if bits.dtype == np.int32 and not bits.flags.writeable else None
        if words is None:
            words = np.zeros(info.num_words, dtype=np.uint32)
        if record:
            return words, walk_recording(self._a, s, trie, words, keep), trie, base
        if _walk.get_walk() is not None:
            # a narrow state of literals (an enum's strings, an object's names) down their bytes
            if not (narrow and a.core is not None and a.core.literal_words(a, s, words, trie)):
                walk_compiled(self._a, s, trie, words, keep)
        else:
            walk_numpy(self._a, s, trie, words)
        packed = words.view("<i4")
        if a.accepting[s]:
            packed |= info.eos_mask
        return packed, base
