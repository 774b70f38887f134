"""Grammar IR checks before the NFA is built (`prepare`): rules resolved, immediate left
recursion rewritten (``A ::= A x | y`` -> ``A ::= y x*``), what never matches removed,
the rules root cannot reach dropped, nullable and productive rules found with a worklist
over callers, and left recursion that is not immediate refused. Each problem is a
CompileError naming the rule and where it is. `nullable_and_productive` and `first_refs`
are shared with `nfa.build_nfa` (counters and nullable bodies).
"""

from __future__ import annotations

from furca.errors import CompileError

from . import ir, key_trie
from .deadline import check as check_deadline


def _where(g, name):
    pos = g.positions.get(name)
    return f"rule {name!r}" + (f" (defined at offset {pos})" if pos is not None else "")


def _derives(e, known, empty):
    """Whether e derives the empty string (empty=True; known: the nullable rules) or
    some string (empty=False; known: the productive rules)."""
    k = e[0]
    if k == "byte":
        return not empty and bool(e[1])
    if k == "seq":  # loops, not all() / any() over generators: the UTF-8 classes make these wide
        for x in e[1]:
            if x[0] == "byte":
                if empty or not x[1]:
                    return False
            elif not _derives(x, known, empty):
                return False
        return True
    if k == "alt":
        for x in e[1]:
            if x[0] == "byte":
                if not empty and x[1]:
                    return True
            elif _derives(x, known, empty):
                return True
        return False
    if k == "rep":
        return e[2] == 0 or _derives(e[1], known, empty)
    if k == "len":
        return (e[2] == 0 or not empty) and _derives(e[1], known, empty)
    if k == "tick":
        return True
    if k == "keys":  # a quote first; then a non-name's closing quote or one of its two rules
        return not empty and (e[4] or e[2][1] in known or e[3][1] in known)
    return e[1] in known


def nullable_and_productive(rules, calls=None):
    """(nullable rule names, productive rule names) of `rules` ({name: expr}); calls:
    {name: [its ("ref", ...) exprs]} when known (else collected here). Two worklists, one
    per property (each depends on its own set only): a rule is looked at again only when
    a rule it calls gained that property. (One worklist for both re-checked a caller's
    nullability whenever a callee became productive: ~3 checks a rule, not ~1.)"""
    if calls is None:
        calls = {n: _scan(e, [])[1] for n, e in rules.items()}
    callers: dict = {}
    for n, acc in calls.items():
        for r in acc:
            callers.setdefault(r[1], set()).add(n)
    nullable, productive = set(), set()
    for known, empty in ((productive, False), (nullable, True)):
        todo = list(rules)
        while todo:
            check_deadline()
            n = todo.pop()
            if n not in known and _derives(rules[n], known, empty):
                known.add(n)
                todo.extend(callers.get(n, ()))
    return nullable, productive


def _scan(e, acc):
    """(clean, acc): appends every ("ref", name, pos) in e to acc; clean: _simplify leaves
    e as it is when every rule it calls is productive (no empty class, no NOTHING, no
    x{m,0} inside)."""
    k = e[0]
    if k == "byte":
        return bool(e[1]), acc
    if k == "ref":
        acc.append(e)
        return True, acc
    if k == "rep":
        return _scan(e[1], acc)[0] and e[3] != 0, acc
    if k == "len":
        return _scan(e[1], acc)[0], acc
    if k == "tick":
        return True, acc
    if k == "keys":
        acc += (e[2], e[3])
        return True, acc
    items = e[1]
    clean = bool(items) or k == "seq"
    for x in items:
        t = x[0]
        if t == "byte":
            if not x[1]:
                clean = False
        elif t == "ref":
            acc.append(x)
        elif not _scan(x, acc)[0]:
            clean = False
    return clean, acc


def _simplify(e, productive):
    """Drops what can never match (calls to unproductive rules, empty classes)."""
    k = e[0]
    if k == "byte":
        return e if e[1] else ir.NOTHING
    if k == "ref":
        return e if e[1] in productive else ir.NOTHING
    if k == "seq":
        check_deadline()
        items = [_simplify(x, productive) for x in e[1]]
        if any(x == ir.NOTHING for x in items):
            return ir.NOTHING
        return ir.seq(items) if items else ir.EMPTY
    if k == "alt":
        check_deadline()
        items = [x for x in (_simplify(x, productive) for x in e[1]) if x != ir.NOTHING]
        return ir.alt(items) if items else ir.NOTHING
    if k == "rep":
        x = _simplify(e[1], productive)
        if x == ir.NOTHING:
            return ir.EMPTY if e[2] == 0 else ir.NOTHING
        if e[3] == 0:
            return ir.EMPTY
        return ("rep", x) + e[2:]  # a counted one's mark kept (ir.py)
    if k == "len":
        x = _simplify(e[1], productive)
        return ir.NOTHING if x == ir.NOTHING else ("len", x, e[2], e[3])
    if k == "keys" and not (e[2][1] in productive and e[3][1] in productive):
        return _simplify(key_trie.expand(e), productive)
    return e


def _remove_immediate_left_recursion(name, e):
    alts = e[1] if e[0] == "alt" else [e]
    rec, base = [], []
    for a in alts:
        items = a[1] if a[0] == "seq" else [a]
        if items and items[0][0] == "ref" and items[0][1] == name:
            rec.append(ir.seq(items[1:]))
        else:
            base.append(a)
    if not rec:
        return e
    if not base:
        return ir.NOTHING
    return ir.seq([ir.alt(base), ("rep", ir.alt(rec), 0, None)])


def first_refs(e, nullable, acc):
    """Rule refs that can be reached before any byte is consumed. Returns nullable(e)."""
    k = e[0]
    if k == "byte":
        return False
    if k == "ref":
        acc.add(e[1])
        return e[1] in nullable
    if k == "seq":
        for x in e[1]:
            if not first_refs(x, nullable, acc):
                return False
        return True
    if k == "alt":
        r = False
        for x in e[1]:
            r |= first_refs(x, nullable, acc)
        return r
    if k == "rep":
        return first_refs(e[1], nullable, acc) or e[2] == 0
    if k == "len":
        return first_refs(e[1], nullable, acc) and e[2] == 0
    return k != "keys"  # a tick: nullable; a key trie: a quote first


# id(body) of a lasting rule (ir.Grammar.lasting) that the left-recursion rewrite leaves
# as it is -> (body, clean, its calls): the first loop's walk, once per process
_LASTING_FACTS: dict = {}
MAX_LASTING = 32


def prepare(g: ir.Grammar) -> ir.Grammar:
    """Resolves, simplifies and checks a grammar; returns the rules reachable from root
    (in g's order) with ``.nullable``, the set of their nullable names. Each rule is walked
    once for its calls (_scan); only a rule holding something that never matches, or
    calling a rule that never completes, is rebuilt (_simplify)."""
    rules, calls, clean = {}, {}, {}
    lasting = g.lasting
    for name, e in g.rules.items():
        check_deadline()
        e2 = _remove_immediate_left_recursion(name, e)
        keep = e2 is e and name in lasting  # a lasting body the rewrite leaves as it is
        hit = _LASTING_FACTS.get(id(e)) if keep else None
        if hit is not None and hit[0] is e:  # walked once in the process
            _, clean[name], acc = hit
        else:
            clean[name], acc = _scan(e2, [])
            if keep and len(_LASTING_FACTS) < MAX_LASTING:
                _LASTING_FACTS[id(e)] = (e, clean[name], acc)  # e kept: its id stays its own
        for r in acc if e2 is e else _scan(e, [])[1]:
            if r[1] not in g.rules:
                raise CompileError(f"undefined rule {r[1]!r} referenced at offset {r[2]} (in {_where(g, name)})")
        rules[name], calls[name] = e2, acc
    if g.root not in rules:
        raise CompileError(f"grammar has no root rule {g.root!r}")
    nullable, productive = nullable_and_productive(rules, calls)
    if g.root not in productive:
        raise CompileError(f"the grammar matches no string ({_where(g, g.root)} can never complete)")
    # keep what root reaches; simplifying drops no nullable derivation (those call only
    # productive rules), so `nullable` stays exact for what is kept
    reach, todo = {g.root}, [g.root]
    while todo:
        check_deadline()
        n = todo.pop()
        acc = calls[n]
        if not clean[n] or any(r[1] not in productive for r in acc):
            rules[n] = _simplify(rules[n], productive)
            acc = _scan(rules[n], [])[1]
        for r in acc:
            if r[1] not in reach:
                reach.add(r[1])
                todo.append(r[1])
    rules = {n: e for n, e in rules.items() if n in reach}
    nullable &= reach
    first = {n: set() for n in rules}
    for n, e in rules.items():
        check_deadline()
        first_refs(e, nullable, first[n])
    _check_left_recursion(g, rules, first)
    # a lasting body simplified here is a new object, no longer lasting
    out = ir.Grammar(rules, g.root, g.positions, {n for n in lasting if rules.get(n) is g.rules[n]})
    out.nullable = nullable
    out.unique = {a: v for a, v in g.unique.items() if a in rules}
    out.objects = {o: v for o, v in getattr(g, "objects", {}).items() if o in rules}
    return out


def _check_left_recursion(g, rules, first):
    """CompileError naming the cycle when the "calls before consuming" graph (first:
    {rule: rules it may call before any byte}) has one. Depth-first with an explicit
    stack, so call chains of any length are checked."""
    state = {}  # 1: on the path, 2: done
    for top in rules:
        if top in state:
            continue
        state[top] = 1
        path, its = [top], [iter(first[top])]
        while its:
            m = next(its[-1], None)
            if m is None:
                state[path.pop()] = 2
                its.pop()
                continue
            st = state.get(m)
            if st == 1:
                cyc = path[path.index(m):] + [m]
                raise CompileError("left recursion is not supported (only the immediate form A ::= A x | y is "
                                   f"rewritten): {' -> '.join(cyc)} ({_where(g, m)})")
            if st is None:
                check_deadline()
                state[m] = 1
                path.append(m)
                its.append(iter(first[m]))
