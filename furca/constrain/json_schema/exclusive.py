"""oneOf: make the branches exclusive, so that oneOf can be emitted as an alternation.

Two branches of literals (enum/const) each lose the literals both hold (exact when the
literals are all they say). For every other pair of branches (each merged with the
keywords beside oneOf) and every JSON type both allow, a proof that no instance of
that type satisfies both (proofs.py). Without a proof, objects get exclusive by construction
when each branch requires a property the other does not (each branch then forbids
the other's), or when each branch declares a property the other forbids (each
branch then requires one: the other cannot hold it), or when both declare a property
with disjoint values (both then require it), strings when both branches constrain
them by `pattern` alone (each
branch then excludes the other's pattern: `x-furca-not-patterns`, difference.py), and
numbers when both branches bound them by range alone and neither range lies strictly
inside the other (each branch keeps its numbers outside the other's range: exact
when both say the same of integers, narrower when one is `integer` and the other
not). When types are left unsettled, each branch takes the other's complement
(logic.negate: `a and not b`, exact; the complement of the branch's own keywords, the
base being in both) where both exist and merge; otherwise the unsettled types are
removed from both branches: every instance the result accepts satisfies exactly
one branch (sound, sometimes narrower).
"""
from __future__ import annotations

from furca.errors import CompileError

from .difference import NOT_PATTERNS, ONE_OF_PATTERNS, disjoint
from .logic import NOT_STRINGS
from .merge import FALSE, json_equal, merge, value_types
from .proofs import disjoint_values, forbids, literals, type_disjoint, type_groups
from .regex import pattern_chars


_RANGE_KEYS = frozenset(("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "title",
                         "description", "default", "examples", "$comment"))


def _interval(s):
    """(lo, lo_open, hi, hi_open) of s's numbers when bounds alone constrain them, else None."""
    if any(k not in _RANGE_KEYS for k in s):
        return None
    b = {k: s.get(k) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")}
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in b.values()):
        return None
    lo, lo_open = b["minimum"], False
    if b["exclusiveMinimum"] is not None and (lo is None or b["exclusiveMinimum"] >= lo):
        lo, lo_open = b["exclusiveMinimum"], True
    hi, hi_open = b["maximum"], False
    if b["exclusiveMaximum"] is not None and (hi is None or b["exclusiveMaximum"] <= hi):
        hi, hi_open = b["exclusiveMaximum"], True
    return lo, lo_open, hi, hi_open


def _minus(x, y):
    """The numbers of interval x outside interval y as bounds to add to x's schema, "empty"
    when y covers x, None when they are two intervals (y strictly inside x)."""
    xlo, xlo_open, xhi, xhi_open = x
    ylo, ylo_open, yhi, yhi_open = y
    low = ylo is None or xlo is not None and (ylo < xlo or ylo == xlo and (not ylo_open or xlo_open))
    high = yhi is None or xhi is not None and (yhi > xhi or yhi == xhi and (not yhi_open or xhi_open))
    if low and high:
        return "empty"
    if low:
        return {"minimum": yhi} if yhi_open else {"exclusiveMinimum": yhi}
    if high:
        return {"maximum": ylo} if ylo_open else {"exclusiveMaximum": ylo}
    return None


_STRING_KEYS = ("type", "pattern", "minLength", "maxLength")


def _literal_strings_cut(a, b):
    """When one branch's strings are literals (enum/const) and the other's strings are
    bounded by type/pattern/lengths alone: (strings a leaves out, strings b leaves out),
    the literal branch dropping those the other accepts and the other dropping every
    literal (exact); else None."""
    la, lb = literals(a), literals(b)
    if (la is None) == (lb is None):
        return None
    lits, other = (la, b) if la is not None else (lb, a)
    if any(k in other for k in _NOT_PATTERN_ONLY if k not in ("minLength", "maxLength")) or NOT_PATTERNS in other:
        return None  # a format, another exclusion, a reference: cannot subtract or decide
    strings = [v for v in lits if isinstance(v, str)]
    try:
        import jsonschema

        check = jsonschema.Draft202012Validator({k: other[k] for k in _STRING_KEYS if k in other}).is_valid
        shared = [v for v in strings if check(v)]
    except Exception:  # noqa: BLE001 - a pattern jsonschema cannot read: the old way
        return None
    return (shared, strings) if la is not None else (strings, shared)


# keywords beside `pattern` that would also constrain a string (or defer to another schema)
_NOT_PATTERN_ONLY = ("minLength", "maxLength", "format", "enum", "const", "x-furca-not-strings",
                     "not", "allOf", "anyOf", "oneOf", "$ref")


def _patterns_disjoint(a: str, b: str, where: str) -> bool:
    """Whether no string matches both patterns (difference.disjoint), so that neither
    branch excludes the other; False where unknown."""
    try:
        return disjoint(pattern_chars(a, where), pattern_chars(b, where), where)
    except CompileError:
        return False


def _pattern_only(s) -> bool:
    """Strings of `s` are those its `pattern` matches, nothing else constrains them (with
    length bounds, the difference's product with a length counter outgrows its state
    limit: maskbench-dev o9804, `{1,255}` against maxLength 255)."""
    return isinstance(s.get("pattern"), str) and not any(k in s for k in _NOT_PATTERN_ONLY)


def _lengths_or_patterns(a, b) -> bool:
    """Whether the strings of a and b are bounded by length or by patterns, not both: the
    product of a pattern with a length counter outgrows difference.py's state limit
    (maskbench-dev o9804, `{1,255}` against maxLength 255), so such a pair's strings
    are not made exclusive by complements."""
    keys = set(a) | set(b)
    return not (keys & {"minLength", "maxLength"} and keys & {"pattern", NOT_PATTERNS, "format"})


def _separating_names(a, b):
    """(names a then requires, names b then requires) that make the objects of a and b
    disjoint, or None: a property both declare with provably disjoint values (both
    require it), else a property each declares that the other forbids (each requires
    its first such one: sound; narrower when a declares several, as an object holding
    only another of them is then left out)."""
    pa, pb = a.get("properties", {}), b.get("properties", {})
    if not (isinstance(pa, dict) and isinstance(pb, dict)):
        return None
    for k in pa:
        if k in pb and pa[k] is not False and pb[k] is not False and disjoint_values(pa[k], pb[k]):
            return {k}, {k}
    ka = next((k for k in pa if pa[k] is not False and forbids(b, k)), None)
    kb = next((k for k in pb if pb[k] is not False and forbids(a, k)), None)
    if ka is not None and kb is not None:
        return {ka}, {kb}
    return None


MAX_COMPLEMENT_BRANCHES = 16  # a complement's anyOf merged into a oneOf branch, at most


def _merge_complements(m, negs, where):
    """m with the other branches' complements merged in -> (schema, the types to drop
    instead: every type of those pairs that no proof settled, when the complements make
    more than MAX_COMPLEMENT_BRANCHES branches or do not merge)."""
    try:
        out = m
        for _, n in negs:
            out = merge(out, n, where)
            if out is FALSE:
                return FALSE, set()
            if len(out.get("anyOf", ())) > MAX_COMPLEMENT_BRANCHES:
                raise CompileError("too many branches")
        return out, set()
    except CompileError:
        return m, set().union(*(ts for ts, _ in negs))


def _complement(complement, sub, merged, beside):
    """A schema of the instances of `beside` (which holds oneOf's base) that `merged` (sub
    and base) rejects: the complement of sub alone, else of merged, else None."""
    n = complement(sub, beside)
    return n if n is not None else complement(merged, beside)


def exclusive_branches(subs, base, no_extras: bool, where: str, complement=None, resolve=None):
    """-> (branches merged with base and made exclusive, whether any was narrowed).
    A branch that can accept nothing is FALSE. complement(s, beside): a schema of exactly
    the instances s rejects, to be merged into `beside` (logic.negate), or None: a pair
    of branches with types no proof settles each take the other's complement instead of
    losing those types (exact), where both complements exist and merge. resolve(s): s
    with its $refs and allOfs inlined, for proofs that look inside members (or None)."""
    merged = [merge(base, s, "%s/oneOf/%d" % (where, i)) for i, s in enumerate(subs)]
    negs = [[] for _ in merged]  # (the types shared, the complement of another branch) to merge in
    drop = [set() for _ in merged]
    forbid = [set() for _ in merged]
    unlike = [set() for _ in merged]
    need = [set() for _ in merged]
    bounds = [[] for _ in merged]
    not_strings = [set() for _ in merged]
    shared = [[] for _ in merged]  # literals of two enum/const branches: in neither
    for i in range(len(merged)):
        for j in range(i + 1, len(merged)):
            a, b = merged[i], merged[j]
            if a is FALSE or b is FALSE or disjoint_values(a, b, resolve):
                continue
            if any(k in a for k in ("enum", "const")) and any(k in b for k in ("enum", "const")):
                la, lb = literals(a), literals(b)
                if la is not None and lb is not None:
                    both = [x for x in la if any(json_equal(x, y) for y in lb)]
                    shared[i] += both
                    shared[j] += both
                    continue
            undecided = set()  # shared types no proof or cut settles
            for t in type_groups(value_types(a)) & type_groups(value_types(b)):
                if type_disjoint(t, a, b, no_extras, resolve):
                    continue
                if t == "object":
                    fi = set(b.get("required", [])) - set(a.get("required", []))
                    fj = set(a.get("required", [])) - set(b.get("required", []))
                    if fi and fj:
                        forbid[i] |= fi
                        forbid[j] |= fj
                        continue
                    names = _separating_names(a, b)
                    if names is not None:
                        need[i] |= names[0]
                        need[j] |= names[1]
                        continue
                if t == "number":
                    ia, ib = _interval(a), _interval(b)
                    cut = (_minus(ia, ib), _minus(ib, ia)) if ia is not None and ib is not None else (None, None)
                    if None not in cut:
                        for k, c in ((i, cut[0]), (j, cut[1])):
                            if c == "empty":
                                drop[k].add(t)
                            else:
                                bounds[k].append(c)
                        continue
                if t == "string":
                    cut = _literal_strings_cut(a, b)
                    if cut is not None:
                        for k, names in ((i, cut[0]), (j, cut[1])):
                            not_strings[k] |= set(names)
                        continue
                if t == "string" and _pattern_only(a) and _pattern_only(b):
                    if not _patterns_disjoint(a["pattern"], b["pattern"], where):
                        unlike[i].add(b["pattern"])
                        unlike[j].add(a["pattern"])
                    continue
                undecided.add(t)
            if undecided and complement is not None and ("string" not in undecided or _lengths_or_patterns(a, b)):
                # each excludes the other whole (so every undecided type), if both complements
                # exist: b and not a == b and not subs[i] (b holds base already), and the
                # branch's own keywords are more often negatable than base's with them
                na = _complement(complement, subs[i], a, b)
                nb = _complement(complement, subs[j], b, a)
                if na is not None and nb is not None:
                    negs[i].append((undecided, nb))
                    negs[j].append((undecided, na))
                    continue
            drop[i] |= undecided
            drop[j] |= undecided
    out = []
    for m, d, f, u, r, bs, ns, sh, ng in zip(merged, drop, forbid, unlike, need, bounds, not_strings, shared, negs):
        if m is FALSE:
            out.append(FALSE)
            continue
        if ng:
            m, lost = _merge_complements(m, ng, where)
            d |= lost
            if m is FALSE:
                out.append(FALSE)
                continue
        if sh:
            kept = [x for x in literals(m) if not any(json_equal(x, y) for y in sh)]
            if not kept:
                out.append(FALSE)
                continue
            m = {k: v for k, v in m.items() if k not in ("enum", "const")}
            m["enum"] = kept
        extra = {}
        if d:
            keep = type_groups(value_types(m)) - d
            if not keep:
                out.append(FALSE)
                continue
            extra["type"] = sorted(keep | ({"integer"} if "number" in keep else set()))
        if u:
            extra[NOT_PATTERNS] = sorted(u)
        if ns:
            extra[NOT_STRINGS] = sorted(ns)
        if r:
            extra["required"] = sorted(r)
        if f:
            extra["properties"] = {k: False for k in sorted(f)}
            if not any(k in m for k in ("properties", "patternProperties", "additionalProperties")):
                extra["additionalProperties"] = True  # keep "no properties declared: any members"
        if "number" in (d or ()):
            bs = []  # numbers dropped: the bounds would narrow nothing
        for b in bs:
            m = merge(m, b, where)
        out.append(merge(m, extra, where) if extra else m)
    return out, any(drop) or any(forbid) or any(need) or any(bounds) or any(not_strings) or any(shared)


def one_product(branches, annotations):
    """exclusive_branches' output with its pattern-only string branches (type string, a
    pattern, the other such branches' patterns excluded, `annotations`) made one branch of
    the strings exactly one of their patterns matches (ONE_OF_PATTERNS: regex.one_of_patterns
    builds one product of the patterns for it, not one per branch). The same strings:
    branch i held those of pattern i and none of the others'. Unchanged where fewer than
    two such branches are, or some branch excludes other patterns than those."""
    group = [i for i, b in enumerate(branches) if b is not FALSE and isinstance(b, dict)
             and b.get("type") in ("string", ["string"]) and isinstance(b.get("pattern"), str)
             and all(k in ("type", "pattern", NOT_PATTERNS) or k in annotations for k in b)]
    if len(group) < 2:
        return branches
    patterns = [branches[i]["pattern"] for i in group]
    for k, i in enumerate(group):
        if set(branches[i].get(NOT_PATTERNS, ())) != set(patterns[:k] + patterns[k + 1:]):
            return branches
    out = [b for i, b in enumerate(branches) if i not in group]
    out.insert(group[0], {"type": "string", ONE_OF_PATTERNS: patterns})
    return out
