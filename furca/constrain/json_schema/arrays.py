"""Arrays: prefixItems (and draft-7 tuple `items`) then `items`, min/maxItems counted,
`contains` (one witness item, spelled at each place it may stand), uniqueItems (a grammar
over a short literal list, else the matcher's watches: distinct.py)."""
from __future__ import annotations

from furca.errors import CompileError

from .grammar import EMPTY, NOTHING, alt, lit, opt, rep, seq
from .merge import FALSE, json_equal, merge
from .scalars import _nonneg_int, literal_check, literals
from .distinct import watched_items, watched_values


def array_grammar(c, schema, where):
    items = schema.get("items")
    prefix = schema.get("prefixItems")
    if isinstance(items, list):  # draft-7 tuple form
        prefix, tail = items, schema.get("additionalItems", True)
    else:
        tail = True if items is None else items
    prefix = prefix or []
    if not isinstance(prefix, list):
        raise CompileError("%s/prefixItems: must be an array" % where)
    min_n = _nonneg_int(schema, "minItems", where) or 0
    max_n = _nonneg_int(schema, "maxItems", where)
    if max_n is not None and max_n < min_n:
        raise CompileError("%s: minItems %d > maxItems %d" % (where, min_n, max_n))
    unique = schema.get("uniqueItems") is True and not (max_n is not None and max_n <= 1)
    if unique and "contains" in schema:
        c.unsupported("contains", where, "beside uniqueItems")  # (the watches know no witness)
        schema = {k: v for k, v in schema.items() if k != "contains"}
    if unique:
        # the items resolved once for both forms: a grammar over a short literal list, else
        # the matcher's watch (strings, long string lists, integers)
        items = c.resolve_for_merge(tail, where + "/items") if not prefix and isinstance(tail, dict) else None
        distinct = _distinct_items(c, items, min_n, max_n, where) if isinstance(items, dict) else None
        body = lambda item, lo, hi: _plain_array(c, [], item, lo, hi)  # noqa: E731
        if distinct is None and isinstance(items, dict):
            distinct = watched_items(c, items, min_n, max_n, where, body)
        if distinct is None and not prefix and (isinstance(items, dict) or tail is True):
            distinct = watched_values(c, tail, min_n, max_n, where, body)
        if distinct is not None:
            return distinct
        c.unsupported("uniqueItems", where, "not with prefixItems / tuple items, nor in GBNF text")
    if "contains" in schema:
        if prefix:
            c.unsupported("contains", where, "not beside prefixItems / tuple items")
        else:
            out = _contains_array(c, schema["contains"], tail, min_n, max_n, where)
            if out is not None:  # (None: too many places, ignored under unsupported="warn")
                return out
    elems = []
    for i, s in enumerate(prefix):
        v = c.value(s, "%s/prefixItems/%d" % (where, i), hint="item")
        if v == NOTHING:
            max_n = i if max_n is None else min(max_n, i)
            break
        elems.append(v)
    t = c.value(tail, where + "/items", hint="item")
    k = len(elems)
    if t == NOTHING:
        max_n = k if max_n is None else min(max_n, k)
    if max_n is not None:
        elems = elems[:max_n]
        k = len(elems)
    return _plain_array(c, elems, t, min_n, max_n)


def _plain_array(c, elems, tail, min_n, max_n):
    """`[` elems then tail items, min_n..max_n in all, `]`."""
    if min_n > (max_n if max_n is not None else min_n):
        return NOTHING
    ws = c.ws
    nonempty = _array_body(c, elems, tail, max(min_n, 1), max_n)
    parts = []
    if min_n == 0:
        parts.append(seq(lit("["), ws, lit("]")))
    if nonempty != NOTHING:
        parts.append(seq(lit("["), ws, nonempty, ws, lit("]")))
    return alt(*parts) if parts else NOTHING


MAX_CONTAINS_PLACES = 16  # contains: one alternative per count of items before the witness


def _contains_array(c, contains, tail, min_n, max_n, where):
    """`contains` (minContains 1): items of `tail`, at least one of them (the witness, the
    first or any other: the grammar is ambiguous there) also of `contains`. The count of
    items before the witness is spelled out while it decides the count after it: one
    alternative per count below minItems - 1, or per place under maxItems
    (MAX_CONTAINS_PLACES at most)."""
    at = where + "/contains"
    item = c.resolve_for_merge(tail, where + "/items") if isinstance(tail, dict) else tail
    witness = merge(item, c.resolve_for_merge(contains, at) if isinstance(contains, dict) else contains, at)
    w = NOTHING if witness is FALSE else c.value(witness, at, hint="item")
    lo = max(min_n, 1)
    if w == NOTHING or max_n is not None and max_n < lo:
        return NOTHING
    t = c.value(tail, where + "/items", hint="item")
    before = lambda a, b: rep(seq(t, c.comma), a, b)  # noqa: E731
    after = lambda a, b: rep(seq(c.comma, t), a, b)  # noqa: E731
    places = lo if max_n is None else max_n
    if places > MAX_CONTAINS_PLACES:
        c.unsupported("contains", where, "with more than %d places for its item under minItems/maxItems"
                      % MAX_CONTAINS_PLACES)
        return None
    if max_n is None:  # a items before the witness: exactly a while a < lo - 1, then any
        bodies = [seq(before(a, a), w, after(lo - 1 - a, None)) for a in range(lo - 1)]
        bodies.append(seq(before(lo - 1, None), w, after(0, None)))
    else:
        bodies = [seq(before(a, a), w, after(max(0, lo - 1 - a), max_n - 1 - a)) for a in range(max_n)]
    return seq(lit("["), c.ws, alt(*bodies), c.ws, lit("]"))


MAX_UNIQUE = 8  # uniqueItems over n literals: one rule per set of values used, 2^n
_LITERAL_ITEM_KEYS = {"enum", "const", "type", "title", "description", "$comment", "examples", "default"}


def _distinct_items(c, items, min_n, max_n, where):
    """uniqueItems over items (the resolved `items` schema) bounded by a short enum/const
    list: the array grammar keeps the set of values used so far (one rule per set), so no
    value comes twice (1 and 1.0 are one value). None when the items are not such a list."""
    if not ("enum" in items or "const" in items) or any(k not in _LITERAL_ITEM_KEYS for k in items):
        return None
    values = []
    for v in ([items["const"]] if "const" in items else items["enum"] if isinstance(items["enum"], list) else []):
        if not any(json_equal(v, w) for w in values):
            values.append(v)
            if len(values) > 4 * MAX_UNIQUE:  # over the bound whatever the check drops: not n^2 over a long list
                return None
    check = literal_check(c, items, where + "/items")
    values = [v for v in values if check(v)]
    if len(values) > MAX_UNIQUE:
        return None
    spell = [literals([v], where + "/items", check) for v in values]
    hi = len(values) if max_n is None else min(max_n, len(values))
    if min_n > hi:
        return NOTHING
    comma, ws, memo = c.comma, c.ws, {}

    def rest(used):  # after the items in `used` (a bit set), at least one
        if used not in memo:
            k = bin(used).count("1")
            parts = [EMPTY] if k >= min_n else []
            if k < hi:
                parts += [seq(comma, spell[j], rest(used | 1 << j)) for j in range(len(values)) if not used >> j & 1]
            memo[used] = c.g.share(c.g.new_name("unique-rest"), alt(*parts)) if parts else NOTHING
        return memo[used]

    out = [seq(lit("["), ws, lit("]"))] if min_n == 0 else []
    if hi >= 1:
        first = alt(*[seq(spell[j], rest(1 << j)) for j in range(len(values))])
        out.append(seq(lit("["), ws, first, ws, lit("]")))
    return alt(*out) if out else NOTHING


def _array_body(c, elems, tail, min_n, max_n):
    """Elements (count in [min_n, max_n], min_n >= 1): elems first, then tail items."""
    comma = c.comma
    k = len(elems)
    if max_n is not None and max_n < min_n:
        return NOTHING
    # tail items after the k prefix elements
    t_min = max(0, min_n - k)
    t_max = None if max_n is None else max_n - k
    if t_max is not None and t_max <= 0 or tail == NOTHING:
        rest = EMPTY if t_min == 0 else NOTHING
        first_tail = NOTHING
    else:
        rest = rep(seq(comma, tail), t_min, t_max)
        first_tail = seq(tail, rep(seq(comma, tail), max(t_min - 1, 0), None if t_max is None else t_max - 1))
    if k == 0:
        return first_tail if t_min >= 1 else first_tail  # min_n >= 1 here
    node = rest
    for i in range(k - 1, 0, -1):
        item = seq(comma, elems[i], node)
        node = item if i < min_n else opt(item)
    return seq(elems[0], node)
