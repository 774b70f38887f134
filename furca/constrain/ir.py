"""The grammar IR every front end produces (regex, GBNF, Lark, choices, JSON schema,
structural tag).

A grammar is ``Grammar(rules={name: expr}, root=name)``; an expr is a tuple:

    ("byte", ranges)          one byte in the union of inclusive (lo, hi) byte ranges
    ("seq", [expr, ...])      concatenation ("seq", []) is the empty string
    ("alt", [expr, ...])      alternation; ("alt", []) matches nothing
    ("rep", expr, min, max)   repetition, max None = unbounded
    ("rep", expr, min, max, "count")  the same, counted on the stack whatever its bounds
                              (nfa.py; a bounded JSON string's characters)
    ("ref", name, pos)        a rule call; pos = character offset in the source (for errors)
    ("len", expr, min, max)   the strings of expr with min..max characters (max None =
                              unbounded), counted by the ticks inside expr (a length frame,
                              nfa.py); expr holds no call, no length region
    ("tick",)                 inside a "len": the next byte starts a character
    ("keys", names, rest, other, is_open)
                              a quoted JSON key that is none of the plain ASCII `names`,
                              leaving the names' trie through the calls `rest` / `other`
                              (("ref", ...) exprs): key_trie.py (made by key_trie.keys)

Everything is over bytes: a Unicode character class becomes an alternation of UTF-8
byte-range sequences (``char_class``), so tokens that split a character work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CODEPOINT = 0x10FFFF
EMPTY = ("seq", [])
NOTHING = ("alt", [])


@dataclass
class Grammar:
    rules: dict = field(default_factory=dict)
    root: str = "root"
    positions: dict = field(default_factory=dict)  # rule name -> source offset of its definition
    # rules whose body object lives across compiles (the JSON schema front end's lexemes:
    # any value, plain scalars, the key tries' rules): never mutated; lower keeps its IR,
    # prepare its facts and build_nfa its node layout per body
    lasting: set = field(default_factory=set)
    # arrays whose string items must be distinct (uniqueItems), which no grammar can say:
    # {array rule: (item rule, minLength, maxLength or None, the items' canonical spellings
    # (bytes between the quotes) when finite, else None)}; the matcher watches them
    # (unique.py: the rule's items remembered, the tokens completing a repeat masked)
    unique: dict = field(default_factory=dict)
    # objects in any member order: {object rule: (its own rules, the declared keys'
    # spellings (bytes between the quotes) or None when any other key is allowed, the
    # rules of the extra members' keys)};
    # the matcher watches them (members.py: each key at most once)
    objects: dict = field(default_factory=dict)


def seq(items):
    flat = []
    for it in items:
        if it[0] == "seq":
            flat.extend(it[1])
        else:
            flat.append(it)
    return flat[0] if len(flat) == 1 else ("seq", flat)


def alt(items):
    flat = []
    for it in items:
        if it[0] == "alt" and it[1]:
            flat.extend(it[1])
        else:
            flat.append(it)
    return flat[0] if len(flat) == 1 else ("alt", flat)


BYTE = [("byte", ((b, b),)) for b in range(256)]  # one shared item per byte (literals are made of these)


def literal(data: bytes | str):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) == 1:
        return BYTE[data[0]]
    return ("seq", [BYTE[b] for b in data])


def normalize_ranges(ranges):
    """Sorted, merged, inclusive (lo, hi) ranges."""
    out = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def negate_ranges(ranges, top=MAX_CODEPOINT):
    out, nxt = [], 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= top:
        out.append((nxt, top))
    return out


_UTF8_BOUNDS = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF)]


def _split_utf8(lo, hi):
    """Byte-range sequences (lists of (lo, hi) per byte) whose union encodes [lo, hi]
    (same encoded length, no surrogates). The classic utf8-ranges construction."""
    out = []
    for blo, bhi in _UTF8_BOUNDS:
        a, b = max(lo, blo), min(hi, bhi)
        if a > b:
            continue
        if blo == 0x800:  # cut out surrogates
            for x, y in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):
                if x <= y:
                    _split_same_len(x, y, out)
        else:
            _split_same_len(a, b, out)
    return out


def _split_same_len(lo, hi, out):
    n = len(chr(lo).encode("utf-8"))
    if n == 1:
        out.append([(lo, hi)])
        return
    # split so that all but the leading byte cover full continuation ranges
    for i in range(1, n):
        m = (1 << (6 * i)) - 1
        if lo & ~m != hi & ~m:
            if lo & m:
                _split_same_len(lo, (lo | m), out)
                _split_same_len((lo | m) + 1, hi, out)
                return
            if (hi & m) != m:
                _split_same_len(lo, (hi & ~m) - 1, out)
                _split_same_len(hi & ~m, hi, out)
                return
    a, b = chr(lo).encode("utf-8"), chr(hi).encode("utf-8")
    out.append([(a[i], b[i]) for i in range(n)])


def char_class(ranges):
    """IR for one character (code point) in the union of the given inclusive ranges.

    The UTF-8 byte-range sequences share their common tails (the continuation bytes):
    ``[E1-EC] [80-BF] [80-BF] | E0 [A0-BF] [80-BF]`` becomes ``([E1-EC] [80-BF] | E0
    [A0-BF]) [80-BF]``, so the NFA has one node per "continuation bytes still due" and
    the automaton one state per such node, not one per sequence and byte (a string
    position inside a multi-byte character: ~8 states instead of ~19 for [^"\\])."""
    if type(ranges) is tuple:  # a normalized tuple (the JSON-schema translator's classes): no sort
        try:
            hit = _CLASS_CACHE.get(ranges)  # only normalized keys are stored
        except TypeError:  # unhashable members (lists)
            hit = None
        if hit is not None:
            return hit
    key = tuple(normalize_ranges(ranges))
    hit = _CLASS_CACHE.get(key)
    if hit is not None:
        return hit
    seqs = []
    for lo, hi in key:
        seqs.extend(tuple(s) for s in _split_utf8(lo, hi))
    res = _suffix_shared(seqs) if seqs else NOTHING
    if len(_CLASS_CACHE) >= 4096:
        _CLASS_CACHE.clear()
    _CLASS_CACHE[key] = res  # IR values are never mutated in place; sharing them is safe
    return res


_CLASS_CACHE: dict = {}


def _suffix_shared(seqs):
    """IR for the union of byte-range sequences, grouped by their last byte range."""
    singles, groups = [], {}
    for s in seqs:
        if len(s) == 1:
            singles.append(s[0])
        else:
            groups.setdefault(s[-1], []).append(s[:-1])
    parts = []
    if singles:
        parts.append(("byte", tuple(normalize_ranges(singles))))
    for last, prefixes in groups.items():
        parts.append(seq([_suffix_shared(prefixes), ("byte", (last,))]))
    return parts[0] if len(parts) == 1 else ("alt", parts)


def case_fold_ranges(ranges):
    """Adds the other case of every letter in the ranges (ASCII fully, others per char
    for ranges up to 2000 code points)."""
    out = list(ranges)
    for lo, hi in ranges:
        a, b = max(lo, ord("a")), min(hi, ord("z"))
        if a <= b:
            out.append((a - 32, b - 32))
        a, b = max(lo, ord("A")), min(hi, ord("Z"))
        if a <= b:
            out.append((a + 32, b + 32))
        if hi >= 128 and hi - lo < 2000:
            for c in range(max(lo, 128), hi + 1):
                for v in {chr(c).lower(), chr(c).upper()}:
                    if len(v) == 1 and v != chr(c):
                        out.append((ord(v), ord(v)))
    return normalize_ranges(out)


def refs(expr, acc):
    """Collects (name, pos) of every rule reference in expr."""
    k = expr[0]
    if k == "ref":
        acc.append((expr[1], expr[2]))
    elif k in ("seq", "alt"):
        for e in expr[1]:
            refs(e, acc)
    elif k in ("rep", "len"):
        refs(expr[1], acc)
    return acc
