"""The quantized LM head's kernel run on torch's OpenMP team (furca.runtime.omp_team)."""

import numpy as np
import pytest
import torch

from furca.runtime import omp_team

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not omp_team.available(), reason="torch's parallel backend is not libgomp here")


@pytest.mark.parametrize("code_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("m", [1, 3])
def test_team_matmul_equals_the_serial_kernel_and_every_thread_ran(code_dtype, m):
    from furca.runtime.quant import cpu_kernels

    rng = np.random.default_rng(m)
    n, k, group, parts = 203, 64, 32, 7
    codes = rng.integers(0, 100, (n, k)).astype(code_dtype)
    scale = rng.random((n, k // group), np.float32)
    offset = rng.random((n, k // group), np.float32)
    x = rng.random((m, k), np.float32)
    xsum = x.reshape(m, k // group, group).sum(axis=2, dtype=np.float32)
    expect = np.empty((m, n), np.float32)
    cpu_kernels.group_matmul_rows(x, xsum, codes, scale, offset, expect, 0, n)

    out = np.full((m, n), np.nan, np.float32)
    args = np.array([0, parts, m, k, n, k // group, k // group, x.ctypes.data, xsum.ctypes.data, codes.ctypes.data,
                     scale.ctypes.data, offset.ctypes.data, out.ctypes.data], np.int64)
    team = cpu_kernels.group_matmul_team_i8 if code_dtype == np.int8 else cpu_kernels.group_matmul_team_u8
    threads = 2
    omp_team.run(team, args, threads)

    # each part is the serial kernel over its rows; the two are compiled apart with fastmath,
    # and on an AVX2 CPU LLVM vectorizes their sums differently (1 ulp apart at m = 3)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=0)
    assert args[0] == parts + threads  # every thread claimed until the parts ran out: the team ran it


def test_group_int8_layout_gives_the_same_logits_on_the_team_and_on_the_pool(monkeypatch):
    from furca.runtime.quant import packed
    from furca.runtime.quant.rtn import quantize_int8

    w = torch.randn(4096, 128, generator=torch.Generator().manual_seed(0))
    layout = packed.GroupInt8(quantize_int8(w))
    x = torch.randn(1, 128)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # two parts: the split path, not the one-thread call
    try:
        on_team = layout.matmul(x)
        monkeypatch.setattr(omp_team, "_STATE", [None])  # libgomp "missing": the thread-pool path
        on_pool = layout.matmul(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(on_team, on_pool)
    torch.testing.assert_close(on_team, x @ layout.dequantize().T, rtol=1e-4, atol=1e-4)
