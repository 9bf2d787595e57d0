"""Layer ``ops``: the NumPy spellings PyTorch accepts for its keyword arguments,
``axis`` for ``dim`` and ``keepdims`` for ``keepdim`` (``torch.sum(x, axis=0,
keepdims=True)``), added in one place: to every public function and Tensor method
that has a ``dim`` or ``keepdim`` parameter, when they are bound."""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["with_numpy_aliases"]

_ALIASES = (("axis", "dim"), ("keepdims", "keepdim"))


def _parameters(fn) -> tuple:
    code = getattr(fn, "__code__", None)
    if code is None:
        return ()
    return code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


def with_numpy_aliases(fn: Callable) -> Callable:
    """``fn`` accepting ``axis``/``keepdims`` for its ``dim``/``keepdim`` (``fn`` itself
    when it has neither). Both spellings at once is PyTorch's TypeError."""
    params = _parameters(fn)
    aliases = tuple((a, n) for a, n in _ALIASES if n in params and a not in params)
    if not aliases:
        return fn

    @functools.wraps(fn)
    def aliased(*args, **kwargs):
        if kwargs:  # the common call has no keywords: one check
            for alias, name in aliases:
                if alias in kwargs:
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got an unexpected keyword argument "
                                        f"'{alias}'")
                    kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)
    return aliased
