"""Layer ``tensor``: making leaf tensors (``tensor``, ``zeros``, ``rand``...) and the
global random generator behind ``manual_seed``."""

from __future__ import annotations

from typing import Any

from graphgrad.backend import get_default_dtype, to_dtype, xp

from .device import check_device
from .modes import active_modes
from .tensor import Tensor
from .value import Value

__all__ = ["tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "arange",
           "linspace", "eye", "rand", "randn", "randint", "randperm", "zeros_like",
           "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like",
           "manual_seed", "seed", "initial_seed", "Generator", "default_generator", "as_array",
           "random_tensor",
           "scalar_tensor"]


class Generator:
    """A seeded random source (``graphgrad.Generator().manual_seed(0)``), NumPy's PCG64."""

    def __init__(self, device: str = "cpu"):
        self._seed = 67280421310721
        self.rng = xp.random.default_rng(self._seed)

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self.rng = xp.random.default_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        s = int(xp.random.SeedSequence().entropy) % (2**63)
        self.manual_seed(s)
        return s


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed graphgrad's global random generator (``rand``, ``randn``, dropout, init...)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def rng_of(generator: Generator | None):
    """The NumPy generator behind ``generator`` (default: the global one); every random
    draw of graphgrad goes through here (jit.trace recognises draws by it)."""
    return (generator or default_generator).rng


def as_array(data: Any, dtype=None):
    """``tensor(data)``'s conversion: Python floats become the default dtype, ints int64,
    bools bool; NumPy arrays keep their dtype; a list of tensors is stacked."""
    if isinstance(data, Value):
        arr = data._array.copy()
    elif isinstance(data, xp.ndarray):
        arr = data.copy()
    elif dtype is not None:
        return xp.array(data, dtype=to_dtype(dtype).np)
    else:
        try:
            arr = xp.array(data)
        except ValueError as e:  # ragged nesting: say where, as PyTorch does
            msg = _ragged(data, 0) or str(e)
            raise (TypeError if msg == "not a sequence" else ValueError)(msg) from None
        if arr.dtype == xp.float64 and not _holds_float64(data):
            arr = arr.astype(get_default_dtype().np)
        elif arr.dtype.kind in "iu" and arr.dtype != xp.int64 and not _holds_numpy(data):
            arr = arr.astype(xp.int64)
        elif arr.dtype == xp.complex128 and not _holds_float64(data):
            arr = arr.astype(xp.complex64 if get_default_dtype().np == xp.float32
                             else xp.complex128)
        elif arr.dtype.kind not in "biufc":
            raise TypeError(f"Could not infer dtype of {type(data).__name__}")
    if dtype is not None:
        arr = arr.astype(to_dtype(dtype).np)
    return arr


def _ragged(data, dim: int) -> str | None:
    """PyTorch's message for the first sequence whose length differs from its siblings'."""
    if not isinstance(data, (list, tuple)) or not data:
        return None
    lengths = [len(d) if isinstance(d, (list, tuple)) else None for d in data]
    first = lengths[0]
    for n in lengths[1:]:
        if n != first:
            if first is None or n is None:
                return "not a sequence"
            return f"expected sequence of length {first} at dim {dim + 1} (got {n})"
    for d in data:
        msg = _ragged(d, dim + 1)
        if msg:
            return msg
    return None


def _holds_float64(data) -> bool:
    """True when ``data`` contains float64 arrays or tensors (which keep their dtype)."""
    if isinstance(data, (xp.ndarray, xp.generic)):
        return data.dtype in (xp.float64, xp.complex128)
    if isinstance(data, Value):
        return data._array.dtype in (xp.float64, xp.complex128)
    if isinstance(data, (list, tuple)):
        return any(_holds_float64(d) for d in data)
    return False


def _holds_numpy(data) -> bool:
    if isinstance(data, (xp.ndarray, xp.generic, Value)):
        return True
    if isinstance(data, (list, tuple)) and data:
        return _holds_numpy(data[0])
    return False


_RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either "
                 "use the 'same' or 'different' randomness flags on vmap or perform the "
                 "randomness operation out of vmap")


def random_tensor(draw, shape: tuple, dtype, requires_grad: bool = False,
                  generator: Generator | None = None) -> Tensor:
    """A tensor of ``draw(rng, shape)`` samples. Inside vmap the level's ``randomness``
    decides: "error" raises, "same" draws once for all examples, "different" draws one
    sample per example (a batched tensor)."""
    levels = [m for m in active_modes() if m.randomness is not None]
    rng = rng_of(generator)

    def sample(shape, lower):
        for k in range(len(lower) - 1, -1, -1):
            level = lower[k]
            if level.randomness == "error":
                raise RuntimeError(_RANDOM_ERROR)
            if level.randomness == "different":
                return level.batched_random(lambda s, below=lower[:k]: sample(s, below), shape)
        return Tensor._make(draw(rng, shape).astype(dtype))

    t = sample(tuple(shape), levels)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _new(arr, requires_grad: bool) -> Tensor:
    t = Tensor._make(arr)
    if requires_grad:
        if arr.dtype.kind not in "fc":  # the factory keyword's wording, as in PyTorch
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               "gradients")
        t._requires_grad = True
    return t


def tensor(data: Any, dtype=None, device=None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data``."""
    check_device(device)
    return _new(as_array(data, dtype), requires_grad)


def scalar_tensor(s, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    return _new(xp.array(s, dtype=(to_dtype(dtype) if dtype else get_default_dtype()).np),
                requires_grad)


def as_tensor(data: Any, dtype=None, device=None) -> Tensor:
    """Like ``tensor`` but shares memory with a NumPy array or a tensor where it can."""
    check_device(device)
    if isinstance(data, Tensor) and (dtype is None or to_dtype(dtype) == data.dtype):
        return data
    if isinstance(data, xp.ndarray) and (dtype is None or to_dtype(dtype).np == data.dtype):
        return Tensor._make(data)
    return tensor(data, dtype=dtype)


def from_numpy(array) -> Tensor:
    """A tensor sharing memory with ``array`` (changes show through both)."""
    if not isinstance(array, xp.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    from graphgrad.backend import from_numpy_dtype
    from_numpy_dtype(array.dtype)  # raises PyTorch's message for unsupported dtypes
    return Tensor._make(array)


def _size(size: tuple, negative: str | None = None) -> tuple:
    """The sizes as ints; a negative one is PyTorch's RuntimeError (``negative``: the
    factory's own message, where it has one)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        size = tuple(int(s) for s in size)
    except TypeError:
        raise TypeError(f"size must be a sequence of ints, got {size!r}") from None
    for s in size:
        if s < 0:
            raise RuntimeError(negative or f"Trying to create tensor with negative dimension "
                                           f"{s}: {list(size)}")
    return size


def _dt(dtype, default=None):
    return to_dtype(dtype).np if dtype is not None else (default or get_default_dtype().np)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    return _new(xp.zeros(_size(size, "zeros: Dimension size must be non-negative."),
                         _dt(dtype)), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    return _new(xp.ones(_size(size), _dt(dtype)), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    return _new(xp.empty(_size(size), _dt(dtype)), requires_grad)


# the C++ type names PyTorch's "cannot be converted" message prints
_C_TYPES = {"int64": "int64_t", "int32": "int", "int16": "int16_t", "int8": "int8_t",
            "uint8": "uint8_t", "float64": "double", "float32": "float", "float16": "c10::Half"}


def invalid_arguments(fn: str, args: tuple, overloads: tuple[str, ...]) -> TypeError:
    """PyTorch's argument-parser error for arguments no overload of ``fn`` takes."""
    got = ", ".join(type(a).__name__ if not isinstance(a, Tensor) else "Tensor" for a in args)
    return TypeError(f"{fn}() received an invalid combination of arguments - got ({got}), but "
                     f"expected one of:\n" + "".join(f" * ({o})\n" for o in overloads))


def is_number(v) -> bool:
    return isinstance(v, (int, float, complex)) or type(v).__module__ == "numpy" and \
        hasattr(v, "dtype")


def fitted_scalar(value, np_dtype):
    """PyTorch's refusal to store a Python number its dtype cannot hold (NaN or infinity in
    an integer tensor, a finite value past the dtype's range, a complex number with an
    imaginary part in a real tensor): fill_, x[i] = v, masked_fill, full. A bool tensor
    takes anything; uint8 takes -255..255 (negatives wrap, as in C++). Returns the value to
    store."""
    dt = xp.dtype(np_dtype)
    if dt.kind == "b" or dt.kind == "c" or isinstance(value, bool) \
            or not isinstance(value, (int, float, complex)):
        return value
    if isinstance(value, complex):
        fits = value.imag == 0
        value = value.real
    else:
        fits = True
    if dt.kind in "iu":
        info = xp.iinfo(dt)
        low = -int(info.max) if dt.kind == "u" else int(info.min)
        fits = fits and value == value and low <= value <= int(info.max)  # NaN != NaN
    elif dt.kind == "f":
        fits = fits and not (abs(value) > float(xp.finfo(dt).max) and abs(value) != float("inf"))
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {_C_TYPES.get(dt.name, dt.name)} "
                           f"without overflow")
    if dt.kind == "u" and value < 0:
        return int(value) % (int(xp.iinfo(dt).max) + 1)
    return value


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    if dtype is None:
        dtype = (xp.bool_ if isinstance(fill_value, bool) else
                 xp.int64 if isinstance(fill_value, int) else None)
        dtype = dtype if dtype is not None else get_default_dtype().np
    else:
        dtype = to_dtype(dtype).np
    if not (is_number(fill_value) or isinstance(fill_value, Tensor)):
        raise TypeError(f"full(): argument 'fill_value' (position 2) must be Number, not "
                        f"{type(fill_value).__name__}")
    fill_value = fitted_scalar(fill_value, dtype)
    return _new(xp.full(_size((size,)), fill_value, dtype), requires_grad)


_NO_END = object()  # arange(end): PyTorch refuses an end of None


def arange(start, end=_NO_END, step=1, dtype=None, device=None,
           requires_grad: bool = False) -> Tensor:
    check_device(device)
    if end is _NO_END:
        start, end = 0, start
    if dtype is None:
        is_int = all(isinstance(v, int) for v in (start, end, step))
        dtype = xp.int64 if is_int else get_default_dtype().np
    else:
        dtype = to_dtype(dtype).np
    _check_range(start, end, step)
    return _new(xp.arange(start, end, step).astype(dtype), requires_grad)


def _check_range(start, end, step) -> None:
    """PyTorch's checks of arange's arguments, in its order."""
    import math
    for v in (start, end, step):
        if isinstance(v, (str, bytes)) or v is None or isinstance(v, (list, tuple)):
            raise TypeError(f"arange() received an invalid combination of arguments - got "
                            f"({', '.join(type(a).__name__ for a in (start, end, step))})")
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")


def linspace(start, end, steps: int, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    check_device(device)
    if not (is_number(start) or isinstance(start, Tensor)) or not (
            is_number(end) or isinstance(end, Tensor)) or isinstance(steps, bool) \
            or not isinstance(steps, int):
        raise invalid_arguments("linspace", (start, end, steps), (
            "Tensor start, Tensor end, int steps", "Number start, Tensor end, int steps",
            "Tensor start, Number end, int steps", "Number start, Number end, int steps"))
    if dtype is not None and to_dtype(dtype).np == xp.bool_:
        raise NotImplementedError('"linspace_cpu" not implemented for \'Bool\'')
    if isinstance(steps, int) and steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if steps == 1:  # the start alone (NumPy computes start + 0 * (end - start): nan for inf)
        return _new(xp.array(start, dtype=xp.float64).reshape(1).astype(_dt(dtype)), requires_grad)
    return _new(xp.linspace(start, end, steps).astype(_dt(dtype)), requires_grad)


def eye(n: int, m: int | None = None, dtype=None, device=None,
        requires_grad: bool = False) -> Tensor:
    check_device(device)
    for name, v, pos in (("n", n, 1), ("m", m, 2)):
        if v is None and name == "m":
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"eye(): argument '{name}' (position {pos}) must be int, not "
                            f"{type(v).__name__}")
        if v < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {v}")
    return _new(xp.eye(n, m, dtype=_dt(dtype)), requires_grad)


def rand(*size, generator: Generator | None = None, dtype=None, device=None,
         requires_grad: bool = False) -> Tensor:
    """Uniform samples on [0, 1)."""
    check_device(device)
    return random_tensor(lambda rng, s: rng.random(s), _size(size), _dt(dtype), requires_grad,
                         generator)


def randn(*size, generator: Generator | None = None, dtype=None, device=None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples."""
    check_device(device)
    return random_tensor(lambda rng, s: rng.standard_normal(s), _size(size), _dt(dtype),
                         requires_grad, generator)


def randint(low, high=None, size=None, *, generator: Generator | None = None, dtype=None,
            device=None, requires_grad: bool = False) -> Tensor:
    """Integers uniform on [low, high); ``randint(high, size)`` as in PyTorch."""
    check_device(device)
    if size is None:  # randint(high, size)
        low, high, size = 0, low, high
    if size is None:
        raise TypeError("randint() missing required argument 'size'")
    return random_tensor(lambda rng, s: rng.integers(low, high, size=s), _size((size,)),
                         _dt(dtype, xp.int64), requires_grad, generator)


def randperm(n: int, *, generator: Generator | None = None, dtype=None,
             device=None) -> Tensor:
    check_device(device)
    return _new(rng_of(generator).permutation(n).astype(_dt(dtype, xp.int64)), False)


def _like(t: Tensor, dtype):
    return t._array.shape, (to_dtype(dtype).np if dtype is not None else t._array.dtype)


def zeros_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    shape, dt = _like(input, dtype)
    return _new(xp.zeros(shape, dt), requires_grad)


def ones_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    shape, dt = _like(input, dtype)
    return _new(xp.ones(shape, dt), requires_grad)


def empty_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    shape, dt = _like(input, dtype)
    return _new(xp.empty(shape, dt), requires_grad)


def full_like(input: Tensor, fill_value, dtype=None, device=None,
              requires_grad: bool = False) -> Tensor:
    check_device(device)
    shape, dt = _like(input, dtype)
    return _new(xp.full(shape, fill_value, dt), requires_grad)


def rand_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    shape, dt = _like(input, dtype)
    return random_tensor(lambda rng, s: rng.random(s), shape, dt, requires_grad)


def randn_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    check_device(device)
    shape, dt = _like(input, dtype)
    return random_tensor(lambda rng, s: rng.standard_normal(s), shape, dt, requires_grad)


def randint_like(input: Tensor, low, high=None, dtype=None, device=None) -> Tensor:
    check_device(device)
    if high is None:
        low, high = 0, low
    shape, dt = _like(input, dtype)
    return random_tensor(lambda rng, s: rng.integers(low, high, size=s), shape, dt)

