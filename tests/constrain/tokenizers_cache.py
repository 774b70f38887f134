"""Real tokenizers for the tests and benchmarks, vendored gzipped under tests/data/
(each folder holds its SOURCE.md and LICENSE) and decompressed on first use into a
folder of the system's temporary directory named by the archive's digest.

A missing archive is an error, never a skip: the tests that need a real vocabulary
always run.

(The module is not named tokenizers.py: that would shadow the `tokenizers` package.)
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
# name -> (folder under tests/data, EOS token text)
TOKENIZERS = {"llama3_1": ("llama3_1-tokenizer", "<|eot_id|>")}


def tokenizer_json(name: str = "llama3_1") -> tuple[Path, str]:
    """(path to the decompressed tokenizer.json, EOS token text).

    Raises FileNotFoundError when the vendored archive is missing, KeyError for an
    unknown name."""
    folder, eos = TOKENIZERS[name]
    archive = DATA / folder / "tokenizer.json.gz"
    if not archive.is_file():
        raise FileNotFoundError(f"vendored tokenizer {name!r} is missing: {archive} (see tests/data/{folder}/SOURCE.md)")
    raw = archive.read_bytes()
    dest = Path(tempfile.gettempdir()) / "furca-test-tokenizers" / f"{name}-{hashlib.sha256(raw).hexdigest()[:16]}"
    path = dest / "tokenizer.json"
    if not path.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        part = dest / f"tokenizer.json.{os.getpid()}.part"  # concurrent test processes: atomic rename
        part.write_bytes(gzip.decompress(raw))
        os.replace(part, path)
    return path, eos
