"""Where the runtime's heavy CPU work runs: see `in_short_lived_thread`."""

from __future__ import annotations

import threading
from typing import Any, Callable


def in_short_lived_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a new thread that ends with it; its result, or its exception.

    ``load_model`` and the engine's set-up (loading and converting weights, zero-filling
    the KV pool) run this way, off the caller's thread. libgomp, PyTorch's OpenMP
    runtime on CPU, keeps an OpenMP thread pool per thread that has opened a parallel
    region, for as long as that thread lives. Had the caller's (often the main) thread
    opened regions during the set-up, its idle pool would outlive it next to the
    scheduler thread's own, and with more OpenMP threads than cores libgomp cuts every
    spin-wait short: each parallel region then wakes sleeping threads. With bf16
    projections the default model's decode step was 6-19% slower that way
    (``bench/cpu_linear_dtype.py``; ``docs/runtime.md``, "One OpenMP pool"). A pool
    dies with its thread, so the scheduler thread's is the only one left."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller as is
            box["error"] = e

    thread = threading.Thread(target=run, name="furca-setup")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
