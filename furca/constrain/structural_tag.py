"""Structural tags (SGLang / xgrammar "structural_tag", for tool calling with
tool_choice=auto): free text until a trigger string appears; from the trigger on, the
text must be one of the tags whose ``begin`` starts with that trigger: ``begin``, a
JSON value of the tag's schema, ``end``; then free text again. EOS is allowed anywhere
in free text.

Free text is "any bytes not containing a trigger", built as an Aho-Corasick automaton
over the triggers' bytes: one IR rule per automaton state (``F<q>``), each byte an
alternative that moves to the next state's rule (tail calls: the stack never grows).
The byte that completes a trigger moves to that trigger's dispatch rule instead.

`check_structural_tag(tags, triggers)` validates the shapes first (structures a list of
objects, begin / end strings, schema an object, a boolean or JSON text, triggers a list
of non-empty strings): every ill-typed field is a `CompileError` naming it
(``structures[1].begin must be a string, got int``), never a TypeError.
"""

from __future__ import annotations

import json
from collections import deque

from furca.errors import CompileError

from . import ir
from .deadline import check as check_deadline


def _type_name(x) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "integer", float: "number"}.get(type(x), type(x).__name__)


def check_structural_tag(tags, triggers) -> tuple[list[tuple[str, object, str]], list[str]]:
    """((begin, schema, end) per structure, triggers) after checking every field's type.
    tags: a list (or tuple) of dicts or objects with ``begin``, ``schema``, ``end``
    attributes; schema: an object, a boolean or its JSON text. Raises CompileError naming
    the field (``structures[2].end``)."""
    if not isinstance(tags, (list, tuple)):
        raise CompileError(f"structural_tag: structures must be an array of objects, got {_type_name(tags)}")
    if not isinstance(triggers, (list, tuple)):
        raise CompileError(f"structural_tag: triggers must be an array of strings, got {_type_name(triggers)}")
    out = []
    for k, tag in enumerate(tags):
        where = f"structural_tag: structures[{k}]"
        if not isinstance(tag, dict) and not all(hasattr(tag, n) for n in ("begin", "schema", "end")):
            raise CompileError(f"{where} must be an object with begin, schema and end, got {_type_name(tag)}")
        begin, end, schema = _field(tag, "begin"), _field(tag, "end"), _field(tag, "schema")
        if not isinstance(begin, str) or not begin:
            raise CompileError(f"{where}.begin must be a non-empty string, got {_type_name(begin)}")
        if not isinstance(end, str):
            raise CompileError(f"{where}.end must be a string, got {_type_name(end)}")
        if not isinstance(schema, (dict, bool, str)):
            raise CompileError(f"{where}.schema must be an object, a boolean or JSON text, got {_type_name(schema)}")
        out.append((begin, schema, end))
    for i, t in enumerate(triggers):
        if not isinstance(t, str) or not t:
            raise CompileError(f"structural_tag: triggers[{i}] must be a non-empty string, got {_type_name(t)}")
    return out, list(triggers)


def _field(tag, name):
    if isinstance(tag, dict):
        if name not in tag:
            raise CompileError(f"structural tag {tag!r} has no {name!r}")
        return tag[name]
    if not hasattr(tag, name):
        raise CompileError(f"structural tag {tag!r} has no {name!r}")
    return getattr(tag, name)


def _rename(e, prefix):
    k = e[0]
    if k == "ref":
        return ("ref", prefix + e[1], e[2])
    if k in ("seq", "alt"):
        return (k, [_rename(x, prefix) for x in e[1]])
    if k == "rep":
        return ("rep", _rename(e[1], prefix), e[2], e[3])
    if k == "keys":  # a key trie calls two rules
        return ("keys", e[1], _rename(e[2], prefix), _rename(e[3], prefix), e[4])
    return e


def structural_tag_grammar(tags, triggers, schema_grammar) -> ir.Grammar:
    """The IR of the structural tag. schema_grammar(schema) -> the `ir.Grammar` (root rule
    ``root``) of one tag's schema (a dict or a bool); its rules are renamed per tag."""
    checked, triggers = check_structural_tag(tags, triggers)
    if not triggers:
        raise CompileError("structural tag: no triggers given")
    if not checked:
        raise CompileError("structural tag: no tags given")
    trig_bytes = []
    for t in triggers:
        if not isinstance(t, str) or not t:
            raise CompileError(f"structural tag: trigger {t!r} must be a non-empty string")
        trig_bytes.append(t.encode("utf-8"))
    rules: dict = {}
    unique: dict = {}
    per_trigger: dict[int, list] = {i: [] for i in range(len(triggers))}
    for k, (begin, schema, end) in enumerate(checked):
        check_deadline()
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise CompileError(f"structural tag {k}: schema is not valid JSON: {e}") from None
        owners = [i for i, t in enumerate(triggers) if begin.startswith(t)]
        if not owners:
            raise CompileError(f"structural tag {k}: begin {begin!r} starts with none of the triggers {triggers!r}")
        sub = schema_grammar(schema)
        prefix = f"tag{k}-"
        for name, e in sub.rules.items():
            rules[prefix + name] = _rename(e, prefix)
        for name, (item, *rest) in sub.unique.items():
            unique[prefix + name] = (prefix + item, *rest)
        i = min(owners, key=lambda j: len(triggers[j]))  # the trigger that completes first
        rest = begin.encode("utf-8")[len(trig_bytes[i]):]
        per_trigger[i].append(ir.seq([ir.literal(rest), ("ref", prefix + "root", 0), ir.literal(end),
                                      ("ref", "F0", 0)]))
    # Aho-Corasick over the trigger bytes
    goto = [{}]
    out = [None]  # trigger index completed at this node
    for i, tb in enumerate(trig_bytes):
        q = 0
        for b in tb:
            if b not in goto[q]:
                goto.append({})
                out.append(None)
                goto[q][b] = len(goto) - 1
            q = goto[q][b]
        if out[q] is None:
            out[q] = i
    fail = [0] * len(goto)
    order = deque(goto[0].values())
    while order:
        q = order.popleft()
        for b, r in goto[q].items():
            f = fail[q]
            while f and b not in goto[f]:
                f = fail[f]
            fail[r] = goto[f][b] if b in goto[f] and goto[f][b] != r else 0
            if out[r] is None and out[fail[r]] is not None:
                out[r] = out[fail[r]]
            order.append(r)

    def step(q, b):
        while q and b not in goto[q]:
            q = fail[q]
        return goto[q].get(b, 0)

    for q in range(len(goto)):
        if out[q] is not None:
            continue  # a completed trigger dispatches; never free text
        by_target: dict[int, list] = {}
        for b in range(256):
            by_target.setdefault(step(q, b), []).append(b)
        alts = [ir.EMPTY]
        for r, bs in by_target.items():
            ranges = ir.normalize_ranges([(b, b) for b in bs])
            target = f"F{r}" if out[r] is None else f"T{out[r]}"
            alts.append(ir.seq([("byte", tuple(ranges)), ("ref", target, 0)]))
        rules[f"F{q}"] = ir.alt(alts)
    for i, bodies in per_trigger.items():
        # a trigger no tag begins with: the text may not continue past it
        rules[f"T{i}"] = ir.alt(bodies) if bodies else ir.NOTHING
    rules["root"] = ("ref", "F0", 0)
    return ir.Grammar(rules, "root", unique=unique)
