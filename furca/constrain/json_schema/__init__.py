"""JSON Schema -> grammar, for constrained decoding.

    schema_to_ir(schema, *, allow_extra_properties=None, unsupported="raise",
                 whitespace="compact", max_whitespace=4, warn=None,
                 member_order="schema") -> furca.constrain.ir.Grammar
    schema_to_gbnf(schema, <the same keywords>) -> str           the same grammar as GBNF text
    json_value_gbnf(whitespace, max_whitespace) / json_object_gbnf(...) -> str
                                                                 any JSON value / any JSON object

`GrammarCompiler.compile_json_schema` compiles `schema_to_ir`'s grammar: the translator
(compiler.py, one `Compiler` per call) builds its rules as code-point nodes (grammar.py)
and `lower.py` turns them into the byte-level IR directly. `schema_to_gbnf` renders the
same rules (length bounds aside, below) as llama.cpp-dialect GBNF text (render.py), to read a schema's grammar or to
compile it elsewhere; the compile path never writes or parses that text. Identical
subschemas share one rule; recursive `$ref`s give recursive rules. Both are pure (no
engine needed) and deterministic.

Contract
- The grammar accepts only JSON texts the schema validates (drafts 2020-12 and 7;
  `$schema` naming draft 4/6/7 selects draft-7 rules: siblings of `$ref` ignored),
  and, for the keywords below, accepts all of them written the way the benchmark
  writes them: compact separators (`whitespace="compact"`), object members in the
  order of `properties` or with the required ones first in `required` order (the
  optional ones then in `properties` order), then extra members, and strings as
  json.dumps(..., ensure_ascii=False) writes them (plain strings accept every JSON escape).
  With `member_order="any"` (schema_to_ir only: the engine's matcher keeps each key
  once, any_order.py, furca/constrain/members.py), members come in any order, extra
  ones anywhere; objects with patterns whose keys can stop (`^[a-z]{1,8}$`),
  propertyNames or more than 6 required names, and flexible whitespace, keep the two orders. minProperties over free keys
  is kept by the same watch in schema order (members then come in any order there).
- Supported: type (one or a list), enum, const, properties, required,
  additionalProperties (bool or schema), patternProperties, items, prefixItems,
  draft-7 array `items` + additionalItems, contains (without prefixItems), minItems, maxItems, minLength, maxLength,
  pattern (ECMA regex, unanchored unless ^/$), format (date, time, date-time,
  duration, email, idn-email (ASCII domain), uuid, uri, uri-reference, ipv4,
  ipv6, hostname, regex (what both ECMA-262 and Python's re compile, narrowed:
  formats.py), uri-template (RFC 6570 without reserved operators); formats JSON Schema does not define are ignored; a format with a
  pattern: a start-anchored finite prefix such as "^https?://" (prefix.py), else the
  product of their automata without length bounds (difference.py)), minimum, maximum, exclusiveMinimum, exclusiveMaximum
  (numeric and draft-4 boolean forms), multipleOf (powers of ten <= 1: 0.01, 1,
  ...; an integer k unbounded, from 0, or with at most 512 multiples between bounds:
  multiples.py), anyOf, oneOf (branches made exclusive, see exclusive.py),
  allOf (merged; different patterns: the strings all of them match, a product of their
  automata, difference.py), $ref ($defs, definitions, any JSON pointer, $anchor, $id inside
  the document; recursion), nullable (OpenAPI), boolean schemas, dependencies /
  dependentRequired / dependentSchemas, if/then/else and not where the negated
  schema is built from type, required, string const/enum, numeric const/enum under
  `type: integer` (integer ranges), numeric bounds, length / item / member count
  bounds, pattern, properties, allOf, anyOf and $refs to such schemas, a schema of
  several of them negated group by group (logic.py), not of a schema nothing satisfies (no constraint), allOf of several `not`s (not of their anyOf), uniqueItems
  when maxItems <= 1, over an enum/const item list of at most 8 values (grammar), or
  over free strings (type string, min/maxLength), a longer string enum list or plain
  integers (compact whitespace): the
  array is watched by the engine's matcher, which masks the tokens completing a repeat
  or reaching a dead end (distinct.py, furca/constrain/unique.py; not in GBNF text,
  which cannot say it), and over any other items (objects, numbers, patterns, several
  types, any value), compared as values by the matcher (1 == 1.0, members unordered;
  furca/constrain/unique_values.py; nested ones too),
  minProperties and maxProperties (optional members and extras counted, declared
  members then in `properties` order only), patternProperties whose pattern matches a finite
  set of names (declared as properties), a declared name a pattern also matches
  (both schemas; the pattern's keys leave it out), propertyNames of enum/const,
  pattern, length bounds and unions of them (names.py). Any schema bounded by
  const/enum (itself or
  an allOf part) takes every keyword, supported or not (not, propertyNames,
  uniqueItems, contains, ...): its literals are checked with `jsonschema` (finite.py).
  Annotations (title, description, default, examples, $comment, readOnly, ...)
  and unknown keywords are ignored silently.
- Undeclared members: an object schema without `additionalProperties` admits
  members it does not declare, as JSON Schema says (`allow_extra_properties=True`,
  the default). `allow_extra_properties=False` admits only declared members there
  (xgrammar's strict_mode, OpenAI's strict outputs); `additionalProperties` in the
  schema always wins.
- unsupported="raise" (default): a keyword furca cannot enforce (uniqueItems of tuple items or in GBNF text,
  contains beside prefixItems or with more than 16 places for its witness, min/maxContains,
  propertyNames of other forms, unevaluated*, other multipleOf values, a not/if it cannot
  negate, ...), a defined format furca does not check, and allOf parts that cannot
  be merged raise CompileError naming the keyword and its JSON pointer.
  unsupported="warn": unenforceable keywords ignored with `warn(message)` (default
  warnings.warn); oneOf branches that may overlap are treated as anyOf (with a
  warning). (Not xgrammar's `strict_mode`, which is allow_extra_properties=False.)
- Narrowings (valid JSON the grammar does not produce): integers written as 1.0
  (except in enum/const), numbers with an exponent when bounded on both sides or multipleOf (bounded on one side:
  a negative exponent unless that bound is 0),
  object members in neither of those two orders (unless member_order="any"; in `properties` order,
  undeclared required names come last), whitespace beyond `max_whitespace` per gap,
  non-canonical escapes inside pattern/format strings and the items of uniqueItems
  string arrays, keys of undeclared members
  and strings excluded by `not`, enum objects with whitespace, dates in year 0000, leap seconds other
  than 23:59:60 UTC, idn-email with a non-ASCII domain or quoted local part, host
  names of more than 6 labels or with "--" at positions 3-4 (IDNA), values that satisfy several oneOf branches' shared types without a
  proof (dropped; objects: a branch may be made to require a property that tells it
  from the other, numbers: to keep its range outside the other's, exclusive.py), several patternProperties with different schemas (a key takes
  all their schemas); bounds beyond 1e300 are treated as absent.
- A pattern or format with minLength/maxLength is exact at any size: the engine counts
  its length on a length region (lengths.py); schema_to_gbnf writes a product automaton
  as rules instead (the same language) where it fits, and raises CompileError for the
  larger ones, which GBNF cannot write.
- Invalid schemas (metaschema errors, unknown type, minimum > maximum, bad
  regex, unresolvable or remote $ref, a schema that accepts nothing) raise
  CompileError naming what and where.
"""
from __future__ import annotations

import json
import warnings
from typing import Callable

from furca.errors import CompileError

from .. import ir
from .._release import release
from .compiler import Compiler
from .grammar import Grammar
from .lower import lower
from .metaschema import check_metaschema
from .render import render

__all__ = ["ANY_OBJECT", "schema_to_ir", "schema_to_gbnf", "json_value_gbnf", "json_object_gbnf"]

ANY_OBJECT = {"type": "object", "additionalProperties": True}  # OpenAI's response_format json_object


def schema_to_ir(schema: dict | str | bool, *, allow_extra_properties: bool | None = None,
                 unsupported: str = "raise", whitespace: str = "compact", max_whitespace: int = 4,
                 warn: Callable[[str], None] | None = None, keys: dict | None = None,
                 member_order: str = "schema") -> ir.Grammar:
    """The `furca.constrain.ir.Grammar` (root rule ``root``) of the JSON texts `schema`
    accepts; see the module docstring. Raises CompileError as described there.

    allow_extra_properties: what an object without `additionalProperties` admits
    besides its declared properties; None or True (default): JSON Schema's meaning
    (allowed); False: none (xgrammar strict_mode / OpenAI strict).
    unsupported: "raise" or "warn" (with `warn(message)`, default warnings.warn).
    keys: the `known` map of a `schema_keys.schema_key(schema, known)` call already made
    for this very schema object (GrammarCompiler's cache key), so the translator does
    not key the whole schema a second time."""
    return _translate(schema, lower, allow_extra_properties=allow_extra_properties, unsupported=unsupported,
                      whitespace=whitespace, max_whitespace=max_whitespace, warn=warn, keys=keys,
                      member_order=member_order)


def schema_to_gbnf(schema: dict | str | bool, *, allow_extra_properties: bool | None = None,
                   unsupported: str = "raise", whitespace: str = "compact", max_whitespace: int = 4,
                   warn: Callable[[str], None] | None = None) -> str:
    """GBNF text (root rule `root`) of the grammar `schema_to_ir` returns for the same
    arguments."""
    return _translate(schema, render, allow_extra_properties=allow_extra_properties, unsupported=unsupported,
                      whitespace=whitespace, max_whitespace=max_whitespace, warn=warn)


def json_value_gbnf(whitespace: str = "compact", max_whitespace: int = 4) -> str:
    """Any JSON value (recursive)."""
    return schema_to_gbnf(True, whitespace=whitespace, max_whitespace=max_whitespace)


def json_object_gbnf(whitespace: str = "compact", max_whitespace: int = 4) -> str:
    """Any JSON object (OpenAI's response_format json_object)."""
    return schema_to_gbnf(ANY_OBJECT, whitespace=whitespace, max_whitespace=max_whitespace)


def _translate(schema, emit: Callable[[Grammar], object], *, warn, keys=None, **opts):
    """emit(the translator's grammar of `schema`), after checking the schema."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise CompileError("the schema is not valid JSON: %s" % e) from None
    if not isinstance(schema, (dict, bool)):
        raise CompileError("a schema must be a JSON object or a boolean, got %s" % type(schema).__name__)
    if isinstance(schema, dict):
        check_metaschema(schema)  # metaschema.py
    c = Compiler(schema, warn=_default_warn if warn is None else warn, keys=keys, **opts)
    c.g.eager_lengths = emit is render  # the engine counts lengths on a frame (faster, any size)
    c.g.watch_unique = emit is lower  # the engine's matcher keeps unique string items distinct
    try:
        out = emit(c.compile_root())
    except RecursionError:
        raise CompileError("#: the schema nests too deeply to compile") from None
    release(c)  # its memo and rules, a piece at a time (not one GIL-holding cascade)
    return out


def _default_warn(message: str):
    warnings.warn(message, stacklevel=3)
