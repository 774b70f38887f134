"""The JSON-schema translator's grammar nodes, their constructors, and code-point set helpers.

Nodes are immutable and hashable:

    Lit(text)                 the exact characters of `text` ("" is the empty string)
    Cls(ranges)               one code point in the union of inclusive (lo, hi) ranges
    Seq(items)                concatenation
    Alt(items)                alternation; Alt(()) is NOTHING, the empty language
    Rep(item, min, max)       item{min,max}; max None = unbounded
    Ref(name)                 a named rule of the enclosing Grammar (recursion allowed)
    Keys(names)               a quoted JSON key, canonically spelled, that is none of `names`
                              (a tuple): the key trie of keys.py, calling the rules
                              key-rest and key-other; kept as one leaf until lowered
    Len(item, min, max)       the strings of item with min..max characters, where item
                              (JSON-encoded, no Ref, no Len) marks each character's start
                              with TICK (lengths.py; a length frame in the automaton)
    TICK                      inside a Len: the next written character is one character

Build nodes with `lit`, `seq`, `alt`, `rep`, `cls`: they flatten, merge adjacent
literals and propagate NOTHING, so a grammar that can match nothing is detected early.
Nodes are over code points and hashable, which the translator needs (shared rules,
dedup in `alt`, equality with NOTHING); `lower.py` turns a finished `Grammar` into the
byte-level `furca.constrain.ir` the automaton compiles, and `render.py` writes it as
GBNF text (`schema_to_gbnf`).
"""
from __future__ import annotations

import re
from ..deadline import check as check_deadline

MAX_CP = 0x10FFFF


# The nodes are plain classes with __slots__, not frozen dataclasses: a frozen
# dataclass's __init__ sets each field through object.__setattr__ (~2.5 µs a node, 5%
# of a Kubernetes schema's compile), these assign (~1 µs). Nothing mutates a node after
# it is built. Equality is by class and fields; compound nodes cache their hash.


class _Leaf:
    """A node of one field (`_F`), hashed as that field."""

    __slots__ = ()

    def __eq__(self, other):
        return other.__class__ is self.__class__ and getattr(other, self._F) == getattr(self, self._F)

    def __hash__(self):
        return hash(getattr(self, self._F))

    def __repr__(self):
        return "%s(%s=%r)" % (type(self).__name__, self._F, getattr(self, self._F))


class Lit(_Leaf):
    __slots__ = ("text",)
    _F = "text"

    def __init__(self, text: str):
        self.text = text

    def __eq__(self, other):
        return other.__class__ is Lit and other.text == self.text

    def __hash__(self):
        return hash(self.text)


class Cls(_Leaf):
    __slots__ = ("ranges",)  # sorted, disjoint, non-adjacent (lo, hi) pairs
    _F = "ranges"

    def __init__(self, ranges: tuple):
        self.ranges = ranges


class Ref(_Leaf):
    __slots__ = ("name",)
    _F = "name"

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return other.__class__ is Ref and other.name == self.name

    def __hash__(self):
        return hash(self.name)


class Keys(_Leaf):
    __slots__ = ("names",)  # distinct, in declaration order (the order of the trie's branches)
    _F = "names"

    def __init__(self, names: tuple):
        self.names = names


class Bound(_Leaf):
    """A word boundary assertion of a pattern (``\\b``; negated: ``\\B``): zero-width,
    the characters on either side one word character ([A-Za-z0-9_]) and one other (the
    ends of the string count as other), or not. Only difference.py's automata read it
    (lengths.Glushkov); json_schema/regex.py hands such patterns to them alone."""

    __slots__ = ("negated",)
    _F = "negated"

    def __init__(self, negated: bool):
        self.negated = negated


class _Items:
    """Seq / Alt: a tuple of items; the hash computed once."""

    __slots__ = ("items", "_hash")

    def __init__(self, items: tuple):
        self.items = items
        self._hash = None

    def __eq__(self, other):
        return other is self or (other.__class__ is self.__class__ and other.items == self.items)

    def __hash__(self):
        h = self._hash
        if h is None:
            h = self._hash = hash((type(self).__name__, self.items))
        return h

    def __repr__(self):
        return "%s(items=%r)" % (type(self).__name__, self.items)


class Seq(_Items):
    __slots__ = ()


class Alt(_Items):
    __slots__ = ()


class _Bounded:
    """Rep / Len: item{min,max}; the hash computed once."""

    __slots__ = ("item", "min", "max", "_hash")

    def __init__(self, item, min: int, max: int | None):  # noqa: A002 - the field names
        self.item = item
        self.min = min
        self.max = max
        self._hash = None

    def __eq__(self, other):
        return other is self or (other.__class__ is self.__class__ and other.min == self.min
                                 and other.max == self.max and other.item == self.item)

    def __hash__(self):
        h = self._hash
        if h is None:
            h = self._hash = hash((type(self).__name__, self.item, self.min, self.max))
        return h

    def __repr__(self):
        return "%s(item=%r, min=%r, max=%r)" % (type(self).__name__, self.item, self.min, self.max)


class Rep(_Bounded):
    __slots__ = ()


class Counted(Rep):
    """A Rep that counts on the stack whatever its bounds (nfa.py: a counter, not copies):
    a bounded string's characters, whose abstract masks come from the tokenizer's tables
    (string_counters.py) only under a counter."""

    __slots__ = ()


class Len(_Bounded):
    __slots__ = ()


class Tick:
    __slots__ = ()

    def __eq__(self, other):
        return other.__class__ is Tick

    def __hash__(self):
        return hash("Tick")

    def __repr__(self):
        return "Tick()"


TICK = Tick()


EMPTY = Lit("")
NOTHING = Alt(())


# ----------------------------------------------------------------- code-point sets
def normalize(ranges) -> tuple:
    """Sorted, merged (lo, hi) ranges."""
    out = []
    last = -2
    for lo, hi in sorted(ranges):
        if lo <= last + 1:
            if hi > last:
                out[-1] = (out[-1][0], hi)
                last = hi
        else:
            out.append((lo, hi))
            last = hi
    return tuple(out)


def complement(ranges) -> tuple:
    out, start = [], 0
    for lo, hi in normalize(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CP:
        out.append((start, MAX_CP))
    return tuple(out)


def intersect(a, b) -> tuple:
    """The code points in both; one merge of the two sorted range lists (the pieces of
    two normalized sets never touch, so the result is normalized)."""
    a, b = normalize(a), normalize(b)
    out, i, j, na, nb = [], 0, 0, len(a), len(b)
    while i < na and j < nb:
        alo, ahi = a[i]
        blo, bhi = b[j]
        lo = alo if alo > blo else blo
        if ahi < bhi:
            if lo <= ahi:
                out.append((lo, ahi))
            i += 1
        else:
            if lo <= bhi:
                out.append((lo, bhi))
            j += 1
    return tuple(out)


def subtract(a, b) -> tuple:
    return intersect(a, complement(b))


def chars(s: str) -> tuple:
    return normalize((ord(c), ord(c)) for c in s)


# ----------------------------------------------------------------- constructors
def lit(text: str):
    return Lit(text)


def cls(ranges):
    r = normalize(ranges)
    return Cls(r) if r else NOTHING


def seq(*items):
    out = []
    for it in items:
        t = type(it)
        if t is Seq:
            parts = it.items
        elif t is Alt and not it.items:  # NOTHING
            return NOTHING
        else:
            parts = (it,)
        for p in parts:
            if type(p) is Lit:
                if not p.text:
                    continue
                if out and type(out[-1]) is Lit:
                    out[-1] = Lit(out[-1].text + p.text)
                    continue
            out.append(p)
    if not out:
        return EMPTY
    return out[0] if len(out) == 1 else Seq(tuple(out))


def alt(*items):
    check_deadline()
    out, seen, singles = [], set(), 0
    for it in items:
        parts = it.items if type(it) is Alt else (it,)
        for p in parts:
            n = len(seen)
            seen.add(p)  # one hash per item
            if len(seen) != n:
                out.append(p)
                if _as_ranges(p) is not None:
                    singles += 1
    # merge single-code-point alternatives into one class
    if singles > 1:
        ranges, rest = [], []
        for p in out:
            r = _as_ranges(p)
            if r is None:
                rest.append(p)
            else:
                ranges.extend(r)
        out = [cls(ranges)] + rest
    if len(out) == 1:
        return out[0]
    return Alt(tuple(out))


def _as_ranges(node):
    t = type(node)
    if t is Cls:
        return node.ranges
    if t is Lit and len(node.text) == 1:
        c = ord(node.text)
        return ((c, c),)
    return None


def rep(item, min_: int, max_: int | None):
    if max_ is not None and max_ < min_:
        return NOTHING
    if item == NOTHING:
        return EMPTY if min_ == 0 else NOTHING
    if item == EMPTY or max_ == 0:
        return EMPTY
    if min_ == 1 and max_ == 1:
        return item
    return Rep(item, min_, max_)


def counted(item, min_: int, max_: int | None):
    """rep(item, min_, max_), counted on the stack where it has a maximum of two or more."""
    r = rep(item, min_, max_)
    return Counted(item, min_, max_) if type(r) is Rep and max_ is not None and max_ >= 2 else r


def opt(item):
    return rep(item, 0, 1)


_NAME_BAD = re.compile(r"[^a-zA-Z0-9-]+")
_BASES: dict = {}  # hint -> its name base (the regex costs ~8 µs on a 100-character $ref pointer)


def _name_base(hint: str) -> str:
    base = _NAME_BAD.sub("-", hint).strip("-").lower()[:40] or "r"
    if base == "root":
        base = "root-x"
    if len(_BASES) < 65536:
        _BASES[hint] = base
    return base


# rules the translator defines under a fixed name (the root, the whitespace of
# "flexible", the key tries' shared rules: keys.key_not_in): never handed out by
# new_name, so a property called "key-rest" gets "key-rest-2" instead of redefining it
FIXED_NAMES = ("root", "ws", "key-esc", "key-rest", "key-other")


class Grammar:
    """Named rules; `root` first. Rule names are unique and GBNF-safe."""

    def __init__(self):
        self.rules: dict[str, object] = {}
        self._used: set[str] = set(FIXED_NAMES)
        self._next: dict[str, int] = {}  # base -> the n to try next (every smaller one is taken)
        self._shared: dict = {}  # body -> its rule's Ref (share)
        # rules whose body object lives across compiles (the JSON lexemes): lower maps it
        # to one IR object per process, which prepare and build_nfa recognise (ir.Grammar.lasting)
        self.lasting: set[str] = set()
        # a string's length bound beyond the simple rewrite: the eager product as rules
        # (what GBNF can write), or else a length region counted by the automaton
        self.eager_lengths = True
        # uniqueItems over free strings: {array rule: (item rule, minLength, maxLength)},
        # enforced by the matcher (furca/constrain/unique.py), so only where the grammar
        # goes to the engine (watch_unique: lower, not GBNF)
        self.unique: dict[str, tuple] = {}
        self.watch_unique = False
        # objects in any member order (any_order.py): {object rule: (its own rules, the
        # declared keys' spellings when no other key is allowed, else None)}, watched by
        # the matcher too (members.py)
        self.objects: dict[str, tuple] = {}

    def new_name(self, hint: str) -> str:
        """The first of `base`, `base-2`, `base-3`, ... not yet used (base: the hint made
        GBNF-safe). Names are never freed, so the search resumes where it last stopped."""
        base = _BASES.get(hint)
        if base is None:
            base = _name_base(hint)
        n = self._next.get(base, 1)
        name = base if n == 1 else "%s-%d" % (base, n)
        while name in self._used:
            n += 1
            name = "%s-%d" % (base, n)
        self._used.add(name)
        self._next[base] = n + 1
        return name

    def define(self, name: str, body) -> Ref:
        self.rules[name] = body
        return Ref(name)

    def share(self, name: str, body) -> Ref:
        """`define`, or the rule already defined here by `share` with an equal body (the
        same language): for a name nothing refers to yet (not a rule reserved for its
        own recursion), so it may stay undefined."""
        hit = self._shared.get(body)
        if hit is None:
            hit = self._shared[body] = self.define(name, body)
        return hit
