"""Layer ``autograd``: grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``,
``inference_mode``, each a context manager and a decorator, as in PyTorch."""

from __future__ import annotations

import contextlib
import functools
import inspect

from graphgrad.tensor import is_grad_enabled, set_grad_mode

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled"]


class GradModeBase:
    """Sets grad mode on enter and restores the previous mode on exit."""

    mode = True

    def __init__(self):
        self.prev = None

    def __enter__(self):
        self.prev = set_grad_mode(self.mode)
        return self

    def __exit__(self, *exc):
        set_grad_mode(self.prev)
        return False

    def __call__(self, fn):
        mode = self.mode
        if inspect.isgeneratorfunction(fn):
            return _generator_in_mode(fn, mode)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = set_grad_mode(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                set_grad_mode(prev)
        return wrapper

    def clone(self):
        return type(self)()


@contextlib.contextmanager
def _in_mode(mode: bool):
    prev = set_grad_mode(mode)
    try:
        yield
    finally:
        set_grad_mode(prev)


def _generator_in_mode(fn, mode: bool):
    """A generator function whose body runs in ``mode`` each time it is resumed (and the
    caller's mode in between), as PyTorch's decorators do for generators."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        gen = fn(*args, **kwargs)
        try:
            with _in_mode(mode):
                item = gen.send(None)
            while True:
                try:
                    sent = yield item
                except GeneratorExit:
                    with _in_mode(mode):
                        gen.close()
                    raise
                except BaseException as e:  # thrown in by the caller: into the body
                    with _in_mode(mode):
                        item = gen.throw(e)
                else:
                    with _in_mode(mode):
                        item = gen.send(sent)
        except StopIteration as stop:
            return stop.value
    return wrapper


class _NoArgsDecorator(GradModeBase):
    """Usable bare as a decorator too (``@no_grad`` as well as ``@no_grad()``)."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoArgsDecorator):  # noqa: N801 - PyTorch's name
    """Ops inside record no graph; their results do not require grad."""

    mode = False


class enable_grad(_NoArgsDecorator):  # noqa: N801
    mode = True


class inference_mode(GradModeBase):  # noqa: N801
    """Like ``no_grad`` here (graphgrad has no separate inference tensors)."""

    def __new__(cls, mode=True):
        if callable(mode):  # bare ``@inference_mode``
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        super().__init__()
        self.mode = not mode


class set_grad_enabled(GradModeBase):  # noqa: N801
    """``set_grad_enabled(False)`` sets the mode at once (as a function) and restores the
    previous one when used as a context manager."""

    def __init__(self, mode: bool):
        super().__init__()
        self.mode = bool(mode)
        self.prev = set_grad_mode(self.mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        set_grad_mode(self.prev)  # as a decorator it must not change the mode now
        return super().__call__(fn)


def is_inference_mode_enabled() -> bool:
    return False
