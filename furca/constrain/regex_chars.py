"""Characters of the regex parser (regex_syntax.py), in its two dialects: backslash
escapes and bracket classes. Both read at ``p.i`` of a regex_syntax parser ``p`` (its
``s``, ``i``, ``py``, ``space``, ``icase``, ``peek``, ``err``) and advance it.

``escape(p, in_class)`` returns a code point (int), a list of (lo, hi) code-point ranges
(a class escape such as ``\\d``), or, outside a class in the python dialect, the anchor
``"^"`` (``\\A``) or ``"$"`` (``\\Z``, ``\\z``). ``char_class(p)`` returns the ranges
of the class at ``[``. The table of differences is in regex_syntax's docstring.
"""

from __future__ import annotations

import unicodedata

from . import ir

DIGIT = ((48, 57),)
WORD = ((48, 57), (65, 90), (95, 95), (97, 122))
SPACE = {
    "python": ((9, 13), (32, 32)),
    "ecma": ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
             (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)),
}
DOT = {  # "." without the dotall flag
    "python": tuple(ir.negate_ranges([(10, 10)])),
    "ecma": tuple(ir.negate_ranges([(10, 10), (13, 13), (0x2028, 0x2029)])),
}
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE = {
    "python": {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7},
    "ecma": {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11},
}


def escape(p, in_class: bool):
    start = p.i
    p.i += 1
    c = p.peek()
    if not c:
        p.err("bad escape (end of pattern)", start)
    p.i += 1
    if c in "dwsDWS":
        ranges = {"d": DIGIT, "w": WORD, "s": p.space}[c.lower()]
        return list(ranges) if c.islower() else ir.negate_ranges(ranges)
    dialect = "python" if p.py else "ecma"
    simple = _SIMPLE[dialect].get(c)
    if simple is not None:
        return simple
    if c in "bB":
        if in_class and c == "b":
            return 8  # backspace
        if not in_class and p.boundaries:
            return ("bound", c == "B")  # regex_syntax: a ("bound", negated, position) node
        p.err(f"word boundary \\{c} is not supported", start)
    if c.isdigit():
        return _digits(p, c, start, in_class)
    return (_python if p.py else _ecma)(p, c, start, in_class)


def char_class(p):
    """At '[': the ranges of the class (negated and case-folded as the flags say)."""
    start = p.i
    p.i += 1
    neg = p.peek() == "^"
    if neg:
        p.i += 1
    if p.peek() == "]" and not p.py:  # ecma: [] is empty, [^] any character
        p.i += 1
        return [(0, ir.MAX_CODEPOINT)] if neg else []
    ranges, first = [], True
    while True:
        if p.i >= len(p.s):
            p.err("unterminated character set", start)
        if p.peek() == "]" and not first:
            p.i += 1
            break
        first = False
        lo = _class_item(p)
        ranged = p.peek() == "-" and p.peek(1) not in ("]", "")
        if isinstance(lo, list):
            if ranged:
                p.err("bad character range (a class escape cannot bound a range)")
            ranges += lo
        elif ranged:
            rpos = p.i
            p.i += 1
            hi = _class_item(p)
            if isinstance(hi, list):
                p.err("bad character range", rpos)
            if hi < lo:
                p.err(f"bad character range {chr(lo)}-{chr(hi)}", rpos)
            ranges.append((lo, hi))
        else:
            ranges.append((lo, lo))
    if neg:
        if p.icase:
            ranges = ir.case_fold_ranges(ranges)
        ranges = ir.negate_ranges(ranges)
    return ranges


def _class_item(p):
    """A code point, or a list of ranges for a class escape."""
    c = p.peek()
    if c == "\\":
        return escape(p, in_class=True)
    if p.py and c == "[" and p.peek(1) in (":", "=", "."):
        j = p.s.find("]", p.i + 2)
        if j > 0 and p.s[j - 1] == p.peek(1):
            p.err("POSIX character classes are not supported")
    p.i += 1
    return ord(c)


def _digits(p, c, start, in_class):
    """\\0 and octal escapes; any other digit is a backreference (not regular)."""
    if p.py and (c == "0" or (c in "1234567" and in_class)):
        digits = c
        while len(digits) < 3 and p.peek() and p.peek() in "01234567":
            digits += p.peek()
            p.i += 1
        return int(digits, 8)
    if not p.py and (c != "0" and in_class or c == "0" and p.peek().isdigit()):
        p.err("octal escape is not supported", start)
    if c == "0":
        return 0
    p.err(f"backreference \\{c} is not supported (not a regular language)", start)


def _python(p, c, start, in_class):
    if c in "xuU":
        return _hex(p, {"x": 2, "u": 4, "U": 8}[c], start)
    if c == "N" and p.peek() == "{":
        j = p.s.find("}", p.i)
        try:
            cp = ord(unicodedata.lookup(p.s[p.i + 1 : j]))
        except (KeyError, ValueError):
            p.err("bad character name", start)
        p.i = j + 1
        return cp
    if c in "AZz" and not in_class:
        return "^" if c == "A" else "$"
    if c.isalnum():
        p.err(f"bad escape \\{c}", start)
    return ord(c)


def _hex(p, n, start):
    h = p.s[p.i : p.i + n]
    if len(h) != n or not _HEX.issuperset(h):
        p.err(f"incomplete escape \\{p.s[start + 1]}{h}", start)
    p.i += n
    cp = int(h, 16)
    if cp > ir.MAX_CODEPOINT:
        p.err("bad escape (code point out of range)", start)
    return cp


def _ecma(p, c, start, in_class):
    if c == "k" and p.peek() == "<":
        p.err("named backreference \\k<name> is not supported (not a regular language)", start)
    if c in "pP":
        p.err(f"unicode property escape \\{c}{{...}} is not supported", start)
    if c == "c":  # \cX: X % 32; Annex B: also a digit or _ in a class, else a literal backslash
        x = p.peek()
        if x and x.isascii() and (x.isalpha() or in_class and (x.isdigit() or x == "_")):
            p.i += 1
            return ord(x) % 32
        p.i = start + 1  # "c" is read again as the next character
        return ord("\\")
    if c == "x":
        h = p.s[p.i : p.i + 2]
        if len(h) == 2 and _HEX.issuperset(h):
            p.i += 2
            return int(h, 16)
        return ord("x")
    if c == "u":
        return _ecma_u(p, start)
    return ord(c)  # identity escape


def _ecma_u(p, start):
    """\\u{H...}, \\uHHHH (a surrogate pair as one code point), or the letter u."""
    if p.peek() == "{":
        end = p.s.find("}", p.i)
        h = p.s[p.i + 1 : end] if end > 0 else ""
        if h and _HEX.issuperset(h) and int(h, 16) <= ir.MAX_CODEPOINT:
            p.i = end + 1
            return int(h, 16)
        p.err("bad \\u{...} escape", start)
    h = p.s[p.i : p.i + 4]
    if len(h) != 4 or not _HEX.issuperset(h):
        return ord("u")
    p.i += 4
    cp = int(h, 16)
    h2 = p.s[p.i + 2 : p.i + 6]
    if (0xD800 <= cp <= 0xDBFF and p.s.startswith("\\u", p.i) and len(h2) == 4 and _HEX.issuperset(h2)
            and 0xDC00 <= int(h2, 16) <= 0xDFFF):
        p.i += 6
        cp = 0x10000 + ((cp - 0xD800) << 10) + (int(h2, 16) - 0xDC00)
    return cp
