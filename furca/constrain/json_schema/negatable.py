"""A schema as logic.negate reads it: its $refs inlined (a recursive one left as it is:
negate then gives up), annotations and unknown keywords dropped, and a oneOf whose
branches are provably disjoint (proofs.provably_disjoint, under the types the schema
and its allOf parts allow) made an anyOf, down the keywords negate descends (allOf,
anyOf, not, properties, patternProperties, additionalProperties, propertyNames, items,
contains). At most MAX_NODES schemas are inlined for one
`not` (a $ref shared by several places is copied at each).
"""
from __future__ import annotations

from furca.errors import CompileError

from .proofs import provably_disjoint
from .merge import intersect_types, type_set

MAX_NODES = 2000


class Negatable:
    def __init__(self, refs, draft7: bool, no_extras: bool, known):
        self.refs, self.draft7, self.no_extras, self.known = refs, draft7, no_extras, known
        self.left = MAX_NODES

    def prepare(self, s, where: str):
        return self._prepare(s, where, (), None)

    def _prepare(self, s, where, inside, types):
        """inside: the $ref targets being inlined (cycle guard); types: what the
        enclosing allOf parts allow (None: every type)."""
        if not isinstance(s, dict):
            return s
        self.left -= 1
        if "$ref" in s and isinstance(s["$ref"], str) and self.refs is not None:
            try:
                ptr, target = self.refs.resolve(s["$ref"], where)
            except CompileError:
                return s
            if ptr in inside or self.left <= 0:
                return s
            target = self._prepare(target, ptr, inside + (ptr,), types)
            rest = {k: v for k, v in s.items() if k != "$ref"}
            rest = {} if self.draft7 else self._prepare(rest, where, inside, types)
            return target if not rest else {"allOf": [target, rest]}
        own = intersect_types(types, type_set(s))
        out = {}
        for k, v in s.items():
            if k not in self.known:
                continue
            if k in ("allOf", "anyOf", "oneOf") and isinstance(v, list):
                v = [self._prepare(x, "%s/%s/%d" % (where, k, i), inside, own if k == "allOf" else None)
                     for i, x in enumerate(v)]
            elif k in ("not", "items", "contains", "additionalProperties", "propertyNames"):
                v = self._prepare(v, "%s/%s" % (where, k), inside, None)
            elif k in ("properties", "patternProperties") and isinstance(v, dict):
                v = {n: self._prepare(x, "%s/%s/%s" % (where, k, n.replace("~", "~0").replace("/", "~1")),
                                      inside, None) for n, x in v.items()}
            out[k] = v
        if isinstance(out.get("allOf"), list):  # the parts' types hold for each part's oneOf
            for part in out["allOf"]:
                if isinstance(part, dict):
                    own = intersect_types(own, type_set(part))
            out["allOf"] = [self._one_of_as_any_of(x, own) for x in out["allOf"]]
        return self._one_of_as_any_of(out, own)

    def _one_of_as_any_of(self, s, types):
        if not (isinstance(s, dict) and isinstance(s.get("oneOf"), list)
                and provably_disjoint(s["oneOf"], intersect_types(types, type_set(s)), self.no_extras)):
            return s
        s = dict(s)
        subs = s.pop("oneOf")
        if "anyOf" in s:
            s["allOf"] = list(s.get("allOf", [])) + [{"anyOf": subs}]
        else:
            s["anyOf"] = subs
        return s
