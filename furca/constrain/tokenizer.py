"""TokenizerInfo: every token's raw bytes, which tokens are special, and a flat token trie.

Built once per tokenizer (cached by file content), then shared by every grammar.

Token bytes: byte-level BPE vocabularies (GPT-2 style: the ``ByteLevel`` decoder or
pre-tokenizer) map each byte to a printable code point; sentencepiece vocabularies write
a space as ``▁`` and unknown bytes as ``<0xHH>`` byte-fallback tokens. Anything else is
taken as UTF-8 text. Special tokens (added tokens marked ``special``) get no bytes: they
are never allowed inside a constraint; the EOS tokens are allowed only where the
language may end.

The trie (``TokenTrie``) holds every distinct non-empty token byte string, nodes in
breadth-first order so that the children of a node are contiguous and each depth is a
contiguous range: a mask is computed by walking the trie one depth at a time with
numpy gathers (see ``masks.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass

import numpy as np

from furca.errors import CompileError

from .ir import _split_utf8


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


class TokenTrie:
    """Flat trie of token byte strings, nodes in BFS order (node 0 = root, depth 0).

    byte[n], parent[n], depth[n]; children of n are first_child[n] : first_child[n] +
    num_children[n]; nodes of depth d are level_start[d] : level_start[d+1].
    token_node[t] is the node where token t's bytes end, or ``num_nodes`` (a sentinel
    slot that walks leave dead) for special / empty / out-of-vocabulary ids.
    The same trie in DFS order (sorted byte strings; node 0 = root) for the compiled
    walk: dfs_parent, dfs_byte, dfs_depth, dfs_end[n] = end of n's subtree; token_node_dfs;
    bfs_to_dfs[n]: BFS node n's DFS index.
    """

    def __init__(self, token_bytes: list[bytes | None]):
        order = sorted((b, i) for i, b in enumerate(token_bytes) if b)
        # DFS construction over the sorted strings: a new node per byte past the common prefix.
        dfs_byte, dfs_parent, dfs_depth = [0], [-1], [0]
        dfs_end = [0]
        path = [0]  # path[d] = node at depth d on the current string
        prev = b""
        tok_dfs = {}
        for b, tid in order:
            lcp = 0
            m = min(len(prev), len(b))
            while lcp < m and prev[lcp] == b[lcp]:
                lcp += 1
            for node in path[lcp + 1 :]:
                dfs_end[node] = len(dfs_byte)
            del path[lcp + 1 :]
            for d in range(lcp, len(b)):
                dfs_end.append(0)
                node = len(dfs_byte)
                dfs_byte.append(b[d])
                dfs_parent.append(path[d])
                dfs_depth.append(d + 1)
                path.append(node)
            tok_dfs[tid] = path[len(b)]
            prev = b
        for node in path:
            dfs_end[node] = len(dfs_byte)
        # DFS order (for the compiled walk): parent, byte, subtree end (exclusive)
        self.dfs_parent = np.asarray(dfs_parent, dtype=np.int32)
        self.dfs_parent[0] = 0
        self.dfs_byte = np.asarray(dfs_byte, dtype=np.int32)
        self.dfs_end = np.asarray(dfs_end, dtype=np.int32)
        depth = np.asarray(dfs_depth, dtype=np.int32)
        self.dfs_depth = depth  # the compiled walk keeps its path's states by depth (_walk.py)
        self.max_depth = int(depth.max(initial=0))
        # dfs_rest[n]: the most bytes any token below DFS node n has left past n
        rest = np.zeros(len(depth), dtype=np.int32)
        by_depth = np.argsort(-depth, kind="stable")
        bounds = np.searchsorted(-depth[by_depth], np.arange(-int(depth.max(initial=0)), 1))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            nodes = by_depth[lo:hi]
            nodes = nodes[nodes > 0]
            np.maximum.at(rest, self.dfs_parent[nodes], rest[nodes] + 1)
        self.dfs_rest = rest
        perm = np.argsort(depth, kind="stable")  # BFS position -> DFS index
        self.bfs_to_dfs = perm.astype(np.int32)  # for lookups that walk down BFS and read DFS subtrees
        inv = np.empty_like(perm)
        inv[perm] = np.arange(len(perm))
        n = len(perm)
        self.num_nodes = n
        self.byte = np.asarray(dfs_byte, dtype=np.int32)[perm]
        par = np.asarray(dfs_parent, dtype=np.int64)[perm]
        par[0] = 0
        self.parent = inv[par].astype(np.int32)
        self.parent[0] = -1
        self.depth = depth[perm]
        counts = np.bincount(self.parent[1:], minlength=n).astype(np.int32)
        self.num_children = counts
        first = np.full(n, n, dtype=np.int64)
        np.minimum.at(first, self.parent[1:], np.arange(1, n))
        self.first_child = first.astype(np.int32)
        max_depth = int(self.depth.max()) if n else 0
        self.level_start = np.searchsorted(self.depth, np.arange(max_depth + 2)).astype(np.int32)
        token_node = np.full(len(token_bytes), n, dtype=np.int32)
        token_node_dfs = np.full(len(token_bytes), n, dtype=np.int32)
        if tok_dfs:
            tids = np.fromiter(tok_dfs.keys(), dtype=np.int64, count=len(tok_dfs))
            dns = np.fromiter(tok_dfs.values(), dtype=np.int64, count=len(tok_dfs))
            token_node[tids] = inv[dns]
            token_node_dfs[tids] = dns
        self.token_node = token_node
        self.token_node_dfs = token_node_dfs
        # CSR: token ids ending at each DFS node: tok_ids[tok_start[n] : tok_start[n + 1]]
        valid = np.flatnonzero(token_node_dfs < n)
        order = np.argsort(token_node_dfs[valid], kind="stable")
        self.tok_ids = valid[order].astype(np.int32)
        self.tok_start = np.searchsorted(token_node_dfs[valid][order], np.arange(n + 1)).astype(np.int32)
        self.keep_all = np.ones(n, dtype=np.bool_)  # the walks' `keep` where nothing is skipped (_walk.py)

    def subtrees_with(self, flags) -> np.ndarray:
        """keep[i] for each DFS node i: whether some token in i's subtree has its flag set
        (flags: one bool per entry of tok_ids, in their order). A token's subtree is a
        run of tok_ids (tok_start[i] : tok_start[dfs_end[i]]), so this is a prefix sum."""
        sums = np.zeros(len(flags) + 1, dtype=np.int64)
        np.cumsum(flags, out=sums[1:])
        start = self.tok_start[: self.num_nodes]
        return sums[self.tok_start[self.dfs_end]] > sums[start]


# JSON string content (no quote, backslash or control character): most of a vocabulary.
SLICES = [("json_string_char", [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])]

# The alphabets of common string patterns (`\S+`, `[\w.-]+`, `\w*`, `[a-zA-Z0-9]+`,
# `[a-z0-9-]+`), largest first: a state inside such a pattern allows no space, so the JSON
# string slice never applies, and its mask walked every token of the alphabet (~35-50k of
# Llama-3.1's, 0.3-0.5 ms a mask). Taken through the whole trie (TokenSlice, rest_tries=False).
CLASS_SLICES = [
    ("nonspace", [(0x21, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]),
    ("ident", [(0x2D, 0x2E), (0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]),
    ("word", [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]),
    ("alnum", [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)]),
    ("lower_digit_dash", [(0x2D, 0x2D), (0x30, 0x39), (0x61, 0x7A)]),
]

# The alphabets with a space of patterns that refuse some JSON string character (ASCII
# text without a backslash: `^[ -~]*$`-like; letters, digits and spaces: a file name's
# `^[^*/:<>?|]+$`, `^[a-zA-Z0-9 ._-]*$`), largest first: the JSON string slice dies at
# once there (depth 0: an accented letter, a `*`), and each such mask walked the whole trie
# (~120k tokens allowed, 2-3.6 ms). Tried only where the JSON string slice's depth is 0.
SPACE_SLICES = [
    ("ascii_text", [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)]),
    ("alnum_space", [(0x20, 0x20), (0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)]),
]


class TokenSlice:
    """Tokens made only of characters in ``ranges`` (whole UTF-8 characters), in length
    levels: for each threshold L in ``LEVELS`` (and for "any length"), the packed bitmask
    of the slice's tokens of at most L characters and how to walk every other token
    (llguidance's "slicer", with lengths). A state from which every string of L slice
    characters stays alive allows that bitmask at once and walks only the other tokens.

    ``levels``: (L, packed bitmask, trie, keep) per level. With rest_tries (the JSON
    string slice: ~95% of a vocabulary, so a small rest), trie holds only the other
    tokens and keep is None. Without (a narrower alphabet, whose rest is most of the
    vocabulary: a trie of it would cost ~0.3 s and ~6 MB a level), trie is the
    tokenizer's whole trie and keep[i] says whether DFS node i's subtree holds a token
    outside the level: the walks skip the other subtrees unvisited (_walk.py), which
    visits the nodes a rest trie would hold, plus one check per skipped child.
    ``first_byte_list``: the bytes that start a slice character (a state must take
    every one for a depth of 1 or more)."""

    LEVELS = (16, 10)

    def __init__(self, info: "TokenizerInfo", name: str, ranges, rest_tries: bool = True):
        self.name = name
        self.ranges = ranges
        klass = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
        pat = re.compile(f"[{klass}]+")
        char_len = np.zeros(info.num_words * 32, dtype=np.int32)  # 0 = not in the slice
        for i, b in enumerate(info.token_bytes):
            if not b:
                continue
            try:
                text = b.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if pat.fullmatch(text):
                char_len[i] = len(text)
        # every level's source (a token of more than 255 characters is longer than any level)
        self._char_len = np.minimum(char_len, 255).astype(np.uint8)
        self.levels = []  # (L, packed mask of slice tokens with <= L chars, trie of the rest or whole, keep)
        trie = info.trie
        for L in (1 << 30,) + self.LEVELS:  # 1 << 30: every slice token (slices.UNBOUNDED)
            short, packed = self._short(L)
            if rest_tries:
                rest = [None if short[i] else b for i, b in enumerate(info.token_bytes)]
                self.levels.append((L, packed, TokenTrie(rest), None))
            else:
                self.levels.append((L, packed, trie, trie.subtrees_with(~short[trie.tok_ids])))
        self.max_level = max(self.LEVELS)  # levels the depth search looks ahead
        self._exact: dict[int, tuple] = {}
        self.utf8_seqs = [seq for lo, hi in ranges for seq in _split_utf8(lo, hi)]
        self.first_bytes = 0  # bit b set: some slice character starts with byte b
        for seq in self.utf8_seqs:
            self.first_bytes |= (1 << (seq[0][1] + 1)) - (1 << seq[0][0])
        self.first_byte_list = np.array([b for b in range(256) if self.first_bytes >> b & 1], dtype=np.intp)

    def exact(self, r: int) -> tuple:
        """The level of a state whose depth is exactly r, below max_level
        (slices.SliceBounds.tight: every string of at most r slice characters keeps it
        alive, every one of r + 1 kills it): (r, packed bitmask of the slice's tokens of
        at most r characters, the "any length" level's trie and keep), so the walk goes
        over the tokens outside the slice only (the slice's longer tokens are all
        refused). Made on first use, cached (a dictionary write: thread-safe)."""
        hit = self._exact.get(r)
        if hit is None:
            _L, _bits, trie, keep = self.levels[0]
            hit = self._exact[r] = (r, self._short(r)[1], trie, keep)
        return hit

    def _short(self, L: int):
        """(per token: in the slice with at most L characters, the same as packed int32 words)."""
        short = (self._char_len > 0) & (self._char_len <= L)
        packed = np.packbits(short, bitorder="little").view("<i4").copy()
        packed.setflags(write=False)  # shared: masks start from it, stored masks refer to it (masks.Delta)
        return short, packed


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
        self._slices = [TokenSlice(self, name, ranges) for name, ranges in SLICES]
        self._class_slices = [TokenSlice(self, name, ranges, rest_tries=False) for name, ranges in CLASS_SLICES]
        self._space_slices = [TokenSlice(self, name, ranges, rest_tries=False) for name, ranges in SPACE_SLICES]
        self._unique_tables = None  # token_tables.py's tables, made when a grammar first needs them

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
