"""Suite-wide rules for waiting (issue 12: the suite must hold on a loaded machine).

A test never depends on how fast the machine is:

- a client (HTTP, OpenAI SDK, a subprocess) waits ``CLIENT_TIMEOUT`` for one answer, far
  above any latency the suite expects even with the CPU shared ten ways; the per-test
  pytest-timeout (900-1200 s) is what catches a real hang;
- a test that waits for something to happen polls it with ``wait_until`` and a deadline of
  ``READY_TIMEOUT``, instead of sleeping a fixed time and hoping;
- where time is the subject (a deadline, a drain, a timeout), a test asserts the order of
  events and the state they leave, not a duration.

``scripts/test_under_load.sh`` runs the suite beside CPU hogs to check these rules hold.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from hypothesis import HealthCheck, settings

CLIENT_TIMEOUT = 600.0  # seconds one request, stream read or subprocess may take
READY_TIMEOUT = 600.0  # seconds a polled condition (a server up, a request running) may take

# No per-example deadline, and no "data generation is too slow" failure: both measure the
# machine's speed. A test's own @settings still sets what it names.
settings.register_profile("furca", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("furca")

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float = READY_TIMEOUT, interval: float = 0.02) -> T:
    """Poll `condition` until it returns a truthy value and return that value; fail with
    `what` after `timeout` seconds. The interval sleeps, so the poll does not compete with
    the code under test for the CPU or the GIL."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout:g} s: {what}")
        time.sleep(interval)


async def async_wait_until(condition: Callable[[], T], what: str, timeout: float = READY_TIMEOUT,
                           interval: float = 0.01) -> T:
    """`wait_until` inside an event loop: the interval yields to the loop's other tasks."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout:g} s: {what}")
        await asyncio.sleep(interval)
