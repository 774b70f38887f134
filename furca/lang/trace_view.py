"""The traced graph as a picture: a self-contained SVG (and an HTML page around it).

Layout (no graphviz): one column per branch, in order of appearance (the program's own
state first, then each fork branch); a node's row is one below the lowest of the nodes
it follows or reads, so a branch's nodes run down its column and a join sits below
every branch it waits for. Solid edges follow a branch, dashed edges are data reads.

Colours say what the radix cache can share:
- green: the program's constant prefix (every run of the program starts with it;
  ``run_batch`` computes it once for the batch);
- blue: text written before a fork (all of the fork's branches start with it);
- white: the rest.

After a run, ``to_svg(state=...)`` writes each gen and select node's cache hits
(``cached / prompt tokens`` from its meta info) under its label. A fork branch's value
is found in the joined list at the branch's index; a name set more than once shows the
last value.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

COL_W, ROW_H, BOX_W, BOX_H, PAD = 300, 64, 270, 44, 20
FILL = {"constant": "#d8f0d8", "fork_shared": "#d8e4f8", "other": "#ffffff"}


def _layout(graph) -> tuple[dict[int, tuple[int, int]], list[str]]:
    columns: list[str] = []
    pos: dict[int, tuple[int, int]] = {}
    for n in graph.nodes:
        if n.branch not in columns:
            columns.append(n.branch)
        above = [pos[i][1] for i in (n.prev, *n.deps) if i is not None and i in pos]
        pos[n.id] = (columns.index(n.branch), max(above) + 1 if above else 0)
    return pos, columns


def sharing(graph) -> dict[int, str]:
    """Each node's colour class: ``constant``, ``fork_shared`` or ``other``."""
    kinds: dict[int, str] = {}
    constant = True
    for n in graph.nodes:  # the root branch's nodes up to the first non-constant one
        if n.branch != "s":
            continue
        if n.kind not in ("text", "role_begin", "role_end", "var_scope_begin", "var_scope_end"):
            constant = False
        kinds[n.id] = "constant" if constant else "other"
    for fork in graph.of_kind("fork"):  # walk back from each fork along its branch
        i = fork.prev
        while i is not None:
            if kinds.get(i) != "constant":
                kinds[i] = "fork_shared"
            i = graph.nodes[i].prev
    return {n.id: kinds.get(n.id, "other") for n in graph.nodes}


def _metas(value: Any):
    if isinstance(value, dict):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _metas(v)


def cache_hits(graph, state) -> dict[int, tuple[int, int]]:
    """``{node id: (cached_tokens, prompt_tokens)}`` for the gen and select nodes of a run."""
    meta_info = state.executor.meta_info
    hits: dict[int, tuple[int, int]] = {}
    for n in graph.nodes:
        if n.kind not in ("gen", "select") or n.name is None or n.name not in meta_info:
            continue
        value = meta_info[n.name]
        path = n.branch.split(".")[1:]
        if len(path) == 1 and isinstance(value, list) and int(path[0]) < len(value):
            value = value[int(path[0])]  # a joined fork's list, one entry per branch
        elif len(path) > 1:
            continue  # nested forks' values are not kept by the parent
        metas = [m for m in _metas(value) if "prompt_tokens" in m]
        if metas:
            hits[n.id] = (sum(_total(m, "cached_tokens") for m in metas), sum(_total(m, "prompt_tokens") for m in metas))
    return hits


def _total(meta: dict, key: str) -> int:
    value = meta.get(key) or 0
    return sum(value) if isinstance(value, (list, tuple)) else int(value)


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def to_svg(graph, name: str = "program", state: Any = None) -> str:
    pos, columns = _layout(graph)
    share = sharing(graph)
    hits = cache_hits(graph, state) if state is not None else {}
    rows = 1 + max((r for _, r in pos.values()), default=0)
    width = PAD * 2 + COL_W * max(1, len(columns))
    height = PAD * 2 + 40 + ROW_H * rows + 30

    def center(i: int) -> tuple[float, float]:
        c, r = pos[i]
        return PAD + c * COL_W + BOX_W / 2, PAD + 40 + r * ROW_H + BOX_H / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">',
           f"<title>{escape(name)}</title>",
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    for c, branch in enumerate(columns):
        out.append(f'<text x="{PAD + c * COL_W}" y="{PAD + 20}" font-weight="bold">{escape(branch)}</text>')
    for n in graph.nodes:
        for src, dashed in [(n.prev, False)] + [(d, True) for d in n.deps]:
            if src is None:
                continue
            (x1, y1), (x2, y2) = center(src), center(n.id)
            style = ' stroke-dasharray="4,3"' if dashed else ""
            out.append(f'<line x1="{x1}" y1="{y1 + BOX_H / 2}" x2="{x2}" y2="{y2 - BOX_H / 2}" stroke="#555"'
                       f'{style} marker-end="url(#arrow)"/>')
    for n in graph.nodes:
        c, r = pos[n.id]
        x, y = PAD + c * COL_W, PAD + 40 + r * ROW_H
        rx = 16 if n.kind in ("gen", "select") else 3
        out.append(f'<g id="node{n.id}" class="{n.kind} {share[n.id]}"><title>{escape(n.label)}</title>')
        out.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="{rx}" '
                   f'fill="{FILL[share[n.id]]}" stroke="#333"/>')
        out.append(f'<text x="{x + 8}" y="{y + 17}">{escape(_clip(f"%{n.id} {n.label}"))}</text>')
        if n.id in hits:
            cached, prompt = hits[n.id]
            share_pct = f" ({cached / prompt:.0%})" if prompt else ""
            out.append(f'<text x="{x + 8}" y="{y + 34}" class="hits">cache {cached}/{prompt} tokens{share_pct}</text>')
        out.append("</g>")
    legend_y = height - PAD
    for i, (kind, label) in enumerate((("constant", "constant prefix"), ("fork_shared", "shared by a fork"))):
        x = PAD + i * 180
        out.append(f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{FILL[kind]}" stroke="#333"/>')
        out.append(f'<text x="{x + 18}" y="{legend_y}">{label}</text>')
    if graph.stopped:
        out.append(f'<text x="{PAD + 380}" y="{legend_y}">tracing stopped: {escape(_clip(graph.stopped, 60))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def to_html(graph, name: str = "program", state: Any = None) -> str:
    """A standalone page: the SVG and the graph's text listing."""
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{escape(name)}</title></head><body>\n"
            f"<h1>{escape(name)}</h1>\n{to_svg(graph, name, state)}\n<pre>{escape(str(graph))}</pre>\n</body></html>\n")


__all__ = ["cache_hits", "sharing", "to_html", "to_svg"]
