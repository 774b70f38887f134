"""TorchAttentionBackend against a naive per-query reference, with scattered KV slots,
grouped-query heads and every request kind (fresh extend, prefix extend, decode), on
both decode paths: gather + SDPA, and the numba kernel reading the pool directly
(``cpu_decode``, fp32 pools only)."""

from __future__ import annotations

import math
import os

import pytest
import torch

from furca.runtime.attention.cpu_decode import get_decode
from furca.runtime.attention.torch_backend import TorchAttentionBackend
from furca.runtime.forward_batch import ForwardBatch
from furca.runtime.kv_cache import KVCache
from tests.conftest import CLIENT_TIMEOUT

H, KV, D = 6, 2, 16
NUMBA_OFF = os.environ.get("FURCA_NO_NUMBA", "") not in ("", "0")  # the user's switch for the gather path
HAS_NUMBA = get_decode() is not None


def naive_attention(q, keys, values, scaling):
    """q (H, D) against keys/values (S, KV, D): softmax over all S, GQA by head // group."""
    group = q.shape[0] // keys.shape[1]
    out = torch.empty_like(q)
    for h in range(q.shape[0]):
        scores = keys[:, h // group] @ q[h] * scaling  # (S,)
        out[h] = torch.softmax(scores, dim=0) @ values[:, h // group]
    return out


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("heads", [(H, KV, D), (8, 8, 64), (16, 2, 64)])
@pytest.mark.parametrize("dtype, cache_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                (torch.float32, torch.bfloat16)])  # the last: bf16 KV, fp32 model
@pytest.mark.parametrize("kinds", [
    [(0, 7), (5, 1), (9, 4), (0, 1)],  # fresh extend, decode, prefix extend, first token
    [(3, 1), (17, 1), (1, 1)],  # decode only, different lengths (padded path)
    [(0, 12)],  # one prefill
    # decodes of very different lengths (split into length groups) between extends
    [(299, 1), (2, 1), (0, 6), (289, 1), (4, 1), (7, 3), (280, 1)],
])
def test_matches_naive_reference(kinds, dtype, cache_dtype, heads, direct):
    H, KV, D = heads
    g = torch.Generator().manual_seed(0)
    num_slots = 64 + sum(p + n for p, n in kinds)
    cache = KVCache(num_slots, 1, KV, D, cache_dtype)
    perm = (torch.randperm(num_slots - 1, generator=g) + 1).tolist()  # scattered slots, never 0
    prefix_lens = [p for p, _ in kinds]
    qo_lens = [n for _, n in kinds]
    kv_indices, out_loc, seq_slots = [], [], []
    for p, n in kinds:
        slots = [perm.pop() for _ in range(p + n)]
        seq_slots.append(slots)
        kv_indices += slots
        out_loc += slots[p:]
        if p:  # the prefix is already cached
            cache.k[0][slots[:p]] = torch.randn(p, KV, D, generator=g).to(cache_dtype)
            cache.v[0][slots[:p]] = torch.randn(p, KV, D, generator=g).to(cache_dtype)
    num_tokens = sum(qo_lens)
    q = torch.randn(num_tokens, H, D, generator=g).to(dtype)
    k = torch.randn(num_tokens, KV, D, generator=g).to(dtype)
    v = torch.randn(num_tokens, KV, D, generator=g).to(dtype)
    backend = TorchAttentionBackend(direct_decode=direct)
    batch = ForwardBatch.build(prefix_lens=prefix_lens, qo_lens=qo_lens, kv_indices=torch.tensor(kv_indices),
                               out_cache_loc=torch.tensor(out_loc), logits_indices=torch.tensor([0]),
                               kv_cache=cache, attn_backend=backend)
    scaling = 1 / math.sqrt(D)
    out = backend.forward(q, k, v, 0, batch, scaling)
    assert out.shape == q.shape and out.dtype == dtype
    has_decode = 1 in qo_lens
    uses_kernel = direct and HAS_NUMBA and has_decode  # fp32 math, fp32 or bf16 pool
    assert (backend._plan.direct is not None) == uses_kernel  # the path under test is the one taken
    torch.testing.assert_close(cache.k[0][out_loc], k.to(cache_dtype))  # new rows were stored first
    torch.testing.assert_close(cache.v[0][out_loc], v.to(cache_dtype))

    row = 0
    # against the stored (rounded) K/V in fp32: exact to fp32 rounding unless q or the output is bf16
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    for (p, n), slots in zip(kinds, seq_slots):
        keys, values = cache.k[0][slots].float(), cache.v[0][slots].float()
        for j in range(n):
            expected = naive_attention(q[row].float(), keys[: p + j + 1], values[: p + j + 1], scaling)
            torch.testing.assert_close(out[row].float(), expected, **tol)
            row += 1
    # a second layer call with the same batch reuses the plan and gives the same result
    torch.testing.assert_close(backend.forward(q, k, v, 0, batch, scaling), out)


def test_decode_groups_partition_by_length():
    from furca.runtime.attention.torch_backend import _split_groups

    decodes = [(row, seq_len, 1000 * row) for row, seq_len in enumerate([300, 3, 290, 1, 5, 280])]
    groups = _split_groups(decodes)
    assert len(groups) == 2  # the long ones and the short ones
    assert sorted(d for g in groups for d in g) == sorted(decodes)
    assert {d[1] for d in groups[0]} == {300, 290, 280}
    assert _split_groups(decodes[:1]) == [decodes[:1]] and _split_groups([]) == []


def test_decode_kernel_builds_unless_turned_off():
    """numba is a dependency: the kernel is there unless FURCA_NO_NUMBA turns it off."""
    assert HAS_NUMBA != NUMBA_OFF


@pytest.mark.skipif(NUMBA_OFF, reason="FURCA_NO_NUMBA turns the kernel off")
def test_direct_decode_kernel_threads():
    """The kernel splits its tasks over torch's thread count; the result is the same to
    the bit whatever the split, and several callers (two engines) may run it at once."""
    import threading

    import numpy as np

    decode = get_decode()
    g = torch.Generator().manual_seed(1)
    k_buf = torch.randn(2, 6000, 64, generator=g)
    v_buf = torch.randn(2, 6000, 64, generator=g)
    q = torch.randn(8, 6, 64, generator=g)
    lens = np.array([1, 37, 2000, 4999, 5, 640, 3000, 2], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    rng = np.random.default_rng(0)
    kv_indices = np.concatenate([rng.permutation(5999)[:n] + 1 for n in lens]).astype(np.int64)
    rows = np.arange(8, dtype=np.int64)
    want = torch.stack([naive_attention(q[r], k_buf.transpose(0, 1)[kv_indices[s:s + n]],
                                        v_buf.transpose(0, 1)[kv_indices[s:s + n]], 0.125)
                        for r, (s, n) in enumerate(zip(starts, lens))])

    def run() -> torch.Tensor:
        out = torch.empty_like(q)
        decode(q.numpy(), k_buf.numpy(), v_buf.numpy(), rows, starts, lens, kv_indices, 0.125, out.numpy())
        return out

    threads_before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(2)
        two = run()
    finally:
        torch.set_num_threads(threads_before)
    torch.testing.assert_close(one, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(one, two)

    results = []
    callers = [threading.Thread(target=lambda: results.extend(run() for _ in range(20))) for _ in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert len(results) == 60 and all(torch.equal(r, one) for r in results)


def test_split_tasks_covers_every_task_once_and_balances_context():
    import numpy as np

    from furca.runtime.attention.cpu_decode import _MIN_WORK_PER_THREAD, split_tasks

    lens = np.array([5000, 10, 10, 10, 4000, 3000, 20], dtype=np.int64)
    for threads in (1, 2, 3, 8):
        runs = split_tasks(lens, 3, threads)
        assert runs[0][0] == 0 and runs[-1][1] == 21 and len(runs) <= threads
        assert all(a[1] == b[0] for a, b in zip(runs, runs[1:])) and all(lo < hi for lo, hi in runs)
    per_task = np.repeat(lens, 3)
    work = [int(per_task[lo:hi].sum()) for lo, hi in split_tasks(lens, 3, 2)]
    assert len(work) == 2 and max(work) < 0.75 * sum(work)  # not all on one thread
    assert split_tasks(np.array([300]), 3, 8) == [(0, 3)]  # too little work to split
    assert len(split_tasks(np.array([_MIN_WORK_PER_THREAD]), 3, 8)) == 3


@pytest.mark.skipif(NUMBA_OFF or not hasattr(os, "fork"), reason="FURCA_NO_NUMBA turns the kernel off, or no fork")
def test_direct_decode_kernel_after_fork():
    """A child forked after the kernel's thread pool started gets a pool of its own
    (the parent's threads do not exist there): the kernel still runs and is exact."""
    import multiprocessing

    import numpy as np

    decode = get_decode()
    lens = np.array([3000, 3000], dtype=np.int64)
    starts = np.array([0, 3000], dtype=np.int64)
    kv_indices = np.arange(1, 6001, dtype=np.int64)
    g = torch.Generator().manual_seed(2)
    k_buf, v_buf = torch.randn(2, 6001, 64, generator=g), torch.randn(2, 6001, 64, generator=g)
    q = torch.randn(2, 4, 64, generator=g)

    def run() -> torch.Tensor:
        out = torch.empty_like(q)
        decode(q.numpy(), k_buf.numpy(), v_buf.numpy(), np.arange(2, dtype=np.int64), starts, lens, kv_indices,
               0.125, out.numpy())
        return out

    threads_before = torch.get_num_threads()
    torch.set_num_threads(2)  # two runs: the pool thread is used before the fork
    try:
        want = run()
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        child = ctx.Process(target=lambda: results.put(run().numpy()))  # a fork: no pickling of run
        child.start()
        got = torch.from_numpy(results.get(timeout=CLIENT_TIMEOUT))
        child.join(timeout=CLIENT_TIMEOUT)
    finally:
        torch.set_num_threads(threads_before)
    assert child.exitcode == 0
    assert torch.equal(got, want)
