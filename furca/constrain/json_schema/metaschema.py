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
_TYPES = {  # JSON type -> (Python types, bool excluded); 1.0 as an integer: left to jsonschema
    "object": (dict, False),
    "array": (list, False),
    "string": (str, False),
    "boolean": (bool, False),
    "null": (type(None), False),
    "number": ((int, float), True),
    "integer": (int, True),
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


# the checks of a compiled node: (op, argument) pairs, all run by _run (one function: in a
# forked worker every function a check calls costs its code object's page, and the
# check's ~20 small functions were ~20 such pages)
(_RAISE, _NEVER, _TYPE, _ENUM, _MINIMUM, _EXCLUSIVE_MINIMUM, _ITEMS, _ITEMS_ARRAY, _MIN_ITEMS, _UNIQUE_ITEMS,
 _PROPERTIES, _ADDITIONAL, _PROPERTY_NAMES, _DEPENDENCIES, _ANY_OF, _ALL_OF) = range(16)
_NUMBER = (int, float)


def _run(node, x) -> bool:
    """Whether the instance x satisfies the compiled metaschema node. False also when unsure;
    _Unsupported where the node holds a check it cannot make."""
    for op, a in node:
        if op == _PROPERTIES:
            if isinstance(x, dict):
                if len(x) < len(a):  # a schema node has a few of the metaschema's ~45 properties: look up its own
                    for k, val in x.items():
                        sub = a.get(k)
                        if sub is not None and not _run(sub, val):
                            return False
                else:
                    for k, sub in a.items():
                        if k in x and not _run(sub, x[k]):
                            return False
        elif op == _TYPE:  # a: (python types, bool excluded) per JSON type named
            for types, no_bool in a:
                if isinstance(x, types) and not (no_bool and x.__class__ is bool):
                    break
            else:
                return False
        elif op == _ANY_OF:
            for sub in a:
                if _run(sub, x):
                    break
            else:
                return False
        elif op == _ENUM:
            # exact only for strings against string values (True == 1 and 1 == 1.0 in Python)
            if a is None or not isinstance(x, str) or x not in a:
                return False
        elif op == _MINIMUM:
            if isinstance(x, _NUMBER) and x.__class__ is not bool:
                v, exclusive = a
                if not (x > v if exclusive else x >= v):
                    return False
        elif op == _ITEMS:
            if isinstance(x, list):
                for e in x:
                    if not _run(a, e):
                        return False
        elif op == _ADDITIONAL:
            if isinstance(x, dict):
                sub, declared = a
                if declared is None:
                    raise _Unsupported("patternProperties")
                for k, val in x.items():
                    if k not in declared and not _run(sub, val):
                        return False
        elif op == _MIN_ITEMS:
            if isinstance(x, list) and len(x) < a:
                return False
        elif op == _UNIQUE_ITEMS:
            if a and isinstance(x, list):
                # exact for scalar items: jsonschema counts 1 and 1.0 as equal and True and 1 as not
                keys = set()
                for e in x:
                    if isinstance(e, bool) or e is None or isinstance(e, str):
                        keys.add((type(e), e))
                    elif isinstance(e, _NUMBER):
                        keys.add((float, e))
                    else:
                        return False  # an array or object: left to jsonschema
                if len(keys) != len(x):
                    return False
        elif op == _EXCLUSIVE_MINIMUM:
            if isinstance(x, _NUMBER) and x.__class__ is not bool and not x > a:
                return False
        elif op == _PROPERTY_NAMES:
            if isinstance(x, dict):
                for k in x:
                    if not _run(a, k):
                        return False
        elif op == _DEPENDENCIES:
            if isinstance(x, dict):
                for k, dep in a:
                    if dep is None:
                        raise _Unsupported("dependencies with a schema")
                    if k in x:
                        for d in dep:
                            if d not in x:
                                return False
        elif op == _ALL_OF:
            for sub in a:
                if not _run(sub, x):
                    return False
        elif op == _ITEMS_ARRAY:
            if isinstance(x, list):
                raise _Unsupported("items as an array")
        elif op == _NEVER:
            return False
        else:  # _RAISE
            raise _Unsupported(a)
    return True


def _compile(meta):
    nodes: dict = {}  # id(metaschema node) -> its compiled node

    def node(m):
        if m is True:
            return []
        if m is False:
            return [(_NEVER, None)]
        got = nodes.get(id(m))
        if got is not None:
            return got
        if not isinstance(m, dict):
            out = nodes[id(m)] = [(_RAISE, repr(m)[:40])]
            return out
        ref = m.get("$ref")
        if ref is not None:  # drafts 4-7: $ref's siblings are ignored
            try:
                out = node(_resolve(ref, meta))  # the same list, filled later when in a cycle ("#")
            except _Unsupported as e:
                out = [(_RAISE, str(e))]
            nodes[id(m)] = out
            return out
        out = nodes[id(m)] = []
        items = []
        for k, v in m.items():
            if k in _ANNOTATIONS or k == "definitions":
                continue
            make = _MAKE.get(k)
            if make is None:  # visiting this node leaves the check to jsonschema
                items.insert(0, (_RAISE, k))
                continue
            item = make(m, v, node)
            if item is not None:
                items.append(item)
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


def _make_type(m, v, node):
    names = [v] if v.__class__ is str else v  # most metaschema nodes name one type
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPES for n in names):
        return (_RAISE, "type %r" % (v,))
    return (_TYPE, tuple(_TYPES[n] for n in names))


def _make_exclusive_minimum(m, v, node):
    if isinstance(v, bool):  # draft 4: a flag on `minimum` (which reads it)
        return None if "minimum" in m else (_RAISE, "exclusiveMinimum without minimum")
    return (_EXCLUSIVE_MINIMUM, v)


def _make_items(m, v, node):
    if not isinstance(v, (dict, bool)):
        return (_ITEMS_ARRAY, None)
    return (_ITEMS, node(v))


def _make_additional(m, v, node):
    declared = None if "patternProperties" in m else frozenset(m.get("properties", {}))
    return (_ADDITIONAL, (node(v), declared))


def _make_dependencies(m, v, node):
    return (_DEPENDENCIES, tuple((k, tuple(dep) if isinstance(dep, list) else None) for k, dep in v.items()))


_MAKE = {  # metaschema keyword -> (its node's value, compile) -> (op, argument), or None: nothing to check
    "type": _make_type,
    "enum": lambda m, v, node: (_ENUM, frozenset(v) if all(isinstance(e, str) for e in v) else None),
    "minimum": lambda m, v, node: (_MINIMUM, (v, m.get("exclusiveMinimum") is True)),
    "exclusiveMinimum": _make_exclusive_minimum,
    "items": _make_items,
    "minItems": lambda m, v, node: (_MIN_ITEMS, v),
    "uniqueItems": lambda m, v, node: (_UNIQUE_ITEMS, v is True),
    "properties": lambda m, v, node: (_PROPERTIES, {k: node(sub) for k, sub in v.items()}),
    "additionalProperties": _make_additional,
    "propertyNames": lambda m, v, node: (_PROPERTY_NAMES, node(v)),
    "dependencies": _make_dependencies,
    "anyOf": lambda m, v, node: (_ANY_OF, tuple(node(sub) for sub in v)),
    "allOf": lambda m, v, node: (_ALL_OF, tuple(node(sub) for sub in v)),
}
