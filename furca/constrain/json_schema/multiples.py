"""multipleOf an integer k >= 2: the JSON integers divisible by k.

Divisibility by k is a regular language in decimal: reading digits left to right, the
remainder r becomes (10 r + d) mod k, so k rules (one per remainder, each digit class
leading to the next remainder) accept exactly the multiples (`multiples`). With both
bounds and at most MAX_LISTED multiples between them, the multiples are listed as
literals instead (`integer_multiples` decides). Integers only: a number schema takes
the same grammar (1.0 and 4e1 spellings are a narrowing, as for bounded numbers).
A fractional multipleOf other than 10^-n (0.25) between two bounds lists its multiples
too (scalars._listed_multiples: each in its shortest decimal spelling, trailing zeros
allowed). Anything else (such a fraction without both bounds, a bound beside an
unbounded side other than 0) stays unsupported.
"""
from __future__ import annotations

from .grammar import EMPTY, NOTHING, Ref, alt, cls, lit, seq

MAX_K = 1000        # remainders: rules per grammar
MAX_LISTED = 512    # multiples listed as literals between two bounds


def _digits(ds):
    """cls of the digit characters in ds (ascending)."""
    ranges, start = [], None
    for d in ds:
        if start is not None and d == prev + 1:
            prev = d
            continue
        if start is not None:
            ranges.append((0x30 + start, 0x30 + prev))
        start = prev = d
    ranges.append((0x30 + start, 0x30 + prev))
    return cls(tuple(ranges))


def multiples(k: int, grammar, negative: bool = True):
    """IR of the canonical JSON integers divisible by k (>= 0 only unless `negative`)."""
    names = [grammar.new_name("mult") for _ in range(k)]
    for r in range(k):
        by_next = {}
        for d in range(10):
            by_next.setdefault((10 * r + d) % k, []).append(d)
        parts = [EMPTY] if r == 0 else []
        parts += [seq(_digits(ds), Ref(names[t])) for t, ds in sorted(by_next.items())]
        grammar.define(names[r], alt(*parts))
    lead = {}
    for d in range(1, 10):
        lead.setdefault(d % k, []).append(d)
    positive = alt(*[seq(_digits(ds), Ref(names[t])) for t, ds in sorted(lead.items())])
    body = alt(lit("0"), positive)
    return alt(body, seq(lit("-"), positive)) if negative else body


def integer_multiples(k: int, lo, hi, grammar):
    """IR of the multiples of k in [lo, hi] (None: unbounded), or None when not built."""
    if lo is not None and hi is not None:
        first = -(-lo // k) * k
        if first > hi:
            return NOTHING
        if (hi - first) // k + 1 <= MAX_LISTED:
            return alt(*[lit(str(v)) for v in range(first, hi + 1, k)])
    if k > MAX_K or hi is not None:
        return None
    if lo is None:
        return multiples(k, grammar)
    if -k < lo <= 0:
        return multiples(k, grammar, negative=False)
    return None
