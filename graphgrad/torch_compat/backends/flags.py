"""Layer ``torch_compat``: the module type behind ``torch.backends.cudnn`` and friends:
settable boolean flags with PyTorch's defaults that refuse non-bools as PyTorch does
(``torch.backends.cudnn.benchmark = 1`` raises there, it does not coerce)."""

from __future__ import annotations

import types

__all__ = ["FlagModule", "FlagNamespace"]


class _Flags:
    """Shared by the module and namespace forms: ``_FLAGS`` maps a flag to the exception
    and message PyTorch raises for a non-bool (``{type}`` is filled with the value's type
    name, ``{cls}`` with the type itself)."""

    _FLAGS: dict[str, tuple[type[Exception], str]] = {}

    def __setattr__(self, name: str, value) -> None:
        check = type(self)._FLAGS.get(name)
        if check is not None and not isinstance(value, bool):
            error, message = check
            raise error(message.format(type=type(value).__name__, cls=type(value)))
        super().__setattr__(name, value)


class FlagModule(_Flags, types.ModuleType):
    """A module whose listed attributes accept only bools (``torch.backends.cudnn``)."""


class FlagNamespace(_Flags):
    """An object whose listed attributes accept only bools and which refuses unknown
    attributes (``torch.backends.cuda.matmul``)."""

    def __init__(self, **defaults: bool | str) -> None:
        for name, value in defaults.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value) -> None:
        if not hasattr(self, name):
            raise AttributeError(f"Unknown attribute {name}")
        super().__setattr__(name, value)
