"""What the running state (`ProgramState`) and the tracer's state share: the role and
variable-scope methods (each defines only `_write(node)`) and the fork group."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from furca.lang.errors import ProgramError
from furca.lang.ir import Expr, RoleBegin, RoleEnd, Seq, VarScopeBegin, VarScopeEnd


class RoleWriter:
    def _write(self, node: Any) -> None:
        raise NotImplementedError

    def _role(self, role: str, expr: Any = None):
        """``s.user("text")`` writes a whole turn; ``with s.user():`` brackets one."""
        if expr is not None:
            self._write(Seq.of(RoleBegin(role), expr, RoleEnd(role)))
            return None

        @contextmanager
        def scope():
            self._write(RoleBegin(role))
            yield
            self._write(RoleEnd(role))

        return scope()

    def system(self, expr: Any = None):
        return self._role("system", expr)

    def user(self, expr: Any = None):
        return self._role("user", expr)

    def assistant(self, expr: Any = None):
        return self._role("assistant", expr)

    @contextmanager
    def var_scope(self, name: str):
        """The text written inside the block becomes variable ``name``."""
        self._write(VarScopeBegin(name))
        yield
        self._write(VarScopeEnd(name))


class ForkGroup:
    """The branches of a fork (running or traced). ``group += x`` appends ``x`` to every
    branch (a list gives one item per branch, a callable is called with the branch index)."""

    def __init__(self, states: list):
        self.states = states

    def __getitem__(self, i: int):
        return self.states[i]

    def __setitem__(self, i: int, value: Any) -> None:
        if value is not self.states[i]:
            raise ProgramError("fork branches cannot be replaced; use forks[i] += ...")

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self):
        return iter(self.states)

    def __iadd__(self, other: Any):
        if callable(other) and not isinstance(other, Expr):
            items = [other(i) for i in range(len(self.states))]
        elif isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ProgramError(f"got {len(other)} items for {len(self.states)} fork branches")
            items = list(other)
        else:
            items = [other] * len(self.states)
        for state, item in zip(self.states, items):
            state += item
        return self
