"""GBNF (llama.cpp / xgrammar EBNF dialect) -> grammar IR.

    root ::= item ("," item)*          # comment
    item ::= "lit\\n" | [a-z0-9_]+ | [^"\\\\] | . | name{2,5} | (a | b)?

Rule names ``[a-zA-Z0-9_-]+``; literals with escapes \\n \\t
\\r \\" \\\\ \\xHH \\uHHHH \\UHHHHHHHH; classes with ranges, escapes and ``^``;
``.`` any character; ``* + ?`` and ``{m} {m,} {m,n}``. A rule may be defined more
than once (alternatives are joined). The root rule is ``root``.
"""

from __future__ import annotations

from furca.errors import CompileError

from . import ir
from .deadline import check as check_deadline

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_ESC = {"n": 10, "t": 9, "r": 13, '"': 34, "\\": 92, "[": 91, "]": 93, "'": 39, "/": 47, "-": 45, "^": 94,
        "0": 0, "f": 12, "v": 11, "b": 8, "a": 7, "e": 27}


def parse_gbnf(text: str, root: str = "root") -> ir.Grammar:
    g = _Parser(text).parse()
    g.root = root
    if root not in g.rules:
        raise CompileError(f"grammar has no root rule {root!r}")
    return g


class _Parser:
    def __init__(self, text):
        self.s, self.i = text, 0

    def where(self, pos):
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        return f"line {line} column {col}"

    def err(self, msg, pos=None):
        pos = self.i if pos is None else pos
        raise CompileError(f"GBNF grammar: {msg} at {self.where(pos)}")

    def ws(self, newlines=True):
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == "#":
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            else:
                break

    def name(self):
        j = self.i
        while j < len(self.s) and self.s[j] in _NAME_CHARS:
            j += 1
        if j == self.i:
            return None
        n, self.i = self.s[self.i : j], j
        return n

    def parse(self):
        g = ir.Grammar()
        self.ws()
        while self.i < len(self.s):
            check_deadline()
            pos = self.i
            n = self.name()
            if n is None:
                c = self.s[self.i]
                self.err("unbalanced ')'" if c == ")" else f"expected a rule name, got {c!r}")
            self.ws()
            if not self.s.startswith("::=", self.i):
                self.err(f"expected '::=' after rule name {n!r}")
            self.i += 3
            self.ws()
            e = self.alternation()
            if n in g.rules:
                g.rules[n] = ir.alt([g.rules[n], e])
            else:
                g.rules[n] = e
                g.positions[n] = pos
            self.ws()
        if not g.rules:
            raise CompileError("GBNF grammar: no rules")
        return g

    def at_rule_start(self):
        """True when the text at i is `name ::=` (the next rule begins)."""
        j = self.i
        save = self.i
        n = self.name()
        if n is None:
            return False
        k = self.i
        self.i = save
        while k < len(self.s) and self.s[k] in " \t\r\n":
            k += 1
        del j
        return self.s.startswith("::=", k)

    def alternation(self):
        alts = [self.sequence()]
        while True:
            self.ws()
            if self.i < len(self.s) and self.s[self.i] == "|":
                self.i += 1
                self.ws()
                alts.append(self.sequence())
            else:
                break
        return ir.alt(alts) if len(alts) > 1 else alts[0]

    def sequence(self):
        items = []
        while True:
            self.ws()
            if self.i >= len(self.s) or self.s[self.i] in "|)" or self.at_rule_start():
                break
            check_deadline()
            items.append(self.postfix())
        return ir.seq(items) if items else ir.EMPTY

    def postfix(self):
        e = self.primary()
        while self.i < len(self.s):
            c, pos = self.s[self.i], self.i
            if c in "*+?":
                self.i += 1
                e = ("rep", e, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[c])
            elif c == "{":
                j = self.s.find("}", self.i)
                body = self.s[self.i + 1 : j] if j > 0 else ""
                parts = [p.strip() for p in body.split(",")]
                if j < 0 or len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1] and not parts[1].isdigit()):
                    self.err("malformed repetition {m,n}", pos)
                lo = int(parts[0])
                hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
                if hi is not None and hi < lo:
                    self.err(f"repetition {{{lo},{hi}}} has max < min", pos)
                self.i = j + 1
                e = ("rep", e, lo, hi)
            else:
                break
        return e

    def primary(self):
        c, pos = self.s[self.i], self.i
        if c == '"':
            return self.string()
        if c == "[":
            return self.klass()
        if c == ".":
            self.i += 1
            return ir.char_class([(0, ir.MAX_CODEPOINT)])
        if c == "(":
            self.i += 1
            self.ws()
            e = self.alternation()
            self.ws()
            if self.i >= len(self.s) or self.s[self.i] != ")":
                self.err("missing ')' for the group opened", pos)
            self.i += 1
            return e
        n = self.name()
        if n is None:
            self.err(f"unexpected {c!r}")
        return ("ref", n, pos)

    def char(self, end):
        """One (possibly escaped) code point inside a literal or class."""
        s, pos = self.s, self.i
        if self.i >= len(s):
            self.err(f"unterminated {'string' if end == chr(34) else 'character class'}", pos)
        c = s[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        self.i += 1
        if self.i >= len(s):
            self.err("unterminated escape", pos)
        e = s[self.i]
        self.i += 1
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            h = s[self.i : self.i + n]
            if len(h) != n or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                self.err(f"bad escape \\{e}{h}", pos)
            self.i += n
            cp = int(h, 16)
            if cp > ir.MAX_CODEPOINT:
                self.err("code point out of range", pos)
            return cp
        if e in _ESC:
            return _ESC[e]
        self.err(f"unknown escape \\{e}", pos)

    def string(self):
        start = self.i
        self.i += 1
        out = []
        while True:
            if self.i >= len(self.s) or self.s[self.i] == "\n":
                self.err("unterminated string", start)
            if self.s[self.i] == '"':
                self.i += 1
                break
            out.append(self.char('"'))
        data = "".join(map(chr, out)).encode("utf-8", "surrogatepass")
        return ir.literal(data)

    def klass(self):
        start = self.i
        self.i += 1
        neg = False
        if self.i < len(self.s) and self.s[self.i] == "^":
            neg = True
            self.i += 1
        ranges = []
        while True:
            if self.i >= len(self.s):
                self.err("unterminated character class", start)
            if self.s[self.i] == "]":
                self.i += 1
                break
            lo = self.char("]")
            if self.i + 1 < len(self.s) and self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                self.i += 1
                hi = self.char("]")
                if hi < lo:
                    self.err("character range is out of order", start)
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        if neg:
            ranges = ir.negate_ranges(ranges)
        return ir.char_class(ranges)
