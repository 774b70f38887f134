"""Keep the server's filesystem out of its answers.

The routes that describe the server (/v1/models, /get_model_info, /server_info) name
the model by its id, the last component of its path, unless the server runs with
``--expose-model-path``. `hide_paths` rewrites every string of an answer that contains
one of the server's own paths (the model's, as given and as resolved, and a chat
template file's), wherever an engine or config field may carry it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from furca.server.state import ServerState


def _own_paths(state: ServerState) -> dict[str, str]:
    """path -> what to show instead (longest first, so no path is half replaced)."""
    out: dict[str, str] = {}
    model = getattr(state.engine, "model_path", None)
    given = state.args.model
    for p in (model, given):
        if p is not None and os.sep in str(p):
            name = Path(str(p)).name
            out[str(p)] = name
            out[str(Path(str(p)).expanduser().resolve())] = name
    template = state.args.chat_template
    if template and len(template) < 4096 and "\n" not in template and os.path.isfile(template):
        out[template] = Path(template).name
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))


def hide_paths(obj: Any, state: ServerState) -> Any:
    """`obj` (JSON-like) with the server's paths replaced by their last component;
    unchanged with ``expose_model_path``."""
    if state.args.expose_model_path:
        return obj
    paths = _own_paths(state)
    return _replace(obj, paths) if paths else obj


def _replace(obj: Any, paths: dict[str, str]) -> Any:
    if isinstance(obj, str):
        for path, shown in paths.items():
            if path in obj:
                obj = obj.replace(path, shown)
        return obj
    if isinstance(obj, dict):
        return {k: _replace(v, paths) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_replace(v, paths) for v in obj]
    return obj
