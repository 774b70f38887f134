"""Transition rows computed in numba: the kernel tables that mirror an automaton.

``Core(a, pack(a.nfa))`` holds the automaton's NFA as int32 arrays (`pack`) and kernel
copies of its stacks (ret, parent, count, depth) and states (their configurations as
sorted int64 keys node << 32 | stack, and whether they accept), each with an
open-addressing table, under the same ids as the automaton's. ``row(a, s)`` computes
state s's whole transition row in one kernel call (_core_kernels.row: the closures of
every byte class, their successors interned) where `LazyAutomaton.expand` would have
run rows.py; ``walk_roots`` / ``walk_range`` are the trie walks that make the rows and
canonical forms they meet (_core_walk_kernels.walk_roots_core); ``base``, ``rebased`` and
``in_layout`` answer a new state's questions (its base frame, its abstract state, whether
it lies in the layout of lasting rules) from the tables, without its configurations as
tuples. A row returns False where
the kernel does not make it (a limit of the automaton, which Python's row then raises;
a state of over 256 configurations or a closure past its budget, which rows.py's
per-node caches serve): the caller computes it in Python. Rows, states and stacks are
the same either way (the kernel follows closures.py and rows.py; test_rows.py,
test_expand_plans.py and test_core_rows.py compare them).

The ids stay in step both ways: the stacks Python pushed since the last kernel call
(the ids past the kernel's count) are entered into the kernel tables before the next
one, and Python's new states are interned in the kernel's table as they are made
(`intern`); the stacks the kernel makes are appended to the automaton's (frames, depth,
the interning dict) right after it, and its states too, their accepting flags at once
and their configurations when Python first reads them (automaton._Configs,
`configs_of`: most never are). The Core holds no reference to the automaton (which
owns it): a dropped grammar is freed by reference counts. Made with the grammar (its first row, inside the compile's first
mask) where numba is installed, unless FURCA_CORE=0 (the automaton's ``core`` is then
None): made later, inside a decode step, its packing and first calls cost that step more
than its rows saved at the per-token p99 (DESIGN.md, "Rows in a kernel", has the
figures).
"""

from __future__ import annotations

import os

import numpy as np

from . import _walk
from .core_keys import KeyCalls
from .core_pack import pack
from .deadline import check as check_deadline
from .nfa import closed_layout_size

_ROOT = np.zeros(1, np.int32)  # the trie's root as the one root of a walk of the whole trie
WALK_ROWS = 64  # rows a compiled walk makes before it returns (then Python checks the deadline)
# stacks and states a walk's kernel call has room for (the kernel cannot grow its tables:
# Python grows them before the call; past it the walk returns, they grow, it goes on);
# the tables start at twice that, so a grammar's first walks grow none of them
WALK_ROOM = 256


def enabled() -> bool:
    """Whether automata compute rows in the kernel: numba installed and the walks
    compiled (_walk: FURCA_NO_NUMBA unset), and FURCA_CORE not 0 (on by default)."""
    if os.environ.get("FURCA_CORE", "") == "0":
        return False
    return _walk.get_walk() is not None


_MODULES = None  # (_core_kernels, _core_tables, _core_walk_kernels, automaton, _key_kernels), at the first Core


def _modules():
    """The kernels' modules (numba's: imported at the first Core, not with the package),
    kept here: a function-level `from . import ...` runs importlib's Python code at every
    call, which a process forked after set-up (the shared harness) pays in page faults."""
    global _MODULES
    if _MODULES is None:
        from . import _core_kernels, _core_tables, _core_walk_kernels, _key_kernels, automaton

        _MODULES = (_core_kernels, _core_tables, _core_walk_kernels, automaton, _key_kernels)
    return _MODULES


def make(a):
    """Core(a, pack(a.nfa)), or None where the NFA does not fit the kernel's int32 tables
    (a counter or length bound past 2^31 - 1, as a hostile maxLength writes): rows.py
    computes that grammar's rows, whose ints have no bound."""
    try:
        packed = pack(a.nfa)
    except OverflowError:
        return None
    return Core(a, packed)


def filled(n, value, dtype):
    """np.full(n, value, dtype) without numpy's Python-level wrapper (see core_pack.pack)."""
    out = np.empty(n, dtype)
    out.fill(value)
    return out


def _doubled(x, rows):
    out = np.zeros((rows,) + x.shape[1:], x.dtype)
    out[: len(x)] = x
    return out


class Core(KeyCalls):
    """row(a, s) -> bool. See the module docstring; the key tries' calls: core_keys.py."""

    def __init__(self, a, packed):
        """a: the automaton; packed: pack(a.nfa) (one int32 array)."""
        kern, _core_tables, _core_walk_kernels, automaton, _key_kernels = _modules()

        self._k = kern
        self._t = _core_tables
        self._walk_core = _core_walk_kernels.walk_roots_core
        self._state_wide = _core_walk_kernels.state_wide
        self._state_depth = _core_walk_kernels.state_depth
        self._state_base = _core_walk_kernels.state_base
        self._rebase_state = _core_walk_kernels.rebase_state
        self._state_in_layout = _core_walk_kernels.state_in_layout
        self._lasting = closed_layout_size(a.nfa)  # state_wide's bound of the shared layout
        self._keys_init(_key_kernels)
        # the item counters' nodes (automaton._base), up to the last of them
        self.items = np.zeros(max(a.nfa.item_counters, default=-1) + 1, np.bool_)
        for n in a.nfa.item_counters:
            self.items[n] = True
        self.P = packed
        self.has_need = bool(a.nfa.need)
        rows = 2 * WALK_ROOM
        # tables whose rows are written before they are read are left unzeroed (np.empty):
        # their pages fault in as rows are written, not all at once
        self.stk = np.empty((rows, 4), np.int32)
        self.sh = filled(2 * rows, -1, np.int32)
        self.pool = np.empty(4 << 12, np.int64)  # the keys of the states (two buf's room: _headroom)
        self.sinfo = np.empty((rows, 3), np.int64)
        self.sinfo[0] = 0  # the dead state: no configurations
        self.hh = filled(2 * rows, -1, np.int32)
        # [0] stacks, [1] pool used, [2] states (0: the empty stack, the dead state), [3] the
        # rows and mappings a walk may still make before it returns (WALK_ROWS a call: Python
        # checks the deadline between), [4] the closure steps a row may still take, [5] the
        # rows a walk made (their states in `made`), [6] the most configurations of a state
        # (automaton.MAX_CONFIGS when the Core is made: past it, Python's intern raises)
        self.cnt = np.array([1, 0, 1, 0, 0, 0, automaton.MAX_CONFIGS], np.int64)
        self.made = np.empty(WALK_ROWS, np.int32)  # the states a walk gave rows, to mark expanded after it
        self.stk[0] = (-1, -1, 0, 0)
        # per stack: its canonical form for short tokens, its full_canonical form and room (-1: not yet)
        self.cmemo = filled(rows, -1, np.int32)
        self.fmemo = filled(rows, -1, np.int32)
        self.froom = filled(rows, -1, np.int64)
        # scratch of a row: successor keys, the closure's work list, its relative frame
        # chains, its visited set (node, chain, stack, generation), the stacks after the byte
        self.buf = np.empty(1 << 12, np.int64)
        self.ws = np.empty((1 << 10, 3), np.int64)
        self.rel = np.empty((64, 3), np.int64)
        self.seen = np.zeros((1 << 11, 4), np.int64)
        self.sts = np.empty(256, np.int32)  # a state of over 256 configurations: rows.py's row (its layouts)
        self.cuts = np.empty(257, np.bool_)
        self._nst, self._ns = 1, 1  # the counts of stacks and states both sides hold (cnt[0], cnt[2])
        self._gen = 0  # bumped when a table of the kernel is replaced (grown)
        self._wargs = (None, None)  # (key, the walk's arguments after `keep`): walk_roots

    def nbytes(self) -> int:
        """The bytes of the kernel's arrays: the packed NFA, the tables, the scratch."""
        return self.P.nbytes + sum(
            x.nbytes for x in (self.stk, self.sh, self.pool, self.sinfo, self.hh, self.cmemo, self.fmemo, self.froom,
                               self.buf, self.ws, self.rel, self.seen, self.sts, self.cuts, self._keybuf, self._krec,
                               self._kfound) if x is not None)

    def _made(self, a, call) -> int:
        """call(), a kernel call over the tables (read anew each time), between entering
        the automaton's new stacks and states and leaving the kernel's; again after the
        tables grew where it ran out of room. Its result (ROOM where they cannot grow)."""
        room = self._t.ROOM
        while True:
            self._enter(a)
            r = call()
            self._leave(a)
            if r != room or not self._grow(a):
                return r

    def row(self, a, s) -> bool:
        """Writes a.trans[s] (s: a state of a without a row); False: not done, the caller
        computes it (a.trans[s] may hold a part: rows.py writes every byte)."""
        k = self._k
        check_deadline()
        s = int(s)
        return self._made(a, lambda: k.row(s, self.P, self.stk, self.sh, self.cnt, self.pool, self.sinfo, self.hh,
                                           a.trans, self.buf, self.ws, self.rel, self.seen, self.sts, self.cuts,
                                           self.has_need)) == 0

    def step_byte(self, a, s, b) -> int:
        """trans[s, b] of a state s without a row (automaton._step_byte, in one kernel
        call: _core_kernels.step_byte); -1 where the kernel does not make it (the
        caller steps it in Python)."""
        k = self._k
        s, b = int(s), int(b)
        t = self._made(a, lambda: k.step_byte(s, b, self.P, self.stk, self.sh, self.cnt, self.pool, self.sinfo,
                                               self.hh, self.buf, self.ws, self.rel, self.seen, self.has_need))
        return t if t >= 0 else -1

    def after_return(self, a, frame) -> int:
        """automaton.after_return(frame) in one kernel call (_core_kernels.after_return);
        -1 where the kernel does not make it (the caller makes it in Python)."""
        k = self._k
        frame = int(frame)
        t = self._made(a, lambda: k.after_return(frame, self.P, self.stk, self.sh, self.cnt, self.pool, self.sinfo,
                                                  self.hh, self.buf, self.ws, self.rel, self.seen, self.has_need))
        return t if t >= 0 else -1

    def step_bytes(self, a, x, data, stop_acc) -> tuple[int, int, int]:
        """x stepped over the bytes data (automaton.step's loops, in one kernel call:
        _core_kernels.step_bytes, whose (j, x, how) it returns)."""
        if len(a.configs) + len(data) + 1 > a._cap:  # room for a state a byte
            a._grow(len(a.configs) + len(data) + 1)
        self._enter(a)
        r = self._k.step_bytes(int(x), np.frombuffer(data, np.uint8), stop_acc, a.trans, a.walkable, a.acc, self.P,
                               self.stk, self.sh, self.cnt, self.pool, self.sinfo, self.hh, self.buf, self.ws,
                               self.rel, self.seen, self.has_need)
        self._leave(a)
        return r

    def walk_range(self, a, i, stack, trie, words, rec, keep) -> int:
        """_walk.walk_range over the whole trie from node i (stack[0]: the walk's state),
        making the rows it meets: walk_roots below the trie's root."""
        j, i = self.walk_roots(a, 0, i, _ROOT, int(stack[0]), stack, trie, words, rec, keep)
        return trie.num_nodes if j else i

    def walk_roots(self, a, j, i, roots, cont, stack, trie, words, rec, keep) -> tuple[int, int]:
        """_walk.walk_roots making the rows it meets (_core_walk_kernels.walk_roots_core)."""
        args = self._walk_args(a, trie)
        j, i = self._walk_core(j, i, roots, cont, stack, words, rec, keep, *args)
        self._walked(a)
        return j, i

    def _walk_args(self, a, trie):
        """Room made for a walk's rows and states (the kernel cannot grow its tables), the
        automaton's new stacks and states entered, the row budget set; the walk's
        arguments after `keep` (kept while the trie and the tables are the same)."""
        if len(a.configs) + 257 > a._cap:  # room for a row's new states in the per-state arrays
            a._grow(len(a.configs) + 257)
        self._enter(a)
        if (self._nst + WALK_ROOM > len(self.stk) or self._ns + WALK_ROOM > len(self.sinfo)
                or int(self.cnt[1]) + 2 * len(self.buf) > len(self.pool)):
            self._headroom()
        self.cnt[3] = WALK_ROWS
        self.cnt[5] = 0
        key, args = self._wargs
        if key != (id(trie), id(a.trans), a._cap, self._gen):
            args = (trie.dfs_depth, trie.dfs_byte, trie.dfs_end, trie.tok_start, trie.tok_ids, trie.dfs_rest,
                    a.trans, a.walkable, a.acc, a.walk_lim, a.short, a.room, a.full, self.made, self.P, self.stk,
                    self.sh, self.cnt, self.pool, self.sinfo, self.hh, self.buf, self.ws, self.rel, self.seen,
                    self.sts, self.cuts, self.has_need, self.cmemo, self.fmemo, self.froom, trie.below,
                    trie.root_child)
            self._wargs = ((id(trie), id(a.trans), a._cap, self._gen), args)
        return args

    def _walked(self, a):
        """After a walk's kernel call: its stacks and states appended to the automaton's,
        the states it gave rows marked expanded (only now: their successors are in the
        automaton's lists)."""
        self._leave(a)
        made = int(self.cnt[5])
        if made:
            a.expanded[self.made[:made]] = True

    def wide(self, a, s) -> bool:
        """masks.TokenMasks._wide for state s from the kernel's tables: whether its
        configurations' NFA nodes take "a" and a space or a digit (their edges in the
        packed NFA), or "a" and "A" inside the closed layout of lasting rules, without
        making the Python tuple of its configurations (configs_of) or the nodes' byte
        sets (_core_walk_kernels.state_wide). Under the automaton's lock (a new mask's
        computation holds it)."""
        if s >= self._ns:  # a state Python made since the last kernel call
            self._enter(a)
        return self._state_wide(int(s), self.pool, self.sinfo, self.P, self._lasting)

    def depth(self, a, s) -> int:
        """The deepest stack among state s's configurations, from the kernel's tables
        (_core_walk_kernels.state_depth). Asked outside the automaton's lock (a matcher's
        fill, compiled.limit_check): entering Python's new states and stacks takes it, as
        every other write to the tables does (a walk of another thread's matcher may be
        running in the kernel without the GIL)."""
        if s >= self._ns or len(a.stacks.frames) > self._nst:
            with a.lock:
                self._enter(a)
        return int(self._state_depth(int(s), self.pool, self.sinfo, self.stk))

    def base(self, a, s) -> int:
        """automaton._base of state s's configurations, from the kernel's tables
        (_core_walk_kernels.state_base). Under the automaton's lock."""
        self._enter(a)
        return int(self._state_base(int(s), self.pool, self.sinfo, self.stk, self.items))

    def in_layout(self, a, s, size) -> bool:
        """Whether state s lies wholly in the layout of lasting rules below the context
        frame (_core_walk_kernels.state_in_layout), from the kernel's tables. Under the
        automaton's lock."""
        self._enter(a)
        return bool(self._state_in_layout(int(s), size, a.cut, self.pool, self.sinfo, self.stk))

    def rebased(self, a, s, frm, to) -> int:
        """The state of s's configurations with the stack frm replaced by to (not
        accepting), interned in one kernel call (_core_walk_kernels.rebase_state: the
        automaton's stacks.rebased then intern, without the configurations' tuples); -1
        where the kernel does not make it (a limit: Python's intern raises it). Under the
        automaton's lock."""
        s, frm, to = int(s), int(frm), int(to)
        t = self._made(a, lambda: self._rebase_state(s, frm, to, self.stk, self.sh, self.cnt, self.pool, self.sinfo,
                                                     self.hh, self.buf))
        return t if t >= 0 else -1

    def _grow(self, a) -> bool:
        """Doubles the tables that are full (their hashes rebuilt); False at the
        automaton's MAX_STATES (its Python row raises the limit)."""
        n_st, used, n_s = (int(x) for x in self.cnt[:3])
        if n_st + 1 >= len(self.stk) or 2 * (n_st + 1) >= len(self.sh):
            self._grow_stacks(2 * len(self.stk))
        if used + int(self.cnt[6]) > len(self.pool) - len(self.buf):
            self._gen += 1
            self.pool = _doubled(self.pool, 2 * len(self.pool) + len(self.buf))
        if n_s + 1 >= len(self.sinfo) or 2 * (n_s + 1) >= len(self.hh):
            if len(self.sinfo) >= _modules()[3].MAX_STATES:
                return False
            self._grow_states(2 * len(self.sinfo))
        return True

    def _headroom(self):
        """Grows the kernel's tables ahead of a walk (which cannot grow them)."""
        if self._nst + WALK_ROOM > len(self.stk):
            self._grow_stacks(2 * len(self.stk))
        if self._ns + WALK_ROOM > len(self.sinfo):
            self._grow_states(2 * len(self.sinfo))
        if int(self.cnt[1]) + 2 * len(self.buf) > len(self.pool):
            self._gen += 1
            self.pool = _doubled(self.pool, 2 * len(self.pool))

    def _grow_stacks(self, rows):
        self._gen += 1
        self.stk = _doubled(self.stk, rows)
        n = len(self.cmemo)
        for name in ("cmemo", "fmemo", "froom"):
            x = filled(rows, -1, getattr(self, name).dtype)
            x[:n] = getattr(self, name)
            setattr(self, name, x)
        self.sh = filled(2 * rows, -1, np.int32)
        self._t.insert_stacks(1, int(self.cnt[0]), self.stk, self.sh)

    def _grow_states(self, rows):
        self._gen += 1
        self.sinfo = _doubled(self.sinfo, rows)
        self.hh = filled(2 * rows, -1, np.int32)
        self._t.insert_states(1, int(self.cnt[2]), self.pool, self.sinfo, self.hh)

    def _enter(self, a):
        """Enters the stacks and states the automaton made since the last kernel call."""
        stacks = a.stacks
        n_st = len(stacks.frames)
        if n_st == self._nst and len(a.configs) == self._ns:
            return
        first = self._nst
        if n_st > first:
            if 2 * (n_st + 1) >= len(self.sh) or n_st >= len(self.stk):
                rows = len(self.stk)
                while 2 * (n_st + 1) >= 2 * rows or n_st >= rows:
                    rows *= 2
                self._grow_stacks(rows)
            stk, frames, depth = self.stk, stacks.frames, stacks.depth
            for sid in range(first, n_st):
                ret, par, k = frames[sid]
                stk[sid] = (ret, par, k, depth[sid])
            self.cnt[0] = self._nst = n_st
            self._t.insert_stacks(first, n_st, self.stk, self.sh)
        configs = a.configs
        first = self._ns
        if len(configs) > first:
            n_s = len(configs)
            if 2 * (n_s + 1) >= len(self.hh) or n_s >= len(self.sinfo):
                rows = len(self.sinfo)
                while 2 * (n_s + 1) >= 2 * rows or n_s >= rows:
                    rows *= 2
                self._grow_states(rows)
            used = int(self.cnt[1])
            keys = [(n << 32) | st for sid in range(first, n_s) for n, st in configs[sid]]
            if used + len(keys) > len(self.pool) - len(self.buf):
                self._gen += 1
                self.pool = _doubled(self.pool, 2 * (used + len(keys)) + len(self.buf))
            self.pool[used:used + len(keys)] = keys
            accepting, sinfo = a.accepting, self.sinfo
            for sid in range(first, n_s):
                m = len(configs[sid])
                sinfo[sid] = (used, m, accepting[sid])
                used += m
            self.cnt[1] = used
            self._t.insert_states(first, n_s, self.pool, self.sinfo, self.hh)
            self.cnt[2] = self._ns = n_s

    def configs_of(self, sid, configs, ids) -> tuple:
        """The configurations of a state the kernel made (automaton._Configs asks on its
        first read): made a tuple, stored in configs and its key in ids (the automaton's
        list and interning dict; the Core keeps no reference to either)."""
        off, m, acc = self.sinfo[sid].tolist()
        cfg = tuple([(x >> 32, x & 0xFFFFFFFF) for x in self.pool[off:off + m].tolist()])
        ids[(cfg, acc != 0)] = sid
        list.__setitem__(configs, sid, cfg)
        return cfg

    def intern(self, a, key):
        """automaton.intern's miss, in the kernel's table: (sid, new). A state the kernel
        made and Python has not read yet is made now (configs_of; new False); a new one
        is interned there (new True: the caller appends it to the automaton's lists at
        sid, which is len(a.configs)). One call where Python would intern the state and
        enter it at the next kernel call. None where the kernel cannot (a limit: Python
        interns it, and raises)."""
        cfg, acc = key
        m = len(cfg)
        if m > self.cnt[6]:
            return None
        if len(a.configs) != self._ns:  # states Python made before the kernel: ids in step
            self._enter(a)
        keys = np.fromiter([(n << 32) | st for n, st in cfg], np.int64, m)
        t = self._t
        while True:
            sid = t.intern(keys, m, bool(acc), self.pool, self.sinfo, self.hh, self.cnt)
            if sid != t.ROOM:
                break
            if not self._grow(a):
                return None
        if sid < 0:
            return None
        if sid < self._ns:
            self.configs_of(sid, a.configs, a._state_ids)
            return sid, False
        self._ns = sid + 1  # Python appends it now
        return sid, True

    def _leave(self, a):
        """Appends the stacks the kernel made to the automaton's, and its states (their
        accepting flags; their configurations None until read: automaton._Configs)."""
        n_st, _used, n_s = self.cnt[:3].tolist()
        if n_st == self._nst and n_s == self._ns:
            return
        stacks = a.stacks
        first = self._nst
        self._nst, self._ns = n_st, n_s
        if n_st > first:
            frames, depth, ids = stacks.frames, stacks.depth, stacks._ids
            for sid, (ret, par, k, d) in enumerate(self.stk[first:n_st].tolist(), first):
                key = (ret, par, k)
                frames.append(key)
                depth.append(d)
                ids[key] = sid
        first = len(a.configs)
        if n_s > first:  # their configurations made when Python reads them (configs_of)
            if n_s > a._cap:
                a._grow(n_s)
            accs = self.sinfo[first:n_s, 2].tolist()
            a.configs.extend([None] * len(accs))
            accepting, acc_arr = a.accepting, a.acc
            for sid, x in enumerate(accs, first):
                accepting.append(x != 0)
                if x:
                    acc_arr[sid] = True
