"""One regex parser for the two dialects furca reads, into one syntax tree.

``parse(pattern, dialect, what)`` reads

- ``"python"``: Python ``re`` syntax, used with full-match semantics (regex constraints,
  Lark terminals; ``constrain.regex`` turns the tree into byte-level ``constrain.ir``);
- ``"ecma"``: ECMA-262 syntax, used with search semantics (JSON Schema ``pattern`` and
  ``patternProperties``; ``json_schema.regex`` pads unanchored ends and JSON-encodes).

The tree is made of tuples shaped like ``constrain.ir`` but over code points:

    ("chars", ranges)          one code point in the union of inclusive (lo, hi) ranges
    ("seq", [node, ...])       concatenation; ("seq", []) is the empty string
    ("alt", [node, ...])       alternation
    ("rep", node, min, max)    repetition; max None = unbounded
    ("bound", negated, pos)    ``\\b`` / ``\\B``, only with parse(..., boundaries=True)

Groups leave no node of their own, a one-item seq or alt is its item, and
case-insensitive flags are already applied (the ranges are folded), so a back end is one
small recursive map. ``parse`` returns the top-level alternatives as ``Branch`` es, each
with whether ``^`` anchored its start and ``$`` its end. An ECMA ``$`` anywhere else (the
end of the input, wherever written) is compiled away exactly: the alternative splits into
its paths without a ``$`` and its paths that end at one (regex_anchors.py). Any other
anchor elsewhere is a CompileError. Python's ``$`` also matches before a final newline,
but only under search semantics: under full match it is the end, like ECMA's.

Both dialects: literals, ``.``, classes with ranges and negation, ``\\d \\w`` (ASCII, as in
ECMA-262 and xgrammar: [0-9], [A-Za-z0-9_]) and their negations, ``\\n \\t \\r \\f \\v``,
``\\xHH``, ``\\uHHHH``, ``(?:...)``, named groups ``(?<name>...)``, alternation, greedy and
lazy quantifiers ``* + ? {m} {m,} {m,n}``, anchors ``^ $`` at the ends of top-level
alternatives. A CompileError naming the construct and its position, in both: backreferences,
lookaround, ``\\b \\B`` (unless the caller reads them: ``boundaries``), possessive
quantifiers, conditionals, atomic groups, a class escape bounding a range (``[\\d-z]``),
a ``^`` elsewhere than at the start of a top-level alternative, a python ``$`` elsewhere
than at its end (a group that is a whole alternative counts as that alternative:
``(^a$)|b``).

With ``parse(..., lookahead=True)`` (JSON Schema patterns) lookaheads are read where they
are an intersection or a difference of regular languages: right after the ``^`` of a
top-level alternative (``Branch.looks``: the whole string must, or must not, start with
a string of the inner pattern, whose own ``$`` and leading ``^`` are understood), a
positive one ending an alternative without ``$`` (inline: R(?=Y) then anything is R Y
then anything), and the tempered token ``^((?!X)c)*$`` (no position starts an X).
A lookahead anywhere else stays a CompileError.

Where the dialects differ (regex_chars.py reads the escapes and bracket classes):

| construct                                | python                          | ecma                                        |
|:--|:--|:--|
| ``\\s``                                   | [\\t-\\r ]                        | also the Unicode spaces (U+00A0, U+2000-200A, U+FEFF, ...) |
| ``.``                                    | not \\n (any with ``(?s)``)      | not \\n \\r U+2028 U+2029                      |
| ``(?i) (?s)``, ``(?i:...)`` (``(?m) (?x) (?L)``: CompileError), ``(?#...)``, ``(?P<name>...)`` | yes             | CompileError                                |
| ``\\A``, ``\\Z``, ``\\z``                    | anchors, like ``^`` / ``$``      | the letters A, Z, z                         |
| ``[]``, ``[^]``                          | ``]`` first is a literal        | the empty class, any character              |
| ``{,n}``                                 | 0 to n                          | the literal text                            |
| bad ``\\x`` / ``\\u`` (not enough hex)     | CompileError                    | the letters x / u                           |
| ``\\u{H...}``, ``\\uD83D\\uDE00``            | CompileError / two surrogates   | one code point                              |
| ``\\UHHHHHHHH``, ``\\N{name}``, ``\\a``      | yes                             | the letters U, N, a                         |
| ``\\cX``                                  | CompileError                    | X % 32 (Annex B: ``\\c`` before no letter is a backslash) |
| ``\\0``, octal ``\\1``-``\\7`` in a class    | octal, up to 3 digits           | ``\\0`` is NUL, other octal a CompileError   |
| other ``\\letter``                        | CompileError                    | the letter (identity escape)                |
| ``[[:alpha:]]``                          | CompileError                    | literal characters                          |
| repeat counts                            | at most 100,000                 | unbounded                                   |
| ``$`` inside an alternative              | CompileError                    | the end of the input (regex_anchors.py)     |
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from furca.errors import CompileError

from . import ir
from .regex_anchors import NOTHING, has_end_anchor, nullable, split_end
from .regex_chars import DOT, SPACE, char_class, escape

DIALECTS = ("python", "ecma")
MAX_REPEAT = 100_000  # python dialect: as re's own limit, a count past it is a CompileError
_BRACE = re.compile(r"\{([0-9]*)(?:(,)([0-9]*))?\}")
_QUANT = ("*", "+", "?")
_GLOBAL_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")
_SCOPED_FLAGS = re.compile(r"([aiLmsux-]*)(.?)")
_UNSUPPORTED_FLAGS = "Lmx"


@dataclass(frozen=True)
class Branch:
    """One top-level alternative: its tree, and whether ^ / $ anchored its start / end.

    looks (only with parse(..., lookahead=True)): the lookaheads at the start of a
    `^`-anchored alternative, ((positive, (Branch, ...)), ...): the whole string must
    (positive) or must not start with a string of one of those inner alternatives (each
    start-anchored; `end`: its own `$`)."""

    node: tuple
    start: bool
    end: bool
    looks: tuple = ()


def parse(pattern: str, dialect: str = "python", what: str = "regex", lookahead: bool = False,
          boundaries: bool = False) -> list[Branch]:
    """The top-level alternatives of `pattern` read in `dialect` ("python" or "ecma").

    lookahead: read `(?=...)` / `(?!...)` where their language is an intersection or a
    difference of regular languages (see `_Parser._lookaheads`); elsewhere, and always
    without it, a lookahead is a CompileError like every other lookaround.
    boundaries: read ``\\b`` / ``\\B`` as ``("bound", negated, position)`` nodes (zero-width:
    the characters on either side are one word character [A-Za-z0-9_] and one other, or
    not; the ends of the input count as other), for a back end that builds the pattern's
    automaton itself (json_schema/difference.py); without it they are CompileErrors.
    Raises CompileError ("{what} {pattern!r}: {message} at position {i}") for a syntax
    error or a construct that is not regular; ValueError for an unknown dialect."""
    if dialect not in DIALECTS:
        raise ValueError(f"regex dialect must be one of {DIALECTS}, not {dialect!r}")
    return _Parser(pattern, dialect, what, lookahead, boundaries).parse()


def seq(items):
    return items[0] if len(items) == 1 else ("seq", items)


def alt(items):
    return items[0] if len(items) == 1 else ("alt", items)


class _Parser:
    def __init__(self, src, dialect, what, lookahead=False, boundaries=False):
        self.s, self.i, self.what = src, 0, what
        self.lookahead, self.boundaries = lookahead, boundaries
        self.stripped_extra = 0  # ^ anchors dropped between leading lookaheads
        self.py = dialect == "python"
        self.space, self.dot = SPACE[dialect], DOT[dialect]
        self.icase = self.dotall = False
        self.anchors = 0  # anchor nodes in the tree; parse() checks they all end up stripped

    def err(self, msg, pos=None):
        pos = self.i if pos is None else pos
        raise CompileError(f"{self.what} {self.s!r}: {msg} at position {pos}")

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def parse(self):
        if self.py:
            self._global_flags()
        root = self.alternation()
        if self.i < len(self.s):
            self.err("unbalanced parenthesis ')'")
        return self._branches(root)

    def _check_flags(self, flags, start):
        """i and s are applied; a and u name furca's meaning of \\d \\w already. L, m and x
        would change what the pattern means, so they are refused rather than ignored."""
        bad = sorted(set(flags) & set(_UNSUPPORTED_FLAGS))
        if bad:
            self.err(f"flag {bad[0]!r} is not supported (supported: a, i, s, u)", start)

    def _global_flags(self):
        while m := _GLOBAL_FLAGS.match(self.s, self.i):
            self._check_flags(m.group(1), self.i)
            self.icase |= "i" in m.group(1)
            self.dotall |= "s" in m.group(1)
            self.i = m.end()

    def _branches(self, root):
        """Strips ^ from the start and $ from the end of each top-level alternative."""
        out, stripped = [], 0
        for b in root[1] if root[0] == "alt" else [root]:
            items = b[1] if b[0] == "seq" else [b]
            i, k = 0, len(items)
            while i < k and items[i][:2] == ("anchor", "^"):
                i += 1
            while k > i and items[k - 1][:2] == ("anchor", "$"):
                k -= 1
            stripped += i + len(items) - k
            node = b if (i, k) == (0, len(items)) else seq(items[i:k])
            node, looks = self._lookaheads(node, i > 0, k < len(items))
            out.append(Branch(node, i > 0, k < len(items), looks))
        stripped += self.stripped_extra
        if stripped != self.anchors and not self.py:
            out = [part for b in out for part in _split_end(b)]
        if (left := next(_anchors([b.node for b in out]), None)) is not None:
            kind, pos = left
            self.err(f"anchor {kind!r} in the middle of the pattern is not supported", pos)
        return out

    def _lookaheads(self, node, start, end):
        """(node, looks) of one top-level alternative: the lookaheads right after its `^`
        become `looks` (an intersection, or a difference, with the strings starting with
        their inner alternatives); a positive lookahead ending an alternative without `$`
        is its inner tree inline (R(?=Y) then anything = R Y then anything). Any other
        lookahead is a CompileError."""
        items = list(node[1]) if node[0] == "seq" else [node]
        looks = []
        if start and end and len(items) == 1 and (tempered := self._tempered(items[0])) is not None:
            items, looks = tempered
        while start and items and items[0][0] in ("look", "anchor"):
            if items[0][0] == "anchor":  # ^ after a lookahead at the start: still position 0
                if items[0][1] != "^":
                    break
                items.pop(0)
                self.stripped_extra += 1
                continue
            _, positive, inner, pos = items.pop(0)
            inner = _strip_starts(inner)
            if (left := next(_anchors([inner]), None)) is not None and left[0] != "$":
                self.err(f"anchor {left[0]!r} inside a lookahead is not supported", left[1])
            inner_branches = tuple(_split_end(Branch(inner, True, False)))
            if (left := next(_anchors([b.node for b in inner_branches]), None)) is not None:
                self.err(f"anchor {left[0]!r} inside a lookahead is not supported", left[1])
            if (nested := next(_looks([b.node for b in inner_branches]), None)) is not None:
                self.err("a lookahead inside a lookahead is not supported", nested[3])
            looks.append((positive, inner_branches))
        if not end and items and items[-1][0] == "look" and items[-1][1]:
            items[-1] = items[-1][2]
        for look in _looks(items):
            kind = "lookahead" if look[1] else "negative lookahead"
            self.err(f"{kind} is only supported at the start of an alternative anchored by ^ "
                     "(or, positive, at the end of one without $)", look[3])
        return seq(items) if items else ("seq", []), tuple(looks)

    def _tempered(self, node):
        """A whole alternative `^((?!X)(?!Y)c)*$` (c one character: a "tempered" token):
        the strings of c* in which no position starts X or Y, i.e. ([c], looks) with the
        negative lookaheads `.*X`, `.*Y` over the whole string. Exact when X and Y match
        no empty string (each position < n is then tried, position n cannot match). None
        when `node` is not of that form."""
        if node[0] != "rep":
            return None
        body = node[1]
        parts = body[1] if body[0] == "seq" else [body]
        if len(parts) < 2 or parts[-1][0] != "chars" or \
                not all(p[0] == "look" and not p[1] for p in parts[:-1]):
            return None
        if any(nullable(p[2]) for p in parts[:-1]):
            return None
        anything = ("rep", ("chars", [(0, ir.MAX_CODEPOINT)]), 0, None)
        looks = [("look", False, ("seq", [anything, p[2]]), p[3]) for p in parts[:-1]]
        return looks + [("rep", parts[-1], node[2], node[3])], []

    def alternation(self):
        alts = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.sequence())
        return alt(alts)

    def sequence(self):
        items = []
        while self.i < len(self.s) and self.peek() not in "|)":
            items.append(self.quantified())
        return seq(items)

    def quantified(self):
        atom = self.atom()
        c, pos = self.peek(), self.i
        if c in _QUANT:
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (q := self._brace()) is not None:
            lo, hi = q
            self.i = self.s.index("}", self.i) + 1
        else:
            return atom
        if atom[0] in ("anchor", "look", "bound"):
            self.err("nothing to repeat", pos)
        if self.peek() == "?":
            self.i += 1  # lazy: same language
        elif self.peek() == "+":
            self.err("possessive quantifier is not supported")
        if self.peek() in _QUANT or (self.peek() == "{" and self._brace() is not None):
            self.err("multiple repeat")
        if hi is not None and hi < lo:
            self.err(f"min repeat greater than max repeat in {{{lo},{hi}}}", pos)
        if self.py and max(lo, hi or 0) > MAX_REPEAT:
            self.err(f"repeat count over {MAX_REPEAT}", pos)
        return ("rep", atom, lo, hi)

    def _brace(self):
        """(min, max) of the counted repeat at self.i, or None where the '{' is a literal."""
        m = _BRACE.match(self.s, self.i)
        if m is None:
            return None
        lo, comma, hi = m.groups()
        if not lo and not (self.py and comma and hi):  # python reads {,n}; ecma needs the min
            return None
        lo = int(lo) if lo else 0
        return (lo, lo) if not comma else (lo, int(hi) if hi else None)

    def atom(self):
        c, pos = self.peek(), self.i
        if c == "(":
            return self.group()
        if c == "[":
            return self.chars(char_class(self))
        if c == ".":
            self.i += 1
            return ("chars", [(0, ir.MAX_CODEPOINT)] if self.dotall else self.dot)
        if c in ("^", "$"):
            self.i += 1
            self.anchors += 1
            return ("anchor", c, pos)
        if c in _QUANT or (c == "{" and self._brace() is not None):
            self.err("nothing to repeat")
        if c == "\\":
            r = escape(self, in_class=False)
            if type(r) is tuple:  # \b \B (parse(..., boundaries=True))
                return ("bound", r[1], pos)
            if isinstance(r, str):  # \A \Z \z (python)
                self.anchors += 1
                return ("anchor", r, pos)
            return self.chars([(r, r)] if isinstance(r, int) else r)
        self.i += 1
        return self.chars([(ord(c), ord(c))])

    def chars(self, ranges):
        return ("chars", ir.case_fold_ranges(ranges) if self.icase else ranges)

    def group(self):
        start = self.i
        self.i += 1
        saved = self.icase, self.dotall
        if self.peek() == "?":
            self.i += 1
            c, c1 = self.peek(), self.peek(1)
            if c == ":":
                self.i += 1
            elif (c == "<" and c1 not in ("=", "!")) or (self.py and c == "P" and c1 == "<"):
                j = self.s.find(">", self.i)
                if j < 0:
                    self.err("missing '>' in group name", start)
                self.i = j + 1
            elif c == "P" and c1 == "=":
                self.err("backreference (?P=name) is not supported (not a regular language)", start)
            elif c in ("=", "!") and self.lookahead:
                self.i += 1
                inner = self.alternation()
                if self.peek() != ")":
                    self.err("missing ), unterminated subpattern", start)
                self.i += 1
                return ("look", c == "=", inner, start)
            elif c in ("=", "!") or c == "<":
                kind = {"=": "lookahead", "!": "negative lookahead"}.get(c) or (
                    "lookbehind" if c1 == "=" else "negative lookbehind")
                self.err(f"{kind} is not supported", start)
            elif c == "(":
                self.err("conditional group is not supported", start)
            elif c == ">":
                self.err("atomic group is not supported", start)
            elif not self.py:
                self.err(f"unsupported group syntax '(?{c}'", start)
            elif c == "#":
                j = self.s.find(")", self.i)
                if j < 0:
                    self.err("missing ')' after comment", start)
                self.i = j + 1
                return ("seq", [])
            else:
                self._scoped_flags(start)
        e = self.alternation()
        if self.peek() != ")":
            self.err("missing ), unterminated subpattern", start)
        self.i += 1
        self.icase, self.dotall = saved
        return e

    def _scoped_flags(self, start):
        """(?flags-flags: ... ): sets icase / dotall for the group (restored after it)."""
        m = _SCOPED_FLAGS.match(self.s, self.i)
        flags, end = m.groups()
        if end != ":" or not flags:
            if end == ")":
                self.err("global flags not at the start of the expression", start)
            self.err("unknown extension", start)
        self._check_flags(flags, start)
        self.i = m.end()
        on, _, off = flags.partition("-")
        self.icase = ("i" in on or self.icase) and "i" not in off
        self.dotall = ("s" in on or self.dotall) and "s" not in off


def _split_end(b: Branch) -> list[Branch]:
    """An ECMA alternative with `$` inside -> the alternatives without it (regex_anchors.py)."""
    if not has_end_anchor(b.node):
        return [b]
    free, end = split_end(b.node)
    return [Branch(n, b.start, e, b.looks) for n, e in ((free, b.end), (end, True)) if n != NOTHING]


def _anchors(nodes):
    """(kind, position) of every anchor node in the trees, in order."""
    for n in nodes:
        if n[0] == "anchor":
            yield n[1], n[2]
        elif n[0] in ("seq", "alt"):
            yield from _anchors(n[1])
        elif n[0] == "rep":
            yield from _anchors([n[1]])



def _looks(nodes):
    """Every lookahead node in the trees, in order."""
    for n in nodes:
        if n[0] == "look":
            yield n
        elif n[0] in ("seq", "alt"):
            yield from _looks(n[1])
        elif n[0] == "rep":
            yield from _looks([n[1]])



def _strip_starts(node):
    """A lookahead's tree with the `^` opening each of its alternatives dropped (at the
    start of the input, where the lookahead stands, `^` holds)."""
    alts = node[1] if node[0] == "alt" else [node]
    out = []
    for a in alts:
        items = list(a[1]) if a[0] == "seq" else [a]
        while items and items[0][:2] == ("anchor", "^"):
            items.pop(0)
        out.append(seq(items) if items else ("seq", []))
    return alt(out)
