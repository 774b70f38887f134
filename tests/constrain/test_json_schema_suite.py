"""The official JSON-Schema-Test-Suite (drafts 2020-12 and 7, optional tests included;
copied under tests/data/json-schema-test-suite) through schema_to_gbnf's text (reference
matcher) and compile_json_schema (engine).

Per case: compile with unsupported="raise"; a CompileError counts as compile_error (unsupported keyword,
remote $ref, ...). Otherwise every valid instance (compact JSON, keys in `properties`
order) must be accepted by the grammar with JSON Schema's meaning of undeclared
members (unsupported="warn", used only when it compiles without a warning), and no
invalid instance may be accepted by either grammar.

invalid_accepted must be 0. valid_rejected comes from documented narrowings only:
format.json's "format is an annotation" cases (furca enforces formats), members of
merged allOf/$ref/dependency objects in an order other than the merge's, numbers
written 1.0 inside enum arrays, const objects with reordered keys, leap seconds with
offsets, punycode host names, idn-email addresses with a non-ASCII domain or quoted
local part, several patternProperties with different schemas, oneOf branches whose
shared types are dropped (no proof of exclusivity), a custom metaschema vocabulary.
Measured 2026-12-01 (passing / compile_error / valid_rejected / invalid_accepted):
draft2020-12 226/199/36/0 of 461 cases, draft7 219/84/18/0 of 321 (idn-email moved
from compile_error to valid_rejected: its documented narrowing). Floors are those
numbers; raise them when the code does better.
"""
import pytest

from .test_json_schema_helpers import real_tokenizer_accept, Counts, check_case, engine_accept, suite_cases

# passing cases (of 461 and 321); 2026-12-04: 250 / 243 (not by keyword groups and of
# $refs, contains, format with a pattern), then 252 / 245 (not of number literals, of
# patternProperties / additionalProperties / propertyNames), 258 / 251 by session 19's end
# (the floors not raised then), 258 / 252 in session 20 (format uri-template: 2 + 2 cases
# leave compile_error: draft 7's one passes, the other three are valid_rejected, as
# format.json's annotation-only cases are for every format furca asserts)
FLOORS = {"draft2020-12": 258, "draft7": 252}
# format "regex" (2026-12-04) moved 4 / 3 cases from compile_error to valid_rejected: its
# narrowing to what both ECMA-262 and Python's re compile (the suite's named groups,
# lookbehind, empty classes) and format.json's "only an annotation" case, as every format
MAX_VALID_REJECTED = {"draft2020-12": 40, "draft7": 21}


def _run(draft, accept=None):
    counts = Counts()
    for name, schema, tests in suite_cases(draft):
        check_case(name, schema, tests, counts, accept=accept, semantics="json-schema")
    return counts


@pytest.mark.parametrize("draft", sorted(FLOORS))
def test_suite_with_reference_matcher(draft):
    counts = _run(draft)
    print(draft, counts.as_dict())
    assert counts.invalid_accepted == 0, [f for f in counts.failures if f[1] == "invalid_accepted"]
    assert counts.passing >= FLOORS[draft], counts.as_dict()
    assert counts.valid_rejected <= MAX_VALID_REJECTED[draft], [f for f in counts.failures if f[1] == "valid_rejected"]


@pytest.mark.parametrize("draft", sorted(FLOORS))
def test_suite_with_engine(draft):
    accept = engine_accept()
    counts = _run(draft, accept)
    print(draft, "engine", counts.as_dict())
    assert counts.invalid_accepted == 0, [f for f in counts.failures if f[1] == "invalid_accepted"]
    assert counts.passing >= FLOORS[draft], counts.as_dict()


@pytest.mark.parametrize("draft", sorted(FLOORS))
def test_suite_with_real_128k_tokenizer(draft, llama):
    """The same check, token by token with the Llama-3.1 tokenizer (128k): every token
    of a valid instance in the mask and accepted, EOS at the end; no invalid one."""
    counts = _run(draft, real_tokenizer_accept(*llama))
    print(draft, "llama-3.1", counts.as_dict())
    assert counts.invalid_accepted == 0, [f for f in counts.failures if f[1] == "invalid_accepted"]
    assert counts.passing >= FLOORS[draft], counts.as_dict()


def test_unsupported_keywords_are_compile_errors():
    """Every case using (at its top) a keyword furca never enforces is a CompileError
    with unsupported="raise". (not, if/then/else and the dependency keywords are rewritten when an
    exact rewrite exists, so they are not in this list.)"""
    from furca.constrain.json_schema.compiler import UNSUPPORTED

    never = UNSUPPORTED - {"if", "then", "else", "not", "dependencies", "dependentRequired", "dependentSchemas"}
    checked = 0
    for draft in FLOORS:
        counts = Counts()
        for name, schema, tests in suite_cases(draft):
            top = schema if isinstance(schema, dict) else {}
            if any(k in top for k in never):
                checked += 1
                assert check_case(name, schema, tests, counts) == "compile_error", name
    assert checked > 50
