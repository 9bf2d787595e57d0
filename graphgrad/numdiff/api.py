"""Layer ``numdiff``: ``derivative``, ``gradient``, ``jacobian``, ``hessian`` by any method:
"central", "forward", "backward" (finite differences) or "complex_step"."""

from __future__ import annotations

import numpy as np

from .complex_step import cs_hessian, cs_jacobian
from .finite import METHODS, as_array, fd_hessian, fd_jacobian

__all__ = ["derivative", "gradient", "jacobian", "hessian"]


def _check(method: str, name: str) -> None:
    if method not in METHODS:
        raise ValueError(f"{name}: method must be one of {', '.join(map(repr, METHODS))}, got "
                         f"{method!r}")


def jacobian(f, x, method: str = "central", h: float | None = None) -> np.ndarray:
    """Numerical Jacobian, shaped ``f(x).shape + x.shape``."""
    _check(method, "jacobian")
    if method == "complex_step":
        return cs_jacobian(f, x, h)
    return fd_jacobian(f, x, method, h)


def derivative(f, x, method: str = "central", h: float | None = None) -> np.ndarray:
    """d f / d x for a scalar ``x`` (a number or a one-element tensor); ``f`` may return
    any shape, which the result keeps."""
    x0 = as_array(x)
    if x0.size != 1:
        raise ValueError(f"derivative: x must be a scalar, got shape {x0.shape}; use gradient "
                         f"or jacobian")
    jac = jacobian(f, x0.reshape(()), method, h)
    return jac


def gradient(f, x, method: str = "central", h: float | None = None) -> np.ndarray:
    """The gradient of a scalar ``f`` at ``x`` (shape of x)."""
    x0 = as_array(x)
    jac = jacobian(f, x0, method, h)
    if jac.shape != x0.shape:
        raise ValueError(f"gradient: f must return a single element, got an output of shape "
                         f"{jac.shape[:jac.ndim - x0.ndim]}")
    return jac


def hessian(f, x, method: str = "central", h: float | None = None) -> np.ndarray:
    """The Hessian of a scalar ``f``: second differences of ``f`` ("central", "forward"),
    or ``Im(grad f(x + i h e_j)) / h`` per column ("complex_step", through graphgrad's
    reverse-mode gradient)."""
    _check(method, "hessian")
    if method == "complex_step":
        return cs_hessian(f, x, h)
    if method == "backward":
        raise ValueError("hessian: use method='central' or 'forward' for finite differences")
    return fd_hessian(f, x, method, h)
