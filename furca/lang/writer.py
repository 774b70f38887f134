"""The role and variable-scope methods that both the running state (`ProgramState`)
and the tracer's state offer; each defines only `_write(node)`."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from furca.lang.ir import RoleBegin, RoleEnd, Seq, VarScopeBegin, VarScopeEnd


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
