"""The ways of writing one extra member of an object (a member `properties` does not
declare): [(key IR, value IR, "pattern" or "additional")].

A key a patternProperties pattern names takes that pattern's schema: with several
patterns of different schemas (up to MAX_PATTERN_REGIONS) each region of keys (the
patterns naming it, less the others and the declared names) takes the merge of its
patterns' schemas (`_pattern_regions`: exact); otherwise every pattern key takes all
the patterns' schemas merged (sound, narrower where they differ). A key no pattern
names takes additionalProperties (alone: the difference of all keys and the patterns'
and declared ones, where that automaton is small enough and, in any member order, no
prefix of those keys has finitely many completions; else merged with the patterns'
schema). propertyNames (names.Names) bounds every key. containers.py builds the object
around them.
"""
from __future__ import annotations

from furca.errors import CompileError

from .difference import NotOpenEnded, both, difference
from .grammar import NOTHING, alt, lit, seq
from .keys import key_not_in
from .merge import FALSE, canon, merge
from .regex import ANY, literal_chars, pattern_chars, pattern_grammar, pattern_minus_names


def pattern_schema_of(c, patterns, where):
    """The value schema of a pattern-matched extra member: the patterns' schemas merged
    when they differ (a key may match several), None without patternProperties."""
    if not patterns:
        return None
    schemas = list(patterns.values())
    pattern_schema = schemas[0]
    for s in schemas[1:]:
        if canon(s) != canon(pattern_schema):
            pattern_schema = merge(c.resolve_for_merge(pattern_schema, where),
                                   c.resolve_for_merge(s, where), where + "/patternProperties")
    return pattern_schema


MAX_PATTERN_REGIONS = 4  # patterns whose key regions (2^n - 1 of them) are built apart
# the exact keys (regions, keys no pattern names) only where their automata are small:
# (positions of each pattern, states); past them the merged form, which needs no
# automaton of its own (o64731's `^[a-zA-Z0-9_-]{0,250}$`: its complement's 250 counted
# states cost a 37 ms compile and a 37 ms first key mask)
EXACT_LIMIT = (64, 256)


def _pattern_regions(c, declared, patterns, where, allowed, also, open_ended=False):
    """The pattern keys split by which patterns name them, each region's value the
    merge of those patterns' schemas (exact JSON Schema): [(key IR, value IR, "pattern")]
    for the regions a key and a value exist in; None where the merged form is kept (one
    schema for all, more than MAX_PATTERN_REGIONS patterns, a region's automaton over its
    state limit). open_ended (an object whose keys the any-order watch keeps distinct:
    it takes a pattern's keys as free keys, which must never all get used): raises
    NotOpenEnded where a region has a prefix of finitely many completions."""
    if len(patterns) < 2 or len(patterns) > MAX_PATTERN_REGIONS or len({canon(v) for v in patterns.values()}) < 2:
        return None
    at = where + "/patternProperties"
    names = list(patterns)
    out = []
    for t in range(1, 1 << len(names)):
        inside = [p for k, p in enumerate(names) if t >> k & 1]
        outside = [p for k, p in enumerate(names) if not t >> k & 1]
        schema = also
        for p in inside:
            schema = merge(c.resolve_for_merge(schema, at), c.resolve_for_merge(patterns[p], at), at)
        if schema is FALSE:
            continue
        try:
            key = c.cached(("pattern-region", tuple(inside), tuple(outside), tuple(declared),
                            allowed.key if allowed else None, open_ended),
                           lambda: difference(both(*[pattern_chars(p, at) for p in inside]),
                                              [pattern_chars(p, at) for p in outside] +
                                              [literal_chars(n) for n in declared],
                                              c.g, at, also=allowed.nodes if allowed else (), limit=EXACT_LIMIT,
                                              open_ended=open_ended))
        except NotOpenEnded:
            raise
        except CompileError:
            return None
        if key == NOTHING:
            continue
        value = c.value(schema, at, hint="pattern-value")
        if value != NOTHING:
            out.append((seq(lit('"'), key, lit('"')), value, "pattern"))
    return out


def extra_branches(c, declared, patterns, additional, where, pattern_schema, clash, allowed=None, also=True,
                   open_ended=False):
    """The ways of writing one extra member: [(key IR, value IR, "pattern" or
    "additional")], none when no extra member is allowed.

    With patternProperties: a key matching pattern p, other than the declared names in
    clash[p], takes `pattern_schema` (every pattern's schema merged when they differ,
    since a key may match several); any other undeclared key takes additionalProperties
    (exact: those keys are the difference of all keys and the patterns' and declared
    ones, where that automaton is small enough and, in any member order, open-ended;
    else merged with pattern_schema). Sound; narrower than JSON Schema where schemas
    differ. Several patterns of different schemas (up to MAX_PATTERN_REGIONS): each
    region of keys (the patterns naming it) takes the merge of its patterns' schemas
    (_pattern_regions, exact, with the same conditions). `allowed` (names.Names,
    propertyNames) bounds every extra key; `also`: a schema every extra value must also
    satisfy (a witness's). open_ended: for an object the any-order watch keeps (its free
    keys must never all get used): raises NotOpenEnded where an exact key set has a
    prefix of finitely many completions (the caller then builds the object in the
    schema orders, exact)."""
    if allowed is not None and allowed.nodes is None:
        return []
    branches = []
    regions = _pattern_regions(c, declared, patterns, where, allowed, also, open_ended) if patterns else None
    if regions is not None:
        branches += regions
    elif patterns:
        schema = pattern_schema if also is True else merge(c.resolve_for_merge(pattern_schema, where), also, where)
        value = c.value(schema, where + "/patternProperties", hint="pattern-value")
        if value != NOTHING:
            key = alt(*[seq(lit('"'), _pattern_key(c, p, clash.get(p), where, allowed), lit('"'))
                        for p in patterns])
            branches.append((key, value, "pattern"))
    if additional is not False:
        schema = additional
        key = None
        if pattern_schema is not None:
            schema = merge(c.resolve_for_merge(additional, where), c.resolve_for_merge(pattern_schema, where),
                           where + "/additionalProperties")
            if canon(schema) != canon(c.resolve_for_merge(additional, where)):
                # the keys no pattern names take additionalProperties alone (exact), when
                # their automaton is small enough
                key = _unnamed_key(c, declared, patterns, allowed, where, open_ended)
                schema = additional if key is not None else schema
        if also is not True:
            schema = merge(c.resolve_for_merge(schema, where), also, where + "/additionalProperties")
        value = c.value(schema, where + "/additionalProperties", hint="additional-value")
        if value != NOTHING:
            if key is not None:
                pass
            elif allowed is None:
                key = key_not_in(c, declared)
            else:
                at = "%s/propertyNames" % where
                key = seq(lit('"'), c.cached(
                    ("names-minus-declared", allowed.key, tuple(declared)),
                    lambda: difference(allowed.nodes[0], [literal_chars(n) for n in declared], c.g, at,
                                       also=allowed.nodes[1:])), lit('"'))
            branches.append((key, value, "additional"))
    return branches


def _unnamed_key(c, declared, patterns, allowed, where, open_ended=False):
    """A quoted key that is no declared name and that no pattern names (within
    `allowed`), or None when that difference outgrows its state limit; with
    `open_ended`, NotOpenEnded where it has a prefix of finitely many completions."""
    at = "%s/additionalProperties" % where
    try:
        return seq(lit('"'), c.cached(
            ("names-minus-patterns", tuple(declared), tuple(patterns), allowed.key if allowed else None, open_ended),
            lambda: difference(allowed.nodes[0] if allowed else ANY,
                               [literal_chars(n) for n in declared] + [pattern_chars(p, at) for p in patterns],
                               c.g, at, also=allowed.nodes[1:] if allowed else (), limit=EXACT_LIMIT,
                               open_ended=open_ended)), lit('"'))
    except NotOpenEnded:
        raise
    except CompileError:
        return None


def _pattern_key(c, p, names, where, allowed=None):
    """The key content a patternProperties pattern admits, less `names`, within `allowed`."""
    at = "%s/patternProperties" % where
    if allowed is not None:
        return c.cached(("pattern-in-names", p, tuple(sorted(names or ())), allowed.key),
                        lambda: difference(pattern_chars(p, at), [literal_chars(n) for n in names or ()], c.g, at,
                                           also=allowed.nodes))
    if names:
        return c.cached(("pattern-minus-names", p, tuple(sorted(names))),
                        lambda: pattern_minus_names(p, names, c.g, at))
    return c.cached(("pattern", p, 0, None), lambda: pattern_grammar(p, at, grammar=c.g))
