"""What callers send the scheduler thread: one message per thing to do, queued in
`SchedulerLoop`'s inbox in arrival order and handled between steps by one dispatch
(`SchedulerLoop._dispatch`).

| message | sent by | the scheduler thread |
|---|---|---|
| `NewRequest` | `SchedulerLoop.submit` (`Engine.generate`, one per request) | `Scheduler.add_request` |
| `AbortRequest` | `SchedulerLoop.abort` (`Engine.abort`) | `Scheduler.abort` |
| `RunCommand` | `SchedulerLoop.call` (`flush_cache`, `get_server_info`, ...) | runs ``fn``, sets ``future`` |

Shutting down is not a message: ``SchedulerLoop.stopping`` is seen at once, ahead of
anything queued.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Union

from furca.runtime.request import Req


@dataclass(frozen=True)
class NewRequest:
    """Queue ``req`` (validated, its rid not in flight)."""

    req: Req


@dataclass(frozen=True)
class AbortRequest:
    """Abort every request whose rid or group rid is ``rid``; unknown rids are ignored."""

    rid: str


@dataclass(frozen=True)
class RunCommand:
    """Run ``fn()`` on the scheduler thread; its result or exception goes to ``future``."""

    fn: Callable[[], Any]
    future: Future


Message = Union[NewRequest, AbortRequest, RunCommand]
