"""Freeing a compile's big intermediate structures a piece at a time.

Dropping the last reference to a translator's memo, an IR grammar or a half-built NFA /
automaton (10^5-10^6 tuples, lists and dicts) frees it in one C-level cascade that holds
the GIL for 50-300 ms: every other thread of the process (a server's event loop) waits.
`release(obj)` empties their containers from Python instead, a chunk per bytecode, so
the interpreter can switch threads between chunks.

Contract: only objects a compile made for itself are released (never a TokenizerInfo,
a cached CompiledGrammar or a caller's schema): ``ir.Grammar``, ``nfa.NFA``,
``LazyAutomaton``, and the JSON-schema translator's ``Compiler`` (its memo and grammar,
not its root schema). Afterwards they are empty shells: call it only on objects about
to be dropped.
"""

from __future__ import annotations

import types

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
    from . import ir
    from .automaton import LazyAutomaton
    from .nfa import NFA

    if isinstance(obj, ir.Grammar):
        _drain(obj.rules)
    elif isinstance(obj, NFA):
        for v in vars(obj).values():
            _drain(v)
    elif isinstance(obj, LazyAutomaton):
        for name, v in list(vars(obj).items()):
            if name == "nfa":
                release(v)
            elif name != "info":
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
