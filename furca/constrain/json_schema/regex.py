"""ECMA-262 regular expressions (JSON Schema `pattern`) -> grammar IR.

A minimal translator of its own (the engine's regex parser lives elsewhere in
furca.constrain and is not imported, so this package stays self-contained).
Supported: literals, `.`, classes with ranges and negation, \\d \\w \\s (and negations),
character escapes (\\n \\t \\xHH \\uHHHH \\u{...} \\cX ...), groups (capturing,
`(?:...)`, named), alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms too),
and `^`/`$` at the ends of top-level alternatives. Backreferences, lookaround, word
boundaries, \\p{...} and anchors elsewhere raise CompileError.

`parse_regex` returns IR over decoded characters (every Cls leaf is one character).
`pattern_grammar` anchors it (JSON Schema patterns are unanchored: "abc" means
"contains abc"), applies minLength/maxLength where it can, and encodes every
character as it appears inside a JSON string (`"` as \\", controls escaped).
"""
from __future__ import annotations

from dataclasses import dataclass

from furca.errors import CompileError

from .grammar import EMPTY, MAX_CP, Alt, Cls, Rep, Seq, alt, chars, cls, complement, normalize, rep, seq


@dataclass(frozen=True)
class Anchor:
    kind: str  # "^" or "$"


DIGIT = ((0x30, 0x39),)
WORD = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE = normalize([(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                   (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
LINE_TERMINATORS = chars("\n\r\u2028\u2029")
ANY_CHAR = ((0, MAX_CP),)
_CLASS_ESC = {"d": DIGIT, "D": complement(DIGIT), "w": WORD, "W": complement(WORD),
              "s": SPACE, "S": complement(SPACE)}
_CHAR_ESC = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}


class _Parser:
    def __init__(self, src: str, where: str):
        self.s, self.i, self.where = src, 0, where

    def fail(self, what: str):
        raise CompileError("%s: %s at position %d of regex %r" % (self.where, what, self.i, self.s))

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else None

    def parse(self):
        node = self.alternation()
        if self.i < len(self.s):
            self.fail("unbalanced ')'")
        return node

    def alternation(self):
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Alt(tuple(branches))

    def sequence(self):
        items = []
        while self.peek() is not None and self.peek() not in "|)":
            c = self.peek()
            if c in "^$":
                self.i += 1
                items.append(Anchor(c))
                continue
            atom = self.atom()
            items.append(self.quantified(atom))
        if not items:
            return EMPTY
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantified(self, atom):
        c = self.peek()
        lo = hi = None
        start = self.i
        if c == "*":
            lo, hi = 0, None
            self.i += 1
        elif c == "+":
            lo, hi = 1, None
            self.i += 1
        elif c == "?":
            lo, hi = 0, 1
            self.i += 1
        elif c == "{":
            q = self.braces()
            if q is None:
                return atom
            lo, hi = q
        else:
            return atom
        if self.peek() == "?":
            self.i += 1
        if isinstance(atom, Anchor):
            self.i = start
            self.fail("quantified anchor")
        if self.peek() is not None and self.peek() in "*+?{" and (self.peek() != "{" or self._is_braces()):
            self.fail("nothing to repeat")
        if hi is not None and hi < lo:
            self.fail("numbers out of order in {} quantifier")
        return Rep(atom, lo, hi)

    def _is_braces(self):
        save = self.i
        q = self.braces()
        self.i = save
        return q is not None

    def braces(self):
        j, s = self.i + 1, self.s
        k = j
        while k < len(s) and s[k].isdigit():
            k += 1
        if k == j:
            return None
        lo = int(s[j:k])
        if k < len(s) and s[k] == "}":
            self.i = k + 1
            return lo, lo
        if k >= len(s) or s[k] != ",":
            return None
        m = k + 1
        while m < len(s) and s[m].isdigit():
            m += 1
        if m >= len(s) or s[m] != "}":
            return None
        self.i = m + 1
        return lo, (int(s[k + 1:m]) if m > k + 1 else None)

    def atom(self):
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.peek() == "?":
                nxt = self.peek(1)
                if nxt == ":":
                    self.i += 2
                elif nxt == "<" and self.peek(2) not in ("=", "!"):
                    end = self.s.find(">", self.i)
                    if end < 0:
                        self.fail("unterminated group name")
                    self.i = end + 1
                elif nxt in ("=", "!") or (nxt == "<" and self.peek(2) in ("=", "!")):
                    self.fail("lookaround is not a regular construct")
                else:
                    self.fail("unsupported group syntax '(?%s'" % (nxt or ""))
            node = self.alternation()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.i += 1
            return node
        if c == "[":
            return Cls(self.char_class())
        if c == ".":
            self.i += 1
            return Cls(complement(LINE_TERMINATORS))
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?":
            self.fail("nothing to repeat")
        if c == "{" and self._is_braces():
            self.fail("nothing to repeat")
        self.i += 1
        return Cls(chars(c))

    def escape(self, in_class: bool):
        """At a backslash: returns a Cls (one character or a class escape)."""
        self.i += 1
        c = self.peek()
        if c is None:
            self.fail("trailing backslash")
        self.i += 1
        if c in _CLASS_ESC:
            return Cls(_CLASS_ESC[c])
        if c == "b" and in_class:
            return Cls(chars("\b"))
        if c in "bB":
            self.fail("word boundary \\%s is not supported" % c)
        if c == "0" and self.peek() is not None and self.peek().isdigit():
            self.fail("octal escape")
        if c in _CHAR_ESC:
            return Cls(chars(_CHAR_ESC[c]))
        if c.isdigit():
            if in_class:
                self.fail("octal escape")
            self.fail("backreference \\%s is not a regular construct" % c)
        if c == "k" and self.peek() == "<":
            self.fail("named backreference is not a regular construct")
        if c in "pP":
            self.fail("unicode property escape \\%s{...} is not supported" % c)
        if c == "c":
            x = self.peek()
            if x is not None and x.isalpha():
                self.i += 1
                return Cls(chars(chr(ord(x) % 32)))
            return Cls(chars("\\c"))  # unreachable in practice; treated literally
        if c == "x":
            h = self.s[self.i:self.i + 2]
            if len(h) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                self.i += 2
                return Cls(chars(chr(int(h, 16))))
            return Cls(chars("x"))
        if c == "u":
            if self.peek() == "{":
                end = self.s.find("}", self.i)
                h = self.s[self.i + 1:end] if end > 0 else ""
                if h and all(ch in "0123456789abcdefABCDEF" for ch in h) and int(h, 16) <= MAX_CP:
                    self.i = end + 1
                    return Cls(chars(chr(int(h, 16))))
                self.fail("bad \\u{...} escape")
            h = self.s[self.i:self.i + 4]
            if len(h) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                self.i += 4
                cp = int(h, 16)
                if 0xD800 <= cp <= 0xDBFF and self.s[self.i:self.i + 2] == "\\u":
                    h2 = self.s[self.i + 2:self.i + 6]
                    if len(h2) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in h2) and 0xDC00 <= int(h2, 16) <= 0xDFFF:
                        self.i += 6
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (int(h2, 16) - 0xDC00)
                return Cls(((cp, cp),))
            return Cls(chars("u"))
        return Cls(chars(c))  # identity escape

    def char_class(self):
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges = []
        first = True
        while True:
            c = self.peek()
            if c is None:
                self.fail("unterminated character class")
            if c == "]" and not first:
                self.i += 1
                break
            if c == "]" and first:  # ECMA: "[]" is the empty class, "[^]" any character
                self.i += 1
                return ANY_CHAR if negated else ()
            first = False
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in (None, "]"):
                self.i += 1
                hi = self.class_atom()
                if len(lo) != 1 or len(hi) != 1 or lo[0][0] != lo[0][1] or hi[0][0] != hi[0][1]:
                    self.fail("class escape in a range")
                if hi[0][0] < lo[0][0]:
                    self.fail("range out of order in character class")
                ranges.append((lo[0][0], hi[0][0]))
            else:
                ranges.extend(lo)
        ranges = normalize(ranges)
        return complement(ranges) if negated else ranges

    def class_atom(self):
        if self.peek() == "\\":
            return self.escape(in_class=True).ranges
        c = self.peek()
        self.i += 1
        return chars(c)


def parse_regex(pattern: str, where: str = "pattern"):
    """IR over decoded characters, with Anchor markers still in it."""
    return _Parser(pattern, where).parse()


# ----------------------------------------------------------------- anchoring
def _anchor(node, where, pattern):
    """Strip ^/$ at the ends of each top-level alternative; pad unanchored ends with .*"""
    branches = node.items if isinstance(node, Alt) else (node,)
    out = []
    for b in branches:
        items = list(b.items) if isinstance(b, Seq) else [b]
        if items and items[0] == Anchor("^"):
            items.pop(0)
            while items and items[0] == Anchor("^"):
                items.pop(0)
        else:
            items.insert(0, Rep(Cls(ANY_CHAR), 0, None))
        if items and items[-1] == Anchor("$"):
            items.pop()
            while items and items[-1] == Anchor("$"):
                items.pop()
        else:
            items.append(Rep(Cls(ANY_CHAR), 0, None))
        for it in items:
            if _has_anchor(it):
                raise CompileError("%s: anchor inside regex %r is only supported at the start or end of a "
                                   "top-level alternative" % (where, pattern))
        out.append(Seq(tuple(items)) if len(items) != 1 else items[0])
    return out


def _has_anchor(node):
    if isinstance(node, Anchor):
        return True
    if isinstance(node, (Seq, Alt)):
        return any(_has_anchor(i) for i in node.items)
    if isinstance(node, Rep):
        return _has_anchor(node.item)
    return False


def pattern_grammar(pattern: str, where: str, min_len: int = 0, max_len: int | None = None, grammar=None):
    """JSON string content (without quotes) whose decoded value matches `pattern`
    (unanchored, as JSON Schema means it) and has min_len..max_len characters.
    `grammar` receives helper rules when the length bound needs an automaton."""
    ast = parse_regex(pattern, where)
    branches = _anchor(ast, where, pattern)
    node = alt(*[_simplify(b) for b in branches])
    from .lengths import bounded_chars
    return bounded_chars(node, min_len, max_len, grammar, where, "pattern %r" % pattern)


def _simplify(node):
    if isinstance(node, Seq):
        return seq(*(_simplify(i) for i in node.items))
    if isinstance(node, Alt):
        return alt(*(_simplify(i) for i in node.items))
    if isinstance(node, Rep):
        return rep(_simplify(node.item), node.min, node.max)
    if isinstance(node, Cls):
        return cls(node.ranges)
    return node
