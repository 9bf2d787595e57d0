"""Layer ``backends``: ``call_loop``, a Numba intrinsic that calls a NumPy inner loop
(fused_loops.py) on two 1-d arrays from inside a kernel, as NumPy's ufunc machinery
calls it: ``loop(char **args, npy_intp *dimensions, npy_intp *steps, void *data)`` with
``args = [src, dst]``, ``dimensions = [len(src)]``, ``steps`` the arrays' strides. Only
generated kernel modules (fused_numba.py) import this module, so Numba loads only when a
kernel is built.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["call_loop"]


@intrinsic
def call_loop(typingctx, fn, data, src, dst):
    """``call_loop(fn, data, src, dst)``: the loop at address ``fn`` (an int) with its
    ``data`` pointer (an int) from ``src`` into ``dst`` (1-d arrays of one length)."""
    if not (isinstance(src, types.Array) and isinstance(dst, types.Array)
            and src.ndim == dst.ndim == 1 and isinstance(fn, types.Integer)
            and isinstance(data, types.Integer)):
        return None
    sig = types.void(fn, data, src, dst)

    def codegen(context, builder, signature, args):
        fn_v, data_v, src_v, dst_v = args
        a = context.make_array(signature.args[2])(context, builder, src_v)
        b = context.make_array(signature.args[3])(context, builder, dst_v)
        i8p = ir.IntType(8).as_pointer()
        intp = context.get_value_type(types.intp)
        one = ir.Constant(intp, 1)
        argv = cgutils.alloca_once(builder, i8p, size=2)
        builder.store(builder.bitcast(a.data, i8p), argv)
        builder.store(builder.bitcast(b.data, i8p), builder.gep(argv, [one]))
        dims = cgutils.alloca_once(builder, intp, size=1)
        builder.store(a.nitems, dims)
        steps = cgutils.alloca_once(builder, intp, size=2)
        builder.store(cgutils.unpack_tuple(builder, a.strides, 1)[0], steps)
        builder.store(cgutils.unpack_tuple(builder, b.strides, 1)[0],
                      builder.gep(steps, [one]))
        fnty = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), intp.as_pointer(),
                                               intp.as_pointer(), i8p])
        callee = builder.inttoptr(fn_v, fnty.as_pointer())
        builder.call(callee, [argv, dims, steps, builder.inttoptr(data_v, i8p)])
        return context.get_dummy_value()

    return sig, codegen
