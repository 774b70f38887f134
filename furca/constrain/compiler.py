"""GrammarCompiler: constraint -> CompiledGrammar, with a thread-safe LRU cache.

Every front end produces the IR (``ir.py``): regex (``regex.py``), GBNF (``gbnf.py``),
Lark (``lark_grammar.py``), choices (here), JSON schemas (``json_schema``: its rules
lowered to the IR directly, no grammar text), structural tags (``structural_tag.py``).
``prepare.prepare`` checks the IR, ``build_nfa`` turns it into one byte-level NFA with rule
calls, and a ``LazyAutomaton`` over the tokenizer's trie computes states and masks on
demand. Compiling computes the first state's mask too, so a request's first
fill_bitmask is a copy.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict

import numpy as np

from furca.errors import CompileError

from . import ir
from .automaton import AutomatonLimit, LazyAutomaton
from ._release import release, release_frames
from .deadline import CompileTimeout
from .gbnf import parse_gbnf
from .gcpause import GC_PAUSE as _GC_PAUSE
from .json_schema import ANY_OBJECT, schema_to_ir
from .json_schema.schema_keys import schema_key
from .json_schema.formats import build_formats
from .lark_grammar import parse_lark
from .compiled import CompiledGrammar
from .nfa import build_nfa
from .prepare import prepare
from .regex import regex_grammar
from .structural_tag import check_structural_tag, structural_tag_grammar
from .tokenizer import TokenizerInfo
from .value_tokens import tables_of as watch_tables


REFRESH_STATES = 200_000  # a cached grammar with more automaton states is compiled afresh


class GrammarCompiler:
    """Compiles constraints into `CompiledGrammar`s for one tokenizer.

    Every ``compile_*`` method returns a `CompiledGrammar` (call ``.matcher()`` for a
    per-request `Matcher`) and raises `CompileError` when the constraint is malformed,
    uses something furca cannot enforce, or exceeds a limit at its start (4,096
    configurations in a state, nesting depth 512). Inside ``with compile_deadline(s):`` a
    compile that runs past the deadline raises `CompileTimeout` (a CompileError) and
    stores nothing.

    Cache: compiled grammars are kept in an LRU of ``cache_size`` entries, keyed by the
    constraint's kind, its text and every keyword that changes the grammar; a hit returns
    the same `CompiledGrammar` (its masks and states shared by all its matchers). A cached
    grammar that has grown past 200,000 automaton states is compiled afresh for the next
    caller (its old matchers keep theirs). Two threads asking for one key compile it once;
    different keys compile concurrently. Safe to call from several threads.
    """

    def __init__(self, info: TokenizerInfo, cache_size: int = 256):
        """info: the tokenizer's `TokenizerInfo` (TypeError otherwise); cache_size: compiled
        grammars kept. Loads the compiled trie walk (numba's on-disk cache) and builds the
        JSON formats' grammars, once per process, and the tokenizer's shared lexeme masks
        and watch tables, once per tokenizer."""
        if not isinstance(info, TokenizerInfo):
            raise TypeError("GrammarCompiler needs a TokenizerInfo")
        self.info = info
        self.cache_size = int(cache_size)
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict = {}
        _warm_walk()
        build_formats()  # the JSON formats' grammars, built once per process (json_schema/formats.py)
        self._warm_lexemes()
        # the watches' tables of the tokenizer (token_tables.py, value_tokens.py: ~11 ms and
        # ~4.4 MB for Llama-3.1, once per tokenizer), made here rather than inside the
        # compile or the step of the first schema that needs them (uniqueItems, members)
        watch_tables(info)

    def _warm_lexemes(self) -> None:
        """The lexeme masks shared by every grammar (lexeme_masks.py: inside a plain
        string, number, integer, boolean or any JSON value) for this tokenizer, made once
        per process and tokenizer: a serving process has them after its first requests;
        made here, the first request of each new schema does not compute them. A grammar
        through every lexeme, its masks filled at every byte of a text through them
        (~0.2 s for Llama-3.1 in a process that has computed no mask yet). Its rows come
        from the kernel (core_rows.py), so the kernel's compiled code is loaded here too
        (numba's on-disk cache, ~0.1-0.3 s once per process; each kernel called from
        Python once), not in a request's compile.
        Not cached in this compiler."""
        info = self.info
        if info in _LEXEMES_DONE:
            return
        g = self._compile(schema_to_ir(_LEXEME_SCHEMA), ("lexemes",))
        a = g.automaton
        row = np.zeros((1, info.num_words), dtype=np.int32)
        _fill_along(g, _LEXEME_TEXT, row)
        for s in range(a.num_states):  # byte steps and a row of their own (Core.step_bytes, step_byte, row)
            if not a.expanded[s]:
                a._bytes(s, b'"', False)
                a._step_byte(s, ord('"'))
                a.expand(s)
                break
        frame = next((x for x, f in enumerate(a.stacks.frames) if x and f[0] >= 0), 0)  # a frame a rule returns through
        if frame:
            a.after_return(frame)  # Core.after_return
        if g.masks.bounded is not None:  # the bounded strings' tables (string_counters.py)
            g.masks.bounded.warm()
        self._warm_formats()
        _LEXEMES_DONE.add(info)
        if not _CORPUS_DONE:
            self._warm_corpus()
            _CORPUS_DONE.append(True)

    def _warm_corpus(self) -> None:
        """Compiles a few schemas of the JSON-schema keywords' common shapes (_WARM_CORPUS),
        once per process: the translator's, prepare's and build_nfa's code paths for them
        run here first (CPython's specialised bytecode, type and attribute caches), not in
        the first request of each shape (nor, in a process forked after set-up, in every
        request's compile). Not cached in this compiler."""
        for i, schema in enumerate(_WARM_CORPUS):
            self._compile(schema_to_ir(schema), ("lexemes", "corpus", i))

    def _warm_formats(self) -> None:
        """The shared masks of the formats that are lasting rules (formats.format_body):
        each format's grammar alone, its masks filled at every byte of a few ordinary
        values (_FORMAT_VALUES; ~35 ms for Llama-3.1). Their wide states' abstract masks
        (a `uri`'s host and path characters: ~0.5-1 ms walks each) are then shared by the
        first request of every schema naming the format; a server fills the rest as its
        requests meet them."""
        row = np.zeros((1, self.info.num_words), dtype=np.int32)
        for fmt, texts in _FORMAT_VALUES.items():
            fg = self._compile(schema_to_ir({"type": "string", "format": fmt}), ("lexemes", fmt))
            for text in texts:
                _fill_along(fg, '"%s"' % text, row)

    # ---- public --------------------------------------------------------------------
    def compile_regex(self, pattern: str) -> CompiledGrammar:
        """The strings that fully match `pattern` (Python `re` syntax, anchored at both ends;
        ``\\d \\w \\s`` are ASCII). Raises CompileError for a pattern that is not a str or
        does not parse, and for what no automaton can enforce (backreferences, lookaround,
        ``\\b``). Cached by the pattern's text."""
        if not isinstance(pattern, str):
            raise CompileError(f"regex must be a str, got {type(pattern).__name__}")
        return self._cached(("regex", pattern), lambda: regex_grammar(pattern))

    def compile_grammar(self, text: str, *, syntax: str | None = None, root: str | None = None) -> CompiledGrammar:
        """The language of a grammar: GBNF / EBNF (xgrammar's and llama.cpp's dialect; root
        rule ``root``) or Lark (start rule ``start``). syntax: "gbnf" | "lark" | None (detect:
        ``::=`` means GBNF); root: another root / start rule. Raises CompileError for a
        syntax error (with line and column), an undefined rule, left recursion through
        several rules, a rule that matches no string, a Lark ``%import`` other than
        ``common.NAME``, or an unknown `syntax`. Cached by (syntax, root, text)."""
        if not isinstance(text, str):
            raise CompileError(f"grammar must be a str, got {type(text).__name__}")
        if syntax is None:
            syntax = "gbnf" if "::=" in text else "lark"
        if syntax in ("gbnf", "ebnf"):
            build = lambda: parse_gbnf(text, root or "root")  # noqa: E731
        elif syntax == "lark":
            build = lambda: parse_lark(text, root or "start")  # noqa: E731
        else:
            raise CompileError(f"unknown grammar syntax {syntax!r}; use 'gbnf' or 'lark'")
        return self._cached(("grammar", syntax, root, text), build)

    def compile_choices(self, choices) -> CompiledGrammar:
        """Exactly one of the strings in `choices` (an iterable of str). Raises CompileError
        when it is empty or holds a non-str. Cached by the tuple of choices."""
        choices = list(choices)
        if not choices:
            raise CompileError("compile_choices: the list of choices is empty")
        for i, c in enumerate(choices):
            if not isinstance(c, str):
                raise CompileError(f"compile_choices: choice {i} is {type(c).__name__}, not str")
        return self._cached(("choices", tuple(choices)),
                            lambda: ir.Grammar({"root": ir.alt([ir.literal(c) for c in choices])}))

    def compile_json_schema(self, schema, *, allow_extra_properties: bool | None = None,
                            unsupported: str = "raise", whitespace: str = "compact",
                            max_whitespace: int = 4, member_order: str = "schema") -> CompiledGrammar:
        """The JSON texts `schema` validates (`furca.constrain.json_schema` lists the
        keywords and the narrowings). schema: a dict, a bool or its JSON text; ``{}`` and
        ``True`` are any JSON value.

        allow_extra_properties: what an object schema without ``additionalProperties``
        admits besides its declared properties: None / True, any other members (JSON
        Schema's meaning); False, none (xgrammar's ``strict_mode``, OpenAI's strict
        outputs). ``additionalProperties`` in the schema always wins.
        unsupported: a keyword furca cannot enforce (uniqueItems, contains, a format it
        does not check, ...): "raise", a CompileError naming it and its JSON pointer;
        "warn", ignored with a `warnings.warn` (the grammar then accepts more than the
        schema allows).
        whitespace: "compact" (none between tokens) or "flexible" (at most
        `max_whitespace` spaces / newlines / tabs in each gap).
        member_order: "schema" (default), an object's declared members in `properties`
        order or required ones first, extra members after them (what models write, and
        what jump-forward can force); "any", members in any order, extra ones anywhere,
        each key at most once (the matcher keeps them distinct: documents written by
        others). "any" needs compact whitespace; objects with patternProperties,
        propertyNames, min/maxProperties or more than 6 required names keep the schema
        orders (json_schema/any_order.py).

        Raises CompileError for text that is not JSON, a schema invalid under its draft's
        metaschema, an unresolvable ``$ref``, a schema that accepts nothing, a bad
        keyword argument, and (unsupported="raise") an unenforceable keyword. Cached by
        the schema's JSON text (as `json_schema.schema_keys.schema_key`) and every keyword."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise CompileError(f"JSON schema is not valid JSON: {e}") from None
        opts = (allow_extra_properties, unsupported, whitespace, max_whitespace, member_order)
        keys = {None: []}  # every subschema's key, handed to the translator (its memo keys)
        return self._cached(("json_schema", schema_key(schema, keys)) + opts,
                            lambda: schema_to_ir(schema, allow_extra_properties=allow_extra_properties,
                                                 unsupported=unsupported, whitespace=whitespace,
                                                 max_whitespace=max_whitespace, keys=keys,
                                                 member_order=member_order))

    def compile_json_object(self, *, whitespace: str = "compact", max_whitespace: int = 4) -> CompiledGrammar:
        """Any JSON object (OpenAI's ``response_format: json_object``); whitespace and
        max_whitespace as for `compile_json_schema`. Raises CompileError for a bad keyword
        argument only. Cached by its keywords."""
        return self._cached(("json_object", whitespace, max_whitespace),
                            lambda: schema_to_ir(ANY_OBJECT, whitespace=whitespace, max_whitespace=max_whitespace))

    def compile_structural_tag(self, tags, triggers, *, allow_extra_properties: bool | None = None,
                               unsupported: str = "raise") -> CompiledGrammar:
        """Free text; where a trigger appears, one of the tags whose ``begin`` starts with
        it follows (``begin``, a JSON value of its ``schema``, ``end``); then free text
        again. EOS is allowed in free text only. tags: dicts or objects with ``begin``
        (non-empty str), ``schema`` (dict, bool or JSON text) and ``end`` (str); triggers:
        non-empty strs. allow_extra_properties, unsupported: as for `compile_json_schema`,
        for every tag's schema.

        Raises CompileError naming the field for an ill-typed tag or trigger
        (``structures[1].begin``), when there is no tag or no trigger, when a tag's
        ``begin`` starts with no trigger, and for any tag's schema as
        `compile_json_schema` does. Cached by the tags, triggers and keywords."""
        checked, triggers = check_structural_tag(tags, triggers)  # CompileError naming an ill-typed field
        key = ("structural_tag", tuple((b, sch if isinstance(sch, str) else json.dumps(sch, sort_keys=True), e)
                                       for b, sch, e in checked), tuple(triggers), allow_extra_properties,
               unsupported)
        tags = [{"begin": b, "schema": sch, "end": e} for b, sch, e in checked]

        def schema_grammar(schema) -> ir.Grammar:
            return schema_to_ir(schema, allow_extra_properties=allow_extra_properties, unsupported=unsupported)

        return self._cached(key, lambda: structural_tag_grammar(tags, triggers, schema_grammar))

    def clear_cache(self) -> None:
        """Drops every cached grammar (matchers made from them keep working)."""
        with self._lock:
            self._cache.clear()

    # ---- internals -----------------------------------------------------------------
    def _cached(self, key, build) -> CompiledGrammar:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit.num_states > REFRESH_STATES:
                # a long-lived grammar (JSON mode in a server) keeps growing with every new
                # nesting context; hand new requests a fresh one (old matchers keep theirs)
                del self._cache[key]
                hit = None
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one compile per key; other keys compile concurrently
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    return hit
            _GC_PAUSE.enter()  # compiling allocates ~10^5 small lists and tuples that all live on:
            failed = None    # the cyclic GC would rescan them again and again (2-3x the compile time)
            try:
                compiled = self._compile(build(), key)
            except CompileTimeout as e:
                # free the half-built grammar now, by reference counts, while the GC is still
                # off: with the frames alive, the first collection after gc.enable() would
                # traverse all of it (a 0.1-0.4 s pause of every thread, GIL held)
                failed = CompileTimeout(str(e))
                release_frames(e.__traceback__)  # the big parts a piece at a time (_release.py)
                e.__traceback__ = None
            finally:
                _GC_PAUSE.exit()
                with self._lock:
                    self._key_locks.pop(key, None)
            if failed is not None:
                try:
                    raise failed  # nothing of this compile was stored
                finally:
                    failed = None  # no cycle through this frame's traceback
            with self._lock:
                self._cache[key] = compiled
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return compiled

    def _compile(self, grammar: ir.Grammar, key) -> CompiledGrammar:
        try:
            prepared = prepare(grammar)
            nfa = build_nfa(prepared)
            release(prepared)  # the IR is not needed past the NFA: freed gradually (_release.py)
            release(grammar)
            auto = LazyAutomaton(nfa, self.info)
            compiled = CompiledGrammar(auto, key[0])
            compiled.masks.mask(auto.start)
            compiled.masks.prepare_keys()  # the key tries' shared part, which a step would pay
            _prepare_first_key(compiled)
        except AutomatonLimit as e:
            raise CompileError(f"grammar exceeds a limit at its start: {e}") from None
        except RecursionError:
            raise CompileError("grammar nesting too deep to compile") from None
        return compiled


def _fill_along(g, text: str, row) -> None:
    """The warm-ups' fill: g's masks at every byte of text, a new matcher from its start
    (text must lie in g's language: the constants of this module)."""
    m = g.matcher()
    for b in text.encode():
        m.fill_bitmask(row)
        if not m.accept_string(bytes([b])):
            raise AssertionError("the warm-up text %r left its grammar" % text)  # a bug in the constants below


OBJECT_START = b'{"'  # where every compact JSON object with members begins


def _prepare_first_key(compiled) -> None:
    """The mask of the state after `{"` (a JSON object's first key), made at the compile
    where the grammar takes those bytes from its start: a JSON document's second decode
    step (its first token is `{` or `{"`) would otherwise make it, often the slowest step
    of a request's first document (a narrow walk of the names' first tokens and the states
    it makes, ~100-300 µs in a process forked per schema). Other grammars are told by
    the start's row (made by the first mask). A limit met here leaves the compile as it
    is."""
    a = compiled.automaton
    if a.expanded[a.start] and not a.trans[a.start, OBJECT_START[0]]:
        return
    try:
        t = a.step(a.start, OBJECT_START)
        if t:
            compiled.masks.mask(t)
    except AutomatonLimit:
        pass


# a JSON text through every lexeme of the compact JSON grammars (strings with escapes and
# wide characters, a bounded string (string_counters.py's tables), numbers, integers,
# booleans, null, nested any values)
_LEXEME_TEXT = ('{"s":"ab c\\"\\\\\\/\\u00e9 é\\n","n":-1.5e+3,"i":-42,"b":true,"t":"a\\"é b",'
                '"x":{"k":["v",0,2.0E-1,null,false,{},[]],"m":{"":""}}}')
_LEXEME_SCHEMA = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "number"},
                                                   "i": {"type": "integer"}, "b": {"type": "boolean"},
                                                   "t": {"type": "string", "maxLength": 40}}}
# ordinary values of each lasting format (_warm_formats), written for their shapes (the
# states they pass through), not taken from any benchmark
_FORMAT_VALUES = {
    "date": ["2024-02-29", "1999-12-31"],
    "time": ["10:30:00Z", "23:59:59.123+05:30"],
    "date-time": ["2024-01-15T10:30:00Z", "2023-12-31T23:59:59.999+01:00"],
    "duration": ["P1Y2M3DT4H5M6S", "PT30M"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000"],
    "uri": ["https://www.example.com/path/to?q=1&r=a#frag", "http://example.org", "urn:isbn:0451450523"],
    "uri-reference": ["/a/b?c=1#d", "https://x.example/z"],
    "ipv4": ["192.168.0.1"],
    "ipv6": ["2001:db8::ff00:42:8329", "::1"],
    "uri-template": ["http://example.com/{id}/x{?q,r}"],
}
_LEXEMES_DONE = weakref.WeakSet()  # the TokenizerInfos whose lexeme masks are made
_CORPUS_DONE: list = []  # [True] once a compiler has compiled _WARM_CORPUS in this process


def _warm_walk():
    """Imports numba and loads the compiled trie walks (their on-disk cache, each called
    once on a tiny trie by _walk._build: ~0.1-0.5 s once per process, remembered there)
    when a compiler is made, rather than in the first request's mask."""
    from . import _walk

    _walk.get_walk()


# schemas of the keywords' common shapes, written for _warm_corpus (not taken from any
# benchmark): definitions and $ref, anyOf / oneOf / allOf, enum and const, arrays with
# bounds and tuples, patterns, formats, bounded strings and numbers, closed and open
# objects, nested objects, type lists, additional and pattern properties
_WARM_CORPUS = [
    {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1}, "name": {"type": "string", "minLength": 1, "maxLength": 80},
        "email": {"type": "string", "format": "email"}, "created": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 10},
        "score": {"type": "number", "minimum": 0, "maximum": 100}, "active": {"type": "boolean"},
        "kind": {"enum": ["a", "b", "c"]}, "note": {"type": ["string", "null"]}},
     "required": ["id", "name"], "additionalProperties": False},
    {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {
        "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                  "required": ["x", "y"]},
        "shape": {"oneOf": [{"type": "object", "properties": {"type": {"const": "circle"},
                                                             "center": {"$ref": "#/definitions/point"},
                                                             "r": {"type": "number", "exclusiveMinimum": 0}},
                             "required": ["type", "center", "r"]},
                            {"type": "object", "properties": {"type": {"const": "poly"},
                                                             "points": {"type": "array", "minItems": 3,
                                                                        "items": {"$ref": "#/definitions/point"}}},
                             "required": ["type", "points"]}]}},
     "type": "object", "properties": {"shapes": {"type": "array", "items": {"$ref": "#/definitions/shape"}},
                                      "meta": {"type": "object", "additionalProperties": {"type": "string"}}}},
    {"type": "array", "items": {"anyOf": [{"type": "string", "pattern": "^[a-z][a-z0-9_-]{2,15}$"},
                                          {"type": "integer", "multipleOf": 5}, {"type": "null"}]},
     "minItems": 1},
    {"type": "object", "properties": {"version": {"type": "string", "pattern": "^\\d+\\.\\d+\\.\\d+$"},
                                      "url": {"type": "string", "format": "uri"},
                                      "uuid": {"type": "string", "format": "uuid"},
                                      "when": {"type": "string", "format": "date"}},
     "patternProperties": {"^x-": {}}, "allOf": [{"required": ["version"]}],
     "dependentRequired": {"url": ["uuid"]}},
    {"type": "object", "properties": {"config": {"type": "object", "properties": {
        "retries": {"type": "integer", "minimum": 0, "maximum": 10, "default": 3},
        "mode": {"type": "string", "enum": ["fast", "safe"]},
        "limits": {"type": "object", "properties": {"cpu": {"type": "string"}, "memory": {"type": "string"}}}}},
        "items": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}},
     "not": {"required": ["forbidden"]}},
]
