"""Freeing a compile's big intermediate structures a piece at a time.

Dropping the last reference to a translator's memo, an IR grammar or a half-built NFA /
automaton (10^5-10^6 tuples, lists and dicts) frees it in one C-level cascade that holds
the GIL for 50-300 ms: every other thread of the process (a server's event loop) waits.
`release(obj)` empties their containers from Python instead, a chunk per bytecode, so
the interpreter can switch threads between chunks.

Contract: only objects a compile made for itself are released (never a TokenizerInfo,
a cached CompiledGrammar or a caller's schema): ``ir.Grammar``, ``nfa.NFA``, the
automaton and its parts (``LazyAutomaton`` with its ``Stacks``, ``TokenMasks`` with
its ``SliceBounds`` and ``SliceProof``), and the JSON-schema translator's ``Compiler``
(its memo and grammar, not its root schema). Afterwards they are empty shells: call it
only on objects about to be dropped.
"""

from __future__ import annotations

import types

from . import ir
from .automaton import LazyAutomaton
from .masks import TokenMasks
from .nfa import NFA
from .slice_proof import SliceProof
from .slices import SliceBounds
from .stacks import Stacks

CHUNK = 2048  # list items freed per step
SMALL = 4096  # containers with fewer items are left to reference counting (a short cascade)


def _drain(v) -> None:
    if not isinstance(v, (list, dict, set)) or len(v) < SMALL:
        return
    if isinstance(v, list):
        while v:
            del v[-CHUNK:]
    elif isinstance(v, dict):
        while v:
            v.popitem()
    elif isinstance(v, set):
        while v:
            v.pop()


def release(obj) -> None:
    """Empty obj's big containers gradually (see the module docstring); other objects
    are left alone."""
    if isinstance(obj, ir.Grammar):
        _drain(obj.rules)
    elif isinstance(obj, (NFA, Stacks)):
        for v in vars(obj).values():
            _drain(v)
    elif isinstance(obj, (LazyAutomaton, TokenMasks, SliceBounds, SliceProof)):
        # their own tables and the parts they own; the automaton a part was given is
        # released on its own (a local of the compile's frame), the TokenizerInfo never
        for v in list(vars(obj).values()):
            if isinstance(v, (NFA, Stacks, SliceBounds, SliceProof)):
                release(v)
            else:
                _drain(v)
    elif type(obj).__name__ == "Compiler" and type(obj).__module__.endswith("json_schema.compiler"):
        _drain(obj.memo)
        _drain(obj.g.rules)


def release_frames(tb: types.TracebackType | None) -> None:
    """`release` every compile object held by the locals of a traceback's frames (a
    compile that stopped at its deadline), innermost last."""
    while tb is not None:
        for v in list(tb.tb_frame.f_locals.values()):
            release(v)
        tb = tb.tb_next
