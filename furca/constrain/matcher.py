"""CompiledGrammar (shared, immutable to users) and Matcher (one per request)."""

from __future__ import annotations

import numpy as np

from .automaton import AutomatonLimit, LazyAutomaton


class CompiledGrammar:
    """A grammar compiled against one tokenizer. Thread-safe to share between requests;
    its automaton grows lazily (states and masks are cached for every later request)."""

    def __init__(self, automaton: LazyAutomaton, source: str = ""):
        self.automaton = automaton
        self.info = automaton.info
        self.source = source

    def matcher(self) -> "Matcher":
        return Matcher(self)

    @property
    def num_states(self) -> int:
        return self.automaton.num_states

    def memory_size_bytes(self) -> int:
        a = self.automaton
        # transition rows in use (the table may be reserved larger, see automaton._grow), masks
        return int(a.num_states * a.trans.shape[1] * a.trans.itemsize + a.mask_bytes)


class _Hist:
    """Persistent history: one node per accepted token (fork and rollback are O(1)/O(n))."""

    __slots__ = ("state", "terminated", "parent", "depth")

    def __init__(self, state, terminated, parent):
        self.state, self.terminated, self.parent = state, terminated, parent
        self.depth = 0 if parent is None else parent.depth + 1


class Matcher:
    """Per-request matcher state.

    accept_token(t) -> bool: False (and a sticky error, see ``error``) when t is not
    allowed here; EOS is allowed exactly where the language may end, and then
    is_terminated() is true. fill_bitmask(bitmask, row): writes row ``row`` of an int32
    [batch, ceil(vocab/32)] numpy array or CPU torch tensor, bit set = allowed; in the
    error state only EOS is allowed, after termination nothing. rollback(n) undoes the
    last n accepted tokens (and clears an error). fork() is an independent copy.
    jump_forward() -> the longest string forced from here ("" when none); the matcher
    does not move: the caller tokenizes it and accepts the tokens.
    Only API misuse (bad row, rollback past the start) raises.
    """

    __slots__ = ("_g", "_a", "_h", "error")

    def __init__(self, grammar: CompiledGrammar, _hist=None):
        self._g = grammar
        self._a = grammar.automaton
        self._h = _hist if _hist is not None else _Hist(self._a.start, False, None)
        self.error: str | None = None

    # ---- queries -------------------------------------------------------------------
    def is_error(self) -> bool:
        return self.error is not None

    def is_terminated(self) -> bool:
        return self._h.terminated

    def can_terminate(self) -> bool:
        return not self._h.terminated and self._a.accepting[self._h.state]

    @property
    def num_accepted(self) -> int:
        return self._h.depth

    # ---- masks ---------------------------------------------------------------------
    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        a = self._a
        out = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()  # torch CPU tensor: shared memory
        n = a.info.num_words
        if out.ndim != 2 or out.shape[1] < n or out.dtype != np.int32:
            raise ValueError(f"bitmask must be int32 [batch, >= {n}], got {out.dtype} {tuple(out.shape)}")
        dest = out[row]
        if self._h.terminated:
            dest[:] = 0
            return
        if self.error is None:
            try:
                a.write_mask(self._h.state, dest)
                return
            except AutomatonLimit as e:
                self._fail(f"grammar limit reached: {e}")
        dest[:n] = a.info.eos_mask
        dest[n:] = 0

    def get_allowed_tokens(self) -> np.ndarray:
        """Ids allowed now (for tests and debugging)."""
        bm = np.zeros((1, self._a.info.num_words), dtype=np.int32)
        self.fill_bitmask(bm)
        bits = np.unpackbits(bm.view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self._a.info.vocab_size])

    # ---- moves ---------------------------------------------------------------------
    def _fail(self, msg):
        if self.error is None:
            self.error = msg

    def accept_token(self, token_id: int) -> bool:
        if self.error is not None:
            return False
        h, a = self._h, self._a
        info = a.info
        if h.terminated:
            self._fail(f"token {token_id} after the end (EOS already accepted)")
            return False
        if token_id in info.eos_token_ids:
            if a.accepting[h.state]:
                self._h = _Hist(h.state, True, h)
                return True
            self._fail(f"EOS (token {token_id}) where the grammar cannot end")
            return False
        data = info.token_bytes[token_id] if 0 <= token_id < len(info.token_bytes) else None
        if not data:
            self._fail(f"token {token_id} is a special or unknown token; not allowed inside a constraint")
            return False
        try:
            s = a.step(h.state, data)
        except AutomatonLimit as e:
            self._fail(f"grammar limit reached: {e}")
            return False
        if s == 0:
            self._fail(f"token {token_id} ({data!r}) is not allowed after {self._text_tail()!r}")
            return False
        self._h = _Hist(s, False, h)
        return True

    def accept_string(self, text: str | bytes) -> bool:
        """Advances by raw text as one step (for tests / jump-forward without tokens)."""
        if self.error is not None or self._h.terminated:
            return False
        data = text.encode("utf-8") if isinstance(text, str) else text
        s = self._a.step(self._h.state, data)
        if s == 0:
            self._fail(f"string {data!r} is not allowed here")
            return False
        self._h = _Hist(s, False, self._h)
        return True

    def _text_tail(self):
        h = self._h
        return f"<{h.depth} tokens accepted>" if h.depth else "<start>"

    def rollback(self, num_tokens: int = 1) -> None:
        if num_tokens < 0 or num_tokens > self._h.depth:
            raise ValueError(f"cannot roll back {num_tokens} tokens; {self._h.depth} accepted")
        h = self._h
        for _ in range(num_tokens):
            h = h.parent
        self._h = h
        self.error = None

    def reset(self) -> None:
        while self._h.parent is not None:
            self._h = self._h.parent
        self.error = None

    def fork(self) -> "Matcher":
        m = Matcher(self._g, self._h)
        m.error = self.error
        return m

    def jump_forward(self) -> str:
        if self.error is not None or self._h.terminated:
            return ""
        data = self._a.forced_bytes(self._h.state)
        # cut at a character boundary
        for cut in range(len(data), max(len(data) - 4, -1), -1):
            try:
                return data[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return ""
