"""Grammars for JSON integers and numbers within bounds (exact, digit by digit).

Integers: the classic range-to-regex split by digit count. Numbers with bounds:
sign, integer part and fraction handled apart, so `minimum: 1.5` gives
"1" followed by a fraction >= .5, or an integer part >= 2 with any fraction.
Numbers bounded on both sides are written without an exponent (a narrowing, documented
in `__init__`); unbounded ones allow the full JSON number syntax. On the side without a
bound an exponent is allowed where it cannot cross the other: any exponent where the bound
is 0 and 0 is valid (`minimum: 0` takes 1e-06; a parser may round 1e-400 to 0), a
non-negative one elsewhere (m * 10^e >= m >= lo).
"""
from __future__ import annotations

from decimal import Decimal

from .grammar import EMPTY, NOTHING, Alt, Cls, Lit, Rep, Seq, alt, cls, lit, opt, rep, seq

DIGIT = cls([(0x30, 0x39)])
NONZERO = cls([(0x31, 0x39)])
INT_UNBOUNDED = seq(opt(lit("-")), alt(lit("0"), seq(NONZERO, rep(DIGIT, 0, None))))
FRACTION = seq(lit("."), rep(DIGIT, 1, None))
EXPONENT = seq(cls([(0x45, 0x45), (0x65, 0x65)]), opt(cls([(0x2B, 0x2B), (0x2D, 0x2D)])), rep(DIGIT, 1, None))
EXPONENT_NONNEG = seq(cls([(0x45, 0x45), (0x65, 0x65)]), opt(lit("+")), rep(DIGIT, 1, None))
NUMBER_UNBOUNDED = seq(INT_UNBOUNDED, opt(FRACTION), opt(EXPONENT))


def _digit_range(a: int, b: int):
    return lit(str(a)) if a == b else cls([(0x30 + a, 0x30 + b)])


def _same_len(lo: str, hi: str):
    """Digit strings of len(lo) == len(hi) between lo and hi inclusive (leading zeros allowed)."""
    n = len(lo)
    if n == 0:
        return EMPTY
    if lo == hi:
        return lit(lo)
    if lo[0] == hi[0]:
        return seq(lit(lo[0]), _same_len(lo[1:], hi[1:]))
    rest = n - 1
    a, b = int(lo[0]), int(hi[0])
    parts = []
    lo_full = lo[1:] == "0" * rest
    hi_full = hi[1:] == "9" * rest
    start = a if lo_full else a + 1
    end = b if hi_full else b - 1
    if not lo_full:
        parts.append(seq(lit(lo[0]), _same_len(lo[1:], "9" * rest)))
    if start <= end:
        parts.append(seq(_digit_range(start, end), rep(DIGIT, rest, rest)))
    if not hi_full:
        parts.append(seq(lit(hi[0]), _same_len("0" * rest, hi[1:])))
    return alt(*parts)


def nonneg_range(lo: int, hi: int | None):
    """Canonical decimal integers in [lo, hi] (lo >= 0; hi None = no upper bound)."""
    if hi is not None and hi < lo:
        return NOTHING
    parts = []
    if lo == 0:
        parts.append(lit("0"))
        lo = 1
        if hi == 0:
            return parts[0]
    n = len(str(lo))
    while hi is None or n <= len(str(hi)):
        a = max(lo, 10 ** (n - 1))
        b = 10 ** n - 1 if hi is None else min(hi, 10 ** n - 1)
        if hi is None and a == 10 ** (n - 1):
            parts.append(seq(NONZERO, rep(DIGIT, n - 1, None)))
            break
        if a <= b:
            parts.append(_same_len(str(a), str(b)))
        n += 1
    return alt(*parts)


def int_range(lo: int | None, hi: int | None):
    """Canonical JSON integers in [lo, hi]; None = unbounded on that side."""
    if lo is None and hi is None:
        return INT_UNBOUNDED
    parts = []
    if hi is None or hi >= 0:
        parts.append(nonneg_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        # negatives: -m with m in [max(1, -hi), -lo]
        m_lo = max(1, -hi) if hi is not None else 1
        m_hi = -lo if lo is not None else None
        body = nonneg_range(m_lo, m_hi)
        if body != NOTHING:
            parts.append(seq(lit("-"), body))
    return alt(*parts)


# ----------------------------------------------------------------- fractions
# Fraction digit strings s compare as the decimals 0.s; "" is 0.
ANY_DIGITS = rep(DIGIT, 0, None)


# `room`: how many fraction digits may be non-zero (multipleOf 10^-room); None = any.
def _dec(room):
    return None if room is None else room - 1


def _tail(room):
    """Any fraction digits (only zeros beyond `room`)."""
    if room is None:
        return ANY_DIGITS
    return seq(rep(DIGIT, 0, room), rep(lit("0"), 0, None))


def _positive(room=None):
    """Digit strings with a non-zero digit: 0.s > 0."""
    if room is None:
        return seq(rep(lit("0"), 0, None), NONZERO, ANY_DIGITS)
    return alt(*[seq(rep(lit("0"), q, q), NONZERO, _tail(room - q - 1)) for q in range(room)])


def _frac_ge(d: str, strict: bool, room=None):
    """0.s >= 0.d (> when strict)."""
    d = d.rstrip("0")
    if not d:
        return _positive(room) if strict else _tail(room)
    if room == 0:
        return NOTHING
    c = int(d[0])
    parts = [seq(lit(d[0]), _frac_ge(d[1:], strict, _dec(room)))]
    if c < 9:
        parts.append(seq(cls([(0x31 + c, 0x39)]), _tail(_dec(room))))
    return alt(*parts)


def _frac_le(d: str, strict: bool, room=None):
    """0.s <= 0.d (< when strict)."""
    d = d.rstrip("0")
    if not d:
        return NOTHING if strict else rep(lit("0"), 0, None)
    if room == 0:
        return rep(lit("0"), 0, None)
    c = int(d[0])
    parts = [EMPTY, seq(lit(d[0]), _frac_le(d[1:], strict, _dec(room)))]
    if c > 0:
        parts.append(seq(cls([(0x30, 0x2F + c)]), _tail(_dec(room))))
    return alt(*parts)


def _frac_pos_le(b: str, strict: bool, room=None):
    """0 < 0.s <= 0.b (< when strict); b > 0."""
    b = b.rstrip("0")
    if not b or room == 0:
        return NOTHING
    c = int(b[0])
    if c == 0:
        return seq(lit("0"), _frac_pos_le(b[1:], strict, _dec(room)))
    parts = [seq(lit("0"), _positive(_dec(room))), seq(lit(b[0]), _frac_le(b[1:], strict, _dec(room)))]
    if c > 1:
        parts.append(seq(cls([(0x31, 0x2F + c)]), _tail(_dec(room))))
    return alt(*parts)


def _frac_between(a: str, a_strict: bool, b: str, b_strict: bool, room=None):
    """0.a <(=) 0.s <(=) 0.b, with 0.a <= 0.b."""
    a, b = a.rstrip("0"), b.rstrip("0")
    if a == b:
        if a_strict or b_strict or (room is not None and len(a) > room):
            return NOTHING
        return seq(lit(a), rep(lit("0"), 0, None))
    if not a:
        return _frac_pos_le(b, b_strict, room) if a_strict else _frac_le(b, b_strict, room)
    if room == 0:
        return NOTHING
    if a[0] == b[0]:
        return seq(lit(a[0]), _frac_between(a[1:], a_strict, b[1:], b_strict, _dec(room)))
    ad, bd = int(a[0]), int(b[0])
    parts = [seq(lit(a[0]), _frac_ge(a[1:], a_strict, _dec(room))),
             seq(lit(b[0]), _frac_le(b[1:], b_strict, _dec(room)))]
    if bd - ad > 1:
        parts.append(seq(cls([(0x31 + ad, 0x2F + bd)]), _tail(_dec(room))))
    return alt(*parts)


def _split(x: Decimal):
    """Non-negative decimal -> (integer part, fraction digits)."""
    x = abs(x)
    ip = int(x)
    s = format(x - ip, "f")
    fd = s.split(".", 1)[1] if "." in s else ""
    return ip, fd.rstrip("0")


def _nonneg_number(lo: Decimal, lo_strict: bool, hi: Decimal | None, hi_strict: bool, room=None):
    """Non-negative JSON numbers (no sign, no exponent) in the interval, 0 <= lo."""
    li, lf = _split(lo)
    any_frac = _dotted(_tail(room))
    if hi is None:
        return alt(seq(lit(str(li)), _dotted(_frac_ge(lf, lo_strict, room))), seq(nonneg_range(li + 1, None), any_frac))
    if hi < lo or (hi == lo and (lo_strict or hi_strict)):
        return NOTHING
    hi_i, hf = _split(hi)
    if li == hi_i:
        return seq(lit(str(li)), _dotted(_frac_between(lf, lo_strict, hf, hi_strict, room)))
    return alt(seq(lit(str(li)), _dotted(_frac_ge(lf, lo_strict, room))),
               seq(nonneg_range(li + 1, hi_i - 1), any_frac),
               seq(lit(str(hi_i)), _dotted(_frac_le(hf, hi_strict, room))))


def _dotted(digits):
    """Digit-string IR (may accept "") -> "" (no fraction) | "." non-empty digits."""
    parts = [EMPTY] if nullable(digits) else []
    ne = _nonempty(digits)
    if ne != NOTHING:
        parts.append(seq(lit("."), ne))
    return alt(*parts) if parts else NOTHING


def nullable(node) -> bool:
    """Does the decoded-character IR `node` (no Ref) accept the empty string?"""
    if isinstance(node, Lit):
        return node.text == ""
    if isinstance(node, Cls):
        return False
    if isinstance(node, Seq):
        return all(nullable(i) for i in node.items)
    if isinstance(node, Alt):
        return any(nullable(i) for i in node.items)
    if isinstance(node, Rep):
        return node.min == 0 or nullable(node.item)
    raise TypeError(node)


def _nonempty(node):
    """The non-empty strings of a digit IR (items of repetitions are never nullable here)."""
    if not nullable(node):
        return node
    if isinstance(node, Lit):
        return NOTHING
    if isinstance(node, Alt):
        return alt(*[_nonempty(i) for i in node.items])
    if isinstance(node, Rep):
        return seq(node.item, rep(node.item, max(node.min - 1, 0), None if node.max is None else node.max - 1))
    if isinstance(node, Seq):
        head, tail = node.items[0], seq(*node.items[1:])
        return alt(seq(_nonempty(head), tail), _nonempty(tail))
    raise TypeError(node)


def _exponent_past(mantissa, any_exponent: bool, unbounded_above: bool):
    """Magnitudes ``mantissa`` (all >= some lo >= 0) with an exponent none of which takes
    them below lo: a non-negative one (m * 10^e >= m), or any (``any_exponent``: lo is 0
    and 0 itself valid, so even a value a parser rounds to 0, 1e-400, is). Unchanged when
    bounded above (an exponent could cross that bound)."""
    if not unbounded_above or mantissa == NOTHING:
        return mantissa
    return seq(mantissa, opt(EXPONENT if any_exponent else EXPONENT_NONNEG))


def number_range(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool, room=None):
    """JSON numbers x with lo <(=) x <(=) hi (an exponent only on an unbounded side, see
    the module docstring); None = unbounded.
    room: at most that many non-zero fraction digits (multipleOf 10^-room)."""
    if lo is None and hi is None and room is not None:
        return seq(INT_UNBOUNDED, _dotted(_tail(room)))
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):
        nlo, nls = (lo, lo_strict) if lo is not None and lo >= 0 else (Decimal(0), False)
        parts.append(_exponent_past(_nonneg_number(nlo, nls, hi, hi_strict, room), nlo == 0 and not nls,
                                    hi is None and room is None))
    if lo is None or lo < 0:
        # negatives: -y with y in (max(0, -hi), -lo]; y == 0 excluded ("-0" is not produced)
        if hi is not None and hi < 0:
            ylo, yls = -hi, hi_strict
        else:
            ylo, yls = Decimal(0), True
        yhi, yhs = (-lo, lo_strict) if lo is not None else (None, False)
        zero_valid = hi is None or hi > 0 or (hi == 0 and not hi_strict)  # -1e-400 reads as -0.0
        parts.append(seq(lit("-"), _exponent_past(_nonneg_number(ylo, yls, yhi, yhs, room), ylo == 0 and zero_valid,
                                                  yhi is None and room is None)))
    parts = [p for p in parts if p != NOTHING]
    return alt(*parts) if parts else NOTHING
