"""Layer ``numdiff``: ``gradcheck`` and ``gradgradcheck`` (exposed as
``graphgrad.autograd.gradcheck``), with PyTorch's semantics: the analytical Jacobian
(one backward pass per output element) against the numerical one (one perturbation
per input element), column by column."""

from __future__ import annotations

import numpy as np

from graphgrad.autograd import enable_grad
from graphgrad.autograd import grad as autograd_grad
from graphgrad.tensor import Value, set_grad_mode
from graphgrad.tensor import Tensor

from .complex_step import complex_step_mode

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    """The analytical and numerical Jacobians disagree."""


def _as_tuple(x) -> tuple:
    return (x,) if isinstance(x, Value) or not isinstance(x, (tuple, list)) else tuple(x)


def _outputs(func, inputs) -> tuple:
    return _as_tuple(func(*inputs))


def _numerical(func, inputs, j, eps, method) -> list[np.ndarray]:
    """d outputs / d inputs[j] by perturbing each element of input j."""
    x = inputs[j]
    base = np.array(x.detach()._array, copy=True)
    cols = []
    prev = set_grad_mode(False)
    try:
        outs0 = [o.detach()._array for o in _outputs(func, inputs)]
        for k in range(base.size):
            def run(arr):
                args = list(inputs)
                args[j] = Tensor._make(arr)
                return [np.array(o.detach()._array, copy=True) for o in _outputs(func, args)]
            if method == "complex_step":
                z = base.astype(np.complex128 if base.dtype != np.float32 else np.complex64)
                z.reshape(-1)[k] += 1j * eps
                with complex_step_mode():
                    cols.append([np.imag(o) / eps for o in run(z)])
            else:
                plus, minus = base.copy(), base.copy()
                plus.reshape(-1)[k] += eps
                minus.reshape(-1)[k] -= eps
                cols.append([(p - m) / (2 * eps) for p, m in zip(run(plus), run(minus),
                                                                 strict=True)])
    finally:
        set_grad_mode(prev)
    jacs = []
    for i, o in enumerate(outs0):
        col = [c[i].reshape(-1) for c in cols]
        jacs.append(np.stack(col, axis=1) if col else np.zeros((o.size, 0)))
    return jacs


def _analytical(func, inputs, j) -> list[np.ndarray]:
    """d outputs / d inputs[j], one backward pass per output element (rows)."""
    with enable_grad():
        outs = _outputs(func, inputs)
        jacs = []
        for o in outs:
            rows = []
            flat_n = o.numel()
            for k in range(flat_n):
                if not o.requires_grad:
                    rows.append(np.zeros(inputs[j].numel()))
                    continue
                seed = np.zeros(o._array.size, o._array.dtype)
                seed[k] = 1
                (g,) = autograd_grad(o, inputs[j], grad_outputs=Tensor._make(seed.reshape(o.shape)),
                                     retain_graph=True, allow_unused=True)
                rows.append(np.zeros(inputs[j].numel()) if g is None
                            else g.detach()._array.reshape(-1))
            jacs.append(np.stack(rows) if rows else np.zeros((0, inputs[j].numel())))
    return jacs


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, method: str = "central", **ignored) -> bool:
    """Check ``func``'s gradients against finite differences (or the complex step) for
    every input that requires grad. Use float64 inputs."""
    inputs = _as_tuple(inputs)
    checked = [j for j, x in enumerate(inputs) if isinstance(x, Value) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but "
                         "none of the them have requires_grad=True.")
    for j in checked:
        numerical = _numerical(func, inputs, j, eps, method)
        analytical = _analytical(func, inputs, j)
        for i, (n, a) in enumerate(zip(numerical, analytical, strict=True)):
            if n.shape != a.shape or not np.allclose(a, n, rtol=rtol, atol=atol):
                err = np.abs(a - n) - rtol * np.abs(n) if n.shape == a.shape else None
                where = np.unravel_index(int(np.argmax(err)), err.shape) if err is not None \
                    and err.size else None
                detail = (f" The worst entry is d output[{where[0]}] / d input[{where[1]}] "
                          f"(flattened): numerical {float(n[where]):.10g}, analytical "
                          f"{float(a[where]):.10g}."
                          if where is not None else "")
                msg = (f"Jacobian mismatch for output {i} with respect to input {j},\n"
                       f"numerical:{n}\nanalytical:{a}\n{detail}")
                if raise_exception:
                    raise GradcheckError(msg)
                return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True, method: str = "central",
                  seed: int = 0, **ignored) -> bool:
    """Check second derivatives: gradcheck of ``v -> grad(func(inputs), inputs, v)``."""
    inputs = _as_tuple(inputs)
    diff = [j for j, x in enumerate(inputs) if isinstance(x, Value) and x.requires_grad]
    with enable_grad():
        outs = _outputs(func, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(
            Tensor._make(rng.standard_normal(o._array.shape).astype(o._array.dtype))
            for o in outs)
    grad_outputs = _as_tuple(grad_outputs)

    def first_grads(*xs):
        # the numerical side calls this on perturbed copies that do not require grad
        xs = tuple(Tensor._make(x._array).requires_grad_() if j in diff and not x.requires_grad
                   else x for j, x in enumerate(xs))
        with enable_grad():
            o = _outputs(func, xs)
            used = [(a, g) for a, g in zip(o, grad_outputs, strict=True) if a.requires_grad]
            gs = autograd_grad([a for a, _ in used], [xs[j] for j in diff],
                               grad_outputs=[g for _, g in used], create_graph=True,
                               allow_unused=True)
        return tuple(g if g is not None else xs[j] * 0 for g, j in zip(gs, diff, strict=True))

    return gradcheck(first_grads, inputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, method=method)
