"""Proofs that two schemas share no instance (oneOf's exclusivity, exclusive.py; a
negated oneOf read as an anyOf, negatable.py).

Cheap proofs first, each for one JSON type both allow: disjoint literal sets (enum /
const, narrowed by a `pattern` beside them), disjoint number or length ranges, and for
objects a member one side requires that both give disjoint values (each side's
properties entry, else its matching patternProperties, else additionalProperties), a
required member the other side forbids, or (undeclared members off) one it cannot emit.
Where a member's schema is a $ref, the deep proofs inline both sides (the compiler's
resolve_for_merge, through a ProofResolver: each schema once, bounded, memoised) and
prove them branch by branch of a top-level anyOf / oneOf, down to MAX_PROOF_DEPTH.
A proof that cannot be made is no proof: the caller then narrows or takes complements.
"""
from __future__ import annotations

import re

from furca.errors import CompileError

from .logic import NOT_STRINGS
from .merge import ANNOTATION_LIKE, FALSE, constraint_for, json_equal, literal_type, merge, value_types


# A pattern matching exactly one string: ^ literal $ without regex metacharacters
# (ECMA-262: `$` without the m flag matches only at the end).
_LITERAL_PATTERN = re.compile(r"\^([A-Za-z0-9_ ,:;@#%&=<>'\"!~`-]*)\$")


def literals(s):
    if not isinstance(s, dict):
        return None
    if "const" in s:
        return _matching([s["const"]], s.get("pattern"))
    if "enum" in s and isinstance(s["enum"], list):
        return _matching(s["enum"], s.get("pattern"))
    if s.get("type") == "string" and isinstance(s.get("pattern"), str):
        m = _LITERAL_PATTERN.fullmatch(s["pattern"])
        if m:
            return [m.group(1)]
    return None


def _matching(values, pattern):
    """The literals a `pattern` beside them leaves (strings it does not match go; other
    types stay): xstate's state nodes, an enum of five types merged with `pattern:
    compound`, then disjoint from each other."""
    if not isinstance(pattern, str) or not all(v.isascii() for v in values if isinstance(v, str)):
        return values  # (Python's re and ECMA-262 part on non-ASCII text: \d, \s, case folding)
    try:
        rx = re.compile(pattern)
    except re.error:
        return values
    return [v for v in values if not isinstance(v, str) or rx.search(v)]


def disjoint_values(a, b, resolve=None, depth=0) -> bool:
    if a is False or b is False:
        return True
    ta, tb = value_types(a), value_types(b)
    if not (ta & tb):
        return True
    la, lb = literals(a), literals(b)
    if la is not None and lb is not None:
        return not any(json_equal(x, y) for x in la for y in lb)
    # literals the other side excludes by `not` ({"not": {"enum": [...]}}: a builder
    # name that is none of the known ones, beside branches naming each known one)
    for lits, other in ((la, b), (lb, a)):
        gone = _excluded(other)
        if lits is not None and gone and all(any(json_equal(x, y) for y in gone) for x in lits):
            return True
    return _deep_disjoint(a, b, resolve, depth)


MAX_PROOF_DEPTH = 3  # members inside members, when their $refs must be inlined to compare them


MAX_PROOF_BRANCHES = 8  # anyOf / oneOf branches of one side, each proved against the other's


MAX_PROOF_RESOLVES = 64  # schemas one oneOf's proofs may inline


MAX_PROOF_PAIRS = 256  # pairs of schemas one oneOf's deep proofs may compare


class ProofResolver:
    """resolve(s) for one oneOf's proofs (the compiler's resolve_for_merge): each schema
    object inlined once, at most MAX_PROOF_RESOLVES of them (then CompileError: no
    proof), the deep proofs' answers kept (`memo`), at most MAX_PROOF_PAIRS computed. Without the bound and the memo a
    Kubernetes oneOf's proofs through every required member's $ref cost 40-70 ms more
    of compile (o17072, kb_228)."""

    def __init__(self, resolve_for_merge, where):
        self.resolve_for_merge, self.where = resolve_for_merge, where
        self.done, self.left, self.memo, self.split = {}, MAX_PROOF_RESOLVES, {}, {}
        self.pairs = MAX_PROOF_PAIRS

    def __call__(self, s):
        if id(s) not in self.done:
            if self.left <= 0:
                raise CompileError("%s: oneOf proofs out of budget" % self.where)
            self.left -= 1
            self.done[id(s)] = (s, self.resolve_for_merge(s))  # s kept: its id stays its own
        return self.done[id(s)][1]

    def branches(self, s):
        """_branches(s), once per schema object (the proofs meet the same ones again)."""
        if id(s) not in self.split:
            self.split[id(s)] = (s, _branches(s))
        return self.split[id(s)][1]


def _deep_disjoint(a, b, resolve, depth) -> bool:
    """a and b disjoint once their $refs and allOfs are inlined (`resolve`, the compiler's),
    branch by branch of a top-level anyOf / oneOf: what the cheap proofs cannot see when a
    member's schema is a $ref (maskbench-dev o17383: an `annotation` both require, a oneOf
    of objects on one side and a $ref to an object with another `type` const on the
    other)."""
    if resolve is None or depth >= MAX_PROOF_DEPTH or not isinstance(a, dict) or not isinstance(b, dict):
        return False
    memo = getattr(resolve, "memo", None)
    if memo is None:
        return _deep_disjoint_now(a, b, resolve, depth)
    key = (id(a), id(b), depth)
    if key not in memo:
        if resolve.pairs <= 0:
            return False  # out of budget: no proof
        resolve.pairs -= 1
        memo[key] = (a, b, _deep_disjoint_now(a, b, resolve, depth))  # a, b kept: their ids stay theirs
    return memo[key][2]


def _deep_disjoint_now(a, b, resolve, depth) -> bool:
    split = getattr(resolve, "branches", _branches)
    try:
        xs, ys = split(resolve(a)), split(resolve(b))
    except CompileError:
        return False
    if xs is None or ys is None:
        return False
    for x in xs:
        for y in ys:
            if x is FALSE or y is FALSE or disjoint_values(x, y, resolve, depth + 1):
                continue
            if not isinstance(x, dict) or not isinstance(y, dict):
                return False
            if not all(type_disjoint(t, x, y, False, resolve, depth + 1)
                       for t in type_groups(value_types(x)) & type_groups(value_types(y))):
                return False
    return True


def _branches(s):
    """s as the list of its anyOf / oneOf branches (each merged with the rest of s), or
    None when there are too many (or s is not a schema object)."""
    if s is FALSE:
        return [FALSE]
    if not isinstance(s, dict) or ("anyOf" in s and "oneOf" in s):
        return None
    for kw in ("anyOf", "oneOf"):
        if isinstance(s.get(kw), list):
            if len(s[kw]) > MAX_PROOF_BRANCHES:
                return None
            rest = {k: v for k, v in s.items() if k != kw}
            return [merge(rest, x, "#") for x in s[kw]]
    return [s]


def _excluded(s) -> list:
    """The literals schema s refuses by a `not` of an enum/const (or logic.py's rewrite
    of one into NOT_STRINGS)."""
    if not isinstance(s, dict):
        return []
    out = list(s.get(NOT_STRINGS, ()))
    n = s.get("not")
    if isinstance(n, dict):
        lits = literals(n)
        if lits is not None and all(k in ("enum", "const", "type") or k in ANNOTATION_LIKE for k in n):
            if "type" not in n or all(literal_type(v) in value_types(n) for v in lits):
                out.extend(lits)
    return out


def value_range(s):
    lo = s.get("minimum", s.get("exclusiveMinimum"))
    hi = s.get("maximum", s.get("exclusiveMaximum"))
    return lo, hi


def _misses(x, y) -> bool:
    """When undeclared members are off by default: every object x's grammar emits
    lacks a property y requires."""
    if x.get("patternProperties") or x.get("additionalProperties", False) is not False:
        return False
    if "additionalProperties" not in x and "properties" not in x:
        return False  # an object schema without properties admits any members
    names = set(x.get("properties", {})) | set(x.get("required", []))
    return any(k not in names for k in y.get("required", []))


_GROUPS = {"integer": "number"}


def type_groups(types):
    return {_GROUPS.get(t, t) for t in types}


def type_disjoint(t, a, b, no_extras, resolve=None, depth=0) -> bool:
    if t == "number":
        (alo, ahi), (blo, bhi) = value_range(a), value_range(b)
        return ahi is not None and blo is not None and ahi < blo or bhi is not None and alo is not None and bhi < alo
    if t in ("string", "array"):
        lo_k, hi_k = ("minLength", "maxLength") if t == "string" else ("minItems", "maxItems")
        alo, ahi, blo, bhi = a.get(lo_k, 0), a.get(hi_k), b.get(lo_k, 0), b.get(hi_k)
        return ahi is not None and ahi < blo or bhi is not None and bhi < alo
    if t == "object":
        ra, rb = set(a.get("required", [])), set(b.get("required", []))
        pa, pb = a.get("properties", {}), b.get("properties", {})
        # a member one of them requires, both constraining its value disjointly (the other's
        # constraint holds whenever the member is there: Swagger 2.0's fileSchema requires
        # `type: file`, its schema lets `type` out but never as "file")
        if any(_disjoint_members(a, b, k, resolve, depth) for k in ra | rb):
            return True
        for x, y, rx in ((a, b, ra), (b, a, rb)):
            py = y.get("properties", {})
            for k in rx:
                if (k in py and py[k] is False) or (k not in py and y.get("additionalProperties") is False
                                                   and not y.get("patternProperties")):
                    return True
        return no_extras and _misses(a, b) and _misses(b, a)
    return False


def _disjoint_members(a, b, k, resolve, depth) -> bool:
    """Whether the values a and b allow for member k are disjoint: each side's
    `properties` entry, else its matching patternProperties, else additionalProperties
    (composer's repositories: an object of one `false` member against ones requiring a
    string `type`)."""
    try:
        ca, cb = constraint_for(a, k, "#"), constraint_for(b, k, "#")
    except CompileError:
        return False
    return ca is not None and cb is not None and disjoint_values(ca, cb, resolve, depth)


def forbids(y, k) -> bool:
    """No object of y holds a member named k."""
    py = y.get("properties", {})
    if k in py:
        return py[k] is False
    return y.get("additionalProperties") is False and not y.get("patternProperties")


def provably_disjoint(subs, types, no_extras: bool) -> bool:
    """Whether no instance of `types` (None: any) satisfies two of the schemas `subs`, by
    the proofs exclusive_branches uses (so oneOf of them is their anyOf there)."""
    try:
        merged = [merge({"type": sorted(types)} if types is not None else {}, s, "#") for s in subs]
    except CompileError:
        return False
    for i in range(len(merged)):
        for j in range(i + 1, len(merged)):
            a, b = merged[i], merged[j]
            if a is FALSE or b is FALSE or disjoint_values(a, b):
                continue
            if not isinstance(a, dict) or not isinstance(b, dict):
                return False
            if not all(type_disjoint(t, a, b, no_extras) for t in type_groups(value_types(a)) & type_groups(value_types(b))):
                return False
    return True
