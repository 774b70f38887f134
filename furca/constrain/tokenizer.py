"""TokenizerInfo: every token's raw bytes, which tokens are special, and a flat token trie.

Built once per tokenizer (cached by file content), then shared by every grammar.

Token bytes: byte-level BPE vocabularies (GPT-2 style: the ``ByteLevel`` decoder or
pre-tokenizer) map each byte to a printable code point; sentencepiece vocabularies write
a space as ``▁`` and unknown bytes as ``<0xHH>`` byte-fallback tokens. Anything else is
taken as UTF-8 text. Special tokens (added tokens marked ``special``) get no bytes: they
are never allowed inside a constraint; the EOS tokens are allowed only where the
language may end.

The trie (token_trie.TokenTrie) holds every distinct non-empty token byte string, the
walks' source; the vocabulary slices (token_slices.TokenSlice) are built here once per
tokenizer, as are the long tokens' trie and words.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass

import numpy as np

from furca.errors import CompileError

from .token_slices import CLASS_SLICES, SLICES, SPACE_SLICES, TokenSlice
from .token_trie import TokenTrie


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


@dataclass(frozen=True)
class _Key:
    digest: str
    eos: tuple
    vocab_size: int


LONG_TOKENS = 256  # tokens walked apart near a bound (TokenizerInfo._split_long)
_CACHE: dict[_Key, "TokenizerInfo"] = {}
_CACHE_LOCK = threading.Lock()


class TokenizerInfo:
    """What grammars need to know about a tokenizer: every token's raw bytes, the EOS
    tokens, the logits width, and the token trie the masks walk.

    Built once per tokenizer and shared by every grammar compiled for it (immutable,
    thread-safe). The constructors from files are cached by file content.

    Attributes
    ----------
    token_bytes : list of bytes or None
        The raw bytes of token i; None for special tokens (added tokens marked special),
        the EOS tokens, the unknown token and unused ids: those are never allowed inside
        a constraint.
    eos_token_ids : tuple of int
        The ids allowed exactly where the language may end.
    vocab_size : int
        The logits width. A bitmask row is ``num_words = ceil(vocab_size / 32)`` int32
        words; ids >= len(token_bytes) (padding columns) are never allowed.
    """

    def __init__(self, token_bytes: list[bytes | None], eos_token_ids: list[int], vocab_size: int | None = None,
                 long_tokens: int = LONG_TOKENS):
        """Builds the info and its token trie (about a second for a 128k vocabulary).

        Parameters
        ----------
        token_bytes : list of bytes or None
            The raw bytes of each token id; None (or b"") for a token never allowed.
        eos_token_ids : list of int
            The EOS token ids (at least one); their bytes are dropped.
        vocab_size : int, optional
            The logits width, when it differs from len(token_bytes): larger adds padding
            ids (never allowed), smaller drops the ids past it.
        long_tokens : int
            How many of the longest tokens the masks of bounded counters walk one by one
            (see _split_long); the rest share masks across counts.

        Raises
        ------
        CompileError
            If eos_token_ids is empty or an EOS id is outside [0, vocab_size).
        """
        if not eos_token_ids:
            raise CompileError("TokenizerInfo needs at least one EOS token id")
        vocab_size = len(token_bytes) if vocab_size is None else int(vocab_size)
        if vocab_size < len(token_bytes):
            token_bytes = token_bytes[:vocab_size]
        self.token_bytes = list(token_bytes)
        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(int(e) for e in eos_token_ids)
        for e in self.eos_token_ids:
            if not 0 <= e < vocab_size:
                raise CompileError(f"EOS token id {e} is outside the vocabulary (size {vocab_size})")
            if e < len(self.token_bytes):
                self.token_bytes[e] = None
        self.num_words = (vocab_size + 31) // 32
        self.max_token_len = max((len(b) for b in self.token_bytes if b), default=1)
        self.trie = TokenTrie(self.token_bytes)
        self._split_long(long_tokens)
        eos_bits = np.zeros(self.num_words * 32, dtype=bool)
        eos_bits[list(self.eos_token_ids)] = True
        self.eos_mask = np.packbits(eos_bits, bitorder="little").view("<i4").copy()
        # every token's bytes in one object (the matcher's cold accept slices a token out of
        # it: a process forked after set-up writes no page of the per-token bytes objects,
        # whose reference counts and hashes a read of them would write)
        self.token_blob = b"".join(self._token_parts())
        offsets = np.zeros(len(self.token_bytes) + 1, dtype=np.int64)
        # lengths read one at a time (a list of 10^5 ints, freed at once, would leave free
        # slots all over the allocator's pools, which a forked process then writes into)
        np.cumsum(np.fromiter(map(len, self._token_parts()), np.int64, len(self.token_bytes)), out=offsets[1:])
        offsets.setflags(write=False)
        self.token_offsets = memoryview(offsets)  # token t is token_blob[offsets[t]:offsets[t + 1]]
        zeros = np.zeros(self.num_words, dtype=np.int32)
        zeros.setflags(write=False)
        # num_words zero words, read-only, shared by every grammar's masks (the matchers'
        # warm path copies it into a row before a sparse mask's words)
        self.zero_words = memoryview(zeros)
        self._slices = [TokenSlice(self, name, ranges) for name, ranges in SLICES]
        self._class_slices = [TokenSlice(self, name, ranges, rest_tries=False) for name, ranges in CLASS_SLICES]
        self._space_slices = [TokenSlice(self, name, ranges, rest_tries=False) for name, ranges in SPACE_SLICES]
        self._unique_tables = None  # token_tables.py's tables, made when a grammar first needs them
        # string_counters.py's tables by (character DFA, trie), made as grammars need them
        self.string_tables: dict = {}

    def _token_parts(self):
        """Each token's bytes in id order, b"" for a token never allowed."""
        return (b or b"" for b in self.token_bytes)

    def _split_long(self, limit: int) -> None:
        """short_len: the fewest bytes such that at most ``limit`` tokens are longer (the
        "long" tokens); long_trie: their trie; long_words: their packed bitmask (uint32).
        Bounded counters far enough from their bound for every short token share a mask
        (automaton.canonical_short) and walk only the long tokens (masks.py)."""
        lengths = sorted((len(b) for b in self.token_bytes if b), reverse=True)
        self.short_len = lengths[limit] if len(lengths) > limit else 0
        long_bits = np.zeros(self.num_words * 32, dtype=bool)
        rest = [None] * len(self.token_bytes)
        for i, b in enumerate(self.token_bytes):
            if b and len(b) > self.short_len:
                long_bits[i], rest[i] = True, b
        self.long_trie = TokenTrie(rest)
        self.long_words = np.packbits(long_bits, bitorder="little").view(np.uint32).copy()

    def slices(self) -> list["TokenSlice"]:
        """The vocabulary slices the masks take whole where they can (see TokenSlice)."""
        return self._slices

    def class_slices(self) -> list["TokenSlice"]:
        """The slices of narrower alphabets (CLASS_SLICES), for states without a space."""
        return self._class_slices

    def space_slices(self) -> list["TokenSlice"]:
        """The slices of narrower alphabets with a space (SPACE_SLICES), for states that
        a JSON string character kills at once."""
        return self._space_slices

    @property
    def eos_token_id(self) -> int:
        """The first of eos_token_ids."""
        return self.eos_token_ids[0]

    # ---- constructors -------------------------------------------------------------
    @classmethod
    def from_tokenizer_json(cls, path, eos_token: str | list[str] | None = None, vocab_size: int | None = None,
                            eos_token_ids: list[int] | None = None) -> "TokenizerInfo":
        """The info of a Hugging Face ``tokenizer.json`` (only that file is read). Cached by
        file content, EOS and vocab_size: the same file gives the same object.

        Parameters
        ----------
        path : str or os.PathLike
            The tokenizer.json file.
        eos_token : str or list of str, optional
            The EOS token's text (or several texts), looked up in the vocabulary.
        vocab_size : int, optional
            The model's logits width, when it differs from the tokenizer's size.
        eos_token_ids : list of int, optional
            The EOS ids instead of eos_token (one of the two is needed).

        Returns
        -------
        info : TokenizerInfo

        Raises
        ------
        OSError
            If the file cannot be read.
        ValueError
            If it is not valid JSON (json.JSONDecodeError).
        KeyError
            If it has no ``model.vocab``.
        CompileError
            If neither eos_token nor eos_token_ids is given, an EOS text is not in the
            vocabulary, or an EOS id is out of range.
        """
        with open(path, "rb") as f:
            raw = f.read()
        return cls._from_json_text(raw, eos_token, vocab_size, eos_token_ids)

    @classmethod
    def from_huggingface(cls, hf_tokenizer, vocab_size: int | None = None, eos_token_ids: list[int] | None = None):
        """The info of a transformers tokenizer backed by ``tokenizers`` (a "fast" one),
        read through its tokenizer.json serialisation; cached like `from_tokenizer_json`.

        Parameters
        ----------
        hf_tokenizer : transformers.PreTrainedTokenizerFast
            The tokenizer.
        vocab_size : int, optional
            The model's logits width (it may exceed the tokenizer's length).
        eos_token_ids : list of int, optional
            The EOS ids; default: the tokenizer's eos_token_id.

        Returns
        -------
        info : TokenizerInfo

        Raises
        ------
        CompileError
            If the tokenizer is not tokenizers-backed, has no eos_token_id and none is
            given, or an EOS id is out of range.
        """
        backend = getattr(hf_tokenizer, "backend_tokenizer", None) or getattr(hf_tokenizer, "_tokenizer", None)
        if backend is None:
            raise CompileError("from_huggingface needs a tokenizers-backed (fast) tokenizer")
        if eos_token_ids is None:
            eos = hf_tokenizer.eos_token_id
            if eos is None:
                raise CompileError("the tokenizer has no eos_token_id; pass eos_token_ids=[...]")
            eos_token_ids = [eos] if isinstance(eos, int) else list(eos)
        return cls._from_json_text(backend.to_str().encode(), None, vocab_size, eos_token_ids)

    @classmethod
    def _from_json_text(cls, raw: bytes, eos_token, vocab_size, eos_token_ids):
        eos_key = tuple(eos_token_ids) if eos_token_ids is not None else (
            (eos_token,) if isinstance(eos_token, str) or eos_token is None else tuple(eos_token))
        key = _Key(hashlib.sha1(raw).hexdigest(), ("ids",) + eos_key if eos_token_ids is not None else eos_key,
                   -1 if vocab_size is None else int(vocab_size))
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None:
            return hit
        data = json.loads(raw)
        token_bytes, by_text = decode_vocab(data)
        if eos_token_ids is None:
            if eos_token is None:
                raise CompileError("from_tokenizer_json needs eos_token='...' (or eos_token_ids)")
            names = [eos_token] if isinstance(eos_token, str) else list(eos_token)
            missing = [n for n in names if n not in by_text]
            if missing:
                raise CompileError(f"EOS token {missing[0]!r} is not in the tokenizer's vocabulary")
            eos_token_ids = [by_text[n] for n in names]
        info = cls(token_bytes, eos_token_ids, vocab_size)
        with _CACHE_LOCK:
            _CACHE[key] = info
        return info


def _kind(data: dict) -> str:
    """'byte_level' | 'sentencepiece' | 'plain' from the decoder / pre-tokenizer."""
    def types(node):
        if not node:
            return []
        out = [node.get("type")]
        for k in ("decoders", "pretokenizers"):
            for sub in node.get(k) or []:
                out += types(sub)
        return out

    dec, pre = types(data.get("decoder")), types(data.get("pre_tokenizer"))
    if "ByteLevel" in dec or "ByteLevel" in pre:
        return "byte_level"
    if "Metaspace" in dec or "ByteFallback" in dec or "Metaspace" in pre or "Replace" in dec:
        return "sentencepiece"
    return "plain"


def decode_vocab(data: dict) -> tuple[list[bytes | None], dict[str, int]]:
    """(token_bytes by id, {token text: id}) from a parsed tokenizer.json."""
    model = data["model"]
    vocab = model["vocab"]
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        items = [(p[0], i) for i, p in enumerate(vocab)]
    else:
        items = list(vocab.items())
    added = data.get("added_tokens") or []
    size = max([i for _, i in items] + [a["id"] for a in added] + [-1]) + 1
    token_bytes: list[bytes | None] = [None] * size
    by_text = {}
    kind = _kind(data)
    u2b = _UNICODE_TO_BYTE
    for text, i in items:
        by_text[text] = i
        if kind == "byte_level":
            try:
                token_bytes[i] = bytes(u2b[c] for c in text)
            except KeyError:
                token_bytes[i] = text.encode("utf-8")
        elif kind == "sentencepiece":
            if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                try:
                    token_bytes[i] = bytes([int(text[3:5], 16)])
                    continue
                except ValueError:
                    pass
            token_bytes[i] = text.replace("\u2581", " ").encode("utf-8")
        else:
            token_bytes[i] = text.encode("utf-8")
    unk = model.get("unk_token")
    if isinstance(unk, str) and unk in by_text:
        token_bytes[by_text[unk]] = None
    for a in added:
        by_text[a["content"]] = a["id"]
        token_bytes[a["id"]] = None if a.get("special", False) else a["content"].encode("utf-8")
    return token_bytes, by_text
