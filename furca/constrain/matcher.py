"""Matcher: one request's position in a CompiledGrammar (compiled.py): masks, accepted
tokens, rollback, jump-forward."""

from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

import numpy as np

from .automaton import MAX_STEPS_CACHED, AutomatonLimit
from .stored_masks import Delta

if TYPE_CHECKING:  # compiled.py imports this module (CompiledGrammar.matcher)
    from .compiled import CompiledGrammar

_INT32 = np.dtype(np.int32)  # fill_bitmask's check: the same object for every native int32 array


_HistView = namedtuple("_HistView", "state terminated parent depth")  # Matcher._h: a node by name


class Matcher:
    """Matches one request's output against a compiled grammar and gives the token mask
    of the next step.

    The matcher accepts tokens one at a time (`accept_token`) and fills the bitmask of
    the tokens allowed next (`fill_bitmask`). Once the grammar's language may end, the
    EOS tokens are allowed too; accepting one terminates the matcher, and after that no
    token is allowed. It keeps every accepted token, so it can `rollback` any number of
    them and `fork` an independent copy cheaply.

    A token the grammar does not allow, and a grammar limit reached while matching
    (nesting deeper than 512, a state of more than 4,096 parallel parses), put the
    matcher in a sticky error state: `is_error()` is true, `error` says why, every
    later `accept_*` returns False, and the mask allows only the EOS tokens (so that a
    request can stop). `rollback` and `reset` clear it. Only API misuse raises.

    Not thread-safe: one matcher belongs to one request (forks may go to other threads).

    Attributes
    ----------
    error : str or None
        Why the matcher is in its error state; None when it is not.
    """

    __slots__ = ("_g", "_a", "_t", "error", "_warm", "_n", "_steps", "_blob", "_offs", "_vocab", "_out", "_row",
                 "_shape", "_dest", "_dmv", "_zeros")

    def __init__(self, grammar: CompiledGrammar, _hist=None):
        self._g = grammar
        a = self._a = grammar.automaton
        self._warm = grammar.masks.warm  # state -> stored mask needing no limit check (fill_bitmask)
        self._n = a.info.num_words
        self._steps = a.token_steps  # state * vocabulary + token id -> state (accept_token)
        self._blob, self._offs = a.info.token_blob, a.info.token_offsets  # every token's bytes
        self._vocab = len(a.info.token_bytes)
        self._t = _hist if _hist is not None else (a.start, False, None, 0)  # the history node (see _HistView)
        # the numpy bitmask row the last full fill validated (fill_bitmask's warm path):
        # the array, its row, its shape then, the row as an array and as a memoryview
        self._out = self._row = self._shape = self._dest = self._dmv = None
        self._zeros = grammar.masks.zeros  # a memoryview of num_words zero int32 words
        self.error: str | None = None

    @property
    def _h(self) -> _HistView:
        """The current history node by name (for tests and debugging)."""
        return _HistView(*self._t)

    # ---- queries -------------------------------------------------------------------
    def is_error(self) -> bool:
        """Whether the matcher is in its sticky error state (see `error`)."""
        return self.error is not None

    def is_terminated(self) -> bool:
        """Whether an EOS token was accepted. A terminated matcher accepts nothing more
        and its mask allows no token.

        Returns
        -------
        terminated : bool
        """
        return self._t[1]

    def can_terminate(self) -> bool:
        """Whether the output so far is a complete string of the grammar's language, so
        that an EOS token would be accepted now (False once terminated).

        Returns
        -------
        can_terminate : bool
        """
        h = self._t
        return not h[1] and self._a.accepting[h[0]]

    @property
    def num_accepted(self) -> int:
        """The number of steps accepted so far: tokens (EOS included) and `accept_string`
        calls. `rollback` undoes this many at most."""
        return self._t[3]

    # ---- masks ---------------------------------------------------------------------
    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        """Writes the mask of the tokens allowed next into one row of a bitmask.

        Bit t of the row (word t // 32, bit t % 32) is set exactly when token t is
        allowed: a token whose bytes continue the output within the grammar, or an EOS
        token where the language may end. Special tokens and ids past the tokenizer's
        vocabulary are never set. In the error state only the EOS tokens are set; once
        terminated, none. Words past ``ceil(vocab_size / 32)`` are zeroed. The matcher
        does not move.

        Parameters
        ----------
        bitmask : numpy.ndarray or torch.Tensor
            int32, shape (batch, >= ceil(vocab_size / 32)), on the CPU (a torch tensor is
            written in place through its shared memory), e.g. from
            `allocate_token_bitmask`.
        row : int, default: 0
            The row to write; the other rows are left as they are.

        Raises
        ------
        ValueError
            If bitmask is not an int32 2-D array at least ceil(vocab_size / 32) wide.
        IndexError
            If row is outside the bitmask.
        """
        h = self._t
        if self.error is None and not h[1]:
            # warm path: a state whose stored mask was written before and needs no
            # nesting-limit check (see the end of the try below)
            m = self._warm.get(h[0])
            if m is not None:
                if bitmask is self._out and row == self._row and bitmask.shape == self._shape \
                        and bitmask.dtype is _INT32:
                    # the numpy row validated before, written through its memoryview (a
                    # dense copy ~0.2 us less than out[row] = m, a sparse one ~0.3 us)
                    if type(m) is tuple:
                        self._dmv[:] = self._zeros
                        self._dest[m[0]] = m[1]
                    elif type(m) is Delta:
                        self._dmv[:] = m.base
                        self._dest[m.idx] = m.words
                    else:
                        self._dmv[:] = m
                    return
                out = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()  # torch CPU: shared memory
                if out.ndim == 2 and out.dtype is _INT32:  # other rows, arrays or widths: as write_stored
                    n = self._n
                    width = out.shape[1]
                    if width == n and out is bitmask:
                        self._remember(out, row)  # validated: the memoryview path from the next fill
                    if type(m) is tuple and width >= n:
                        dest = out[row]
                        dest.fill(0)
                        dest[m[0]] = m[1]
                        return
                    if width == n and type(m) is not Delta:
                        out[row] = m
                        return
        out = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()  # torch CPU tensor: shared memory
        a = self._a
        n = self._n
        if out.ndim != 2 or out.shape[1] < n or (out.dtype is not _INT32 and out.dtype != _INT32):
            raise ValueError(f"bitmask must be int32 [batch, >= {n}], got {out.dtype} {tuple(out.shape)}")
        dest = out[row]
        if h[1]:
            dest[:] = 0
            return
        if self.error is None:
            g, state = self._g, h[0]
            try:
                m = g.masks.write_mask(state, dest)
                near = g.limit_check(state)
                if near is not None:
                    self._drop_tokens_past_limit(dest, *near)
                else:  # the stored mask is the whole answer: the warm path's from now on
                    self._warm[state] = m
                return
            except AutomatonLimit as e:
                if g.limit_check(state) is not None:  # the walk met the nesting limit: step every token
                    dest[:n] = g.mask_by_steps(state)
                    dest[n:] = 0
                    return
                self._fail(f"grammar limit reached: {e}")
        dest[:n] = a.info.eos_mask
        dest[n:] = 0

    def _remember(self, out: np.ndarray, row) -> None:
        """Keeps out (a numpy int32 bitmask exactly num_words wide, just validated) and its
        row for the warm path of the next fills: the array (held, so its buffer stays
        put), its shape now (an in-place reshape or dtype change fails the check), the row
        as an array and as a memoryview. A non-contiguous row is not kept."""
        dest = out[row]
        if dest.flags.c_contiguous:
            self._out, self._row, self._shape, self._dest, self._dmv = out, row, out.shape, dest, memoryview(dest)

    def _drop_tokens_past_limit(self, dest: np.ndarray, room: int, per_byte: int) -> None:
        """Clear the bits of ``dest`` (this state's mask) whose token would nest deeper
        than the limit: each allowed token long enough to push ``room`` frames is
        stepped (`LazyAutomaton.step`, cached), and cleared when the step raises
        AutomatonLimit, so that the mask and `accept_token` agree."""
        g = self._g
        n, vocab = g.info.num_words, len(g.info.token_bytes)
        bits = np.unpackbits(dest[:n].view(np.uint8), bitorder="little")[:vocab]
        ids = np.flatnonzero(bits)
        ids = ids[g._token_len[ids] * per_byte >= room]
        if not len(ids):
            return
        words = dest.view(np.uint32)
        token_bytes, step, state = g.info.token_bytes, self._a.step, self._t[0]
        for t in ids.tolist():
            try:
                step(state, token_bytes[t])
            except AutomatonLimit:
                words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)

    def get_allowed_tokens(self) -> np.ndarray:
        """The ids allowed next (the set bits of `fill_bitmask`), for tests and debugging.

        Returns
        -------
        token_ids : numpy.ndarray
            Sorted int64 ids below vocab_size.
        """
        bm = np.zeros((1, self._a.info.num_words), dtype=np.int32)
        self.fill_bitmask(bm)
        bits = np.unpackbits(bm.view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self._a.info.vocab_size])

    # ---- moves ---------------------------------------------------------------------
    def _fail(self, msg):
        if self.error is None:
            self.error = msg

    def accept_token(self, token_id: int) -> bool:
        """Accepts one token and moves the matcher past it.

        The matcher does not move and returns False (entering the error state, see
        `error`) when:

        1. the token's bytes do not continue the output within the grammar;
        2. the token is an EOS token where the language may not end yet;
        3. the matcher has terminated (an EOS token was accepted);
        4. the token is a special token, or its id is outside the vocabulary;
        5. a grammar limit is reached (nesting deeper than 512, ...).

        In the error state it returns False without looking at the token.

        Parameters
        ----------
        token_id : int
            The id of the token.

        Returns
        -------
        accepted : bool
            Whether the token was accepted. An accepted EOS token terminates the matcher.
        """
        h = self._t
        if self.error is None and not h[1] and 0 <= token_id < self._vocab:
            # a warm step: the automaton's cache read without a call (only live steps on a
            # token's bytes are cached: EOS and special tokens are never a hit)
            s = self._steps.get(h[0] * self._vocab + token_id)
            if s:
                self._t = (s, False, h, h[3] + 1)
                return True
        return self._accept_cold(token_id)

    def _accept_cold(self, token_id: int) -> bool:
        """accept_token past its warm step: the error and terminated states, EOS, special
        tokens, and steps not in the automaton's cache (or cached dead)."""
        if self.error is not None:
            return False
        h = self._t
        if h[1]:
            self._fail(f"token {token_id} after the end (EOS already accepted)")
            return False
        a = self._a
        if token_id in a.info.eos_token_ids:
            if a.accepting[h[0]]:
                self._t = (h[0], True, h, h[3] + 1)
                return True
            self._fail(f"EOS (token {token_id}) where the grammar cannot end")
            return False
        data = self._token_data(token_id)
        if not data:
            self._fail(f"token {token_id} is a special or unknown token; not allowed inside a constraint")
            return False
        s = h[0]
        try:
            s = a.step(s, data)
        except AutomatonLimit as e:
            self._fail(f"grammar limit reached: {e}")
            return False
        if s == 0:
            self._fail(f"token {token_id} ({data!r}) is not allowed after {self._text_tail()!r}")
            return False
        steps = self._steps
        if len(steps) >= MAX_STEPS_CACHED:
            steps.clear()  # cleared, never rebound: matchers hold it
        steps[h[0] * self._vocab + token_id] = s
        self._t = (s, False, h, h[3] + 1)
        return True

    def _token_data(self, token_id: int) -> bytes | None:
        """The bytes of a token id (b"" for a special token), None for an id outside the
        vocabulary: sliced out of the tokenizer's one blob (TokenizerInfo.token_blob)."""
        if not 0 <= token_id < self._vocab:
            return None
        offs = self._offs
        return self._blob[offs[token_id]:offs[token_id + 1]]

    def accept_string(self, text: str | bytes) -> bool:
        """Accepts raw text (UTF-8 for a str) as one step, as if one token had these bytes:
        for tests, and for text that is not tokenized. `rollback(1)` undoes it whole.

        Returns False without moving when the matcher is in its error state or has
        terminated; returns False and enters the error state when the text does not
        continue the output within the grammar or a grammar limit is reached. EOS cannot
        be accepted this way (use `accept_token`).

        Parameters
        ----------
        text : str or bytes
            The text.

        Returns
        -------
        accepted : bool
            Whether the text was accepted.
        """
        h = self._t
        if self.error is not None or h[1]:
            return False
        data = text.encode("utf-8") if isinstance(text, str) else text
        if not data:  # the same state
            self._t = (h[0], False, h, h[3] + 1)
            return True
        try:
            s = self._a.step(h[0], data)
        except AutomatonLimit as e:
            self._fail(f"grammar limit reached: {e}")
            return False
        if s == 0:
            self._fail(f"string {data!r} is not allowed here")
            return False
        self._t = (s, False, h, h[3] + 1)
        return True

    def _text_tail(self):
        depth = self._h.depth
        return f"<{depth} tokens accepted>" if depth else "<start>"

    def rollback(self, num_tokens: int = 1) -> None:
        """Undoes the last num_tokens accepted steps (an accepted EOS counts as one, and
        so does an `accept_string` call) and clears the error state.

        Parameters
        ----------
        num_tokens : int, default: 1
            How many steps to undo; 0 only clears the error state.

        Raises
        ------
        ValueError
            If num_tokens is negative or more than `num_accepted`.
        """
        h = self._t
        if num_tokens < 0 or num_tokens > h[3]:
            raise ValueError(f"cannot roll back {num_tokens} tokens; {h[3]} accepted")
        for _ in range(num_tokens):
            h = h[2]
        self._t = h
        self.error = None

    def reset(self) -> None:
        """Back to the grammar's start: every accepted step undone, the error cleared."""
        h = self._t
        while h[2] is not None:
            h = h[2]
        self._t = h
        self.error = None

    def fork(self) -> "Matcher":
        """An independent copy: the same grammar, position, history and error state; what
        either accepts or rolls back afterwards does not affect the other. O(1).

        Returns
        -------
        matcher : Matcher
        """
        m = Matcher(self._g, self._t)
        m.error = self.error
        return m

    def jump_forward(self) -> str:
        """The longest text the grammar forces from here: one possible next byte at each
        step, stopping where the language may end or a choice opens), without a UTF-8
        character left incomplete at its end. The matcher does not move: the caller tokenizes the text and accepts
        its tokens (or `accept_string`).

        Returns
        -------
        text : str
            The forced text; "" when nothing is forced, when it does not start at a
            character boundary, in the error state, once terminated, or when a grammar
            limit is reached (which enters the error state, except the nesting limit
            within reach of the current state: then nothing is forced).
        """
        state, terminated = self._t[:2]
        if self.error is not None or terminated:
            return ""
        try:
            data = self._a.forced_bytes(state)
        except AutomatonLimit as e:
            if self._g.limit_check(state) is None:
                self._fail(f"grammar limit reached: {e}")
            # else: at the nesting limit, building the next states meets it; forcing
            # nothing is right (the mask, `mask_by_steps`, still allows what fits)
            return ""
        # cut at a character boundary
        for cut in range(len(data), max(len(data) - 4, -1), -1):
            try:
                return data[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return ""
