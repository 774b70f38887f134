"""Process-wide settings of the language (SGLang's ``global_config``)."""

from __future__ import annotations

from typing import Any

#: the backend ``run`` uses when none is passed; set with ``set_default_backend``
default_backend: Any = None


class _GlobalConfig:
    """``furca.global_config.default_backend`` reads and writes the module setting."""

    @property
    def default_backend(self) -> Any:
        return default_backend

    @default_backend.setter
    def default_backend(self, value: Any) -> None:
        global default_backend
        default_backend = value


global_config = _GlobalConfig()
