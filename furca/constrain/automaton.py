"""The lazy byte automaton: its states and transition table.

A state is a set of parser configurations ``(nfa node, stack)``; a stack is an
interned persistent list of return frames (stacks.py; id 0 = empty). For a regular
language (regex, choices, non-recursive grammars: most JSON schemas) stacks stay
bounded and this is plain lazy subset construction of a DFA; for recursive grammars it
is the same construction over the configurations of the pushdown automaton,
materialised only where a walk goes (each distinct nesting context is its own state).
State 0 is dead.

This module builds states: interning, the transition row of a state (all 256 bytes,
one computation per byte class) on first use, stepping, jump-forward (the canonical
form of counter and length states: canonical_forms.py, its base class); the closures it interns come from its `Closures`
(closures.py, ``.closures``; closure, closure_of, template and byte_stack are bound on
the automaton too). The token masks of states are another object over these tables
(masks.TokenMasks, with slices.SliceBounds): they receive the automaton and use its
public methods (intern, closure, closure_of, template, byte_stack, expand, canonical,
canonical_stack) and tables (configs, stacks, closures, trans, expanded, acc,
accepting). The automaton knows nothing of them. See DESIGN.md.

Thread safety: growing the tables is done under ``lock``; readers take no lock (rows
are written before a state is marked expanded). Its parts compute under the same lock.
"""

from __future__ import annotations

from _thread import RLock  # threading.RLock is a Python-level factory of this

import numpy as np

from . import core_rows
from .canonical_forms import CanonicalForms
from .closures import Closures, return_through
from .deadline import check as check_deadline
from .nfa import NFA
from .rows import Rows, bucket_plan, from_plan
from .stacks import CUT_RET, AutomatonLimit, Stacks
from .tables import reserved_table
from .tokenizer import TokenizerInfo

__all__ = ["AutomatonLimit", "LazyAutomaton"]

MAX_CONFIGS = 4096  # configurations in one state (ambiguity bound)
MAX_STATES = 1 << 20  # states per compiled grammar (~1 GB of transition rows)
RESERVE_AFTER = 64  # past this many states the transition table is reserved at MAX_STATES (see _grow)
FIRST_WALK_CAP = 512  # the per-state arrays' first length where the row kernel walks (a row's room and more)
MAX_JUMP = 4096
MAX_STEP_KEY = 64  # step() results are cached for data up to this long (tokens)
MAX_STEPS_CACHED = 1 << 16  # ... this many (then the cache starts over)
# rows a grammar computes in Python (rows.py) before its kernel tables are made and the
# kernel takes over (core_rows.py). 0: made with the grammar, in its first mask: made at
# its 33rd row, inside a decode step, the packing and the kernels' first calls cost that
# step more than the rows saved (harness per-token p99 547 against 401 µs, DESIGN.md)
CORE_AFTER = 0


def _grown(x, cap):
    """x copied into zeros of length cap."""
    out = np.zeros(cap, dtype=x.dtype)
    out[: len(x)] = x
    return out


class _Configs(list):
    """State id -> its configurations (a sorted tuple of (node, stack) pairs). A state the
    row kernel made (core_rows.Core) is None here until Python first reads it, then made
    (Core.configs_of): ~85% of them are never read (a walk's states between trie nodes),
    and making each a tuple and an interning key cost ~9% of the slow steps' time."""

    __slots__ = ("core", "ids")

    def __getitem__(self, i):
        x = list.__getitem__(self, i)
        if x is None:
            x = self.core.configs_of(i if i >= 0 else i + len(self), self, self.ids)
        return x

    def __iter__(self):
        return map(self.__getitem__, range(len(self)))


class LazyAutomaton(CanonicalForms):
    """The automaton of one grammar against one tokenizer: expand(s) / step(s, data) /
    accepting[s] / forced_bytes(s). Token masks: masks.TokenMasks over it."""

    def __init__(self, nfa: NFA, info: TokenizerInfo):
        self.nfa, self.info = nfa, info
        self.lock = RLock()
        self.stacks = Stacks()
        self.closures = cl = Closures(nfa, self.stacks)
        # the closures' methods the automaton and its parts call most, bound once
        self.closure, self.closure_of, self.template, self.byte_stack = (
            cl.closure, cl.closure_of, cl.template, cl.byte_stack)
        # the kernel that computes rows (core_rows.py), made at the row after the first
        # CORE_AFTER where numba is installed and FURCA_CORE is not 0; None before and else
        # (_rows_to_core -1)
        self.core = None
        self._state_ids = {}
        self.configs = _Configs()  # state id -> tuple of (node, stack) (the kernel's states made on read)
        self.configs.core, self.configs.ids = None, self._state_ids
        self.accepting = []  # state id -> bool
        # rows are read only once written (walkable, expanded): left unzeroed, the table's
        # pages fault in as rows are written (the dead state's row is zeros). With the row
        # kernel, whose first walk (in the compile's first mask) asks room for 257 new
        # states, the table is reserved at once (see _grow) and the per-state arrays start
        # at that room: no table of 64 rows written, then copied, then dropped
        core_on = core_rows.enabled()
        self._cap = FIRST_WALK_CAP if core_on else 64
        trans = reserved_table(MAX_STATES) if core_on else None
        self.trans = trans if trans is not None else np.empty((self._cap, 256), dtype=np.int32)
        self.trans[0] = 0
        self.expanded = np.zeros(self._cap, dtype=bool)
        # the compiled walks read a state's row where this is set: every expanded state, and
        # states whose row the walks filled byte by byte, -1 elsewhere (trie_walks.resume)
        self.walkable = np.zeros(self._cap, dtype=bool)
        self.acc = np.zeros(self._cap, dtype=bool)  # accepting, for the compiled walk
        # canonical_short of each state for the compiled walk (0: not mapped yet; a live
        # state's canonical form is never the dead state 0, and zeros stay a lazily zeroed
        # mapping when the tables are reserved: see _grow), used at
        # trie nodes with at most walk_lim bytes left below them (-1: never; _walk.py)
        self.short = np.zeros(self._cap, dtype=np.int32)
        # with short[s] mapped, for the walk at nodes with more than walk_lim bytes left: the
        # state with every counter and length frame of s that may move at its canonical
        # count (full[s]), and the most bytes left below a node for which s and full[s]
        # allow the same (room[s]; 0: no frame moves). See full_canonical.
        self.full = np.zeros(self._cap, dtype=np.int32)
        self.room = np.zeros(self._cap, dtype=np.int32)
        self._full_stack_memo: dict[int, tuple] = {}
        self.walk_lim = info.short_len if (nfa.counter or nfa.length) and info.short_len > 0 else -1
        self._canon: dict[int, int] = {}
        self._canon_stack: dict[int, int] = {}
        self._canon_short: dict[int, int] = {}  # canonical_short's memo
        self._canon_stack_short: dict[int, int] = {}
        self._max_token_len = info.max_token_len
        self._jump: dict[int, bytes] = {}
        self.step_cache: dict[tuple, int] = {}  # (s, data) -> step(s, data)
        # s * vocabulary + token id -> the live state after the token (Matcher.accept_token's
        # warm step, filled by its cold one; an int key: no token's bytes object is read)
        self.token_steps: dict[int, int] = {}
        self._byte_steps: dict[int, int] = {}  # s * 256 + b -> trans[s, b] of a state without a row (_step_byte)
        self._abstract: dict[int, tuple | None] = {}  # state -> (abstract state, base stack) or None (abstract)
        self.rows = Rows(nfa)  # computes the transition rows (expand)
        self.intern((), False)  # dead state 0
        self.expanded[0] = self.walkable[0] = True
        self.cut = self.stacks.push(CUT_RET, 0)  # the context frame of abstract states (masks.py)
        self.start = self.intern(*self.closure_of([(nfa.start, 0)]))
        self._rows_to_core = CORE_AFTER if core_on else -1

    @property
    def num_states(self):
        return len(self.configs)

    def intern(self, configs, accept) -> int:
        """The id of the state with these configurations (interned; a new state grows the
        tables). Raises AutomatonLimit past MAX_CONFIGS or MAX_STATES."""
        # a sorted tuple of int pairs, not a frozenset: tuples of ints leave the garbage
        # collector's tracking, so big automata do not slow every collection down
        if len(configs) == 1:
            key = (tuple(configs), accept)
        else:  # a set as it comes from the rows and closure_of; others deduplicated first
            key = (tuple(sorted(configs if type(configs) is set else set(configs))), accept)
        sid = self._state_ids.get(key)
        if sid is None:
            check_deadline()  # before anything of the new state is stored
            if len(key[0]) > MAX_CONFIGS:
                raise AutomatonLimit(f"more than {MAX_CONFIGS} parallel parses (grammar too ambiguous)")
            sid = len(self.configs)
            if self.core is not None and sid < MAX_STATES:  # the kernel's table: a state it made, or this one new
                hit = self.core.intern(self, key)
                if hit is not None:
                    if not hit[1]:
                        return hit[0]
                    sid = hit[0]
            if sid >= MAX_STATES:
                raise AutomatonLimit(f"more than {MAX_STATES} automaton states")
            self._state_ids[key] = sid
            self.configs.append(key[0])
            self.accepting.append(accept)
            if sid >= self._cap:
                self._grow()
            self.acc[sid] = accept
        return sid

    def _grow(self, need: int = 0):
        """Doubles the tables, as many times as `need` states take at once (a walk asks
        for room for a row's 257 new states: one growth, not one per doubling, each
        allocating every per-state array anew). The transition table (1 KB a state), past RESERVE_AFTER
        (64) states, is reserved for MAX_STATES at once instead (tables.reserved_table: a
        mapping whose pages become resident only when rows are written), so a grammar
        never pays the copy of a big table in the middle of a request (a 50-150 ms step
        at 64 MB), and a process forked per request (the shared harness) faults in each
        page of rows once, not once per doubling plus the copies (the 500 sample forked:
        page faults in the steps -14%, 2026-12-05). The per-state flags and maps (a few
        bytes a state) keep doubling: reserved at MAX_STATES too, their five arrays were
        ~14 MB that the allocator may hand out from its heap and zero in the step that
        crossed 4,096 states (Github_easy o9925: ~4 ms of a 10 ms step)."""
        n = cap = self._cap
        cap *= 2
        while cap < need:
            cap *= 2
        self._cap = min(cap, MAX_STATES)
        if len(self.trans) < self._cap:
            trans = reserved_table(MAX_STATES) if n >= RESERVE_AFTER else None
            if trans is None:
                trans = np.empty((self._cap, 256), dtype=np.int32)
            trans[:n] = self.trans[:n]
            self.trans = trans
        self.expanded, self.walkable, self.acc, self.short, self.full, self.room = [
            _grown(x, self._cap) for x in (self.expanded, self.walkable, self.acc, self.short, self.full, self.room)]

    # ---- transitions ---------------------------------------------------------------
    def expand(self, s: int):
        """Computes state s's transition row (idempotent; rows.Rows: one closure and intern
        per distinct successor of its byte classes)."""
        if self.expanded[s]:
            return
        with self.lock:
            if self.expanded[s]:
                return
            if self._rows_to_core > 0:
                self._rows_to_core -= 1
            elif self._rows_to_core == 0:
                self._rows_to_core = -1
                self.core = self.configs.core = core_rows.make(self)
            if self.core is not None and self.core.row(self, s):
                pass  # the kernel's row (core_rows.py): the same as rows.py's (its configurations stay unread)
            elif len(configs := self.configs[s]) == 1:  # most states (one position in a rule): the node's template
                self.rows.single(self, s, *configs[0])
            else:
                self.rows.multi(self, s, configs)
            self.walkable[s] = True
            self.expanded[s] = True

    def step(self, s: int, data: bytes) -> int:
        """State after consuming data from s (0 = dead), cached per (s, data) for data of
        at most MAX_STEP_KEY bytes (a token). A state without a row is not expanded: the
        states a matcher steps through inside a rule get their masks from their abstract
        states (masks.TokenMasks), so their rows would be built only for this, interning
        a state per byte class. Such a state is stepped over its abstract state's rows
        as far as the token stays inside the rule (_step_abstract), then byte by byte
        (_bytes: through rows, or the kernel's byte steps, or _step_byte)."""
        key = (s, data)
        hit = self.step_cache.get(key)
        if hit is not None:
            return hit
        t, rest = s, data
        if not self.expanded[s] and len(data) > 1:
            t, rest = self._step_abstract(s, data)
        if t and rest:
            _j, t, how = self._bytes(t, rest, False)
            if how == 1:
                t = 0
        if len(data) <= MAX_STEP_KEY:
            if len(self.step_cache) >= MAX_STEPS_CACHED:
                self.step_cache.clear()  # cleared, never rebound: matchers hold it
            self.step_cache[key] = t
        return t

    def abstract(self, s: int):
        """(abstract state, base) of s, or None: base is the innermost call frame or item
        counter frame (_base; other counter frames stay in the abstract state) below which
        every configuration of s shares its stack, and the abstract state is s with base
        replaced by the context frame `cut` (reaching the rule's end, or the item's, there
        is accepting instead of a return). None without such a frame (base 0, or already
        the context frame).
        Cached per state: contexts.ContextSplit.context (a state's mask) and _step_abstract
        (the token accepted from it) ask for the same state one after the other."""
        hit = self._abstract.get(s, False)
        if hit is not False:
            return hit
        with self.lock:
            res = None
            base = self._state_base(s)
            if base and self.stacks.frames[base][0] != CUT_RET:
                res = (self._rebased_state(s, base, self.cut), base)
            self._abstract[s] = res
        return res

    def abstract_groups(self, s: int, most: int, root: bool):
        """(abstract state, frames) of a state that abstract() cannot cut (its
        configurations share no frame) whose configurations, grouped by their own innermost
        frame, are one abstract state in every group once that frame is cut (the same rule
        reached along several parses), for 2..most groups; or, with root, every
        configuration at the root (no frame at all): (the same state at the context frame,
        [0]). None otherwise. Masks: contexts.ContextSplit.contexts."""
        frames = self.stacks.frames
        groups: dict[int, list] = {}
        for n, st in self.configs[s]:
            f = self._base(((n, st),))
            if f and frames[f][0] == CUT_RET:
                return None
            groups.setdefault(f, []).append((n, st))
        if list(groups) == [0]:
            return (self.intern(self.stacks.rebased(groups[0], 0, self.cut), False), [0]) if root else None
        if 0 in groups or not 1 < len(groups) <= most:
            return None
        ab = None
        for f, g in groups.items():
            x = self.intern(self.stacks.rebased(g, f, self.cut), False)
            if ab is not None and x != ab:
                return None
            ab = x
        return ab, list(groups)

    def _state_base(self, s: int) -> int:
        """_base of state s's configurations: in the row kernel where the grammar has one
        (without reading the configurations as tuples: most states it made are never)."""
        if self.core is not None:
            return self.core.base(self, s)
        return self._base(self.configs[s])

    def _rebased_state(self, s: int, frm: int, to: int) -> int:
        """The state (not accepting) of s's configurations with the stack frm, which all
        their stacks extend, replaced by to: in one kernel call where the grammar has the
        row kernel (core_rows.Core.rebased), else stacks.rebased and intern."""
        if self.core is not None:
            t = self.core.rebased(self, s, frm, to)
            if t >= 0:
                return t
        return self.intern(self.stacks.rebased(self.configs[s], frm, to), False)

    def _base(self, configs) -> int:
        """The innermost call frame or item counter frame (nfa.item_counters) below which
        every configuration shares its stack (0: none); the frames of length regions and
        other counters are skipped. An item's body ends only after several bytes (a value,
        its closing quote or bracket), so few tokens pass its end and the items of an
        array share one abstract state, whatever their count; a character's or a word's
        counter stays in the abstract state (nearly every token would pass its body's end
        and be walked again from the continuation)."""
        if not configs:
            return 0
        frames, items = self.stacks.frames, self.nfa.item_counters
        base = self.stacks.base_of(configs)
        while base and frames[base][2] and frames[base][0] not in items:
            base = frames[base][1]
        return base

    def after_return(self, frame: int) -> int:
        """The state after a rule end returns through the stack frame `frame` (closures.py's
        return_through): a call frame goes on at its return node; an item counter frame
        with k bodies done runs the body again at k + 1 below its maximum and leaves at or
        past its minimum. In the row kernel where the grammar has one (core_rows.py)."""
        if self.core is not None:
            t = self.core.after_return(self, frame)
            if t >= 0:
                return t
        ret, parent, k = self.stacks.frames[frame]
        pairs = [(t, parent if again is None else self.stacks.push(ret, parent, again))
                 for t, again in return_through(self.nfa, ret, k)]
        return self.intern(*self.closure_of(pairs))

    def _step_abstract(self, s: int, data: bytes):
        """(state, rest): s stepped over a prefix of data through s's abstract state
        (abstract(s): the configurations with their shared base stack, the innermost
        call frame, replaced by the context frame `cut`), and the bytes left for the byte
        steps. A state without a row got its mask from its abstract state, whose walk
        built the rows along the token's bytes; the real states between are never
        interned. Exact while no state after a byte returned through the context frame
        (accepting): until then every closure stayed above the base, so the real state is
        the abstract one with `cut` replaced by the base again (the same frames, nodes
        and counts; length regions and Closures.live read only frames above it). The
        prefix stops before the first byte that leads to an accepting abstract state (the
        token may leave the rule there: the caller's part needs the real stack)."""
        hit = self.abstract(s)
        if hit is None:
            return s, data
        x, base = hit
        with self.lock:
            # up to the first byte that leads to an accepting state (a configuration returned
            # through the base: the caller's part)
            j, x, how = self._bytes(x, data, True)
            if how == 1:
                return 0, b""
            if j == 0:
                return s, data
            t = self._rebased_state(x, self.cut, base)
            if t not in self._abstract and self._state_base(x) == self.cut:
                # x is t's abstract state (t's base is base: x's configurations share no
                # call frame above the context frame), so the mask of t, asked for next,
                # does not rebase and intern it again
                self._abstract[t] = (x, base)
            return t, data[j:]

    def _bytes(self, x: int, data: bytes, stop_acc: bool) -> tuple[int, int, int]:
        """x stepped over data: (j, x, how) as _core_kernels.step_bytes (how 0: every
        byte taken, x the state after them; 1: byte j leads to the dead state; 2: byte j
        leads to an accepting state and stop_acc, x the state before it). Through the
        rows of expanded states; from the first state without one, the rest in one
        kernel call (core_rows.py: a call per token, not per byte), else by _step_byte."""
        trans, expanded, accepting = self.trans, self.expanded, self.accepting
        j, n = 0, len(data)
        while j < n:
            if expanded[x]:
                y = trans.item(x, data[j])  # a Python int, ~60 ns less than int(trans[s, b])
            else:
                if self.core is not None:
                    with self.lock:
                        k, x, how = self.core.step_bytes(self, x, data[j:], stop_acc)
                    j += k
                    if how != 3:
                        return j, x, how
                y = self._step_byte(x, data[j])  # what the kernel did not step (a limit, full tables)
                trans, expanded, accepting = self.trans, self.expanded, self.accepting  # interning may grow them
            if y == 0:
                return j, x, 1
            if stop_acc and accepting[y]:
                return j, x, 2
            x = y
            j += 1
        return n, x, 0

    def _step_byte(self, s: int, b: int) -> int:
        """trans[s, b] without building s's row (the same state: the same configurations
        as expand's bucket for b, built the same way: rows.bucket_plan / from_plan, the
        targets' relative closures pushed on the stacks after the byte), cached per (s, b)."""
        key = s * 256 + b
        t = self._byte_steps.get(key)
        if t is None:
            with self.lock:
                if self.expanded[s]:
                    return int(self.trans[s, b])
                t = self.core.step_byte(self, s, b) if self.core is not None else -1
                if t >= 0:  # the kernel's (core_rows.py): the same state as below
                    self._byte_steps[key] = t
                    return t
                configs, edges = self.configs[s], self.nfa.edges
                bucket = [(i, x) for i, (n, _st) in enumerate(configs) for lo, hi, x in edges[n] if lo <= b <= hi]
                sts = {i: self.byte_stack(*configs[i]) for i, _x in bucket}  # -1: past a length region's maximum
                live = self.closures.live if self.nfa.need else None
                t = from_plan(self, bucket_plan(self, bucket), sts, live)  # no configuration: the dead state 0
                self._byte_steps[key] = t
        return t

    # ---- jump-forward --------------------------------------------------------------
    def forced_bytes(self, s: int) -> bytes:
        """The longest byte string forced from s (one possible next byte at each step,
        and the language may not end there)."""
        hit = self._jump.get(s)
        if hit is not None:
            return hit
        out = bytearray()
        cur = s
        while cur and not self.accepting[cur] and len(out) < MAX_JUMP:
            self.expand(cur)
            row = self.trans[cur]
            nz = np.flatnonzero(row)
            if len(nz) != 1:
                break
            out.append(int(nz[0]))
            cur = int(row[nz[0]])
        res = bytes(out)
        self._jump[s] = res
        return res
