"""A fixed 100-schema sample of MaskBench's development half (tests/data/maskbench-sample,
drawn with the benchmark's own rule: stratified by split, sha256-ordered) through
schema_to_gbnf's text (reference matcher) and compile_json_schema (engine), as the
benchmark checks it: every valid instance (compact JSON, keys in the schema's
`properties` order) accepted, every invalid one rejected.

Counts measured 2026-11-29 (reference matcher and engine agree):
  default (unsupported="raise", undeclared members allowed): passing 99, compile_error 1, valid_rejected 0, invalid_accepted 0
  allow_extra_properties=False (xgrammar strict): passing 93, compile_error 1, valid_rejected 6, invalid_accepted 0
The 6 valid_rejected without extra members are instances with members their schema
does not declare (MaskBench's valid instances follow JSON Schema, where they are allowed).
The compile error: a pattern beside format "uri" (two regular languages furca does
not intersect).
"""
import pytest

from .test_json_schema_helpers import real_tokenizer_accept, Counts, check_case, engine_accept, maskbench_cases

MODES = {  # name: (schema keywords, passing floor, engine: every n-th schema, its floor)
    "default": ({}, 99, 4, 24),  # undeclared-member grammars are slower to walk: every 4th schema
    "no-extra": ({"allow_extra_properties": False}, 93, 1, 93),
}


def _run(kw, accept=None, every=1):
    counts = Counts()
    cases = list(maskbench_cases())
    assert len(cases) == 100
    for name, schema, tests in cases[::every]:
        check_case(name, schema, tests, counts, accept=accept, **kw)
    return counts


@pytest.mark.parametrize("mode", sorted(MODES))
def test_maskbench_sample_with_reference_matcher(mode):
    kw, floor, _, _ = MODES[mode]
    counts = _run(kw)
    print(mode, counts.as_dict(), counts.errors)
    assert counts.invalid_accepted == 0, [f for f in counts.failures if f[1] == "invalid_accepted"]
    assert counts.passing >= floor, (counts.as_dict(), counts.failures)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_maskbench_sample_with_engine(mode):
    accept = engine_accept()
    kw, _, every, floor = MODES[mode]
    counts = _run(kw, accept, every)
    print(mode, "engine", counts.as_dict())
    assert counts.invalid_accepted == 0, [f for f in counts.failures if f[1] == "invalid_accepted"]
    assert counts.passing >= floor, (counts.as_dict(), counts.failures)


def test_maskbench_sample_with_real_128k_tokenizer(llama):
    """The 100-schema sample token by token with the Llama-3.1 tokenizer, as the
    benchmark walks it."""
    kw, _, _, _ = MODES["default"]
    counts = _run(kw, real_tokenizer_accept(*llama))
    print("llama-3.1", counts.as_dict())
    assert counts.invalid_accepted == 0, [f for f in counts.failures if f[1] == "invalid_accepted"]
    assert counts.passing >= 99, (counts.as_dict(), counts.failures)
