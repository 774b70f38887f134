"""JSON object keys that are none of a given set of names.

Keys are written in canonical JSON (what json.dumps writes with ensure_ascii=False:
only `"`, `\\` and control characters escaped, \\uXXXX in lower case), so each decoded
key has exactly one spelling and excluding the declared names is exact. The grammar
is a trie of the names: at each node, either stop (when the prefix is not a name),
follow a child, or leave the trie with any other character and then anything.

Leaving the trie is split by character width, because names are almost all ASCII: an
ASCII character other than the node's children is one byte class of the node, and "a
non-ASCII character or an escape, then key-rest" is one shared rule (`key-other`) that
every node whose children are plain ASCII calls. Its UTF-8 continuation nodes then
exist once per grammar instead of once per trie node (~8 NFA nodes each), which is what
the slice proof (slice_proof.py) and the automaton's closures pay for per node. A node
with a non-ASCII or escaped child spells its own exact classes instead.

The translator keeps a trie as one leaf, `Keys(names)`: building it as translator nodes
(an `alt` per trie node, each hashed and deduplicated) and lowering those cost ~35 µs a
trie node, two thirds of a Kubernetes schema's translation (85 tries, 3,800 nodes).
`lower` turns a trie whose names are plain ASCII into the IR's own key trie
(`furca.constrain.key_trie`: the same language, built into the NFA straight from the
names); `trie` builds the translator's nodes, which `render` writes as GBNF and which
name sets with wide or escaped characters are lowered from.
"""
from __future__ import annotations

from .. import key_trie
from ..key_trie import is_plain, plain_ascii_except, trie_of
from .grammar import (MAX_CP, NOTHING, Cls, Keys, Ref, alt, chars, cls, complement, intersect, lit, normalize,
                      rep, seq, subtract)

_SPECIAL = normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_NAMED = {0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t", 0x22: '"', 0x5C: "\\"}
_ASCII = ((0, 0x7F),)
_WIDE = ((0x80, MAX_CP),)
_ALL_SPECIAL = frozenset(range(0x20)) | {0x22, 0x5C}


_UNITS: dict = {}  # character -> canonical_unit of it (the trie's children, shared by every trie)


_ESCAPES: dict = {}  # frozenset of special code points -> _escapes of them (nodes are immutable)


def _escapes(members):
    """Canonical escapes of the special code points in `members`; built once per process
    for each set (every compile's key-esc and key-other spell all 34: ~5% of a small
    schema's compile)."""
    key = frozenset(members)
    hit = _ESCAPES.get(key)
    if hit is None:
        if len(_ESCAPES) >= 1024:
            _ESCAPES.clear()
        hit = _ESCAPES[key] = _spell_escapes(key)
    return hit


def _spell_escapes(members):
    named = [ch for cp, ch in _NAMED.items() if cp in members]
    parts = [seq(lit("\\"), cls(chars("".join(named))))] if named else []
    for hi in (0, 1):
        lows = [cp & 15 for cp in members if cp >> 4 == hi and cp < 0x20 and cp not in _NAMED]
        if lows:
            digits = "".join("0123456789abcdef"[x] for x in lows)
            parts.append(seq(lit("\\u00%d" % hi), cls(chars(digits))))
    return alt(*parts) if parts else NOTHING


def canonical_unit(ranges):
    """IR for one character of `ranges` in canonical JSON-string spelling."""
    raw = subtract(ranges, _SPECIAL)
    members = {cp for lo, hi in ranges if lo <= 0x5C for cp in range(lo, min(hi, 0x5C) + 1)
               if cp < 0x20 or cp in (0x22, 0x5C)}
    parts = [cls(raw)] if raw else []
    if members:
        parts.append(_escapes(members))
    return alt(*parts) if parts else NOTHING


def key_not_in(c, names):
    """A quoted JSON key (canonical spelling) whose value is not in `names`: the leaf
    `Keys(names)`. `c` is the compiler: the shared rules its trie calls (`key-esc`,
    `key-rest` and `key-other`) are defined here."""
    if ("named", "key-other") not in c.memo:  # defined once per grammar, not per object
        for name, body in _shared_rules():
            c.named(name, body)
            c.g.lasting.add(name)
    return Keys(tuple(names))


_SHARED = None  # the key tries' shared rules, ((name, body), ...): _shared_rules


def _shared_rules():
    """The bodies of key-esc, key-rest and key-other: the same objects in every compile
    of the process (Grammar.lasting). Built whole, then published in one assignment
    (compiles run in several threads)."""
    global _SHARED
    if _SHARED is None:
        # every escape is spelled inline in key-other (not a call of key-esc): a trie
        # state is then the trie node plus key-other's start, two configurations
        _SHARED = (("key-esc", _escapes(_ALL_SPECIAL)),
                   ("key-rest", seq(rep(alt(cls(complement(_SPECIAL)), Ref("key-esc")), 0, None), lit('"'))),
                   ("key-other", seq(alt(cls(subtract(_WIDE, _SPECIAL)), _escapes(_ALL_SPECIAL)), _REST)))
    return _SHARED


_REST, _OTHER = Ref("key-rest"), Ref("key-other")


def trie(node: Keys):
    """The translator's grammar of `node`: the opening quote, then the trie (`_rest`)."""
    return seq(lit('"'), _rest(trie_of(node.names), _REST, _OTHER))


def keys_ir(node: Keys, conv):
    """The IR of `node`: the IR's own key trie (`furca.constrain.key_trie`) when every
    name is plain ASCII (almost always), else `conv` (lower's converter of translator
    nodes) of `trie(node)`."""
    if all(is_plain(ch) for name in node.names for ch in name):
        return key_trie.keys(node.names, _REST.name, _OTHER.name)
    return conv(trie(node))


def _rest(node, rest, other):
    """The grammar after the trie node `node` (a dict: child character -> node, None ->
    the prefix is a name)."""
    parts = []
    if None not in node:
        parts.append(lit('"'))
    kids = [k for k in node if k is not None]
    for ch in kids:
        unit = _UNITS.get(ch)
        if unit is None:
            unit = _UNITS[ch] = canonical_unit(chars(ch))
        parts.append(seq(unit, _rest(node[ch], rest, other)))
    if all(is_plain(k) for k in kids):
        narrow = plain_ascii_except(sorted(ord(k) for k in kids))
        if narrow:
            parts.append(seq(Cls(narrow), rest))
        parts.append(other)  # every wide character and every escape leaves the trie
        return alt(*parts)
    taken = normalize((ord(k), ord(k)) for k in kids)
    others = subtract(complement(taken), _SPECIAL)
    narrow = intersect(others, _ASCII)
    if narrow:
        parts.append(seq(cls(narrow), rest))
    leave = []  # a child is wide or escaped: this node spells its own exact classes
    wide = intersect(others, _WIDE)
    if wide:
        leave.append(cls(wide))
    spec = _ALL_SPECIAL - {ord(k) for k in kids}
    if spec:
        leave.append(_escapes(spec))
    if leave:
        parts.append(seq(alt(*leave), rest))
    return alt(*parts)
