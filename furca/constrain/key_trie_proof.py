"""The slice proof's short paths for key tries: a stack-free part's requirements read off
the node, not built from its byte classes.

slice_proof.SliceProof._prove requires, for the part of one stack-free configuration
(pair (configuration,), None), the units of the targets of the configuration's byte
classes that meet the slice's first bytes (its general path: _spans / _pieces, tuples
per class and a set of (units, tail) pairs). Most of the first proof of a grammar's key
tries (json_schema/keys.py, built by key_trie.py) is such parts, one per trie node, so
KeyTrieParts gives their requirements directly:

- trie_units: at a node that key_trie.py marked (key_trie.trie_nodes), key-rest's unit
  and, at a node with children, the node's own unit; the proof then gives its verdict
  to every inner node (every leaf) of the trie (spread), so a trie of 1,000 nodes is
  settled in a few pairs;
- ascii_units: at any node whose edges that meet the slice's first bytes take one-byte
  characters only and do not overlap, the distinct units of their targets.

Both return the same requirements as the general path (tests/constrain/
test_maxstep_key_tries.py and test_slice_proof_ascii.py prove the verdicts and parts
equal with the path switched off). The closure units come from SliceProof.closure_unit,
passed in as `unit_of` (KeyTrieParts keeps no reference to the proof that owns it).
"""

from __future__ import annotations

from .key_trie import trie_nodes


class KeyTrieParts:
    """The requirements of stack-free parts at key trie nodes and ASCII nodes of one NFA.
    `units` is the owning SliceProof's cache of closure units ((node, stack) -> unit),
    read before calling unit_of."""

    def __init__(self, nfa, units: dict):
        self._nfa = nfa
        self._tick = nfa.tick  # nodes whose bytes count a length region's characters
        self._units = units
        self.marks = trie_nodes(nfa)  # key trie node -> (narrow classes' target, call of other, has children)
        self._groups: dict[tuple, list] = {}  # a trie's mark -> the parts of its nodes (_parts)

    def trie_units(self, cfg, bits, unit_of):
        """(the node's mark, the boundary requirements of a stack-free key trie node's
        part) when `bits` lacks the closing quote: key-rest's unit (the narrow classes'
        target) and, at a node with children, the node's own unit (itself and
        key-other's start: as parts, other's are required and its own is the pair
        itself), not its children's units. Exact for the greatest fixpoint: a node's
        bytes in `bits` lead to a child (whose unit is the child plus key-other's start)
        or to key-rest, and below every node there is a leaf, whose plain ASCII
        characters all go to key-rest; so a leaf's part holds exactly when key-rest's
        unit does, an inner node's when key-rest's unit and key-other's parts do. Every
        inner node (every leaf) of a trie has the same requirements, so the proof gives
        its verdict to all of them (spread): a trie of 1,000 nodes is proven in a few
        parts, not 1,000 (sp_138's first key proof ~13 -> ~0.5 ms). None otherwise."""
        hit = self.marks.get(cfg[0]) if cfg[1] is None else None
        if hit is None or bits >> 0x22 & 1:
            return None
        rest = unit_of(hit[0], None)
        return hit, dict.fromkeys((rest, unit_of(cfg[0], None)) if hit[2] else (rest,))

    def ascii_units(self, cfg, bits, unit_of):
        """The boundary requirements of the part of a stack-free configuration whose
        edges that meet `bits` all take one-byte characters (< 0x80) and do not overlap:
        the distinct units of their targets, one of which is () when some target has no
        configuration (then the part fails); None otherwise (the proof's general path).
        The same requirements as that path's pieces (a piece per edge, one target unit,
        tail ()), without building them: a key trie node's part, one per trie node, is
        most of the first proof of a grammar's key tries."""
        n, st = cfg
        if st is not None or n in self._tick:
            return None
        seen, out, units = 0, {}, self._units
        for lo, hi, t in self._nfa.edges[n]:
            m = (1 << (hi + 1)) - (1 << lo)
            if not bits & m:
                continue
            if hi >= 0x80 or seen & m:
                return None
            seen |= m
            u = units.get((t, None))
            out[unit_of(t, None) if u is None else u] = None
        return out

    def spread(self, found, holds, complete, parts) -> None:
        """Gives each trie's verdict to the parts of all its inner nodes (all its leaves):
        found maps a mark to the pair of a node with that mark whose part the proof
        explored, holds is the proof's verdict per pair, complete whether it explored
        everything (else only what holds is kept); a trie whose inner nodes hold has
        leaves that hold too. parts: the proof's {(configuration,): whether its part
        holds}, updated."""
        for mark in list(found):
            ok = holds[found[mark]]
            if ok or complete:
                found[mark] = ok
                if ok and mark[2]:  # key-rest holds: so do the leaves
                    found[mark[:2] + (False,)] = True
            else:
                del found[mark]
        for mark, ok in found.items():
            parts.update(dict.fromkeys(self._parts(mark), ok))

    def _parts(self, mark):
        """The parts ((node, None),) of the inner nodes or the leaves of a key trie (its
        mark: key_trie.trie_nodes)."""
        groups = self._groups
        if not groups:
            for n, m in self.marks.items():
                groups.setdefault(m, []).append(((n, None),))
        return groups.get(mark, ())
