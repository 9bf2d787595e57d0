"""Layer ``autograd``: grad mode: ``no_grad``, ``enable_grad``, ``set_grad_enabled``,
``inference_mode``, each a context manager and a decorator, as in PyTorch."""

from __future__ import annotations

import functools

from graphgrad.tensor import is_grad_enabled, set_grad_mode

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled"]


class _GradMode:
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


class no_grad(_GradMode):  # noqa: N801 - PyTorch's name
    """Ops inside record no graph; their results do not require grad."""

    mode = False


class enable_grad(_GradMode):  # noqa: N801
    mode = True


class inference_mode(_GradMode):  # noqa: N801
    """Like ``no_grad`` here (graphgrad has no separate inference tensors)."""

    def __init__(self, mode: bool = True):
        super().__init__()
        self.mode = not mode


class set_grad_enabled(_GradMode):  # noqa: N801
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
