"""Layer ``backends``: the registry of backends by name (``torch._dynamo``'s
``register_backend``/``lookup_backend``), used by ``graphgrad.compile(backend=...)``."""

from __future__ import annotations

from collections.abc import Callable

from .array_program import default
from .eager import eager, print_backend

__all__ = ["BACKENDS", "register_backend", "lookup_backend"]

BACKENDS: dict[str, Callable] = {"eager": eager, "print": print_backend, "default": default,
                                 "inductor": default}


def register_backend(name: str, fn: Callable) -> Callable:
    BACKENDS[name] = fn
    return fn


def lookup_backend(backend) -> Callable:
    if callable(backend):
        return backend
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"Invalid backend: {backend!r}, see `graphgrad.compiler.list_backends()` "
                         f"for available backends ({', '.join(sorted(BACKENDS))})") from None
