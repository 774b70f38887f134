"""The metaschema check of a JSON schema, fast when the schema is valid.

    check_metaschema(schema: dict) -> None        CompileError when the schema is invalid

`jsonschema` validates a schema against its draft's metaschema in ~1 ms for a small
schema and ~0.2 s for a large one (a generic validator: a `descend` per node). Most
schemas are valid, so a small interpreter of the keywords the draft 4 / 6 / 7
metaschemas use (type, enum, minimum, exclusiveMinimum, items, minItems, uniqueItems,
properties, additionalProperties, propertyNames, dependencies, anyOf, allOf, local
$refs; format is an annotation there, as in `jsonschema` without a format checker)
first proves the schema valid. It answers "valid" only where `jsonschema` would: any
doubt (a float where an integer is due, enum values it cannot compare exactly, a
metaschema keyword it does not know) sends the schema to `jsonschema`, which then
finds the error and words the message (`best_match`), so the messages are
`jsonschema`'s.
"""
from __future__ import annotations

from furca.errors import CompileError

_VALIDATORS: dict = {}  # validator class -> an instance for its metaschema
# the URIs of drafts 4, 6 and 7 (with and without "#") -> their validator class, as
# validator_for finds it (filled by _compile_drafts); validator_for normalizes the URI
# through urllib's parsers: ~10 functions a call, each a page or two to copy in a worker
# forked from a warmed-up process
_DECLARED: dict = {}
_UNSUPPORTED: set = set()  # validator classes whose metaschema the fast check cannot read
_ANNOTATIONS = frozenset(("default", "title", "description", "$schema", "$id", "id", "format", "$comment"))
_TYPES = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
    "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),  # 1.0: left to jsonschema
}


class _Unsupported(Exception):
    """The metaschema uses a keyword or form the fast check does not read."""


def check_metaschema(schema: dict):
    """CompileError when the schema is invalid under its draft (or, without $schema,
    under each of drafts 7, 2020-12 and 4: draft 7's metaschema is checked first,
    being the cheapest; formats inside the schema are left to the compiler)."""
    import jsonschema

    declared = schema.get("$schema")
    if isinstance(declared, str):
        cls_ = _DECLARED.get(declared)
        if cls_ is None:
            try:
                cls_ = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            except Exception:
                return
        cands = [cls_]
    else:
        cands = [jsonschema.Draft7Validator, jsonschema.Draft202012Validator, jsonschema.Draft4Validator]
    if _fast_valid(cands[0], schema):
        return
    from jsonschema.exceptions import best_match

    first = None
    for cls_ in cands:
        try:
            err = best_match(_validator(cls_).iter_errors(schema))
        except Exception:  # a metaschema that cannot be evaluated: leave it to the compiler
            return
        if err is None:
            return
        first = first or err
    path = "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in first.absolute_path)
    raise CompileError("%s: invalid schema: %s" % (path, first.message[:300]))


def _validator(cls_):
    v = _VALIDATORS.get(cls_)
    if v is None:
        v = _VALIDATORS[cls_] = cls_(cls_.META_SCHEMA)
    return v


def _fast_valid(cls_, schema) -> bool:
    """True only if `cls_`'s metaschema accepts `schema` (False: not known)."""
    if cls_ in _UNSUPPORTED or cls_.__name__ not in ("Draft4Validator", "Draft6Validator", "Draft7Validator"):
        return False
    meta = cls_.META_SCHEMA
    hit = _COMPILED.get(id(meta))
    try:
        if hit is None or hit[0] is not meta:
            _compile_drafts()
            hit = _COMPILED.get(id(meta))
        return _run(hit[1] if hit is not None and hit[0] is meta else _compile(meta), schema)
    except _Unsupported:
        _UNSUPPORTED.add(cls_)
        return False
    except RecursionError:
        return False


# The check runs on a compiled copy of the metaschema, made in one pass at its first use:
# a node is a list of (check, argument) pairs, annotations and `definitions` left out,
# a $ref replaced by the node it names. Every object a check reads or passes on is
# then one of these, allocated together, rather than jsonschema's dicts or plans made
# node by node as visited: in a process forked from a warmed one (a worker), each
# object whose reference count the check changes costs its page a copy on write
# (~8 µs here), and the same check touched ~90 such pages of a small schema's ~800.
_COMPILED: dict = {}  # id(metaschema) -> (metaschema, its compiled root node)


def _compile_drafts():
    """At the first check: the metaschemas of drafts 4, 6 and 7 compiled together, and
    their URIs entered in _DECLARED, so that a process warmed up on one schema has them
    all (a worker forked from it neither compiles draft 4's for its first schema, as a
    third of MaskBench's declare it, nor parses the URI)."""
    import jsonschema

    for cls_ in (jsonschema.Draft7Validator, jsonschema.Draft4Validator, jsonschema.Draft6Validator):
        meta = cls_.META_SCHEMA
        hit = _COMPILED.get(id(meta))
        if hit is None or hit[0] is not meta:
            _compile(meta)
        uri = meta.get("$schema")
        if isinstance(uri, str):
            for u in (uri, uri.rstrip("#"), uri.rstrip("#") + "#"):
                if jsonschema.validators.validator_for({"$schema": u}, default=None) is cls_:
                    _DECLARED.setdefault(u, cls_)


def _run(node, x) -> bool:
    """Whether the instance x satisfies the compiled metaschema node. False also when unsure."""
    for check, a in node:
        if not check(a, x):
            return False
    return True


def _compile(meta):
    nodes: dict = {}  # id(metaschema node) -> its compiled node

    def node(m):
        if m is True:
            return []
        if m is False:
            return [(_never, None)]
        got = nodes.get(id(m))
        if got is not None:
            return got
        if not isinstance(m, dict):
            out = nodes[id(m)] = [(_raise, repr(m)[:40])]
            return out
        ref = m.get("$ref")
        if ref is not None:  # drafts 4-7: $ref's siblings are ignored
            try:
                out = node(_resolve(ref, meta))  # the same list, filled later when in a cycle ("#")
            except _Unsupported as e:
                out = [(_raise, str(e))]
            nodes[id(m)] = out
            return out
        out = nodes[id(m)] = []
        items = []
        for k, v in m.items():
            if k in _ANNOTATIONS or k == "definitions":
                continue
            make = _MAKE.get(k)
            if make is None:  # visiting this node leaves the check to jsonschema
                items.insert(0, (_raise, k))
                continue
            items.append(make(m, v, node))
        out.extend(items)
        return out

    try:
        root = node(meta)
    finally:
        node = None  # noqa: F841 - no cycle through the closure cell
    _COMPILED[id(meta)] = (meta, root)
    return root


def _resolve(ref, root):
    if ref == "#":
        return root
    if ref.startswith("#/definitions/") and ref[14:] in root.get("definitions", {}):
        return root["definitions"][ref[14:]]
    raise _Unsupported(ref)


def _raise(a, x):
    raise _Unsupported(a)


def _never(a, x):
    return False


def _type_one(test, x):
    return test(x)


def _type_any(tests, x):
    for test in tests:
        if test(x):
            return True
    return False


def _make_type(m, v, node):
    if v.__class__ is str:  # most metaschema nodes name one type
        test = _TYPES.get(v)
        return (_type_one, test) if test is not None else (_raise, "type %r" % (v,))
    if not isinstance(v, list) or not all(isinstance(n, str) and n in _TYPES for n in v):
        return (_raise, "type %r" % (v,))
    return (_type_any, tuple(_TYPES[n] for n in v))


def _enum(names, x):
    # exact only for strings against string values (True == 1 and 1 == 1.0 in Python)
    return names is not None and isinstance(x, str) and x in names


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _minimum(a, x):
    if not _number(x):
        return True
    v, exclusive = a
    return x > v if exclusive else x >= v


def _exclusive_minimum(v, x):
    return not _number(x) or x > v


def _always(a, x):
    return True


def _make_exclusive_minimum(m, v, node):
    if isinstance(v, bool):  # draft 4: a flag on `minimum`
        return (_always, None) if "minimum" in m else (_raise, "exclusiveMinimum without minimum")
    return (_exclusive_minimum, v)


def _items(sub, x):
    return not isinstance(x, list) or all(_run(sub, e) for e in x)


def _items_unsupported(a, x):
    if isinstance(x, list):
        raise _Unsupported("items as an array")
    return True


def _min_items(v, x):
    return not isinstance(x, list) or len(x) >= v


def _unique_items(on, x):
    if not on or not isinstance(x, list):
        return True
    # exact for scalar items: jsonschema counts 1 and 1.0 as equal and True and 1 as not
    keys = set()
    for e in x:
        if isinstance(e, bool) or e is None or isinstance(e, str):
            keys.add((type(e), e))
        elif isinstance(e, (int, float)):
            keys.add((float, e))
        else:
            return False  # an array or object: left to jsonschema
    return len(keys) == len(x)


def _properties(v, x):
    if not isinstance(x, dict):
        return True
    if len(x) < len(v):  # a schema node has a few of the metaschema's ~45 properties: look up its own
        for k, val in x.items():
            sub = v.get(k)
            if sub is not None and not _run(sub, val):
                return False
        return True
    return all(_run(sub, x[k]) for k, sub in v.items() if k in x)


def _additional(a, x):
    if not isinstance(x, dict):
        return True
    sub, declared = a
    if declared is None:
        raise _Unsupported("patternProperties")
    return all(_run(sub, val) for k, val in x.items() if k not in declared)


def _property_names(sub, x):
    return not isinstance(x, dict) or all(_run(sub, k) for k in x)


def _dependencies(deps, x):
    if not isinstance(x, dict):
        return True
    for k, dep in deps:
        if dep is None:
            raise _Unsupported("dependencies with a schema")
        if k in x and not all(d in x for d in dep):
            return False
    return True


def _any_of(subs, x):
    return any(_run(sub, x) for sub in subs)


def _all_of(subs, x):
    return all(_run(sub, x) for sub in subs)


def _make_items(m, v, node):
    if not isinstance(v, (dict, bool)):
        return (_items_unsupported, None)
    return (_items, node(v))


def _make_additional(m, v, node):
    declared = None if "patternProperties" in m else frozenset(m.get("properties", {}))
    return (_additional, (node(v), declared))


def _make_dependencies(m, v, node):
    return (_dependencies, tuple((k, tuple(dep) if isinstance(dep, list) else None) for k, dep in v.items()))


_MAKE = {  # metaschema keyword -> (its node's value, compile) -> (check, argument)
    "type": _make_type,
    "enum": lambda m, v, node: (_enum, frozenset(v) if all(isinstance(e, str) for e in v) else None),
    "minimum": lambda m, v, node: (_minimum, (v, m.get("exclusiveMinimum") is True)),
    "exclusiveMinimum": _make_exclusive_minimum,
    "items": _make_items,
    "minItems": lambda m, v, node: (_min_items, v),
    "uniqueItems": lambda m, v, node: (_unique_items, v is True),
    "properties": lambda m, v, node: (_properties, {k: node(sub) for k, sub in v.items()}),
    "additionalProperties": _make_additional,
    "propertyNames": lambda m, v, node: (_property_names, node(v)),
    "dependencies": _make_dependencies,
    "anyOf": lambda m, v, node: (_any_of, tuple(node(sub) for sub in v)),
    "allOf": lambda m, v, node: (_all_of, tuple(node(sub) for sub in v)),
}
