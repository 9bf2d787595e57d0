"""Layer ``ops``: the shape/dtype rule shared by elementwise ops (broadcasting)."""

from __future__ import annotations

from graphgrad.backend import result_float_dtype, xp

from .base import Op, Spec, broadcast_shapes

__all__ = ["Elementwise"]


class _Elementwise(Op):
    """An op applied element by element to broadcast inputs. Its dtype rule runs
    ``forward`` on 0-d stand-ins, so it is exactly what eager execution gives."""

    @classmethod
    def infer(cls, *specs, **params) -> Spec:
        shapes = [s.shape for s in specs if isinstance(s, Spec)]
        shape = broadcast_shapes(cls.__name__.lower(), *shapes)
        dummies = [xp.ones((), s.dtype) if isinstance(s, Spec) else s for s in specs]
        with xp.errstate(all="ignore"):
            dt = cls.forward(*dummies, **params).dtype
        if cls.promotes:
            cast = result_float_dtype(dt, *[s.dtype for s in specs if isinstance(s, Spec)])
            dt = cast if cast is not None else dt
        return Spec(shape, xp.dtype(dt))


Elementwise = _Elementwise
