"""Tracing: run a program on placeholder arguments and record what it appends.

``program.trace()`` returns a `Graph` of nodes (text, arg, gen, select, role_begin,
role_end, var, var_scope_begin / _end, fork, join), each with the node before it in
its branch (``prev``) and the nodes whose values it reads (``deps``: a variable read
depends on the gen or select that sets it; a join on each branch's last node).

Tracing stops early (``Graph.stopped`` says why) where the program's text or control
flow depends on a value tracing cannot know: ``str(arg)``, an f-string of an argument,
a branch on a generated variable. What was recorded up to there stays valid.

``Graph.constant_prefix`` is the text every run of the program starts with (up to the
first argument, gen or select; roles rendered by the backend's chat template).
``run_batch`` traces each item with its arguments and orders the batch by these
prefixes (`furca.lang.prefix_tree`). ``Graph.to_svg()`` / ``to_html()`` draw the graph
(`furca.lang.trace_view`).
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from furca.lang.chat import Message
from furca.lang.writer import ForkGroup, RoleWriter
from furca.lang.ir import (
    Argument, Expr, Gen, RoleBegin, RoleEnd, Select, Seq, StopTracing, Text, Variable, VarScopeBegin, VarScopeEnd,
    as_expr,
)

_current: contextvars.ContextVar["_Tracer | None"] = contextvars.ContextVar("furca_tracer", default=None)


def current_tracer() -> "_Tracer | None":
    return _current.get()


@dataclass(frozen=True)
class TraceNode:
    id: int
    kind: str
    label: str
    branch: str  # "s" for the program's state, "s.1" for fork branch 1, "s.1.0" deeper
    prev: int | None = None
    deps: tuple[int, ...] = ()
    expr: Any = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str | None:
        return getattr(self.expr, "name", None)


_KINDS = {Text: "text", Gen: "gen", Select: "select", RoleBegin: "role_begin", RoleEnd: "role_end",
          VarScopeBegin: "var_scope_begin", VarScopeEnd: "var_scope_end", Argument: "arg", Variable: "var"}


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _gen_label(expr: Gen) -> str:
    shown = {k: v for k, v in expr.params.to_dict().items() if k in ("max_new_tokens", "stop", "regex", "temperature")}
    if expr.dtype:
        shown["dtype"] = expr.dtype
    return f"gen {expr.name!r}" + (f" {shown}" if shown else "")


_LABELS = {
    Text: lambda e: f"text {_short(e.value)}",
    Gen: _gen_label,
    Select: lambda e: f"select {e.name!r} {list(e.choices)}",
    RoleBegin: lambda e: f"role_begin {e.role}",
    RoleEnd: lambda e: f"role_end {e.role}",
}


def _label(expr: Expr) -> str:
    label = _LABELS.get(type(expr))
    return label(expr) if label else f"{_KINDS[type(expr)]} {expr.name!r}"


@dataclass
class Graph:
    nodes: list[TraceNode] = field(default_factory=list)
    constant_prefix: str = ""
    stopped: str | None = None  # why tracing stopped early, or None

    def of_kind(self, kind: str) -> list[TraceNode]:
        return [n for n in self.nodes if n.kind == kind]

    def kinds(self, branch: str | None = None) -> list[str]:
        return [n.kind for n in self.nodes if branch is None or n.branch == branch]

    def __str__(self) -> str:
        lines = []
        for n in self.nodes:
            head = f"%{n.id} = " + (f"%{n.prev} + " if n.prev is not None else "")
            deps = f"  <- {', '.join(f'%{d}' for d in n.deps)}" if n.deps else ""
            lines.append(f"{head}{n.label}{deps}   [{n.branch}]")
        if self.stopped:
            lines.append(f"(tracing stopped: {self.stopped})")
        return "\n".join(lines)

    def to_dot(self, name: str = "program") -> str:
        """Graphviz DOT: solid edges follow each branch, dashed edges are data dependencies."""
        out = [f"digraph {_dot_id(name)} {{", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
        shapes = {"gen": "ellipse", "select": "diamond", "fork": "trapezium", "join": "invtrapezium", "arg": "note"}
        for n in self.nodes:
            label = n.label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            out.append(f'  n{n.id} [label="%{n.id} {label}", shape={shapes.get(n.kind, "box")}];')
        for n in self.nodes:
            if n.prev is not None:
                out.append(f"  n{n.prev} -> n{n.id};")
            out.extend(f"  n{d} -> n{n.id} [style=dashed];" for d in n.deps)
        out.append("}")
        return "\n".join(out)


    def to_svg(self, name: str = "program", state: Any = None) -> str:
        """A self-contained SVG of the graph, shared prefixes coloured; given a run's
        ``state``, each gen and select shows its cache hits (see `furca.lang.trace_view`)."""
        from furca.lang.trace_view import to_svg

        return to_svg(self, name, state)

    def to_html(self, name: str = "program", state: Any = None) -> str:
        """A standalone HTML page with the SVG and the text listing."""
        from furca.lang.trace_view import to_html

        return to_html(self, name, state)


def _dot_id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "program"


class _Tracer:
    def __init__(self):
        self.graph = Graph()

    def add(self, kind: str, label: str, branch: str, prev: int | None, deps=(), expr=None) -> TraceNode:
        node = TraceNode(len(self.graph.nodes), kind, label, branch, prev, tuple(deps), expr)
        self.graph.nodes.append(node)
        return node

    def call(self, function, args, kwargs):
        raise StopTracing(f"the program calls another program ({function.__name__})")


class TracerState(RoleWriter):
    """What a traced program gets as ``s``: records instead of running."""

    def __init__(self, tracer: _Tracer, branch: str = "s", last: int | None = None,
                 setters: dict[str, int] | None = None):
        self._tracer = tracer
        self._branch = branch
        self._last = last
        self._setters: dict[str, int] = dict(setters or {})  # variable name -> node that sets it

    def __iadd__(self, other: Any) -> "TracerState":
        expr = as_expr(other)
        for item in expr.items if isinstance(expr, Seq) else (expr,):
            deps = ()
            if isinstance(item, Variable):
                source = item.source if item.source is not None else self._setters.get(item.name)
                deps = () if source is None else (source,)
            node = self._tracer.add(_KINDS[type(item)], _label(item), self._branch, self._last, deps, item)
            self._last = node.id
            if isinstance(item, (Gen, Select, VarScopeEnd)) and item.name is not None:
                self._setters[item.name] = node.id
        return self

    def _write(self, node: Any) -> None:
        self += node

    def __getitem__(self, name: str) -> Variable:
        return Variable(name, self._setters.get(name))

    def __setitem__(self, name: str, value: Any) -> None:
        self._setters.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._setters

    def get_meta_info(self, name: str) -> None:
        return None

    def fork(self, size: int = 1, position_ids_offset: Any = None) -> "TracerGroup":
        node = self._tracer.add("fork", f"fork({int(size)})", self._branch, self._last)
        self._last = node.id
        branches = [TracerState(self._tracer, f"{self._branch}.{i}", node.id, self._setters) for i in range(int(size))]
        return TracerGroup(branches, self)

    @contextmanager
    def copy(self, position_ids_offset: Any = None):
        group = self.fork(1)
        yield group[0]
        group.join()

    def text(self) -> str:
        raise StopTracing("the program reads its own text")

    def messages(self):
        raise StopTracing("the program reads its messages")


class TracerGroup(ForkGroup):
    def __init__(self, states: list[TracerState], src: TracerState):
        super().__init__(states)
        self.src = src

    def join(self, mode: str = "gather_variable") -> None:
        deps = [s._last for s in self.states if s._last is not None]
        node = self.src._tracer.add("join", f"join({mode})", self.src._branch, self.src._last, deps)
        self.src._last = node.id
        for state in self.states:
            for name in state._setters.keys() - self.src._setters.keys():
                self.src._setters[name] = node.id


def trace_program(function, kwargs: dict[str, Any], backend=None) -> Graph:
    """Trace ``function`` with ``kwargs`` as given and every other argument a placeholder."""
    tracer = _Tracer()
    args = {name: Argument(name) for name in function.arg_names}
    args.update(function.bind_arguments)
    args.update(kwargs)
    state = TracerState(tracer)
    token = _current.set(tracer)
    try:
        function.func(state, **args)
    except StopTracing as e:
        tracer.graph.stopped = str(e)
    except Exception as e:  # noqa: BLE001 - a program may do anything with placeholders
        tracer.graph.stopped = f"{type(e).__name__}: {e}"
    finally:
        _current.reset(token)
    tracer.graph.constant_prefix = constant_prefix(tracer.graph, backend)
    return tracer.graph


def constant_prefix(graph: Graph, backend=None) -> str:
    """The text of the program's own branch up to its first non-constant node."""
    chat = backend.chat_format() if backend is not None else None
    text, history, role, role_start = "", [], None, 0
    for node in graph.nodes:
        if node.branch != "s":
            continue
        expr = node.expr
        if isinstance(expr, Text):
            text += expr.value
        elif isinstance(expr, (VarScopeBegin, VarScopeEnd)):
            continue
        elif isinstance(expr, (RoleBegin, RoleEnd)) and chat is not None and not chat.uses_messages:
            prefix, suffix = chat.markers(tuple(history), expr.role)
            if isinstance(expr, RoleBegin):
                text += prefix
                role, role_start = expr.role, len(text)
            else:
                history.append(Message(role, text[role_start:].lstrip()))
                text += suffix
        else:
            break
    return text
