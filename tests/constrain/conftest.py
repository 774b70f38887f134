import random

import numpy as np
import pytest
from tokenizers import Tokenizer

from furca.constrain import GrammarCompiler, TokenizerInfo, _walk

from .tokenizers_cache import tokenizer_json

BYTE_EOS = 256


# abstract states' recording walks, the key-trie split, the shared lexeme masks and the
# Delta store are made by numba's compiled walks; without numba (FURCA_NO_NUMBA=1) every
# state is walked as it is, and the tests of those parts skip (the masks' own tests run)
COMPILED_WALKS = _walk.get_walk_range() is not None
needs_compiled_walks = pytest.mark.skipif(not COMPILED_WALKS, reason="numba's compiled walks make this part")


def byte_info(extra=(), **kw):
    """One token per byte (ids 0..255), EOS = 256, then a special token 257 and any
    extra multi-byte tokens; the logits width is padded to 300. kw goes to TokenizerInfo
    (long_tokens=0: no long-token tier, so every mask comes from the state itself)."""
    toks = [bytes([i]) for i in range(256)] + [None, None] + [e.encode() if isinstance(e, str) else e for e in extra]
    return TokenizerInfo(toks, [BYTE_EOS], vocab_size=300, **kw)


def accept_bytes(g, text):
    """A matcher of g (over byte_info's tokens) after text's bytes, each accepted."""
    m = g.matcher()
    for b in text.encode():
        assert m.accept_token(b), m.error
    return m


@pytest.fixture(scope="session")
def byte_compiler():
    return GrammarCompiler(byte_info(["ab", "abc", "\"}", "{\"", "12", " \"", "日本"]))


@pytest.fixture(scope="session")
def llama():
    """(TokenizerInfo, GrammarCompiler, tokenizers.Tokenizer) of the vendored Llama-3.1
    tokenizer (tests/data/llama3_1-tokenizer)."""
    path, eos = tokenizer_json("llama3_1")
    info = TokenizerInfo.from_tokenizer_json(path, eos_token=eos)
    return info, GrammarCompiler(info), Tokenizer.from_file(str(path))


def allowed_set(m, info):
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    m.fill_bitmask(bm)
    bits = np.unpackbits(bm.view(np.uint8), bitorder="little")
    return bits


def walk_ids(m, ids, info, check_probes=0, rng=None):
    """Feeds ids (each must be in the mask and accepted); probes random tokens that the
    mask and accept_token agree. Returns True when every id was accepted."""
    rng = rng or random.Random(0)
    for t in ids:
        bits = allowed_set(m, info)
        for p in rng.sample(range(info.vocab_size), min(check_probes, info.vocab_size)):
            f = m.fork()
            assert bool(bits[p]) == f.accept_token(p), f"mask and accept_token disagree on token {p}"
        if not bits[t]:
            return False
        if not m.accept_token(t):
            raise AssertionError(f"token {t} in the mask but refused: {m.error}")
    return True


def check_mask(m, info):
    """Asserts that m's mask equals brute force (a fork of the matcher trying each token;
    EOS where it may terminate); returns the mask as booleans over the vocabulary."""
    bits = allowed_set(m, info)[: info.vocab_size].astype(bool)
    ref = np.array([m.fork().accept_token(t) for t in range(info.vocab_size)])
    ref[BYTE_EOS] = m.can_terminate()
    assert (bits == ref).all(), np.flatnonzero(bits != ref)[:10]
    return bits


def walk_checking_masks(m, info, rng, steps):
    """A random walk of up to ``steps`` tokens; at every step the mask must equal brute
    force (a fork of the matcher trying each token; EOS where it may terminate). Half the
    moves prefer multi-byte tokens (ids past the 256 bytes and EOS), to cross rule ends
    inside tokens."""
    for _ in range(steps):
        bits = check_mask(m, info)
        choices = [t for t in np.flatnonzero(bits) if t != BYTE_EOS]
        if not choices:
            return
        t = rng.choice([c for c in choices if c > 257] or choices) if rng.random() < 0.5 else rng.choice(choices)
        assert m.accept_token(int(t))


def spy_string_tables(monkeypatch):
    """A list that gets, at each call of string_counters.BoundedStrings.part, whether the
    tables served that abstract state."""
    from furca.constrain.string_counters import BoundedStrings

    served = []
    part = BoundedStrings.part

    def tables(self, ab, trie):
        got = part(self, ab, trie)
        served.append(got is not None)
        return got

    monkeypatch.setattr(BoundedStrings, "part", tables)
    return served


@pytest.fixture
def no_shared_masks():
    """The process's shared lexeme masks emptied (restored after the test), and the
    compilers' warm-up to be made again: yields the table (lexeme_masks._LEXEME_MASKS)."""
    from furca.constrain import compiler as compiler_mod
    from furca.constrain import lexeme_masks

    saved, done = dict(lexeme_masks._LEXEME_MASKS), set(compiler_mod._LEXEMES_DONE)
    lexeme_masks._LEXEME_MASKS.clear()
    compiler_mod._LEXEMES_DONE.clear()  # a compiler made here makes them again
    yield lexeme_masks._LEXEME_MASKS
    lexeme_masks._LEXEME_MASKS.clear()
    lexeme_masks._LEXEME_MASKS.update(saved)
    compiler_mod._LEXEMES_DONE.clear()
    compiler_mod._LEXEMES_DONE.update(done)
