"""Reference matcher for the GBNF text `furca.constrain.json_schema.schema_to_gbnf`
writes (slow, exact; independent of the engine's own GBNF parser and automaton).

`parse_gbnf(text)` reads llama.cpp-style GBNF (the subset schema_to_gbnf emits) into
the JSON-schema translator's grammar nodes; `Matcher(rules).fullmatch(s)` says whether
`s` is in the language of its `root` rule. Matching is over code points with sets of end positions, memoised per
(rule, start), so ambiguity and recursion (never left recursion here) are fine.
"""
from __future__ import annotations

import sys

from furca.constrain.json_schema.grammar import Alt, Cls, Lit, Ref, Rep, Seq, complement, normalize

_ESC = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "]": "]", "[": "[", "^": "^", "-": "-"}


class GbnfSyntaxError(ValueError):
    pass


def parse_gbnf(text: str) -> dict:
    rules = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, body = line.partition("::=")
        if not sep:
            raise GbnfSyntaxError("line %d: no '::='" % lineno)
        p = _P(body.strip(), lineno)
        rules[name.strip()] = p.alternation()
        if p.i != len(p.s):
            raise GbnfSyntaxError("line %d: unexpected %r" % (lineno, p.s[p.i:]))
    for r in rules.values():
        _check_refs(r, rules)
    return rules


def _check_refs(node, rules):
    if isinstance(node, Ref):
        if node.name not in rules:
            raise GbnfSyntaxError("undefined rule %r" % node.name)
    elif isinstance(node, (Seq, Alt)):
        for i in node.items:
            _check_refs(i, rules)
    elif isinstance(node, Rep):
        _check_refs(node.item, rules)


class _P:
    def __init__(self, s, lineno):
        self.s, self.i, self.lineno = s, 0, lineno

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def alternation(self):
        items = [self.sequence()]
        self.ws()
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            items.append(self.sequence())
            self.ws()
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self):
        items = []
        while True:
            self.ws()
            if self.i >= len(self.s) or self.s[self.i] in "|)":
                break
            items.append(self.postfix(self.atom()))
        if not items:
            return Lit("")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def postfix(self, atom):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "*":
                atom, self.i = Rep(atom, 0, None), self.i + 1
            elif c == "+":
                atom, self.i = Rep(atom, 1, None), self.i + 1
            elif c == "?":
                atom, self.i = Rep(atom, 0, 1), self.i + 1
            elif c == "{":
                end = self.s.index("}", self.i)
                body = self.s[self.i + 1:end]
                if "," in body:
                    lo, hi = body.split(",")
                    atom = Rep(atom, int(lo), int(hi) if hi else None)
                else:
                    atom = Rep(atom, int(body), int(body))
                self.i = end + 1
            else:
                break
        return atom

    def char(self):
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return c
        e = self.s[self.i + 1]
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            h = self.s[self.i + 2:self.i + 2 + n]
            self.i += 2 + n
            return chr(int(h, 16))
        if e not in _ESC:
            raise GbnfSyntaxError("line %d: bad escape \\%s" % (self.lineno, e))
        self.i += 2
        return _ESC[e]

    def atom(self):
        c = self.s[self.i]
        if c == '"':
            self.i += 1
            out = []
            while self.s[self.i] != '"':
                out.append(self.char())
            self.i += 1
            return Lit("".join(out))
        if c == "[":
            self.i += 1
            neg = self.s[self.i] == "^"
            if neg:
                self.i += 1
            ranges = []
            while self.s[self.i] != "]":
                lo = self.char()
                if self.s[self.i] == "-" and self.s[self.i + 1] != "]":
                    self.i += 1
                    hi = self.char()
                    ranges.append((ord(lo), ord(hi)))
                else:
                    ranges.append((ord(lo), ord(lo)))
            self.i += 1
            r = normalize(ranges)
            return Cls(complement(r) if neg else r)
        if c == "(":
            self.i += 1
            node = self.alternation()
            self.ws()
            if self.s[self.i] != ")":
                raise GbnfSyntaxError("line %d: missing ')'" % self.lineno)
            self.i += 1
            return node
        j = self.i
        while j < len(self.s) and (self.s[j].isalnum() or self.s[j] == "-"):
            j += 1
        if j == self.i:
            raise GbnfSyntaxError("line %d: unexpected %r" % (self.lineno, c))
        name, self.i = self.s[self.i:j], j
        return Ref(name)


class Matcher:
    def __init__(self, rules: dict, root: str = "root"):
        self.rules, self.root = rules, root

    def fullmatch(self, s: str) -> bool:
        self.s, self.memo = s, {}
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 100000))
        try:
            return len(s) in self.ends(Ref(self.root), 0)
        finally:
            sys.setrecursionlimit(old)

    def ends(self, node, i):
        """frozenset of positions where a match of node starting at i can end."""
        t = type(node)
        if t is Lit:
            return frozenset((i + len(node.text),)) if self.s.startswith(node.text, i) else frozenset()
        if t is Cls:
            if i < len(self.s):
                cp = ord(self.s[i])
                for lo, hi in node.ranges:
                    if lo <= cp <= hi:
                        return frozenset((i + 1,))
            return frozenset()
        if t is Ref:
            key = (node.name, i)
            if key not in self.memo:
                self.memo[key] = frozenset()  # guards left recursion (never produced)
                self.memo[key] = self.ends(self.rules[node.name], i)
            return self.memo[key]
        if t is Seq:
            cur = {i}
            for item in node.items:
                nxt = set()
                for p in cur:
                    nxt |= self.ends(item, p)
                cur = nxt
                if not cur:
                    break
            return frozenset(cur)
        if t is Alt:
            out = set()
            for item in node.items:
                out |= self.ends(item, i)
            return frozenset(out)
        if t is Rep:
            out = {i} if node.min == 0 else set()
            frontier, seen, k = {i}, set(), 0
            while frontier and (node.max is None or k < node.max):
                k += 1
                nxt = set()
                for p in frontier:
                    nxt |= self.ends(node.item, p)
                if k >= node.min:
                    if node.max is None:
                        nxt -= seen
                        seen |= nxt
                    out |= nxt
                frontier = nxt
            return frozenset(out)
        raise TypeError(node)

