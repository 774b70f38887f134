"""Running a compiled CPU kernel on torch's own OpenMP team.

On CPU, torch runs its operators on an OpenMP team (GNU libgomp, shipped inside the torch
wheel). Between two operators the team's workers spin for a while before sleeping, so
work handed to other threads right after a torch operator (a Python thread pool running
a numba kernel) shares the cores with spinning workers: the Q8_0 LM head of the default
model took 5.7 ms a decode token that way against 3.0 ms on the team itself
(``bench/omp_team.py``). ``run(kernel, args)`` calls libgomp's ``GOMP_parallel`` with a
numba ``cfunc`` (``omp_team_kernel``): the calling thread and torch's workers run it, each
claiming parts of the work from a shared counter, and the call returns when all parts are
done. ctypes releases the GIL for the call.

Available when torch's parallel backend is OpenMP and its libgomp exports
``GOMP_parallel`` (``available()``), and never in a forked child (see ``_off_in_child``);
the callers keep their thread-pool path otherwise.
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import torch

_LOCK = threading.Lock()
_STATE: list = []  # [GOMP_parallel or None] once resolved, then [.., team_functions()] once asked


def _off_in_child() -> None:
    # libgomp has no fork handler: a forked child's thread keeps its parent's team, whose
    # workers do not exist there, and its next parallel region waits for them forever
    _STATE[:] = [None]


os.register_at_fork(after_in_child=_off_in_child)


def _loaded_libgomp() -> str | None:
    """The path of the libgomp this process loaded for torch (torch's own copy first)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line and "/" in line}
    except OSError:
        return None
    ordered = sorted(paths, key=lambda p: "torch" not in p)
    return ordered[0] if ordered else None


def _resolve():
    if "OpenMP" not in torch.__config__.parallel_info().split("ATen parallel backend:")[-1]:
        return None
    path = _loaded_libgomp()
    if path is None:
        return None
    try:
        fn = ctypes.CDLL(path).GOMP_parallel
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    fn.restype = None
    return fn


def team_functions() -> tuple[int, int] | None:
    """The addresses of this libgomp's ``omp_get_thread_num`` and ``omp_get_num_threads``
    (for a team kernel that splits work by thread and waits at barriers: it must know
    the team it got), or None where `run` is not available."""
    if not available():
        return None
    if len(_STATE) == 1:
        with _LOCK:
            if len(_STATE) == 1:
                lib = ctypes.CDLL(_loaded_libgomp())
                _STATE.append((ctypes.cast(lib.omp_get_thread_num, ctypes.c_void_p).value,
                               ctypes.cast(lib.omp_get_num_threads, ctypes.c_void_p).value))
    return _STATE[1]


def _gomp_parallel():
    if not _STATE:
        with _LOCK:
            if not _STATE:
                _STATE.append(_resolve())
    return _STATE[0]


def available() -> bool:
    return _gomp_parallel() is not None


def run(kernel, args: np.ndarray, threads: int | None = None) -> None:
    """Run the cfunc ``kernel`` (signature ``void(int64*)``) on torch's OpenMP team with
    ``args`` (int64, contiguous; ``args[0]`` the part counter, set to 0 here). Every team
    thread calls ``kernel(args)``; the call returns when all have returned. The arrays
    whose addresses ``args`` holds must be kept alive by the caller."""
    args[0] = 0
    _gomp_parallel()(kernel.address, args.ctypes.data, threads or torch.get_num_threads(), 0)
