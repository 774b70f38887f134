"""Compile furca's Triton kernels for CUDA GPUs that are not here, and check their resources.

    python tools/cross_compile.py                    # sm_90 (H100/H200) and sm_80 (A100)
    python tools/cross_compile.py --arch 90 --json out.json

Triton lowers a kernel to PTX with its bundled LLVM and assembles it with the ``ptxas``
in its wheel: the whole GPU compile runs on a machine without a GPU; only loading and
launching need a driver. So this tool (a stand-in driver: a development check, not
part of the furca package)

1. runs the real launchers (`launch_all`: the shapes the runtime, the tests and
   ``bench/gpu_kernels.py`` use) on CPU tensors, under a stand-in driver that reports a
   CUDA target, so each launch asks for exactly the specialization a GPU run would
   (dtypes, constexprs, block sizes, warps, stages, 16-byte divisibility);
2. catches every compile request in Triton's ``jit_cache_hook``, which also skips the
   launch (there is no device to launch on);
3. compiles each with ``JITFunction.preload`` for the target, reads registers, spilled
   (local) and shared memory from the cubin with the wheel's ``cuobjdump``, and checks
   them against the target: no spills, shared memory within the SM's per-block limit.

It catches what the interpreter (``TRITON_INTERPRET=1``, where the kernel tests run on
CPU) cannot: front-end errors of compiled Triton (``tl.dot`` shapes, loop-carried types),
ptxas failures, spills and shared memory over the limit. It says nothing of speed or
numerics: that is ``bench/gpu_check.sh`` on a GPU.

Kernel modules must be imported compiled, not interpreted: run this in a process where
``TRITON_INTERPRET`` is unset (``main`` clears it before importing them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile

# Per-block shared memory a kernel may opt into, bytes (CUDA programming guide, "Compute
# capabilities"): sm_80 163 KB, sm_86/sm_89 99 KB, sm_90 227 KB.
SHARED_LIMIT = {80: 166_912, 86: 101_376, 89: 101_376, 90: 232_448}
DEFAULT_ARCHS = (90, 80)


@dataclasses.dataclass
class Compiled:
    """One kernel specialization compiled for one target."""

    kernel: str
    arch: int
    spec: str  # constexprs and argument types that tell specializations apart
    num_warps: int
    num_stages: int
    registers: int
    local_bytes: int  # spills (and stack arrays) per thread
    shared_bytes: int  # Triton's dynamic allocation plus the cubin's static shared memory
    error: str | None = None

    def problems(self) -> list[str]:
        found = []
        if self.error:
            found.append(f"compile failed: {self.error}")
        if self.local_bytes:
            found.append(f"{self.local_bytes} bytes of local memory per thread (register spills)")
        limit = SHARED_LIMIT.get(self.arch)
        if limit is not None and self.shared_bytes > limit:
            found.append(f"{self.shared_bytes} bytes of shared memory, over sm_{self.arch}'s {limit}")
        return found


class _CudaTargetDriver:
    """Just enough of a Triton driver for the launchers to specialize and ask to compile:
    a CUDA target, device ``arch`` (so each target gets its own JIT cache) and stream 0."""

    def __init__(self, arch: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.arch = arch
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_device(self) -> int:
        return self.arch

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target


@contextlib.contextmanager
def _capturing(arch: int, requests: dict):
    """Within: kernel launches compile nothing and launch nothing; each distinct compile
    request lands in ``requests`` as ``key -> (jit_function, specialization_data)``."""
    from triton import knobs
    from triton.runtime import driver

    def hook(*, key, fn, compile, is_manual_warmup, **_):
        if is_manual_warmup:  # our own preload below: let it compile
            return None
        requests.setdefault(str(key), (fn.jit_function, compile["specialization_data"]))
        return True  # handled: no compile, no launch

    previous_hook, previous_driver = knobs.runtime.jit_cache_hook, getattr(driver, "_active", None)
    driver.set_active(_CudaTargetDriver(arch))
    knobs.runtime.jit_cache_hook = hook
    try:
        yield
    finally:
        knobs.runtime.jit_cache_hook = previous_hook
        driver._active = previous_driver  # not reset_active(): that builds the real driver, absent here


def _tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _resources(cubin: bytes) -> tuple[int, int, int]:
    """(registers, local bytes, static shared bytes) of the cubin's one kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        dump = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", f.name],
                              capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", dump)
    if m is None:
        raise RuntimeError(f"cuobjdump printed no resource usage:\n{dump}")
    regs, stack, shared, local = map(int, m.groups())
    return regs, local + stack, shared


def _describe(spec_json: str) -> tuple[str, str]:
    """The kernel's name and a short key of what specializes it."""
    data = json.loads(spec_json)
    name = data["name"].rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    signature = data["signature"]
    consts = dict(zip((tuple(k) for k in data["constant_keys"]), data["constant_vals"]))
    pointers = sorted({t for t in signature.values() if isinstance(t, str) and t.startswith("*")})
    shown = {key[0] if len(key) == 1 else key: val for key, val in consts.items()}
    names = list(signature)
    spec = " ".join(f"{names[k] if isinstance(k, int) and k < len(names) else k}={v}"
                    for k, v in shown.items() if not isinstance(v, dict)) + " " + ",".join(pointers)
    return name, spec.strip()


def compile_for(arch: int, launch=None) -> list[Compiled]:
    """Every kernel specialization ``launch`` (default `launch_all`) asks for, compiled
    for ``sm_<arch>``."""
    requests: dict = {}
    with _capturing(arch, requests):
        (launch or launch_all)()
    out = []
    with _capturing(arch, {}):  # preload compiles for the active (stand-in) driver's target
        for fn, spec_json in requests.values():
            name, spec = _describe(spec_json)
            options = json.loads(spec_json)["options"]
            try:
                kernel = fn.preload(spec_json)
                regs, local, static_shared = _resources(kernel.asm["cubin"])
                out.append(Compiled(name, arch, spec, options["num_warps"], options["num_stages"],
                                    regs, local, kernel.metadata.shared + static_shared))
            except Exception as e:  # noqa: BLE001 - reported per kernel, with the rest still compiled
                out.append(Compiled(name, arch, spec, options["num_warps"], options["num_stages"], 0, 0, 0,
                                    error=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"))
    return out


# --------------------------------------------------------------------------- the launches

# (query heads, KV heads, head dim): SmolLM2-135M (G=3, D=64), Llama-3-8B and the GPU
# bench's decode shape (G=4, D=128), and the test table's G=1 and G=8.
HEAD_SHAPES = ((9, 3, 64), (32, 8, 128), (8, 8, 64), (8, 1, 128))


def launch_all() -> None:
    """Run every launcher over the dtypes and shapes the runtime, the kernel tests and
    the GPU bench use (CPU tensors: under `_capturing` nothing runs)."""
    import torch

    from furca.kernels.decode_attention import decode_attention, default_num_stages
    from furca.kernels.extend_attention import default_blocks, extend_attention
    from furca.kernels.store_kv import store_kv
    from furca.kernels.token_bitmask import apply_token_bitmask_
    from triton.runtime import driver

    gen = torch.Generator().manual_seed(0)
    cuda = torch.device("cuda")  # only named: the tensors stay on the CPU
    # fp8 (e4m3) KV pools, read with fp16 / bf16 queries: sm_89+ only (Triton has no e4m3 before)
    arch = driver.active.get_current_target().arch
    sm89 = arch >= 89
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        fp8_pool = sm89 and dtype != torch.float32
        for (num_heads, num_kv, head_dim), pool_dtype in [(s, d) for s in HEAD_SHAPES
                                                          for d in (dtype, torch.float8_e4m3fn)[:1 + fp8_pool]]:
            slots = 64
            k_buf = torch.randn(num_kv, slots, head_dim, generator=gen).to(pool_dtype).transpose(0, 1)
            v_buf = torch.randn(num_kv, slots, head_dim, generator=gen).to(pool_dtype).transpose(0, 1)
            for idx_dtype in (torch.int64, torch.int32):  # the runtime's, and a caller's int32
                indices = torch.arange(1, 21, dtype=idx_dtype)
                indptr = torch.tensor([0, 8, 20], dtype=idx_dtype)
                q = torch.randn(2, num_heads, head_dim, generator=gen).to(dtype)
                decode_attention(q, k_buf, v_buf, indptr, indices, 0.125,  # what a GPU launch picks
                                 num_stages=default_num_stages(k_buf.element_size(), (arch // 10, arch % 10)))
                qo = torch.tensor([0, 3, 10], dtype=idx_dtype)
                qx = torch.randn(10, num_heads, head_dim, generator=gen).to(dtype)
                kx = torch.randn(10, num_kv, head_dim, generator=gen).to(dtype)
                # what a GPU launch of this arch picks (q's dtype)
                bm, bn, warps, stages = default_blocks(cuda, head_dim, dtype, (arch // 10, arch % 10))
                extend_attention(qx, kx, kx.clone(), k_buf, v_buf, qo, indptr, indices, 0.125, max_qo_len=7,
                                 block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
            store_kv(k_buf, v_buf, torch.arange(3, 13), kx, kx.clone())
        for vocab in (49_152, 128_001):  # SmolLM2's vocabulary; the tests' odd size
            logits = torch.zeros(4, vocab, dtype=dtype)
            mask = torch.zeros(4, (vocab + 31) // 32, dtype=torch.int32)
            apply_token_bitmask_(logits, mask)
            apply_token_bitmask_(logits, mask, indices=[0, 2])
        launch_dequant_matmul(dtype)


def launch_dequant_matmul(dtype) -> None:
    """The quantized matmuls at decode (M = 1 with split-K, fp32 partial sums; M = 1 and
    7 unsplit, in bf16) and prefill (M = 64) tiles: int4 with fp16 zeros, int8
    per-channel and fp8 (sm_89+ only: Triton has no e4m3 before) in every dtype; the
    other layouts in bf16."""
    import torch
    from triton.runtime import driver

    from furca.kernels.dequant_matmul import fp8_matmul, int4_matmul, int8_matmul
    from furca.kernels.dequant_pack import PackedWeight

    n = k = 256

    def packed(kind, group, bias, scale_dtype, zero, storage):
        rows = k // 8 if kind == "int4" else k
        scale = torch.ones(k // group, n, dtype=scale_dtype)
        return PackedWeight(kind, torch.zeros(rows, n, dtype=storage), scale, scale.clone() if zero else None,
                            group, bias, n, k)

    layouts = [(int4_matmul, packed("int4", 32, 0, torch.float16, True, torch.int32)),
               (int8_matmul, packed("int8", k, 0, torch.float32, False, torch.int8))]
    if dtype == torch.bfloat16:
        layouts += [(int4_matmul, packed("int4", 128, -8, torch.float32, False, torch.int32)),
                    (int8_matmul, packed("int8", 16, 0, torch.float16, False, torch.int8)),
                    (int8_matmul, packed("int8", 32, 128, torch.float16, True, torch.int8))]
    if driver.active.get_current_target().arch >= 89:
        layouts.append((fp8_matmul, packed("fp8", k, 0, torch.float32, False, torch.float8_e4m3fn)))
    for fn, weight in layouts:
        for m, split in ((1, 4), (1, 1), (7, 1), (64, 1)) if dtype == torch.bfloat16 else ((1, 4), (64, 1)):
            fn(torch.zeros(m, k, dtype=dtype), weight, split_k=split)
    if dtype == torch.bfloat16:  # the GPU bench's BLOCK_N sweep
        int4_matmul(torch.zeros(1, k, dtype=dtype), layouts[0][1], split_k=1, block_n=32)


# --------------------------------------------------------------------------- command line

def _table(results: list[Compiled]) -> str:
    lines = ["| kernel | arch | specialization | warps/stages | regs | local B | shared B | status |",
             "|:--|--:|:--|--:|--:|--:|--:|:--|"]
    for r in results:
        status = "; ".join(r.problems()) or "ok"
        lines.append(f"| {r.kernel} | sm_{r.arch} | {r.spec} | {r.num_warps}/{r.num_stages} | {r.registers} | "
                     f"{r.local_bytes} | {r.shared_bytes} | {status} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, action="append",
                        help="compute capability without the dot, e.g. 90; repeatable (default 90 and 80)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if os.environ.pop("TRITON_INTERPRET", None) == "1" and any(m.startswith("furca.kernels.") for m in sys.modules):
        parser.error("kernel modules were imported interpreted (TRITON_INTERPRET=1); run in a fresh process")
    if not os.path.exists(_tool("ptxas")):
        parser.error(f"this Triton has no bundled ptxas ({_tool('ptxas')}): cannot compile for CUDA here")
    results = [r for arch in (args.arch or DEFAULT_ARCHS) for r in compile_for(arch)]
    print(_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    failed = [r for r in results if r.problems()]
    print(f"\n{len(results)} kernel specializations compiled, {len(failed)} with problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
