"""`ProgramSession`: one program run's session on its backend, so the run's KV (its text
so far, its forks' shared prefix) stays pinned in the server's radix cache between its
own ``gen`` calls (docs/runtime.md "Sessions").

A backend that has sessions offers ``open_session() -> str`` and ``close_session(id)``
(`LocalBackend`, `RuntimeEndpoint`); others are used without one. The session opens at
the run's first ``gen`` (a program that never generates opens none), is shared by the
run's forks (each executor holds a reference), and closes when the last executor holding
it ends. ``open_session`` may return None (a server without sessions); when it raises,
the run goes on without a session, and a failed close is left to the lease's timeout.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger("furca.lang")


class ProgramSession:
    def __init__(self, backend: Any):
        self.backend = backend
        self._lock = threading.Lock()
        self._refs = 0
        self._id: str | None = None
        self._opened = False  # open_session was tried (whatever its outcome)

    def acquire(self) -> "ProgramSession":
        """One more executor holds the session (the run's own, or a fork's)."""
        with self._lock:
            self._refs += 1
        return self

    def session_id(self) -> str | None:
        """The session's id, opened on first use; None where the backend has no sessions."""
        with self._lock:
            if not self._opened:
                self._opened = True
                self._id = self._open()
            return self._id

    def _open(self) -> str | None:
        open_session = getattr(self.backend, "open_session", None)
        if open_session is None:
            return None
        try:
            return open_session()
        except Exception as e:  # noqa: BLE001 - pinning is an optimisation: run without it
            logger.debug("opening a session on %r failed (%s: %s); the program runs without one", self.backend,
                         type(e).__name__, e)
            return None

    def release(self) -> None:
        """An executor holding the session ended; the last one closes it."""
        with self._lock:
            self._refs -= 1
            sid = self._id if self._refs == 0 else None
            if sid is not None:
                self._id = None
        if sid is not None:
            try:
                self.backend.close_session(sid)
            except Exception as e:  # noqa: BLE001 - the lease's timeout releases it
                logger.debug("closing session %s failed (%s: %s); its lease times out", sid, type(e).__name__, e)
