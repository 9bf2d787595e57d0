"""Layer ``numdiff``: complex-step differentiation.

For a function that is real on real inputs and holomorphic, ``f(x + i h) = f(x) +
i h f'(x) + O(h^2)``, so ``f'(x) = Im f(x + i h) / h`` with no subtraction of close
numbers: the step can be 1e-20 and the result is exact to rounding.

It needs the *analytic continuation* of every op on the way. graphgrad's ops compute
it (NumPy's complex exp, sin, log, sqrt... are the analytic functions; arithmetic,
matmul, sums and the shape ops are linear or polynomial); their vjp rules are written
without conjugation, so reverse mode on complex inputs also gives the analytic
derivative (PyTorch's convention conjugates instead). Ops that are not holomorphic
(abs, comparisons, max/min, relu, clamp, sign, rounding, casts to real...) would give
a silently wrong derivative: in complex-step mode they raise, naming the op.
"""

from __future__ import annotations

import contextlib

import numpy as np

from graphgrad.ops.complex_kernels import complex_tanh, mixed_matmul
from graphgrad.ops.linalg import Matmul
from graphgrad.ops.unary import Tanh
from graphgrad.tensor import (Mode, Tensor, Value, active_modes, dispatch, is_grad_enabled,
                              pop_mode, push_mode, record)

from .finite import as_array, default_step, evaluate

__all__ = ["complex_step_mode", "ComplexStepError", "cs_jacobian", "cs_hessian",
           "ComplexStepMode"]


# below this many multiply-adds (m k n) the cast and zgemm cost little
_MIXED_MIN = 1 << 15


class ComplexStepError(ValueError):
    """A non-holomorphic op met a complex input in complex-step mode."""


class ComplexStepMode(Mode):
    """Checks every op call: complex inputs may only reach holomorphic ops."""

    mixes_dtypes = True  # complex points meet the function's real weights

    def process(self, op, args: tuple, params: dict):
        ok = op.holomorphic
        if callable(ok):
            ok = ok(**params)
        if not ok:
            for a in args:
                if isinstance(a, Value) and a._array.dtype.kind == "c":
                    raise ComplexStepError(
                        f"complex step: {op.__name__} is not holomorphic, so its complex "
                        f"extension does not carry the derivative (inputs: "
                        f"{', '.join(str(tuple(x.shape)) + ' ' + x.dtype.name for x in args if isinstance(x, Value))}"  # noqa: E501
                        f"). Rewrite f without it, or use a finite-difference method.")
                if isinstance(a, complex):
                    raise ComplexStepError(f"complex step: {op.__name__} is not holomorphic "
                                           f"and got a complex scalar")
        args = _as_constants(args)
        kernel = _KERNELS.get(op)
        if kernel is not None and active_modes()[0] is self:  # eager below: no mode
            out = kernel(*args)                                # must see the op
            if out is not None:
                if is_grad_enabled() and any(isinstance(a, Value) and a.requires_grad
                                             for a in args):
                    return record(op, args, params, out)  # as eager dispatch records
                return Tensor._make(out)
        with self.lowered():
            if op.same_dtypes:
                args = _complex_operands(args)
            return dispatch(op, args, params)


def _mixed_matmul(a, b):
    """A real matrix times a complex one, without the real factor's cast (which copies
    it to complex, saved for the backward, and then, to multiply, copies its real part
    back: two copies of a weight matrix per product). Taken for large products when the
    real factor needs no gradient (its graph node keeps the real factor as its input;
    the backward's products come back here). None where the plain route applies."""
    if not (isinstance(a, Value) and isinstance(b, Value)):
        return None
    x, y = a._array, b._array
    if type(x) is not np.ndarray or type(y) is not np.ndarray:
        return None
    kinds = x.dtype.kind + y.dtype.kind
    if kinds == "fc":
        real, cplx, real_value = x, y, a
    elif kinds == "cf":
        real, cplx, real_value = y, x, b
    else:
        return None
    if (real.dtype != cplx.real.dtype or real_value.requires_grad
            or x.ndim < 2 or y.ndim < 2 or x.shape[-1] != y.shape[-2]
            or x.shape[-2] * x.shape[-1] * y.shape[-1] < _MIXED_MIN):
        return None
    try:
        np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        return None  # Matmul raises, with PyTorch's message
    return mixed_matmul(x, y)


def _tanh(a):
    """Complex tanh, fast where the real parts repeat along the batch (ops/complex_
    kernels.py; NumPy's tanh elsewhere, as ``Tanh.forward``)."""
    if isinstance(a, Value) and type(a._array) is np.ndarray and a._array.dtype.kind == "c":
        return complex_tanh(a._array)
    return None


# ops the mode runs itself, on arrays, where the complex step's batch makes a kernel
# other than the op's forward pay (a result of None: the op's own route)
_KERNELS = {Matmul: _mixed_matmul, Tanh: _tanh}


def _complex_operands(args: tuple) -> tuple:
    """PyTorch (and graphgrad) refuse a product of a complex and a real tensor; the
    complex step makes them by design (a complex input meets real weights), so the
    operands are cast to their common complex dtype first."""
    arrays = [a._array for a in args if isinstance(a, Value)]
    if not any(x.dtype.kind == "c" for x in arrays):
        return args
    common = np.result_type(*arrays)
    return tuple(a.to(common) if isinstance(a, Value) and a._array.dtype != common else a
                 for a in args)


def _as_constants(args: tuple) -> tuple:
    """Real operands that require grad, met by complex ones, detached. A real value on
    the complex step's path cannot depend on its input (every op from complex to real is
    refused above), so it is one of f's weights, and the step differentiates by the
    input alone; recorded, the weight's gradient would need a complex-to-real Cast (not
    holomorphic) in the very backward that computes the derivative."""
    if not any(isinstance(a, Value) and a._array.dtype.kind == "c" for a in args):
        return args
    return tuple(a.detach() if isinstance(a, Value) and a.requires_grad
                 and a._array.dtype.kind != "c" else a for a in args)


class _ConstantsMode(Mode):
    """Detaches f's real weights where they meet complex values (``_as_constants``),
    from above a vmap: the complex step mode below it sees only the batch's arrays, and
    the graph that the batched gradient pass runs back through is recorded up here."""

    def process(self, op, args: tuple, params: dict):
        args = _as_constants(args)
        with self.lowered():
            return dispatch(op, args, params)


@contextlib.contextmanager
def _weights_as_constants():
    mode = _ConstantsMode()
    push_mode(mode)
    try:
        yield
    finally:
        pop_mode(mode)


@contextlib.contextmanager
def complex_step_mode():
    """Within the block, a non-holomorphic op applied to complex values raises."""
    mode = ComplexStepMode()
    push_mode(mode)
    try:
        yield mode
    finally:
        pop_mode(mode)


def _complex_dtype(dt) -> np.dtype:
    return np.dtype(np.complex64 if np.dtype(dt) == np.float32 else np.complex128)


def _stepped(x, h):
    """The real input, the step, and a function giving ``x + i h e_j`` (complex)."""
    x0 = as_array(x)
    if x0.dtype.kind != "f":
        x0 = x0.astype(np.float64)
    h = default_step("complex_step", x0.dtype) if h is None else h
    flat = x0.reshape(-1).astype(_complex_dtype(x0.dtype))

    def at(j: int) -> np.ndarray:
        z = flat.copy()
        z[j] += 1j * h
        return z.reshape(x0.shape)
    return x0, h, at


def cs_jacobian(f, x, h: float | None = None) -> np.ndarray:
    """d f(x) / d x by the complex step, one evaluation per input element:
    column j is ``Im f(x + i h e_j) / h``."""
    x0, h, at = _stepped(x, h)
    columns = []
    with complex_step_mode():
        for j in range(x0.size):
            columns.append(np.imag(evaluate(f, at(j))) / h)
    out_shape = columns[0].shape if columns else ()
    jac = np.stack(columns, axis=-1) if columns else np.zeros(out_shape + (0,))
    return jac.reshape(out_shape + x0.shape)


def cs_hessian(f, x, h: float | None = None, *, batched: bool = True) -> np.ndarray:
    """The Hessian of a scalar ``f``: column j is ``Im(grad f(x + i h e_j)) / h``, the
    complex step taken through graphgrad's reverse-mode gradient (exact to rounding).

    ``batched=True`` (the default) evaluates every direction at once: the n complex
    points x + i h e_j are the rows of one batch, and ``func.vmap`` runs a single
    gradient pass over it, so the per-op overhead is paid once, not n times (the
    cost left is n gradients' worth of arithmetic on (n, ...) arrays). ``batched=False``
    runs one gradient pass per direction (the textbook loop)."""
    x0, h, at = _stepped(x, h)
    n = x0.size
    if n == 0:
        return np.zeros(x0.shape + x0.shape)
    if batched:
        points = np.empty((n, n), _complex_dtype(x0.dtype))
        points[...] = x0.reshape(-1)  # row j: x ...
        points.reshape(-1)[::n + 1] += 1j * h  # ... + i h e_j (no (n, n) identity built)
        with complex_step_mode():
            grads = _batched_gradient(f, Tensor._make(points.reshape((n,) + x0.shape)))
        # row j is the gradient at x + i h e_j, i.e. column j of the Hessian
        return (np.imag(grads).reshape(n, n).T / h).reshape(x0.shape + x0.shape)
    from graphgrad.autograd import enable_grad
    from graphgrad.autograd import grad as autograd_grad
    columns = []
    with complex_step_mode(), enable_grad():
        for j in range(n):
            xz = Tensor._make(at(j))
            xz.requires_grad_(True)
            out = f(xz)
            _check_scalar(out)
            seed = Tensor._make(np.ones(out._array.shape, out._array.dtype))
            (g,) = autograd_grad(out, xz, grad_outputs=seed, allow_unused=True)
            gz = np.zeros(x0.shape) if g is None else g.detach()._array
            columns.append(np.imag(gz).reshape(-1) / h)
    hess = np.stack(columns, axis=-1)
    return hess.reshape(x0.shape + x0.shape)


def _check_scalar(out) -> None:
    if out.numel() != 1:
        raise RuntimeError(f"cs_hessian: f must return a single element, got shape "
                           f"{tuple(out.shape)}")


def _batched_gradient(f, points: Tensor) -> np.ndarray:
    """The analytic gradient of ``f`` at each row of ``points`` (complex), by one
    vmapped reverse pass; rows with no path to the output get zeros.

    The pass is a plain ``autograd.grad`` (``create_graph=False``), not ``func.vjp``:
    the Hessian is not differentiated again, so the backward need not be recorded, and
    each intermediate is freed when the backward is done with it (n = 300 in
    bench/hessian_methods.py: peak 23 -> 13 MB, and the page faults of fresh memory
    with it)."""
    from graphgrad.autograd import enable_grad
    from graphgrad.autograd import grad as autograd_grad
    from graphgrad.func import vmap
    from graphgrad.tensor import ones_like, zeros_like

    def gradient(z):
        with enable_grad():
            z = z.detach().requires_grad_(True)
            with _weights_as_constants():  # over vmap, where the graph is recorded
                out = f(z)
            _check_scalar(out)
            if not out.requires_grad:
                return zeros_like(z)
            (g,) = autograd_grad(out, z, grad_outputs=ones_like(out), allow_unused=True)
        return zeros_like(z) if g is None else g
    return vmap(gradient)(points).detach()._array
