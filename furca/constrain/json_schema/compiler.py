"""The schema walker: JSON Schema (draft 2020-12 / 7) -> grammar IR rules.

One `Compiler` per call. `value(schema, where)` returns the IR of every JSON text
the schema accepts (a Ref when the body became a rule). Identical subschemas share
one rule (memo keyed by `schema_key`: equal for equal JSON texts, key order kept
since property order matters); `$ref` targets get a rule named after their pointer, reserved before
their body is built so recursion closes on itself. Before a schema is built,
not/if/dependencies are rewritten (logic.py), allOf is merged (merge.py), anyOf
and oneOf are distributed over the sibling keywords (oneOf made exclusive,
exclusive.py); what remains is one grammar per allowed JSON type.
"""
from __future__ import annotations

from furca.errors import CompileError

from ..deadline import check as check_deadline
from . import arrays, containers, finite, logic, scalars
from .exclusive import exclusive_branches, one_product
from .grammar import EMPTY, NOTHING, Cls, Grammar, Lit, Ref, alt, cls, lit, rep, seq
from .merge import FALSE, ALL_TYPES, merge, normalize_schema, type_set
from .negatable import Negatable
from .numeric import INT_UNBOUNDED
from .proofs import ProofResolver
from .refs import RefIndex
from .schema_keys import NO_LANGUAGE, language_key, schema_key

# Keywords that never constrain an instance (or are handled elsewhere): ignored silently.
ANNOTATIONS = {
    "title", "description", "default", "examples", "example", "$comment", "$schema", "$id", "id", "$anchor",
    "$dynamicAnchor", "$vocabulary", "readOnly", "writeOnly", "deprecated", "$defs", "definitions",
    "contentMediaType", "contentEncoding", "contentSchema", "discriminator", "xml", "externalDocs",
}
# Keywords furca enforces.
SUPPORTED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern",
    "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref",
    "nullable", "uniqueItems", "minProperties", "maxProperties", "multipleOf", "propertyNames", "contains",
    logic.NOT_STRINGS, logic.SOME_MEMBER,
}
# Validation keywords furca cannot enforce: CompileError (unsupported="raise") or a warning ("warn").
UNSUPPORTED = {
    "minContains", "maxContains", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "dependencies", "not", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$recursiveRef", "$recursiveAnchor",
}
_KNOWN = (SUPPORTED | UNSUPPORTED) - ANNOTATIONS  # keywords that validate
_DRAFT7_URIS = ("draft-07", "draft-06", "draft-04", "draft-03")


class Compiler:
    def __init__(self, root, *, unsupported: str, whitespace: str, max_whitespace: int, warn,
                 allow_extra_properties: bool | None = None, keys: dict | None = None,
                 member_order: str = "schema"):
        if unsupported not in ("raise", "warn"):
            raise CompileError("unsupported must be 'raise' or 'warn', got %r" % (unsupported,))
        self.root = root
        self.raise_unsupported = unsupported == "raise"
        self.allow_extra = True if allow_extra_properties is None else bool(allow_extra_properties)
        if member_order not in ("schema", "any"):
            raise CompileError("member_order must be 'schema' or 'any', got %r" % (member_order,))
        self.member_order = member_order  # "any": objects in any member order (any_order.py)
        self.warn = warn
        self.g = Grammar()
        self.memo = {}
        # id(subschema) -> its schema_key: each keyed once (schema_key); `keys` when the
        # caller keyed root already (GrammarCompiler's cache key): not walked again
        self.keys = {None: []} if keys is None else keys
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.draft7 = isinstance(schema_uri, str) and any(d in schema_uri for d in _DRAFT7_URIS)
        # draft-04 and -03: `integer` has no fraction part (1.0 is a number, not an integer)
        self.draft4 = self.draft7 and any(d in schema_uri for d in _DRAFT7_URIS[2:])
        # drafts 6 and older have no if/then/else: validators ignore them there, as any
        # unknown keyword (maskbench-dev o3385, o39097: draft-04 schemas whose valid
        # instances break their `then`)
        self.no_conditionals = self.draft7 and any(d in schema_uri for d in _DRAFT7_URIS[1:])
        self.refs = RefIndex(root, self.draft7) if isinstance(root, dict) else None
        self.inlining = []  # pointers of $ref targets being merged (cycle guard)
        self.finite_env = None  # finite.py's validator class and registry for this document
        self.pending, self.recursed = set(), set()
        if whitespace == "compact":
            self.ws = EMPTY
        elif whitespace == "flexible":
            if not isinstance(max_whitespace, int) or max_whitespace < 0:
                raise CompileError("max_whitespace must be a non-negative int, got %r" % (max_whitespace,))
            self.ws = self.g.define("ws", rep(cls([(0x20, 0x20), (0x09, 0x0A)]), 0, max_whitespace)) \
                if max_whitespace else EMPTY
        else:
            raise CompileError("whitespace must be 'compact' or 'flexible', got %r" % (whitespace,))
        self.comma = seq(self.ws, lit(","), self.ws)
        self.colon = seq(self.ws, lit(":"), self.ws)

    # ------------------------------------------------------------- entry points
    def compile_root(self) -> Grammar:
        """The grammar of the root schema (its rule ``root`` and every rule it uses)."""
        body = self.value(self.root, "#")
        if body == NOTHING:
            raise CompileError("#: the schema accepts no JSON value")
        self.g.rules["root"] = body
        return self.g

    def named(self, name, body):
        """A rule with a fixed name, defined once per grammar."""
        key = ("named", name)
        if key not in self.memo:
            self.g._used.add(name)
            self.memo[key] = self.g.define(name, body)
        return self.memo[key]

    def cached(self, key, build):
        if key not in self.memo:
            self.memo[key] = build()
        return self.memo[key]

    def unsupported(self, keyword: str, where: str, why: str = ""):
        msg = "%s/%s: keyword %r is not supported%s" % (where, keyword, keyword, (" (" + why + ")") if why else "")
        if self.raise_unsupported:
            raise CompileError(msg + "; compile with unsupported='warn' to ignore it")
        self.warn(msg + "; ignored (unsupported='warn')")

    # ------------------------------------------------------------- values
    def value(self, schema, where: str, hint: str = "value"):
        check_deadline()  # once per schema node: a compile past its deadline stops here
        if schema is True:
            return self.any_value()
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise CompileError("%s: a schema must be an object or a boolean, got %s" % (where, type(schema).__name__))
        key = schema_key(schema, self.keys)
        if not NO_LANGUAGE.isdisjoint(schema):
            key = language_key(key)
        return self._memoised(key, hint, lambda: self.build(schema, where), where)

    def ref_value(self, ref, where: str):
        ptr, target = self.refs.resolve(ref, where)
        hint = ptr.rsplit("/", 1)[-1] if ptr != "#" else "root-ref"
        return self._memoised("$ref:" + ptr, hint, lambda: self.value(target, ptr, hint=hint), where)

    def _memoised(self, key, hint, build, where):
        """Memo by key; a rule when the body is not trivial or when it recursed into itself."""
        if key in self.memo:
            r = self.memo[key]
            if isinstance(r, Ref) and r.name in self.pending:
                self.recursed.add(r.name)
            return r
        name = self.g.new_name(hint)
        ref = Ref(name)
        self.memo[key] = ref
        self.pending.add(name)
        try:
            body = build()
        finally:
            self.pending.discard(name)
        if name in self.recursed:
            if body == NOTHING:
                raise CompileError("%s: a recursive schema that accepts nothing" % where)
            self.g.define(name, body)
            return ref
        if body == NOTHING or _is_simple(body):
            self.memo[key] = body
            return body
        lasting = _LASTING_BODIES.get(body)  # a plain string, number, integer, boolean
        if lasting is not None:
            ref = self.memo[key] = self.lasting_rule(name, lasting)
        else:
            ref = self.memo[key] = self.g.share(name, body)  # an equal rule's Ref, if there is one
        return ref

    def lasting_rule(self, name: str, body) -> Ref:
        """A call of `body`, a body object that lives across compiles (Grammar.lasting:
        lower, prepare and build_nfa keep what they make of it, and the masks of the
        states inside it are the lexeme masks shared by every grammar, lexeme_masks.py):
        the grammar's one rule of that body (g.share), named `name` when it is the
        first. Two lasting rules are defined by their names instead, since they are
        called by them: any JSON value (any_value: its body calls itself) and the key
        tries' rules (keys.key_not_in: the trie calls key-rest and key-other)."""
        ref = self.g.share(name, body)
        self.g.lasting.add(ref.name)
        return ref

    def any_value(self):
        key = "$any"
        if key not in self.memo:
            name = self.g.new_name("json-value")
            self.memo[key] = Ref(name)
            # one body object per (name, whitespace) in the process: lower, prepare and
            # build_nfa keep what they make of it across compiles (Grammar.lasting)
            self.g.define(name, _any_value_body(name, self.ws, self.comma, self.colon))
            self.g.lasting.add(name)
        return self.memo[key]

    # ------------------------------------------------------------- one schema
    def check_keywords(self, schema: dict, where: str):
        for k in schema:
            if k in UNSUPPORTED or (self.draft7 and k in ("contentMediaType", "contentEncoding")):
                if k in ("then", "else") and "if" not in schema:
                    continue
                if k == "if" and "then" not in schema and "else" not in schema:
                    continue
                self.unsupported(k, where)

    def rewrite(self, schema: dict, where: str = "#") -> dict:
        """not / if-then-else / dependencies -> allOf parts, where an exact rewrite exists."""
        extra = []
        if any(k in schema for k in ("not", "if", "then", "else", "dependencies", "dependentRequired",
                                     "dependentSchemas")):
            schema = dict(schema)
            extra += logic.dependencies(schema)
            for k in ("dependencies", "dependentRequired", "dependentSchemas"):
                if isinstance(schema.get(k), dict):  # rewritten whole (an empty one: nothing)
                    del schema[k]
            if self.no_conditionals:
                for k in ("if", "then", "else"):
                    schema.pop(k, None)
            if "if" in schema and ("then" in schema or "else" in schema):
                part = logic.conditional(dict(schema, **{"if": self.negatable(schema["if"], where + "/if")}))
                if part is not None:
                    extra.append(logic.merged_branches(part, lambda b: self.resolve_for_merge(b, where + "/if")))
                    for k in ("if", "then", "else"):
                        schema.pop(k, None)
            elif "if" not in schema or ("then" not in schema and "else" not in schema):
                for k in ("if", "then", "else"):  # if alone, then/else alone: no constraint
                    schema.pop(k, None)
            if "not" in schema:
                neg = logic.negate(self.negatable(schema["not"], where + "/not"), schema)
                if neg is not None:
                    extra.append(neg)
                    del schema["not"]
                elif self._never(schema["not"]):
                    del schema["not"]  # not of a schema nothing satisfies: no constraint
            if extra:
                schema["allOf"] = list(schema.get("allOf", [])) + extra
        return schema

    def negatable(self, s, where: str):
        """`s` as logic.negate reads it (negatable.py)."""
        return Negatable(self.refs, self.draft7, not self.allow_extra, _KNOWN).prepare(s, where)

    def _never(self, schema) -> bool:
        """Whether schema accepts no value (its grammar is empty), as far as it compiles."""
        try:
            return self.value(schema, "#/not") == NOTHING
        except CompileError:
            return False

    def build(self, schema: dict, where: str):
        found = finite.finite_values(self, schema, ANNOTATIONS)
        if found is not None:  # bounded by const/enum: exactly the literals the schema validates
            return scalars.literals(found[0], where, found[1])
        schema = self.rewrite(schema, where)
        self.check_keywords(schema, where)
        if all(k in ANNOTATIONS or k not in SUPPORTED and k not in UNSUPPORTED for k in schema):
            return self.any_value()
        schema = normalize_schema(schema, self.draft7)
        if "$ref" in schema:
            rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
            if self.draft7 or not any(k in SUPPORTED for k in rest):
                return self.ref_value(schema["$ref"], where)
            schema = self.inline_ref(schema, where)
            if schema is FALSE:
                return NOTHING
            return self.value(schema, where) if schema is not True else self.any_value()
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            subs = schema["allOf"]
            if not isinstance(subs, list) or not subs:
                raise CompileError("%s/allOf: must be a non-empty array" % where)
            for i, sub in enumerate(subs):
                sub = self.resolve_for_merge(sub, "%s/allOf/%d" % (where, i))
                merged = merge(merged, sub, "%s/allOf/%d" % (where, i))
                if merged is FALSE:
                    return NOTHING
            return self.value(merged, where)
        if "anyOf" in schema or "oneOf" in schema:
            return self.combinator(schema, where)
        return self.plain(schema, where)

    def resolve_for_merge(self, sub, where):
        """Inline top-level $refs (recursively) so `sub` can be merged."""
        if isinstance(sub, dict):
            sub = self.rewrite(sub, where)
            self.check_keywords(sub, where)
            sub = normalize_schema(sub, self.draft7)
        if isinstance(sub, dict) and "$ref" in sub:
            return self.inline_ref(sub, where)
        if isinstance(sub, dict) and "allOf" in sub:
            merged = {k: v for k, v in sub.items() if k != "allOf"}
            for i, s in enumerate(sub["allOf"]):
                merged = merge(merged, self.resolve_for_merge(s, "%s/allOf/%d" % (where, i)), where)
                if merged is FALSE:
                    return FALSE
            return merged
        return sub

    def inline_ref(self, schema, where):
        ptr, target = self.refs.resolve(schema["$ref"], where)
        if ptr in self.inlining:
            raise CompileError("%s: $ref %r is recursive and has sibling keywords (cannot be merged)"
                               % (where, schema["$ref"]))
        self.inlining.append(ptr)
        try:
            target = self.resolve_for_merge(target, ptr)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            if self.draft7:
                return target
            return merge(target, self.resolve_for_merge(rest, where), where)
        finally:
            self.inlining.pop()

    def combinator(self, schema, where):
        base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
        groups = []
        for kw in ("anyOf", "oneOf"):
            if kw in schema:
                subs = schema[kw]
                if not isinstance(subs, list) or not subs:
                    raise CompileError("%s/%s: must be a non-empty array" % (where, kw))
                groups.append((kw, subs))
        branches = [base]
        for kw, subs in groups:
            resolved = [self.resolve_for_merge(s, "%s/%s/%d" % (where, kw, i)) for i, s in enumerate(subs)]
            new = []
            for b in branches:
                if kw == "oneOf" and len(resolved) > 1:
                    new += self.exclusive(resolved, b, where)
                    continue
                for i, s in enumerate(resolved):
                    m = merge(b, s, "%s/%s/%d" % (where, kw, i))
                    if m is not FALSE:
                        new.append(m)
            branches = [b for b in new if b is not FALSE]
        parts = [self.value(b, where) for b in branches]
        return alt(*[p for p in parts if p != NOTHING]) if parts else NOTHING

    def exclusive(self, subs, base, where):
        """oneOf branches merged with `base`, made exclusive (unsupported="raise") or, where
        exclusivity would drop values, as anyOf with a warning (unsupported="warn")."""
        complement = lambda s, beside: logic.negate(self.negatable(s, where), beside)  # noqa: E731
        resolve = ProofResolver(lambda s: self.resolve_for_merge(s, where), where)
        out, narrowed = exclusive_branches(subs, base, not self.allow_extra, where, complement, resolve)
        if narrowed and not self.raise_unsupported:
            self.warn("%s/oneOf: branches may overlap; oneOf's exclusivity is not enforced; treated as anyOf "
                      "(unsupported='warn')" % where)
            return [merge(base, s, "%s/oneOf/%d" % (where, i)) for i, s in enumerate(subs)]
        return one_product(out, ANNOTATIONS)

    # ------------------------------------------------------------- plain schemas
    def plain(self, schema: dict, where: str):
        types = type_set(schema)
        if types is not None:
            bad = [t for t in types if t not in ALL_TYPES]
            if bad:
                raise CompileError("%s/type: unknown type %r" % (where, bad[0]))
        if "enum" in schema or "const" in schema:
            return scalars.enum_values(self, schema, where)
        if types is None:
            types = set(ALL_TYPES)
        if "number" in types:
            types.discard("integer")
        parts = []
        for t in ("object", "array", "string", "integer", "number", "boolean", "null"):
            if t in types:
                parts.append(_TYPE_BUILDERS[t](self, schema, where))
        parts = [p for p in parts if p != NOTHING]
        if len(parts) > 1:  # a plain scalar among others (`"type": ["string", "null"]`): its lasting rule called
            parts = [p if (lasting := _LASTING_BODIES.get(p)) is None else
                     self.lasting_rule(self.g.new_name(_LASTING_HINTS[lasting]), lasting) for p in parts]
        return alt(*parts) if parts else NOTHING


def _object(c, schema, where):
    return containers.object_grammar(c, schema, where)


def _array(c, schema, where):
    return arrays.array_grammar(c, schema, where)


_TYPE_BUILDERS = {
    "object": _object,
    "array": _array,
    "string": lambda c, s, w: scalars.string_grammar(c, s, w),
    "integer": lambda c, s, w: scalars.integer_grammar(c, s, w),
    "number": lambda c, s, w: scalars.number_grammar(c, s, w),
    "boolean": lambda c, s, w: alt(lit("true"), lit("false")),
    "null": lambda c, s, w: lit("null"),
}


def _is_simple(body) -> bool:
    return isinstance(body, (Lit, Cls, Ref))


# the JSON lexemes a rule body often is, by equality -> the one object every compile uses
# (share's rules of these bodies are lasting: their IR, facts and NFA layout made once)
_LASTING_BODIES = {b: b for b in (scalars.STRING, scalars.NUMBER, INT_UNBOUNDED, alt(lit("true"), lit("false")))}
_LASTING_HINTS = dict(zip(_LASTING_BODIES, ("string", "number", "integer", "boolean")))
_ANY_BODIES: dict = {}  # (name, ws, comma, colon) -> the body of any JSON value (any_value)
_MAX_ANY_BODIES = 32  # distinct names / whitespace settings kept; past it, built per compile


def _any_value_body(name, ws, comma, colon):
    """Any JSON value, recursing through the rule `name`: the same object for equal
    arguments (every compile of this process), so that its IR, prepared facts and NFA
    layout are made once."""
    key = (name, ws, comma, colon)
    body = _ANY_BODIES.get(key)
    if body is None:
        ref = Ref(name)
        member = seq(scalars.STRING, colon, ref)
        obj = alt(seq(lit("{"), ws, lit("}")),
                  seq(lit("{"), ws, member, rep(seq(comma, member), 0, None), ws, lit("}")))
        arr = alt(seq(lit("["), ws, lit("]")),
                  seq(lit("["), ws, ref, rep(seq(comma, ref), 0, None), ws, lit("]")))
        body = alt(obj, arr, scalars.STRING, scalars.NUMBER, lit("true"), lit("false"), lit("null"))
        if len(_ANY_BODIES) < _MAX_ANY_BODIES:
            _ANY_BODIES[key] = body
    return body

