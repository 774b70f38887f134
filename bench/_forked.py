"""in_child(fn): fn() run in a process forked from this one, its result back through a
pipe (pickled), as the shared harness runs each schema in a child of a warmed-up process.
For the bench scripts that measure what such a child pays (constrain_tail.py,
constrain_cow_pages.py)."""

from __future__ import annotations

import os
import pickle
import sys
import traceback


def in_child(fn):
    """fn()'s return value, computed in a forked child; None where the child failed
    (raised: its traceback on stderr, so that a broken measurement is not read as a
    schema without steps; or exited without a result)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = fn()
            with os.fdopen(w, "wb") as f:
                pickle.dump(out, f)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else None
