"""Grammar token masks filled beside the forward pass (`MaskFiller`), and what a step's
constrained decoding cost (`MaskTimes`).

A request's mask for the token a step samples depends only on its matcher's state, which
the previous step's ``accept_token`` (and jump-forward) settled. So the scheduler calls
`MaskFiller.start` with the step's sampling requests *before* the model's forward pass:
the masks are filled on worker threads while the forward runs on the scheduler thread
(torch's CPU and CUDA ops release the GIL; so does the numba trie walk of
``furca/constrain/_walk.py``, compiled ``nogil=True``; the matcher's Python around it
holds the GIL). After the forward, `MaskFiller.collect` joins them.

The bound (``wait_s``): once the forward is done, `collect` waits at most ``wait_s``
seconds more for the masks. A request whose mask is not ready by then is *late*: it
skips sampling this step (the scheduler rolls its last position back, so the next step
computes it again and samples it then); its fill goes on in the background and is used
the next step (its matcher has not moved). So a slow mask delays no other request of the
step by more than ``wait_s``. When every sampling request of the step is late, nobody
else is delayed: `collect` waits for the first of their masks, then ``wait_s`` more for
the others.

Early start (``early=True``): a request's next mask depends only on its matcher's state
once its sampled token and any jump-forward (forced) tokens are accepted, so the
postprocessor calls `MaskFiller.start_early` for it right then, and the fill runs while
the rest of the step is postprocessed, the next step is scheduled and its forward runs;
the next step's `start` keeps it. A request whose next forward computes forced tokens
(jump-forward appended them; their pass samples after the last of them) has its mask
ready before that heavier forward begins. Nothing moves the matcher between the early
start and the step that collects it: the matcher moves only when its request samples,
and a request samples only after its fill is done. A fill started early for a request
that then leaves the running batch (retracted, finished by a stop string, aborted) is
dropped by a later `start` once it is done.

With ``overlap=False`` nothing runs beside the forward: `collect` fills the masks on the
scheduler thread, in order, with no bound (the sequential path; greedy outputs are the
same either way, since a mask depends only on the matcher's state).

Failure isolation: an exception in a request's fill (its matcher, or an injected
``grammar`` fault) is returned by `collect` for that request alone.

Thread safety: the matchers' automata grow their tables under their own lock and their
readers take none (``furca/constrain/automaton.py``), so fills of several requests run
concurrently, and a late fill may run on while the scheduler thread moves other matchers
of the same grammar. No two threads ever touch the same matcher: a request with a fill in
flight is never sampled (it is late) until the fill is done.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from furca.runtime.request import Req

DEFAULT_WAIT_S = 0.002  # how long a step waits, after its forward, for a late mask
DEFAULT_WORKERS = 2  # mask worker threads


@dataclass(frozen=True, slots=True)
class MaskTimes:
    """Constrained decoding in one step. ``fill_s`` is summed over the masks (on
    whichever thread filled them); ``wait_s`` is the scheduler thread's wait for them after
    the forward pass (with overlap off: the fills themselves)."""

    num_masks: int  # constrained requests that sampled (or were late)
    num_late: int  # requests that waited a step for their mask
    num_early: int  # masks of the step started early (right after the previous step's accept)
    fill_s: float
    wait_s: float
    apply_s: float  # masking the sampled logits rows
    accept_s: float  # accept_token and jump-forward of the sampled tokens


class _Job:
    """One request's mask fill: its own row (so a late fill writes nothing the step reads)."""

    __slots__ = ("req", "row", "done", "error", "fill_s", "early", "_cond")

    def __init__(self, req: Req, words: int, cond: threading.Condition, early: bool = False):
        self.req = req
        self.early = early  # started by `start_early`
        self.row = torch.empty((1, words), dtype=torch.int32)
        self.done = False
        self.error: BaseException | None = None
        self.fill_s = 0.0
        self._cond = cond  # notified when done

    def run(self, faults) -> None:
        began = time.perf_counter()
        try:
            if faults is not None:
                faults.check("grammar", self.req)
            self.req.grammar.fill_bitmask(self.row, 0)
        except BaseException as e:  # noqa: BLE001 - handed to the scheduler thread by `collect`
            self.error = e
        finally:
            self.fill_s = time.perf_counter() - began
            with self._cond:
                self.done = True
                self._cond.notify_all()


class MaskFiller:
    """Masks of logits ``width`` wide, filled on ``workers`` threads beside the forward pass
    (``overlap=True``) or on the scheduler thread after it. Used by the scheduler thread
    only (its workers are its own); `close` stops the workers."""

    def __init__(self, width: int, *, overlap: bool = True, wait_s: float = DEFAULT_WAIT_S,
                 workers: int = DEFAULT_WORKERS, early: bool = True):
        if wait_s < 0 or workers < 1:
            raise ValueError(f"wait_s must be >= 0 and workers >= 1, got {wait_s!r}, {workers!r}")
        self.words = (int(width) + 31) // 32
        self.overlap, self.wait_s, self.workers = overlap, float(wait_s), workers
        self.early = early and overlap
        self.faults = None  # a FaultInjector (faults.py) in tests; set by the scheduler
        self._jobs: dict[Req, _Job] = {}  # fills started and not yet collected
        self._cond = threading.Condition()
        self._pool: ThreadPoolExecutor | None = None

    def start(self, reqs: list[Req]) -> None:
        """Begin the masks of ``reqs``' constrained requests (the step's sampling requests)
        on the workers. A request whose earlier fill is still running keeps it. Fills done
        for requests no longer in a step (aborted, failed, retracted) are dropped."""
        if not self.overlap:
            return
        live = set(reqs)
        for req in [r for r, job in self._jobs.items() if r not in live and job.done]:
            del self._jobs[req]
        for req in reqs:
            self._submit(req, False)

    def start_early(self, req: Req) -> None:
        """Begin ``req``'s next mask now (with ``early``): its matcher has accepted this
        step's tokens and will not move before the step that samples with it (see the
        module docstring). No-op without a grammar, or when its fill is already started."""
        if self.early:
            self._submit(req, True)

    def discard(self, req: Req) -> None:
        """Wait for ``req``'s fill in flight, if any, and forget it: the caller is about to
        move its matcher (speculative drafting checks draft tokens with it)."""
        job = self._jobs.pop(req, None)
        if job is not None:
            with self._cond:
                self._cond.wait_for(lambda: job.done)

    def _submit(self, req: Req, early: bool) -> None:
        if req.grammar is not None and req not in self._jobs:
            job = self._jobs[req] = _Job(req, self.words, self._cond, early)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="furca-masks")
            try:
                self._pool.submit(job.run, self.faults)
            except RuntimeError:
                # the pool takes no new work: the interpreter is exiting (concurrent.futures'
                # exit hook refuses every submit, while an engine left running still steps)
                # or it was shut down; fill on this thread instead
                job.run(self.faults)

    def collect(self, reqs: list[Req]):
        """After the forward pass: ``(bitmask, late, errors, fill_s, wait_s, num_early)``. ``bitmask``
        is int32 ``[len(reqs), words]`` (all bits set in unconstrained rows), or None when
        no request of ``reqs`` has a grammar; ``late``: the requests whose mask was not
        ready within the bound (their rows are meaningless; they sample next step);
        ``errors``: ``(req, exception)`` of the fills that raised (their rows likewise);
        ``num_early``: how many of the masks collected were started by `start_early`."""
        constrained = [r for r in reqs if r.grammar is not None]
        if not constrained:
            return None, [], [], 0.0, 0.0, 0
        began = time.perf_counter()
        if self.overlap:
            jobs = [self._jobs.get(r) for r in constrained]
            for r, job in zip(constrained, jobs):
                if job is None:  # not started beside this forward (a retried step): fill now
                    job = self._jobs[r] = _Job(r, self.words, self._cond)
                    job.run(self.faults)
            jobs = [self._jobs[r] for r in constrained]
            with self._cond:
                if not self._cond.wait_for(lambda: all(j.done for j in jobs), self.wait_s) \
                        and len(constrained) == len(reqs) and not any(j.done for j in jobs):
                    # every sampling request is late: nobody else waits; take the first mask
                    # to come, and the others that come within the bound after it
                    self._cond.wait_for(lambda: any(j.done for j in jobs))
                    self._cond.wait_for(lambda: all(j.done for j in jobs), self.wait_s)
        else:
            jobs = [_Job(r, self.words, self._cond) for r in constrained]
            for job in jobs:
                job.run(self.faults)
        wait_s = time.perf_counter() - began
        # numpy, not torch.full: a batch's bitmask (32 rows x 1,536 words for a 49k vocabulary)
        # is past torch's grain size, so torch.full wakes the intra-op OpenMP team, whose
        # threads then spin (2.3 ms of process CPU per call at 2 threads, against 0.1 ms). On an
        # H200 host (16 cores) the constrained steps took 4.5x the plain steps' CPU time, 127
        # against 28 ms per step, for 1 ms of mask fill (bench/results/gpu.md, 2026-12-04).
        rows = np.full((len(reqs), self.words), -1, dtype=np.int32)
        bitmask = torch.from_numpy(rows)  # shares memory: a row copied in costs a numpy copy
        index = {r: i for i, r in enumerate(reqs)}
        late, errors, fill_s, num_early = [], [], 0.0, 0
        for job in jobs:
            if not job.done:
                late.append(job.req)
                continue
            self._jobs.pop(job.req, None)
            fill_s += job.fill_s
            num_early += job.early
            if job.error is not None:
                errors.append((job.req, job.error))
            else:
                rows[index[job.req]] = job.row.numpy()[0]
        return bitmask, late, errors, fill_s, wait_s, num_early

    def close(self) -> None:
        """Stop the worker threads: queued fills are dropped, one in flight ends on its own
        (nothing waits for it)."""
        pool, self._pool = self._pool, None
        self._jobs.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
