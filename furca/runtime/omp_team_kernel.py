"""The numba side of `omp_team`: what a team ``cfunc`` uses to read its arguments and
claim its parts.

A team kernel is a ``cfunc`` with signature ``void(int64*)``: ``args[0]`` is the part
counter (zeroed by `omp_team.run`), the rest are sizes and array addresses laid out by the
kernel's own contract. Each thread loops ``p = claim(args)`` while ``p`` is below the
number of parts, so a thread that finishes early takes the next part (the parts are
contiguous row ranges; the result does not depend on which thread computed a part).
Everything is cache-safe (no ctypes pointers baked into the code): numba's on-disk cache
serves the kernels in every process after the first.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

TEAM_SIGNATURE = types.void(types.CPointer(types.int64))


@intrinsic
def as_ptr(typingctx, addr):
    """The int64 address ``addr`` as a ``voidptr`` (for ``numba.carray``)."""
    sig = types.voidptr(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


@intrinsic
def claim(typingctx, args):
    """Atomically ``args[0] += 1``; the value before (the part this thread takes)."""
    sig = types.int64(types.CPointer(types.int64))

    def codegen(context, builder, signature, llargs):
        one = context.get_constant(types.int64, 1)
        return builder.atomic_rmw("add", llargs[0], one, "seq_cst")

    return sig, codegen


# ---- what a kernel that runs a whole step on the team needs beyond claim (cpu_step_kernel):
# counters at any address, an acquire load to spin on, and the team's size and thread number


@intrinsic
def fetch_add(typingctx, addr, value):
    """Atomically ``*addr += value`` (``addr``: the int64 address of an int64); the value before."""
    sig = types.int64(types.int64, types.int64)

    def codegen(context, builder, signature, llargs):
        ptr = builder.inttoptr(llargs[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", ptr, llargs[1], "seq_cst")

    return sig, codegen


@intrinsic
def load_acquire(typingctx, addr):
    """``*addr`` (an int64 at the int64 address ``addr``) read atomically with acquire order:
    what another thread wrote before its ``fetch_add`` on the same counter is visible after."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, llargs):
        ptr = builder.inttoptr(llargs[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


@intrinsic
def call_int(typingctx, addr):
    """Call the C function ``int f(void)`` at the int64 address ``addr`` (libgomp's
    ``omp_get_thread_num`` / ``omp_get_num_threads``, from `omp_team.team_functions`)."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, llargs):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        return builder.sext(builder.call(fn, []), ir.IntType(64))

    return sig, codegen
