"""Context-independent masks (contexts.ContextSplit.context), the relative closure, suffix-shared
UTF-8 classes and stepping without rows: each checked against a brute-force
reference (every token stepped through the real automaton)."""

import random

import numpy as np
import pytest

from furca.constrain import GrammarCompiler, ir
from furca.constrain.stacks import CUT_RET

from .conftest import BYTE_EOS, allowed_set, byte_info, walk_checking_masks

EXTRA = ['"', '",', '"x', 'ab"', '"}', '"x,', '日本"', "日", "本", '"]', "a\"", "{\"", '",b"', "zz", "\xe6", "abcdefghij"]

# one string rule called from several places and nesting depths, a bounded repetition
# (counter frames) and a recursive rule: the abstract states are shared between them
# (the string takes "a" and " ": only such wide states go through an abstract state)
GRAMMAR = r'''
root ::= "{" item ("," item)* "}"
item ::= "a" str | "b" str "x" | "[" root "]" | "c" str str
str ::= "\"" [a-z 日本]{0,40} "\""
'''



def direct_closure(a, node, stack):
    """The closure of (node, stack) computed directly, without the per-node caches: the
    reference the automaton's cached closure is checked against."""
    key = (node, stack)
    nfa = a.nfa
    edges, eps, call, is_end, is_tail, counter = nfa.edges, nfa.eps, nfa.call, nfa.is_end, nfa.is_tail, nfa.counter
    out, accept = [], False
    seen = {key}
    todo = [key]
    while todo:
        n, st = todo.pop()
        if edges[n]:
            out.append((n, st))
        nxt = [(t, st) for t in eps[n]]
        c = call.get(n)
        if c is not None:
            callee, ret = c
            nxt.append((callee, st if ret in is_tail else a.stacks.push(ret, st)))
        if n in counter:
            body, done, lo, hi = counter[n]
            nxt.append((body, a.stacks.push(n, st, 1)))
            if lo == 0:
                nxt.append((done, st))
        if n in is_end:
            if st == 0:
                accept = True
            else:
                ret, parent, k = a.stacks.frames[st]
                if k:  # a counter frame: k bodies done
                    body, done, lo, hi = counter[ret]
                    if k < hi:
                        nxt.append((body, a.stacks.push(ret, parent, k + 1)))
                    if k >= lo:
                        nxt.append((done, parent))
                elif ret == CUT_RET:  # an abstract state's context: the rule ends here
                    accept = True
                else:
                    nxt.append((ret, parent))
        for x in nxt:
            if x not in seen:
                seen.add(x)
                todo.append(x)
    return tuple(out), accept


@pytest.mark.parametrize("seed", range(6))
def test_masks_equal_brute_force_on_random_walks(seed):
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_grammar(GRAMMAR)
    rng = random.Random(seed)
    m = g.matcher()
    walk_checking_masks(m, info, rng, 60)
    from furca.constrain import _walk

    if _walk.get_walk_range() is not None:  # numba installed (the numpy walk has no abstract masks)
        assert g.masks.split._abs, "no context-independent mask was shared"


def test_relative_closure_matches_direct_closure():
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_grammar(GRAMMAR)
    m = g.matcher()
    rng = random.Random(1)
    for _ in range(40):
        bits = allowed_set(m, info)
        choices = [t for t in np.flatnonzero(bits[: info.vocab_size]) if t != BYTE_EOS]
        if not choices:
            break
        m.accept_token(int(rng.choice(choices)))
    a = g.automaton
    for key, (configs, accept) in list(a.closures._closure_cache.items()):
        c2, a2 = direct_closure(a, *key)
        assert set(configs) == set(c2) and accept == a2, key


def test_utf8_class_shares_continuation_states():
    # [^"\\] as UTF-8: one node per "continuation bytes still due" (and the E0/ED/F0/F4
    # second bytes), not one per byte-range sequence
    e = ir.char_class([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])
    from furca.constrain.nfa import build_nfa
    from furca.constrain.prepare import prepare

    nfa = build_nfa(prepare(ir.Grammar({"root": e})))
    assert sum(1 for e in nfa.edges if e) <= 9  # 19 with one path per sequence
    info = byte_info()
    g = GrammarCompiler(info).compile_grammar('root ::= [^"\\\\]')
    for text in ["a", "é", "日", "😀", "\U0010FFFF", "\ue000"]:
        m = g.matcher()
        assert m.accept_string(text) and m.can_terminate(), text
    for bad in [b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b'"']:
        assert not g.matcher().accept_string(bad), bad


def test_step_without_rows_matches_expanded_rows():
    # step() moves through states without building their rows (_step_byte); the state
    # it reaches on each byte must be the one the row built later holds
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_grammar(GRAMMAR)
    a = g.automaton
    rng = random.Random(2)
    checked = 0
    for _ in range(30):
        s = a.start
        for _ in range(40):
            if not a.expanded[s]:
                stepped = [a.step(s, bytes([b])) for b in range(256)]
                a.expand(s)
                assert a.trans[s].tolist() == stepped, s
                checked += 1
            live = np.flatnonzero(a.trans[s])
            if not len(live):
                break
            s = int(a.trans[s, rng.choice(live.tolist())])
    assert checked > 50


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled"])
def test_closures_and_byte_classes_match_references_in_any_cache_order(order):
    # Closures.relative reuses the cached closures of the nodes it reaches, so what it returns
    # must not depend on which nodes were cached first; template(n) must give every byte
    # exactly the targets of the edges that cover it
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_grammar(GRAMMAR + 'extra ::= ("a" | [a-c] | [b-z] "q" | "")* str? "!"\nroot2 ::= extra root\n')
    a = type(g.automaton)(g.automaton.nfa, info)
    nodes = list(range(len(a.nfa.edges)))
    if order == "descending":
        nodes.reverse()
    elif order == "shuffled":
        random.Random(3).shuffle(nodes)
    for n in nodes:
        for st in (0, a.cut):
            configs, accept = a.closure(n, st)
            c2, a2 = direct_closure(a, n, st)
            assert set(configs) == set(c2) and len(configs) == len(set(configs)) and accept == a2, (n, st)
        per_byte = [tuple(sorted({t for lo, hi, t in a.nfa.edges[n] if lo <= b <= hi})) for b in range(256)]
        got = [()] * 256
        for lo, stop, targets in a.template(n):
            assert targets and all(got[b] == () for b in range(lo, stop))
            got[lo:stop] = [targets] * (stop - lo)
        assert got == per_byte, n
