"""Layer ``ops``: sampling from distributions given by tensors: ``normal`` (its four
overloads), ``bernoulli`` and ``multinomial``, and the in-place ``normal_`` and
``bernoulli_``.

Each op is pure: the raw randomness (uniform or standard normal samples) is drawn first
by ``tensor.creation.random_tensor``, the one place every draw of graphgrad goes through,
so vmap's ``randomness=`` flag and the capture frontends' random nodes apply unchanged;
the op turns those samples and its tensor arguments into the result. As in PyTorch the
result is not differentiated through the sample: ``normal`` and ``bernoulli`` give zero
gradients (and zero tangents) to their tensor arguments, ``bernoulli(input, p)`` has no
derivative, and ``multinomial``'s indices never require grad.
"""

from __future__ import annotations

from graphgrad.backend import get_default_dtype, to_dtype, xp
from graphgrad.tensor import Tensor, Value, active_modes
from graphgrad.tensor.creation import Generator, random_tensor, zeros_like

from .base import Op, Spec, broadcast_shapes
from .batching import batch_size, materialize
from .base import scalar_name
from .elementwise import Elementwise
from .inplace import fill_inplace
from . import taylor as ts

__all__ = ["normal", "bernoulli", "multinomial", "normal_", "bernoulli_"]

_SAME_WITH_BATCHED = ("Vmap does not currently support same randomness with a batched tensor "
                      "input. Please file an issue with functorch")
_NORMAL_SIGNATURES = (
    " * (Tensor mean, Tensor std, *, torch.Generator generator = None, Tensor out = None)\n"
    " * (Tensor mean, float std = 1, *, torch.Generator generator = None, Tensor out = None)\n"
    " * (float mean, Tensor std, *, torch.Generator generator = None, Tensor out = None)\n"
    " * (float mean, float std, tuple of ints size, *, torch.Generator generator = None, "
    "Tensor out = None, torch.dtype dtype = None, torch.layout layout = None, torch.device "
    "device = None, bool pin_memory = False, bool requires_grad = False)\n")


def _draw(kind: str, shape: tuple, dtype, generator: Generator | None, inputs=()) -> Tensor:
    """Uniform [0, 1) (``kind == "uniform"``) or standard normal samples. PyTorch refuses
    vmap's randomness="same" when a distribution's parameters are batched."""
    for mode in active_modes():
        if mode.randomness == "same" and any(mode.batches(t) for t in inputs):
            raise RuntimeError(_SAME_WITH_BATCHED)
    if kind == "uniform":
        return random_tensor(lambda rng, s: rng.random(s), shape, dtype, generator=generator)
    return random_tensor(lambda rng, s: rng.standard_normal(s), shape, dtype,
                         generator=generator)


def _check_floating(t_or_dtype, kernel: str) -> None:
    dt = t_or_dtype._array.dtype if isinstance(t_or_dtype, Value) else xp.dtype(t_or_dtype)
    if dt.kind != "f":
        name = scalar_name(dt)
        raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')


def _zero_tangent(dots, out, *inputs, **params):
    return zeros_like(out)


# Taylor mode: a sample's series is zero, as its tangent (PyTorch's derivative of normal
# and bernoulli w.r.t. their parameters is zero: a draw is not reparameterized). JAX's
# jet agrees for bernoulli (uniform < p is a comparison, whose series is zero); there a
# normal sample is a constant z drawn from the key, so mean + std * z gets the series of
# mean and std through mul/add: write that form (randn_like) to get those.
_ZERO_SERIES = classmethod(ts.zero_taylor)


class _InvalidDistributionError(RuntimeError):
    """A check on the values of a distribution's parameters, which PyTorch's kernels make
    with their own words: raised as is, not explained as a shape or dtype failure."""


class _ChecksValues(Op):
    @classmethod
    def explain_failure(cls, err: Exception, args: tuple, params: dict) -> Exception:
        if isinstance(err, _InvalidDistributionError):
            return err
        return super().explain_failure(err, args, params)


class Normal(_ChecksValues, Elementwise):
    """``mean + std * noise`` (``noise``: standard normal samples in the result's dtype)."""

    promotes = False
    saves_inputs = ()
    jvp = staticmethod(_zero_tangent)
    taylor = _ZERO_SERIES

    @staticmethod
    def forward(mean, std, noise):
        if isinstance(std, xp.ndarray) and not (std >= 0).all():
            raise _InvalidDistributionError("normal expects all elements of std >= 0.0")
        return xp.asarray(mean + std * noise).astype(noise.dtype, copy=False)

    @staticmethod
    def vjp(g, out, mean, std, noise):
        return zeros_like(g), zeros_like(g), None


def _check_std(std: float) -> None:
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")


def normal(mean, std=1.0, size=None, *, generator: Generator | None = None, dtype=None,
           device=None, requires_grad: bool = False) -> Tensor:
    """Normal samples: ``normal(mean, std)`` with tensor means and/or standard deviations
    (broadcast; the result has the dtype of the tensor mean, else of std), or
    ``normal(mean, std, size)`` for two numbers."""
    mean_t, std_t = isinstance(mean, Value), isinstance(std, Value)
    if (size is None) != (mean_t or std_t):  # no overload takes a size with a tensor
        got = ", ".join("Tensor" if isinstance(a, Value) else type(a).__name__
                        for a in (mean, std, size) if a is not None)
        raise TypeError(f"normal() received an invalid combination of arguments - got "
                        f"({got}), but expected one of:\n{_NORMAL_SIGNATURES}")
    if not mean_t and not std_t:
        _check_std(std)
        dt = to_dtype(dtype).np if dtype is not None else get_default_dtype().np
        _check_floating(dt, "normal_kernel_cpu")
        shape = tuple(size) if isinstance(size, (tuple, list)) else (int(size),)
        out = Normal.apply(mean, std, _draw("normal", shape, dt, generator))
        return out.requires_grad_() if requires_grad else out
    if not std_t:
        _check_std(std)
    dt = (mean if mean_t else std)._array.dtype
    _check_floating(dt, "normal_kernel_cpu")
    shape = broadcast_shapes("normal", *(tuple(t.shape) for t in (mean, std)
                                         if isinstance(t, Value)))
    noise = _draw("normal", shape, dt, generator, [t for t in (mean, std) if isinstance(t, Value)])
    return Normal.apply(mean, std, noise)


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *,
            generator: Generator | None = None) -> Tensor:
    """Fill ``self`` in place with normal samples."""
    _check_std(std)
    _check_floating(self, "normal_kernel_cpu")
    noise = _draw("normal", tuple(self.shape), self._array.dtype, generator)
    return fill_inplace(self, Normal.apply(mean, std, noise), "normal_")


class Bernoulli(_ChecksValues, Elementwise):
    """1 where ``u < p`` (``u``: uniform samples), else 0, in ``input``'s dtype; with the
    parameter ``p`` every element has that probability and ``input`` gives only the
    shape and dtype."""

    promotes = False
    saves_inputs = ()
    jvp = staticmethod(_zero_tangent)
    taylor = _ZERO_SERIES

    @staticmethod
    def forward(input, u, *, p=None):
        if p is None:
            if not ((input >= 0) & (input <= 1)).all():
                raise _InvalidDistributionError(
                    "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this "
                    "error message be improved?  If so, please report an enhancement request "
                    "to PyTorch.)")
            return xp.asarray(u < input).astype(input.dtype)
        return xp.asarray(u < p).astype(xp.asarray(input).dtype)

    @staticmethod
    def vjp(g, out, input, u, *, p=None):
        if p is not None:
            raise RuntimeError("derivative for aten::bernoulli is not implemented")
        return zeros_like(g), None


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")


def _uniform_like(t: Tensor, generator: Generator | None, inputs=()) -> Tensor:
    """Uniform samples of ``t``'s shape, in its dtype when floating (else float64)."""
    dt = t._array.dtype if t._array.dtype.kind == "f" else xp.dtype(xp.float64)
    return _draw("uniform", tuple(t.shape), dt, generator, inputs)


def bernoulli(input: Tensor, p: float | None = None, *,
              generator: Generator | None = None) -> Tensor:
    """0/1 samples: with probability ``input`` elementwise, or ``p`` for every element."""
    if p is None:
        _check_floating(input, "bernoulli_tensor_cpu_p_")
        return Bernoulli.apply(input, _uniform_like(input, generator, [input]))
    if isinstance(p, Value):
        raise TypeError("bernoulli() received an invalid combination of arguments - got "
                        "(Tensor, p=Tensor), but expected one of:\n"
                        " * (Tensor input, *, torch.Generator generator = None, Tensor out = "
                        "None)\n * (Tensor input, float p, *, torch.Generator generator = "
                        "None)\n")
    _check_p(p)
    return Bernoulli.apply(input, _uniform_like(input, generator), p=float(p))


def bernoulli_(self: Tensor, p=0.5, *, generator: Generator | None = None) -> Tensor:
    """Fill ``self`` in place with 0/1 samples of probability ``p`` (a number, or a tensor
    that broadcasts to ``self``)."""
    if isinstance(p, Value):
        _check_floating(p, "bernoulli_tensor_cpu_p_")
        probs = p.detach().expand(*self.shape)
        value = Bernoulli.apply(probs, _uniform_like(probs, generator, [probs]))
    else:
        _check_p(p)
        value = Bernoulli.apply(self.detach(), _uniform_like(self, generator), p=float(p))
    return fill_inplace(self, value, "bernoulli_")


def _check_distribution(probs) -> None:
    if not (xp.isfinite(probs) & (probs >= 0)).all():
        raise _InvalidDistributionError("probability tensor contains either `inf`, `nan` or "
                                        "element < 0")
    if (probs.sum(-1) == 0).any():
        raise _InvalidDistributionError("invalid multinomial distribution (sum of "
                                        "probabilities <= 0)")


class Multinomial(_ChecksValues):
    """Category indices per row of ``probs``: with replacement, the uniform samples ``u``
    (one per index) through each row's cumulative distribution; without, the
    ``num_samples`` largest of ``probs / q`` with ``q = -log(1 - u)`` exponential samples
    (PyTorch's Gumbel-max form), so an index is never drawn twice."""

    differentiable = False
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(probs, u, *, num_samples, replacement):
        _check_distribution(probs)
        rows, cats = probs.reshape(-1, probs.shape[-1]), probs.shape[-1]
        noise = u.reshape(rows.shape[0], u.shape[-1])
        if replacement:
            cdf = xp.cumsum(rows, -1, dtype=xp.float64)
            cdf /= cdf[:, -1:]
            out = xp.stack([xp.searchsorted(c, v, side="right") for c, v in
                            zip(cdf, noise, strict=True)]) if rows.shape[0] else \
                xp.empty((0, num_samples), xp.int64)
            out = xp.minimum(out, cats - 1)
        else:
            with xp.errstate(divide="ignore", invalid="ignore"):
                keys = xp.where(rows > 0, rows / -xp.log1p(-noise.astype(xp.float64)), 0.0)
            out = xp.argsort(-keys, axis=-1, kind="stable")[:, :num_samples]
        return out.astype(xp.int64).reshape(*probs.shape[:-1], num_samples)

    @classmethod
    def infer(cls, probs, u, *, num_samples, replacement) -> Spec:
        return Spec((*probs.shape[:-1], num_samples), xp.dtype(xp.int64))

    @classmethod
    def batch(cls, vals, bdims, *, num_samples, replacement):
        """Every example's rows as rows of one call."""
        size = batch_size(vals, bdims)
        probs, u = (materialize(v, d, size) for v, d in zip(vals, bdims, strict=True))
        out = cls.apply(probs.reshape(-1, probs.shape[-1]), u.reshape(-1, u.shape[-1]),
                        num_samples=num_samples, replacement=replacement)
        return out.reshape(size, *probs.shape[1:-1], num_samples), 0


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    """``num_samples`` category indices per row of ``input`` (1-D or 2-D, non-negative
    weights that need not sum to 1), int64."""
    if not isinstance(num_samples, int) or isinstance(num_samples, bool):
        raise TypeError(f"multinomial(): argument 'num_samples' (position 2) must be int, not "
                        f"{type(num_samples).__name__}")
    if input.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if input._array.dtype.kind != "f":
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{scalar_name(input._array.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > input.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    shape = (*input.shape[:-1], num_samples if replacement else input.shape[-1])
    noise = _draw("uniform", shape, xp.dtype(xp.float64), generator, [input])
    return Multinomial.apply(input, noise, num_samples=num_samples,
                             replacement=bool(replacement))
