"""Keys of JSON values for memos: schema_key(x) is equal for two values exactly when their
JSON texts are (the compile cache's key of a schema, and the translator's memo key of a
subschema); language_key drops a subschema's annotations (keywords that change no
language), so subschemas that differ only in a description share one rule. Split from
compiler.py (session 47)."""

from __future__ import annotations

import json


class _Tag:
    """A container's tag in `schema_key` (equal to nothing but itself)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


_DICT, _LIST, _TRUE, _FALSE, _PENDING = _Tag("dict"), _Tag("list"), _Tag("true"), _Tag("false"), _Tag("pending")


def schema_key(x, known: dict | None = None):
    """A hashable key of a JSON value, equal for two values exactly when their JSON texts
    (key order kept, as json.dumps writes them) are equal: a dict is the tuple (tag, key,
    value, key, value, ...), a list (tag, items...), strings, ints and None themselves,
    floats their repr, booleans a tag. Unlike the JSON text, it allocates one tuple per
    container, not a new string per string per enclosing subschema (the translator keyed
    every subschema by its text: O(size x depth) strings). known: {id(container): key},
    filled and reused (a compile's subschemas are keyed once), with every container keyed
    in the list under the key None (kept alive, so no id is reused while `known` lives).
    TypeError for what JSON cannot hold, ValueError for a container that contains itself
    (as json.dumps)."""
    t = type(x)
    if t is str or x is None or t is int:
        return x
    if known is None:
        known = {None: []}
    else:
        hit = known.get(id(x))
        if hit is not None:
            if hit is _PENDING:
                raise ValueError("Circular reference detected")
            return hit
    if isinstance(x, dict):
        known[id(x)] = _PENDING
        out = [_DICT]
        for k, v in x.items():
            out.append(k if isinstance(k, str) else json.dumps(k))  # a key as json.dumps writes it
            out.append(schema_key(v, known))
    elif isinstance(x, (list, tuple)):
        known[id(x)] = _PENDING
        out = [_LIST]
        for v in x:
            out.append(schema_key(v, known))
    elif x is True:
        return _TRUE
    elif x is False:
        return _FALSE
    elif isinstance(x, str):
        return str(x)
    elif isinstance(x, float):
        return ("float", float.__repr__(x))
    elif isinstance(x, int):
        return int(x)
    else:
        raise TypeError("Object of type %s is not JSON serializable" % type(x).__name__)
    key = known[id(x)] = tuple(out)
    known[None].append(x)
    return key


# Keywords that change no schema's language, whatever their value (annotations; not
# $id / $anchor / $defs, which move what $refs resolve to): two subschemas that differ
# only in these share one rule. A Kubernetes schema writes a description on most
# properties, so its 158 strings of different descriptions were 158 string rules.
NO_LANGUAGE = frozenset(("title", "description", "default", "examples", "example", "$comment", "readOnly",
                          "writeOnly", "deprecated", "markdownDescription"))


def language_key(key: tuple) -> tuple:
    """A dict's schema_key without its top-level NO_LANGUAGE members (the memo key of
    the subschema; the annotations of nested subschemas stay in it, their own memo keys
    drop them)."""
    out = [key[0]]
    for i in range(1, len(key), 2):
        if key[i] not in NO_LANGUAGE:
            out += (key[i], key[i + 1])
    return tuple(out)
