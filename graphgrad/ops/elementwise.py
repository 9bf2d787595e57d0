"""Layer ``ops``: the shape/dtype rule shared by elementwise ops (broadcasting)."""

from __future__ import annotations

from graphgrad.backend import from_numpy_dtype, torch_promotion, xp
from graphgrad.tensor import Value

from .base import Op, Spec, broadcast_shapes
from .batching import align, logical_ndim

__all__ = ["Elementwise", "Diagonal"]


WIDE_DTYPES = (xp.dtype(xp.float64), xp.dtype(xp.int64), xp.dtype(xp.complex128))


class _Elementwise(Op):
    """An op applied element by element to broadcast inputs. Its dtype rule runs
    ``forward`` on 0-d stand-ins, so it is exactly what eager execution gives."""

    rank_free = True  # broadcasting works the same for every rank

    @classmethod
    def infer(cls, *specs, **params) -> Spec:
        shapes = [s.shape for s in specs if isinstance(s, Spec)]
        shape = broadcast_shapes(cls.__name__.lower(), *shapes)
        # one-element stand-ins that keep each input's rank (0-d inputs promote weakly)
        dummies = [xp.ones((1,) * s.ndim, s.dtype) if isinstance(s, Spec) else s for s in specs]
        with xp.errstate(all="ignore"):
            dt = xp.asarray(cls.forward(*dummies, **params)).dtype
        if cls.promotes:
            cast = torch_promotion(dt, dummies)
            dt = cast if cast is not None else dt
        return Spec(shape, xp.dtype(dt))

    @classmethod
    def batch(cls, vals, bdims, **params):
        """Batch first, ranks lined up: then broadcasting does the rest."""
        rank = max(logical_ndim(v, d) for v, d in zip(vals, bdims, strict=True))
        args = [align(v, d, rank) if d is not None else v
                for v, d in zip(vals, bdims, strict=True)]
        out = cls.apply(*args, **params)
        if cls.promotes and any(d is not None and v.ndim == 1
                                for v, d in zip(vals, bdims, strict=True)):
            # batched 0-d examples have a dim physically, but promote as 0-d tensors
            logical = cls.infer(*[Spec(tuple(s for i, s in enumerate(v.shape) if i != d),
                                       v.dtype.np) if isinstance(v, Value) else v
                                  for v, d in zip(vals, bdims, strict=True)], **params)
            if logical.dtype != out.dtype.np:
                out = out.to(from_numpy_dtype(logical.dtype))
        return out, 0


class _Diagonal(_Elementwise):
    """One-input elementwise ops: the Jacobian is diagonal, so J v is the vjp's own formula
    applied to the tangent (``vjp(g)`` is ``g * f'(a)``, and so is ``jvp(v)``)."""

    @classmethod
    def jvp(cls, dots, out, a, **params):
        return cls.vjp(dots[0], out, a, **params)[0]


Elementwise = _Elementwise
Diagonal = _Diagonal
