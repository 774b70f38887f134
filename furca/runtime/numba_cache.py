"""numba's on-disk cache, keyed on every file a kernel's compiled code comes from.

numba keys a cached kernel on its own file (mtime and size): a kernel that calls an
``@njit`` function of another module has that function compiled into it, so an edit to
the callee alone left the caller's cache entry valid, and the caller ran the old code
while direct calls of the callee ran the new (seen with the compiled decode step and the
Int4Dot tile). A kernel module that calls other modules' kernels names them here, before
its first ``cache=True`` decorator::

    link_sources(__file__, "furca.runtime.cpu_math_kernel", ...)

and its cache entries are then keyed on a hash of its own file and of theirs. It plugs into
numba through ``_CacheImpl._locator_classes`` (named ``CacheImpl`` from numba 0.61): not a
public API, so an import that finds neither leaves numba's own keying in place.
"""

from __future__ import annotations

import hashlib
import os
import sys

from numba.core import caching

_LINKS: dict[str, tuple[str, ...]] = {}  # a kernel file's absolute path -> modules it links


def link_sources(file: str, *modules: str) -> None:
    """Key the numba cache of the kernels in ``file`` also on the files of ``modules``
    (imported module names). Call at module level, after importing them and before the
    module's first ``cache=True`` kernel."""
    _LINKS[os.path.abspath(file)] = modules


class _LinkedSourcesLocator(caching.InTreeCacheLocator):
    """The in-tree cache locator (``__pycache__`` beside the file) for registered files,
    with a source stamp that hashes the file and the files it links."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.abspath(py_file) not in _LINKS:
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        own = os.path.abspath(self._py_file)
        digest = hashlib.sha256()
        for path in (own, *(sys.modules[name].__file__ for name in _LINKS[own])):
            with open(path, "rb") as f:
                digest.update(f.read())
        return digest.hexdigest()


_IMPL = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
if _IMPL is not None and _LinkedSourcesLocator not in _IMPL._locator_classes:
    _IMPL._locator_classes.insert(0, _LinkedSourcesLocator)
