"""Python ``re`` syntax -> grammar IR (full-match semantics, over UTF-8 bytes).

Supported: literals and escapes (\\n \\t \\xHH \\uHHHH \\UHHHHHHHH \\N{...}, octal \\0),
classes with ranges and negation, ``.`` (no newline unless ``(?s)``), \\d \\w \\s and their
negations (ASCII meaning, as JSON Schema's ECMA-262 and xgrammar/llguidance use: \\d =
[0-9], \\w = [A-Za-z0-9_]), groups ``( )`` ``(?: )`` ``(?P<name> )``, alternation,
quantifiers ``* + ? {m} {m,} {m,n} {,n}`` and their lazy forms (same language), global
flags ``(?i)`` ``(?s)`` at the start, scoped ``(?i:...)``, anchors ``^ \\A`` at the start
and ``$ \\Z \\z`` at the end.
Not regular or not supported, each a CompileError naming it and its position:
backreferences, lookaround, conditionals, possessive quantifiers, atomic groups, \\b \\B,
anchors in the middle.
"""

from __future__ import annotations

import unicodedata

from furca.errors import CompileError

from . import ir

DIGIT = [(48, 57)]
WORD = [(48, 57), (65, 90), (95, 95), (97, 122)]
SPACE = [(9, 13), (32, 32)]
MAX_REPEAT = 100_000


def parse_regex(pattern: str, what: str = "regex"):
    """IR expression for the whole pattern."""
    return _Parser(pattern, what).parse()


def regex_grammar(pattern: str) -> ir.Grammar:
    return ir.Grammar({"root": parse_regex(pattern)}, "root")


class _Parser:
    def __init__(self, src, what):
        self.s, self.i, self.what = src, 0, what
        self.icase = self.dotall = False

    def err(self, msg, pos=None):
        pos = self.i if pos is None else pos
        raise CompileError(f"{self.what} {self.s!r}: {msg} at position {pos}")

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def parse(self):
        self._global_flags()
        if self.s.startswith("^", self.i) or self.s.startswith("\\A", self.i):
            self.i += 1 if self.s[self.i] == "^" else 2
        e = self.alternation(top=True)
        if self.i < len(self.s):
            if self.peek() == ")":
                self.err("unbalanced parenthesis ')'")
            self.err(f"unexpected {self.peek()!r}")
        return e

    def _global_flags(self):
        while self.s.startswith("(?", self.i):
            j = self.i + 2
            flags = ""
            while j < len(self.s) and self.s[j] in "aiLmsux":
                flags += self.s[j]
                j += 1
            if j < len(self.s) and self.s[j] == ")" and flags:
                self.icase |= "i" in flags
                self.dotall |= "s" in flags
                self.i = j + 1
            else:
                return

    def alternation(self, top=False):
        alts = [self.sequence(top)]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.sequence(top))
        return ir.alt(alts) if len(alts) > 1 else alts[0]

    def sequence(self, top):
        items = []
        while self.i < len(self.s) and self.peek() not in "|)":
            c = self.peek()
            if c == "$" or self.s.startswith("\\Z", self.i) or self.s.startswith("\\z", self.i):
                pos = self.i
                self.i += 1 if c == "$" else 2
                if not (top and (self.i == len(self.s) or self.peek() == "|")):
                    self.err("anchor in the middle of the pattern is not supported", pos)
                continue
            if c == "^":
                self.err("anchor '^' in the middle of the pattern is not supported")
            items.append(self.quantified())
        return ir.seq(items) if items else ir.EMPTY

    def quantified(self):
        atom = self.atom()
        while True:
            c, pos = self.peek(), self.i
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._is_brace_quant():
                lo, hi = self._brace()
            else:
                return atom
            if self.peek() == "?":
                self.i += 1  # lazy: same language
            elif self.peek() == "+":
                self.err("possessive quantifier is not supported")
            if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._is_brace_quant()):
                self.err("multiple repeat", self.i)
            if hi is not None and hi < lo:
                self.err(f"min repeat greater than max repeat in {{{lo},{hi}}}", pos)
            if max(lo, hi or 0) > MAX_REPEAT:
                self.err(f"repeat count over {MAX_REPEAT}", pos)
            atom = ("rep", atom, lo, hi)

    def _is_brace_quant(self):
        j = self.s.find("}", self.i)
        if j < 0:
            return False
        body = self.s[self.i + 1 : j]
        parts = body.split(",")
        return len(parts) <= 2 and all(p.isdigit() or p == "" for p in parts) and body not in ("", ",") and (
            parts[0] != "" or len(parts) == 2)

    def _brace(self):
        j = self.s.find("}", self.i)
        parts = self.s[self.i + 1 : j].split(",")
        self.i = j + 1
        lo = int(parts[0]) if parts[0] else 0
        if len(parts) == 1:
            return lo, lo
        return lo, int(parts[1]) if parts[1] else None

    def atom(self):
        c, pos = self.peek(), self.i
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_set(self.klass())
        if c == ".":
            self.i += 1
            return ir.char_class([(0, ir.MAX_CODEPOINT)] if self.dotall else ir.negate_ranges([(10, 10)]))
        if c in "*+?":
            self.err("nothing to repeat")
        if c == "{" and self._is_brace_quant():
            self.err("nothing to repeat")
        if c == "\\":
            r = self.escape(in_class=False)
            return r if isinstance(r, tuple) else self.char_set(r)
        self.i += 1
        return self.char_set([(ord(c), ord(c))])

    def char_set(self, ranges):
        if self.icase:
            ranges = ir.case_fold_ranges(ranges)
        return ir.char_class(ranges)

    def group(self):
        start = self.i
        self.i += 1
        saved = self.icase, self.dotall
        if self.peek() == "?":
            self.i += 1
            c = self.peek()
            if c == ":":
                self.i += 1
            elif c == "P" and self.peek(1) == "<":
                j = self.s.find(">", self.i)
                if j < 0:
                    self.err("missing '>' in group name", start)
                self.i = j + 1
            elif c == "P" and self.peek(1) == "=":
                self.err("backreference (?P=name) is not supported (not a regular language)", start)
            elif c == "<" and self.peek(1) not in ("=", "!"):
                j = self.s.find(">", self.i)
                if j < 0:
                    self.err("missing '>' in group name", start)
                self.i = j + 1
            elif c in ("=", "!") or (c == "<" and self.peek(1) in ("=", "!")):
                kind = {"=": "lookahead", "!": "negative lookahead"}.get(c) or (
                    "lookbehind" if self.peek(1) == "=" else "negative lookbehind")
                self.err(f"{kind} is not supported", start)
            elif c == "(":
                self.err("conditional group is not supported", start)
            elif c == ">":
                self.err("atomic group is not supported", start)
            elif c == "#":
                j = self.s.find(")", self.i)
                if j < 0:
                    self.err("missing ')' after comment", start)
                self.i = j + 1
                return ir.EMPTY
            else:
                flags = ""
                while self.peek() and self.peek() in "aiLmsux-":
                    flags += self.peek()
                    self.i += 1
                if self.peek() != ":" or not flags:
                    if self.peek() == ")":
                        self.err("global flags not at the start of the expression", start)
                    self.err("unknown extension", start)
                self.i += 1
                on, _, off = flags.partition("-")
                if "i" in on:
                    self.icase = True
                if "i" in off:
                    self.icase = False
                if "s" in on:
                    self.dotall = True
                if "s" in off:
                    self.dotall = False
        e = self.alternation()
        if self.peek() != ")":
            self.err("missing ), unterminated subpattern", start)
        self.i += 1
        self.icase, self.dotall = saved
        return e

    def klass(self):
        start = self.i
        self.i += 1
        neg = False
        if self.peek() == "^":
            neg = True
            self.i += 1
        ranges = []
        first = True
        while True:
            if self.i >= len(self.s):
                self.err("unterminated character set", start)
            c = self.peek()
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self._class_item()
            if isinstance(lo, list):
                ranges += lo
                continue
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                rpos = self.i
                self.i += 1
                hi = self._class_item()
                if isinstance(hi, list):
                    self.err("bad character range", rpos)
                if hi < lo:
                    self.err(f"bad character range {chr(lo)}-{chr(hi)}", rpos)
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        if neg:
            if self.icase:
                ranges = ir.case_fold_ranges(ranges)
            ranges = ir.negate_ranges(ranges)
        return ranges

    def _class_item(self):
        """A code point, or a list of ranges for a class escape."""
        c = self.peek()
        if c == "\\":
            r = self.escape(in_class=True)
            return r
        if c == "[" and self.peek(1) in (":", "=", "."):
            j = self.s.find("]", self.i + 2)
            if j > 0 and self.s[j - 1] == self.peek(1):
                self.err("POSIX character classes are not supported")
        self.i += 1
        return ord(c)

    def escape(self, in_class):
        """At a backslash. Returns a code point (int), a list of ranges, or (outside a
        class) an IR expression."""
        start = self.i
        self.i += 1
        c = self.peek()
        if not c:
            self.err("bad escape (end of pattern)", start)
        self.i += 1
        simple = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
        if c in simple:
            return simple[c] if in_class else [(simple[c], simple[c])]
        classes = {"d": DIGIT, "w": WORD, "s": SPACE}
        if c in classes:
            return list(classes[c])
        if c.lower() in classes:
            return ir.negate_ranges(classes[c.lower()])
        if c == "x":
            return self._hex(2, start, in_class)
        if c == "u":
            return self._hex(4, start, in_class)
        if c == "U":
            return self._hex(8, start, in_class)
        if c == "N" and self.peek() == "{":
            j = self.s.find("}", self.i)
            try:
                cp = ord(unicodedata.lookup(self.s[self.i + 1 : j]))
            except (KeyError, ValueError):
                self.err("bad character name", start)
            self.i = j + 1
            return cp if in_class else [(cp, cp)]
        if c == "0" or (c in "1234567" and in_class):
            j = self.i
            digits = c
            while len(digits) < 3 and self.peek() in "01234567" and self.peek():
                digits += self.peek()
                self.i += 1
            cp = int(digits, 8)
            return cp if in_class else [(cp, cp)]
        if c.isdigit():
            self.err(f"backreference \\{c} is not supported (not a regular language)", start)
        if c in "bB":
            if in_class and c == "b":
                return 8
            self.err(f"word boundary \\{c} is not supported", start)
        if c in "AZz" and not in_class:
            self.err(f"anchor \\{c} in the middle of the pattern is not supported", start)
        if c.isalnum():
            self.err(f"bad escape \\{c}", start)
        return ord(c) if in_class else [(ord(c), ord(c))]

    def _hex(self, n, start, in_class):
        h = self.s[self.i : self.i + n]
        if len(h) != n or any(ch not in "0123456789abcdefABCDEF" for ch in h):
            self.err(f"incomplete escape \\{self.s[start + 1]}{h}", start)
        self.i += n
        cp = int(h, 16)
        if cp > ir.MAX_CODEPOINT:
            self.err("bad escape (code point out of range)", start)
        return cp if in_class else [(cp, cp)]
