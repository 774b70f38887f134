"""Objects in any member order: the matcher keeps each object's keys distinct.

json_schema/any_order.py builds an object whose members may come in any order (the
grammar counts the required ones) and registers its own rules (nfa.objects,
nfa.spans): the braces, keys, colons and commas, with every value a call. What the
grammar cannot say, each key at most once, the matcher keeps (`UniqueMatcher`, with
the uniqueItems watch of unique.py beside it):

- **Which object.** A `{` opens a watched object when, right after it, some
  configuration's node lies in one of the object's own rules (values are calls, so no
  other `{` lands there). A configuration is inside an object when its node or a
  frame of its stack lies in the object's own rules past the object's entry (before
  its `{` it is not inside yet). Its `levels` are the objects up its stack, innermost
  first; a state's level d holds the key languages of every configuration's d-th
  object, so an anyOf/oneOf branch that died stops counting. An extra member's key
  rule is a free key language of its own: with patternProperties beside declared
  names, a body only the names complete is dead where no pattern reading lives.
- **What was used.** The accepted bytes are read as JSON (`_skim`): a stack of the
  containers open since the watch began, each watched object with the set of keys
  written in it (canonical spellings: equal names, equal bytes). Immutable, one per
  accepted token beside the history: rollback and fork stay O(1).
- **What is masked** (where every configuration is inside some watched object; where only
  some are, the tokens that would be masked are read whole, and masked when they end the
  readings outside, as `read` refuses them: `_masked_some`):
  tokens that write a used key, or stop where every completion of the key is used (a
  finite key set: a key body all of whose names are used, or after a comma once every
  name is). Exactly, by token-trie lookups: inside a key whose body so far is p, the
  tokens starting with r + `"` for each used p + r and with the rest of each dead
  body; at a key's start, those starting with `"` u `"` or `"` + a dead body. Every
  other token that may do it is a candidate, read through (`blocked`) where the grammar
  allows it: in compact JSON a key opened after a token's first byte follows `{` or
  `,`, so member_tokens.py's `KeyIndex` lists the tokens by the key they write there (a used name's, or
  an unused name's of a finite set: writing it may use the set up), by where a key
  they open stops (a dead body's), by where they write a comma outside strings (an
  object used up), and the few that write one key twice or open an object, write a
  key and a comma. A plan per (watch state, levels) holds the exact tokens as words
  and the candidates with their verdicts, so the steps of a string value reuse it.
- **accept_token agrees with the mask**: it refuses what `blocked` finds (one `read`
  gives the verdict and the next watch state).
"""
from __future__ import annotations

import numpy as np

from .member_tokens import CLOSE_ARR, CLOSE_OBJ, COLON, COMMA, OPEN, OPEN_ARR, key_index as _key_index
from .bitmask import allowed_ids, distinct
from .token_tables import _NONE, BACKSLASH, QUOTE, _tables
from .unique import Items, Watched

_WS = b" \t\n\r"
_FIRST, _KEY, _AFTER_KEY, _VALUE = 0, 1, 2, 3  # a watched object's phase
_OWN, _OPEN, _SHELL = 0, 1, 2  # an object's rule: its body's, an extra member's key rule, the object rule


class _Object:
    """A watched object's key languages: its declared names (or free keys when any key
    is allowed) and the free one of its extra members' key rules."""

    __slots__ = ("keys", "free")

    def __init__(self, keys, free):
        self.keys, self.free = keys, free


class ObjectSites(Watched):
    """The watched objects of one compiled grammar: which states lie inside them, and
    the tokens a watch state masks."""

    def __init__(self, automaton):
        nfa = automaton.nfa
        spans = []  # (start, end, (object, what the rule is to it))
        self._close: dict[int, _Object] = {}  # the return node of an object's call of its body
        self._entries = set()  # an object rule's entry (before its `{`): not inside it yet
        for obj, (own, values, open_keys, body) in nfa.objects.items():
            rec = _Object(Items(None, values), Items(None, None))
            for name in (obj, *own):
                if name in nfa.spans:
                    kind = _SHELL if name == obj else _OPEN if name in open_keys else _OWN
                    spans.append((*nfa.spans[name], (rec, kind)))
            lo, hi = nfa.spans[obj]
            body_start = nfa.rule_start.get(body)
            for n in range(lo, hi):
                call = nfa.call.get(n)  # (the callee's start node, the return node)
                if call is not None and call[0] == body_start:
                    self._close[call[1]] = rec
            todo = [nfa.rule_start[obj]]
            while todo:
                n = todo.pop()
                if n not in self._entries:
                    self._entries.add(n)
                    todo.extend(t for t in nfa.eps[n] if isinstance(t, int))
        super().__init__(automaton, spans, len, min_len=1)  # no length bound on keys; non-empty dead bodies
        self._opens: dict[int, tuple] = {}  # state -> key languages of the objects a `{` just opened
        self._levels: dict[int, tuple] = {}  # state -> (levels, some configuration inside, all are)
        self._plans: dict[tuple, tuple] = {}  # (watch state, levels) -> masked's plan (_plan)

    def opens(self, s: int) -> tuple:
        """The key languages of the watched objects a `{` just read opened (state s after
        it): a configuration in an object's own rules whose innermost body frame is that
        object's, or in the object's rule itself past its entry (`{}`)."""
        hit = self._opens.get(s)
        if hit is None:
            a = self.automaton
            frames = a.stacks.frames
            langs = set()
            for node, st in a.configs[s] if s else ():
                site = self._site(node)
                if site is None or node in self._entries:
                    continue
                rec = site[0]
                if site[1] != _SHELL:  # inside the body: its first body frame must be this object's
                    while st > 0:
                        ret, st, _count = frames[st]
                        if ret in self._close:
                            break
                    if self._close.get(ret) is not rec:
                        continue
                langs.add(rec.keys)
            hit = self._opens[s] = tuple(langs)
        return hit

    def inside(self, s: int) -> tuple:
        """(some configuration of s is inside a watched object, all are)."""
        return self._read_stacks(s)[1:]

    def levels(self, s: int) -> tuple:
        """The key languages of the watched objects state s is inside, innermost first:
        levels[d] holds, for each configuration, the d-th watched object up its stack.
        An object is a level where a frame returns to its rule after its body (the call
        of its members, never a tail call: its `}` follows), or where the configuration
        sits in its rule past its entry (at that `}`, or `{}`'s). Its key language is the
        free one of its extra keys where the configuration is in an extra member's key
        rule below that frame, else its declared names'. The objects of a level narrow
        as the alternatives (anyOf / oneOf branches) that die leave."""
        return self._read_stacks(s)[0]

    def _read_stacks(self, s: int) -> tuple:
        """(levels, some, every) of state s (cached): see `levels` and `inside`."""
        hit = self._levels.get(s)
        if hit is None:
            a = self.automaton
            frames = a.stacks.frames
            close = self._close
            out: list[set] = []
            some, every = False, True
            for node, st in a.configs[s] if s else ():
                lv, free = [], False
                site = self._site(node)
                if site is not None:
                    if site[1] == _OPEN:
                        free = True
                    elif site[1] == _SHELL and node not in self._entries:
                        lv.append(site[0].keys)
                while st > 0:
                    ret, st, _count = frames[st]
                    rec = close.get(ret)
                    if rec is not None:
                        lv.append(rec.free if free else rec.keys)
                        free = False
                    elif not free:
                        site = self._site(ret)
                        free = site is not None and site[1] == _OPEN
                for d, lang in enumerate(lv):
                    if d == len(out):
                        out.append(set())
                    out[d].add(lang)
                some |= bool(lv)
                every &= bool(lv)
            hit = self._levels[s] = (tuple(tuple(x) for x in out), some, some and every)
        return hit

    def read(self, o, s0: int, data: bytes):
        """(the watch state after data, read from state s0; whether the matcher refuses
        data). o: None (not watching) or (frames, mode, key body, inside an escape); see
        `_skim`. Refused: what `blocked` (watching, every configuration inside) or
        `blocked_outside` (not watching) finds, so accept_token agrees with the mask.
        The caller drops the state when no configuration of the state after data is
        inside a watched object any more (`inside`)."""
        step = self.automaton.step

        def opener(i):
            return self.opens(step(s0, data[:i]))

        # checked where every configuration is inside a watched object, before data or
        # after it (data ended the readings outside: only watched ones go on)
        checking = o is None or self.inside(s0)[1] or self.inside(step(s0, data))[1]
        i, n = 0, len(data)
        while i < n:
            if o is None:
                j = data.find(b"{", i)
                if j < 0:
                    break
                i = j + 1
                langs = opener(i)
                if langs:
                    o = (((langs, frozenset(), _FIRST),), 0, None, False)
                continue
            o, i, how = _skim(o, data, i, checking, opener)
            if how == "repeat":
                return o, True
            if how == "end":
                o, checking = None, False  # as blocked: an object closed, nothing after it checked
        return o, checking and o is not None and self._dead_end(o, self.levels(step(s0, data)))

    def _dead_end(self, o, levels) -> bool:
        """Whether watch state o stops where every completion of its key is used: inside
        a key, or after a comma once every key of a finite set is used. levels: those of
        the state there (the innermost object's key languages: levels[0])."""
        frames, mode, cur, _esc = o
        top = frames[-1] if frames else None
        if not isinstance(top, tuple) or not top[1]:
            return False
        langs, used, phase = top
        if levels:
            langs = levels[0]
        if mode == 2:
            return self._dead(langs, used).dead(cur)
        return phase == _KEY and self._dead(langs, used).dead(b"")

    def blocked_outside(self, s: int, data: bytes) -> bool:
        """`blocked` for a token read while no object is watched: whether it opens a
        watched object and writes a key twice in it."""
        j = data.find(b"{")
        while j >= 0:
            langs = self.opens(self.automaton.step(s, data[:j + 1]))
            if langs:
                return self.blocked((((langs, frozenset(), _FIRST),), 0, None, False), s, data, j + 1)
            j = data.find(b"{", j + 1)
        return False

    def masked_outside(self, s: int, row: np.ndarray) -> None:
        """`masked` while no object is watched: only the tokens `blocked_outside` finds."""
        ids = _key_index(self.automaton.info).outside
        if len(ids):
            words = row.view(np.uint32)
            token_bytes = self.automaton.info.token_bytes
            for i in allowed_ids(words, ids).tolist():
                if self.blocked_outside(s, token_bytes[i]):
                    words[i >> 5] &= ~np.uint32(1 << (i & 31))

    def blocked(self, o, s: int, data: bytes, start: int = 0) -> bool:
        """Whether data[start:], read from watch state o (data read from state s), writes a
        key used in its object (or earlier in data), or stops where every completion of
        the key is used (a dead end: inside a key, or after a comma with every key of a
        finite set used)."""
        step = self.automaton.step

        def opener(i):
            return self.opens(step(s, data[:i]))

        o, _i, how = _skim(o, data, start, True, opener)
        if how is not None:
            return how == "repeat"
        return self._dead_end(o, self.levels(step(s, data)))

    def masked(self, o, s: int, row: np.ndarray) -> None:
        """Clears, in row (the grammar's mask of state s, int32 words), the tokens that
        write a used key or reach a dead end from watch state o (module docstring)."""
        levels, some, every = self._read_stacks(s)
        if not every:
            if some:
                self._masked_some(o, s, row, levels)
            return
        key = (o, levels)  # the same across the steps of a string value
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 1024:
                self._plans.clear()
            plan = self._plans[key] = _Plan(*self._plan(o, levels))
        words = memoryview(row).cast("B").cast("I")  # a few words and bits: Python ints beat numpy calls
        for w, keep in plan.exact:
            words[w] &= keep
        memo = plan.memo
        token_bytes = self.automaton.info.token_bytes
        cand = plan.cand
        if len(cand) > 48:  # many: the ones the grammar allows found by numpy
            ids = plan.ids
            cand = allowed_ids(row.view(np.uint32), ids).tolist()
        step = self.automaton.step
        for i in cand:  # read through where the grammar allows them
            if not words[i >> 5] >> (i & 31) & 1:
                continue
            data = token_bytes[i]
            hit = memo.get(i)
            if hit is None:
                if b"{" in data:  # which object the `{` opens depends on the state: read whole each time
                    if self.blocked(o, s, data):
                        words[i >> 5] &= ~(1 << (i & 31)) & 0xFFFFFFFF
                    continue
                after, _j, how = _skim(o, data, 0, True, None)
                hit = memo[i] = (how, after)
            how, after = hit
            # a repeat depends on the watch state alone, a dead end on the key languages
            # after the token too (the state's: an alternative the token ends no longer counts)
            if how == "repeat" or how is None and self._dead_end(after, self.levels(step(s, data))):
                words[i >> 5] &= ~(1 << (i & 31)) & 0xFFFFFFFF

    def _masked_some(self, o, s: int, row: np.ndarray, levels) -> None:
        """`masked` where some configurations of s are outside every watched object: a
        token is refused only where it ends those readings (after it every one is inside:
        `read`), so each token the plan would mask or read is read whole from s. Github_hard
        o38435 in any member order: after `,"` a reading in schema order was still alive
        and `a` ended it, leaving a key body whose every completion (analysis_level,
        anat_only) was used; the mask then allowed `nat`, which accept_token refused."""
        exact, cand = self._plan(o, levels)
        ids = distinct(np.concatenate((exact, cand)))
        words = row.view(np.uint32)
        token_bytes = self.automaton.info.token_bytes
        for i in allowed_ids(words, ids).tolist():
            if self.read(o, s, token_bytes[i])[1]:
                words[i >> 5] &= ~np.uint32(1 << (i & 31))

    def _plan(self, o, levels) -> tuple:
        """(the tokens watch state o masks as they are, the tokens to read through with
        `blocked` where the grammar allows them, their verdicts so far)."""
        frames, mode, cur, esc = o
        top = frames[-1]
        info = self.automaton.info
        t, k = _tables(info), _key_index(info)
        out = []  # exact: masked as they are
        cand = [k.two_keys, k.open_write]  # read through (blocked)
        at_key = mode == 0 and isinstance(top, tuple) and top[2] in (_FIRST, _KEY)
        d = -1  # watched objects above the innermost one
        for up, f in enumerate(reversed(frames)):  # up: levels above the innermost container
            if not isinstance(f, tuple):
                continue
            langs, used, _phase = f
            d += 1
            if d < len(levels):
                langs = levels[d]
            here = up == 0
            # a finite key set: writing one of its unused names may leave a dead end (its
            # last comma, or a body whose other names are used), so those are read too
            unused = sorted({v for x in langs if x.values is not None for v in x.values} - used)
            for u in (*used, *unused):
                if b'"' in u:  # an escaped quote in the key: not split at it, read every two-quote token
                    cand.append(t.two_quotes)
                else:
                    cand.append(k.segments.get(u, _NONE))
            if here and at_key:
                out.extend(t.with_prefix(b'"' + u + b'"') for u in used)
                cand.extend(t.with_prefix(b'"' + u + b'"') for u in unused)
            if here and mode == 2:  # inside a key of this object, body cur so far
                n = len(cur)
                cand.append(k.close_then_key)  # which may write this key again
                out.extend(t.with_prefix(u[n:] + b'"') for u in used if u.startswith(cur))
                cand.extend(t.with_prefix(u[n:] + b'"') for u in unused if u.startswith(cur))
            if not used:
                continue
            dead = self._dead(langs, used)
            # dead in every language: exact; dead in some: read through, since the token
            # may end the alternatives (anyOf / oneOf branches) whose language it is not
            for q in set().union(*dead.per_lang):
                sure = q in dead.nodes
                if q:
                    cand.append(k.ending_in(q))
                    if here and at_key:
                        (out if sure else cand).append(t.with_prefix(b'"' + q))
                    if here and mode == 2 and len(q) > len(cur) and q.startswith(cur):
                        (out if sure else cand).append(t.with_prefix(q[len(cur):]))
                else:  # every key used: no comma at this object's level
                    cand.append(k.comma if esc else k.commas.get((mode != 0, up), _NONE))
        out = [x for x in out if len(x)]
        cand = [x for x in cand if len(x)]
        # repeats in either list are harmless (a bit cleared twice, a verdict read twice)
        exact = np.concatenate(out) if len(out) > 1 else out[0] if out else _NONE
        cand = np.concatenate(cand) if len(cand) > 1 else cand[0] if cand else _NONE
        return exact.astype(np.int64), cand.astype(np.int64)


class _Plan:
    """What `masked` clears for one (watch state, levels): the exact tokens as
    (word, bits it keeps) pairs, the candidates read through where the grammar allows
    them (distinct token ids), and their readings so far (how `_skim` ended, the watch
    state after: a dead end is then judged with the state's levels after the token)."""

    __slots__ = ("exact", "cand", "ids", "memo")

    def __init__(self, exact, cand):
        keep: dict[int, int] = {}
        for i in distinct(exact).tolist():
            keep[i >> 5] = keep.get(i >> 5, 0xFFFFFFFF) & ~(1 << (i & 31))
        self.exact = list(keep.items())
        self.ids = distinct(cand)
        self.cand = self.ids.tolist()
        self.memo: dict[int, tuple] = {}


def _skim(o, data: bytes, i: int, stop_on_repeat: bool, opener):
    """Reads data[i:] as JSON inside watched objects from watch state o: (state,
    position, how): how "end" when the outermost object closed (position past its `}`),
    "repeat" when a key written equals one used in its object (only with
    stop_on_repeat), None when data was read whole.

    o = (frames, mode, key, esc): frames, the containers open since the watch began,
    innermost last: "{" / "[" for a plain one, (key languages, used keys, phase) for a
    watched object; mode 0 between tokens of JSON, 1 in a string value, 2 in a key of
    the innermost object (key: its body so far); esc: after a backslash. opener(j):
    the key languages of the objects the `{` at data[j - 1] opens (none: a plain one)."""
    frames, mode, cur, esc = o
    n = len(data)
    while i < n:
        b = data[i]
        i += 1
        if mode:
            if esc:
                esc = False
            elif b == BACKSLASH:
                esc = True
            elif b == QUOTE:
                if mode == 2:
                    langs, used, _phase = frames[-1]
                    if cur in used:
                        if stop_on_repeat:
                            return (frames, mode, cur, esc), i, "repeat"
                    else:
                        used = used | {cur}
                    frames = frames[:-1] + ((langs, used, _AFTER_KEY),)
                    cur = None
                mode = 0
                continue
            if mode == 2:
                cur += data[i - 1:i]
            continue
        if b in _WS:
            continue
        top = frames[-1]
        if b == QUOTE:
            if isinstance(top, tuple) and top[2] in (_FIRST, _KEY):
                mode, cur = 2, b""
            else:
                mode = 1
        elif b == OPEN:
            langs = opener(i)
            frames = frames + (((langs, frozenset(), _FIRST) if langs else "{"),)
        elif b == OPEN_ARR:
            frames = frames + ("[",)
        elif b == CLOSE_OBJ or b == CLOSE_ARR:
            frames = frames[:-1]
            if not frames:
                return (frames, 0, None, False), i, "end"
        elif isinstance(top, tuple):
            if b == COLON:
                frames = frames[:-1] + ((top[0], top[1], _VALUE),)
            elif b == COMMA:
                frames = frames[:-1] + ((top[0], top[1], _KEY),)
    return (frames, mode, cur, esc), i, None
