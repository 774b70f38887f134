"""The abstract masks of the JSON lexemes' states, shared by every grammar of the process.

A state whose configurations all lie in the NFA's closed layout of lasting rules
(nfa._Layout: the JSON lexemes and any JSON value, laid out alike in every grammar that
holds them) has the same language up to its context frame in every such grammar, and so
the same abstract mask for one tokenizer. masks.TokenMasks computes such a mask once and
publishes it here (`share`); every later grammar of the process finds it (`shared`) by
its key (`lexeme_key`: the nodes by (body, offset), the frames above the context frame,
acceptance, the tokenizer). Entries are never written to. The compiler's warm-up fills
the common ones (compiler._warm_lexemes), so a request's grammar starts with them. See
DESIGN.md ("Lexeme masks shared across grammars").
"""

from __future__ import annotations

import weakref

# lexeme_key -> (weakref to the TokenizerInfo, (stored, roots, trie, size)). The key holds
# id(info): an entry whose tokenizer is gone is replaced.
_LEXEME_MASKS: dict = {}
MAX_LEXEME_MASKS = 512


def shared(key, info):
    """The published (stored, roots, trie, size) of key for the tokenizer info, or None."""
    hit = _LEXEME_MASKS.get(key) if key is not None else None
    return hit[1] if hit is not None and hit[0]() is info else None


def share(key, info, hit) -> None:
    """Publishes an abstract mask for every grammar (one dict store); when the table is
    full, the entries of tokenizers no longer alive make room first."""
    if len(_LEXEME_MASKS) >= MAX_LEXEME_MASKS:
        for k, v in list(_LEXEME_MASKS.items()):
            if v[0]() is None:
                _LEXEME_MASKS.pop(k, None)
        if len(_LEXEME_MASKS) >= MAX_LEXEME_MASKS:
            return
    _LEXEME_MASKS[key] = (weakref.ref(info), hit)


def lexeme_key(a, ab):
    """The key of abstract state ab of automaton a in _LEXEME_MASKS, or None: when every
    node of its configurations and every return node of their frames above the context
    frame lie in the NFA's closed layout of lasting rules (nfa._Layout: the JSON lexemes,
    any JSON value), its language up to the context frame, and so its abstract mask, is
    the same in every grammar whose layout holds those bodies. The key names nodes by
    (body, offset) and is per tokenizer (the masks' trie)."""
    lay = a.nfa.layout
    if lay is None or not lay.closed:
        return None
    if a.core is not None and not a.core.in_layout(a, ab, lay.size):
        return None  # most abstract states: told from the kernel's tables, no configuration read
    frames, cut, canon = a.stacks.frames, a.cut, lay.canon
    items = []
    for node, st in a.configs[ab]:
        n = canon(node)
        if n is None:
            return None
        path = []
        while st != cut:
            ret, st, count = frames[st]
            r = canon(ret)
            if r is None or st <= 0:  # past the layout, or a stack without the context frame
                return None
            path.append((r, count))
        items.append((n, tuple(path)))
    items.sort()
    return id(a.info), tuple(items), bool(a.accepting[ab])
