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
        try:
            cands = [jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)]
        except Exception:
            return
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
    try:
        return _ok(meta, schema, meta)
    except _Unsupported:
        _UNSUPPORTED.add(cls_)
        return False
    except RecursionError:
        return False


def _ok(m, x, root) -> bool:
    """Whether the instance x satisfies the metaschema node m (root: the metaschema, for
    $refs). False also when unsure."""
    if m is True:
        return True
    if m is False:
        return False
    hit = _PLANS.get((id(m), id(root)))
    plan = hit[2] if hit is not None else _plan(m, root)
    if plan.__class__ is not list:  # a $ref, resolved
        return _ok(plan, x, root)
    for check, v in plan:
        if not check(m, v, x, root):
            return False
    return True


_PLANS: dict = {}  # (id(metaschema node), id(its root)) -> (node, root, its plan): both kept alive


def _plan(m, root):
    """A metaschema node's checks, [(check, value)] without its annotations, or the node
    its $ref names (drafts 4-7: $ref's siblings are ignored); made once per node."""
    if not isinstance(m, dict):
        raise _Unsupported(repr(m)[:40])
    ref = m.get("$ref")
    if ref is not None:
        plan = _resolve(ref, root)
    else:
        plan = []
        for k, v in m.items():
            if k in _ANNOTATIONS:
                continue
            check = _KEYWORDS.get(k)
            if check is None:
                raise _Unsupported(k)
            plan.append((check, v))
    _PLANS[(id(m), id(root))] = (m, root, plan)
    return plan


def _resolve(ref, root):
    if ref == "#":
        return root
    if ref.startswith("#/definitions/") and ref[14:] in root.get("definitions", {}):
        return root["definitions"][ref[14:]]
    raise _Unsupported(ref)


def _type(m, v, x, root):
    if v.__class__ is str:  # most metaschema nodes name one type
        test = _TYPES.get(v)
        if test is None:
            raise _Unsupported("type %r" % (v,))
        return test(x)
    names = v
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPES for n in names):
        raise _Unsupported("type %r" % (v,))
    return any(_TYPES[n](x) for n in names)


def _enum(m, v, x, root):
    # exact only for strings against string values (True == 1 and 1 == 1.0 in Python)
    return isinstance(x, str) and all(isinstance(e, str) for e in v) and x in v


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _minimum(m, v, x, root):
    if not _number(x):
        return True
    return x > v if m.get("exclusiveMinimum") is True else x >= v


def _exclusive_minimum(m, v, x, root):
    if isinstance(v, bool):  # draft 4: a flag on `minimum`
        if "minimum" not in m:
            raise _Unsupported("exclusiveMinimum without minimum")
        return True
    return not _number(x) or x > v


def _items(m, v, x, root):
    if not isinstance(x, list):
        return True
    if not isinstance(v, (dict, bool)):
        raise _Unsupported("items as an array")
    return all(_ok(v, e, root) for e in x)


def _min_items(m, v, x, root):
    return not isinstance(x, list) or len(x) >= v


def _unique_items(m, v, x, root):
    if v is not True or not isinstance(x, list):
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


def _properties(m, v, x, root):
    if not isinstance(x, dict):
        return True
    if len(x) < len(v):  # a schema node has a few of the metaschema's ~45 properties: look up its own
        for k, val in x.items():
            sub = v.get(k)
            if sub is not None and not _ok(sub, val, root):
                return False
        return True
    return all(_ok(sub, x[k], root) for k, sub in v.items() if k in x)


def _additional(m, v, x, root):
    if not isinstance(x, dict):
        return True
    if "patternProperties" in m:
        raise _Unsupported("patternProperties")
    declared = m.get("properties", {})
    return all(_ok(v, val, root) for k, val in x.items() if k not in declared)


def _property_names(m, v, x, root):
    return not isinstance(x, dict) or all(_ok(v, k, root) for k in x)


def _dependencies(m, v, x, root):
    if not isinstance(x, dict):
        return True
    for k, dep in v.items():
        if not isinstance(dep, list):
            raise _Unsupported("dependencies with a schema")
        if k in x and not all(d in x for d in dep):
            return False
    return True


def _any_of(m, v, x, root):
    return any(_ok(sub, x, root) for sub in v)


def _all_of(m, v, x, root):
    return all(_ok(sub, x, root) for sub in v)


_KEYWORDS = {
    "type": _type, "enum": _enum, "minimum": _minimum, "exclusiveMinimum": _exclusive_minimum,
    "items": _items, "minItems": _min_items, "uniqueItems": _unique_items, "properties": _properties,
    "additionalProperties": _additional, "propertyNames": _property_names, "dependencies": _dependencies,
    "anyOf": _any_of, "allOf": _all_of, "definitions": lambda m, v, x, root: True,
}
