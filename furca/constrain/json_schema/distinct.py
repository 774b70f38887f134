"""uniqueItems: the array as a watched rule.

No grammar can say "no item twice" (the set of items used so far is unbounded), so an
array of free strings (`{"type": "string"}`, min/maxLength allowed), of a string
enum/const list longer than containers' grammar sets take, or of plain integers
(compact whitespace) becomes two rules the matcher recognises (ir.Grammar.unique,
furca/constrain/unique.py): the array rule and its item rule. The matcher remembers the
items it has accepted inside the array and masks the tokens that would complete one of
them again or leave no unused completion.

Items are written in one canonical spelling, so that equal values are equal bytes and the
matcher can compare spellings: characters as they are, except `"` and `\\` escaped, the
five control characters with a short escape (\\b \\f \\n \\r \\t) spelled so, the other
control characters as \\u00xx in lowercase hex. No `\\/`, no other \\u escapes; enum
values as json.dumps writes them; integers without `-0` (these narrow the spellings,
never the values). Only where the grammar goes to the engine: GBNF (`schema_to_gbnf`)
cannot carry the watch, so it stays unsupported there.

Items of any other schema (objects, arrays, numbers, several types, any value) are
compared as values instead (`watched_values`, furca/constrain/unique_values.py): the
item rule is the items' own grammar, and no spelling is narrowed.
"""
from __future__ import annotations

import json

from furca.constrain.unique_values import VALUES

from .grammar import EMPTY, NOTHING, alt, chars, cls, complement, lit, normalize, opt, rep, seq
from .merge import ANNOTATION_LIKE
from .scalars import _nonneg_int, literal_check

# one character of a string value in its canonical JSON spelling (see the module docstring)
CANON_CHAR = alt(
    cls(complement(normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))),
    seq(lit("\\"), alt(cls(chars('"\\bfnrt')),
                       seq(lit("u00"), alt(seq(lit("0"), cls(chars("01234567bef"))),
                                           seq(lit("1"), cls(chars("0123456789abcdef"))))))))

_ITEM_KEYS = {"type", "minLength", "maxLength"} | ANNOTATION_LIKE
_ENUM_ITEM_KEYS = _ITEM_KEYS | {"enum", "const", "pattern", "format"}


def watched_items(c, tail, min_n, max_n, where, body):
    """The rule of an array of distinct items (tail: its resolved `items` schema): free
    strings (type string, min/maxLength), a string enum/const list or plain integers;
    registered in c.g.unique for the matcher. None when the items are none of these (or
    the grammar is for GBNF). body(item, min_n, max_n): the array's grammar around one
    item (containers')."""
    if not c.g.watch_unique:
        return None
    where = where + "/items"
    if "enum" in tail or "const" in tail:
        return _watched_enum(c, tail, min_n, max_n, where, body)
    if tail.get("type") in ("integer", ["integer"]) and all(k in ANNOTATION_LIKE or k == "type" for k in tail):
        if c.ws != EMPTY:  # bare items end at a delimiter; whitespace before it is not read (compact only)
            return None
        item = c.g.share(c.g.new_name("unique-item"), alt(lit("0"), seq(opt(lit("-")), cls([(0x31, 0x39)]),
                                                                         rep(cls([(0x30, 0x39)]), 0, None))))
        return _watched(c, item, (0, None, None, True), min_n, max_n, body)
    if any(k not in _ITEM_KEYS for k in tail) or tail.get("type") not in ("string", ["string"]):
        return None
    lo = _nonneg_int(tail, "minLength", where) or 0
    hi = _nonneg_int(tail, "maxLength", where)
    if hi is not None and hi < max(lo, 1):
        return None  # "" alone (or nothing): the literal path's business
    item = c.g.share(c.g.new_name("unique-item"), seq(lit('"'), rep(CANON_CHAR, lo, hi), lit('"')))
    return _watched(c, item, (lo, hi, None, False), min_n, max_n, body)


def _watched_enum(c, tail, min_n, max_n, where, body):
    """A string enum/const list of items (more than arrays' MAX_UNIQUE values, or
    with keywords beside it): its values that the whole item schema accepts, each in its
    canonical spelling (json.dumps's), as a finite item language."""
    if any(k not in _ENUM_ITEM_KEYS for k in tail):
        return None
    raw = [tail["const"]] if "const" in tail else tail["enum"] if isinstance(tail["enum"], list) else []
    if not raw or not all(isinstance(v, str) for v in raw):
        return None
    check = literal_check(c, tail, where)
    spellings = []
    for v in dict.fromkeys(raw):
        text = json.dumps(v, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text writes it
            continue
        if check(v):
            spellings.append(text)
    if min_n > len(spellings):
        return NOTHING
    if not spellings:
        return None
    # no maxItems of len(spellings) added: the watch stops the array there (a comma once
    # every value is used is a dead end it masks), and a bound over 16 would count items
    # on the stack, a state per count
    item = c.g.share(c.g.new_name("unique-item"), alt(*[lit(t) for t in spellings]))
    return _watched(c, item, (0, None, tuple(t[1:-1].encode("utf-8") for t in spellings), False), min_n, max_n,
                    body)


def _watched(c, item, language, min_n, max_n, body):
    grammar = body(item, min_n, max_n)
    if grammar == NOTHING:
        return NOTHING
    array = c.g.share(c.g.new_name("unique-array"), grammar)
    c.g.unique[array.name] = (item.name, *language)
    return array


def watched_values(c, tail, min_n, max_n, where, body):
    """The rule of an array of distinct items of any schema (tail: its `items`, a schema
    or True), compared as values by the matcher (unique_values.py); registered in
    c.g.unique with the language VALUES. None for GBNF."""
    if not c.g.watch_unique:
        return None
    value = c.value(tail, where + "/items", hint="item")
    if value == NOTHING:
        return body(NOTHING, min_n, max_n)  # `[]` alone
    item = c.g.define(c.g.new_name("unique-item"), value)  # its own rule: the watch's span
    grammar = body(item, min_n, max_n)
    if grammar == NOTHING:
        return NOTHING
    array = c.g.define(c.g.new_name("unique-array"), grammar)
    c.g.unique[array.name] = (item.name, c.ws != EMPTY, None, None, VALUES)
    return array

