"""``prefetch(array, index)``: a software prefetch hint for Numba CPU kernels.

Sampling is bound by memory latency (a random ``indptr`` read, then a random
``indices`` read, then a random node-map read per edge); issuing those loads a
few iterations ahead lets them overlap. Compiles to ``llvm.prefetch`` (read,
high locality, data cache); a hint only, never faults.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """Hint the CPU to bring ``array[index]`` into cache; no bounds check, no effect on results."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        arr_type = signature.args[0]
        arr = context.make_array(arr_type)(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.gep(arr.data, [idx])
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p, ir.IntType(32), ir.IntType(32), ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        i32 = ir.IntType(32)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
