"""The key tries' calls of the row kernel's Core (core_rows.py): a key state's split and
its words (KeyTrieMasks with the kernel: _key_kernels.split_key, key_words), and the
masks of narrow states of literals walked down their bytes by the same literal walk
(literal_words). Core inherits them; they use its tables (pool, sinfo, stk, P), its
walks' arguments and bookkeeping (_walk_args, _walked) and their own scratch."""

from __future__ import annotations

import numpy as np

from .deadline import check as check_deadline

_NO_NODES = np.zeros(0, np.int32)  # literal_words: no roots, no closers
LITERAL_MIN = 4  # literal_words: the fewest configurations (literals) of a state it walks


class KeyCalls:
    """Core's key-trie kernel calls (see the module docstring)."""

    def _keys_init(self, kernels) -> None:
        """Their kernels (_key_kernels) and scratch, at the Core's making."""
        self._split_key = kernels.split_key
        self._key_words = kernels.key_words
        self._literal_configs = kernels.literal_configs
        self._key_full, self._key_rec = kernels.FULL, kernels.REC_CAP
        self._keybuf = np.empty(0, np.int64)  # key_split's configurations, then key_words' scratch
        # key_words' scratch: a walk's records, the return nodes (made at its first call)
        self._krec, self._kfound = None, None

    def key_split(self, a, s, marks, other_ret):
        """(the key of state s's one configuration on a key trie node, the other
        configurations the mask walks as int64 keys) from the kernel's tables
        (_key_kernels.split_key: key_masks.KeyTrieMasks.split), or None. marks: the key
        trie nodes (bool over the NFA's nodes); other_ret: per node, where its call of
        `other` returns. Under the automaton's lock."""
        if s >= self._ns:
            self._enter(a)
        s = int(s)
        kk, n = self._split_key(s, self.pool, self.sinfo, self.stk, marks, other_ret, self._keybuf)
        if kk == self._t.ROOM:  # room for s's configurations, then again
            self._keybuf = np.empty(max(256, 2 * n), np.int64)
            kk, n = self._split_key(s, self.pool, self.sinfo, self.stk, marks, other_ret, self._keybuf)
        if kk < 0:
            return None
        return int(kk), self._keybuf[:n].copy()

    def key_words(self, a, words, roots, closers, rest, trie):
        """KeyTrieMasks.words' walks in one kernel call (_key_kernels.key_words): words
        (a copy of the "any key" words) cleared below the closers and set for the
        configurations rest (int64 keys, from key_split); the return nodes, or None where
        the kernel stopped (the caller computes the mask in Python from the any-key
        words again). Under the automaton's lock."""
        check_deadline()
        args = self._walk_args(a, trie)
        if len(rest) > len(self._keybuf):  # its scratch for the configurations not on a literal
            self._keybuf = np.empty(max(256, 2 * len(rest)), np.int64)
        if self._krec is None:
            self._krec = np.zeros(self._key_rec, np.int32)
            self._kfound = np.empty(1024, np.int32)
        stack = np.empty(trie.max_depth + 1, dtype=np.int32)
        n = self._key_words(words, roots, closers, rest, len(rest), self._keybuf, stack, self._krec, self._kfound,
                            trie.keep_all, *args)
        self._walked(a)
        if n == self._key_full:
            self._kfound = np.empty(max(1024, 2 * len(self._kfound)), np.int32)
        return self._kfound[:n].copy() if n >= 0 else None

    def literal_words(self, a, s, words, trie) -> bool:
        """Sets in words (zero) the tokens state s allows where every configuration of s
        sits on a one-byte node (the names of an object without extra keys, an enum's
        strings): key_words walks each down the token trie along its literal, through
        closures, making no automaton state (nor row) until the literal's end, where its
        state is walked below that trie node. A walk from s makes a state and a row per
        literal position the vocabulary's tokens reach (78 for a 14-string enum, ~2 µs
        each). False (words left zero): s is not such a state, or the kernel stopped.
        Under the automaton's lock."""
        if s >= self._ns:
            self._enter(a)
        s = int(s)
        m = int(self.sinfo[s, 1])
        if m < LITERAL_MIN:
            return False
        rest = np.empty(m, np.int64)
        if self._literal_configs(s, self.pool, self.sinfo, self.P, rest) != m:
            return False
        if self.key_words(a, words, _NO_NODES, _NO_NODES, rest, trie) is None:
            words[:] = 0  # the part it set
            return False
        return True
