"""Layer ``autograd``: reverse mode by graph extension (``backward``, ``grad``) and
grad mode, custom ``Function``s."""

from . import engine, forward_ad, function, functional, grad_mode
from .engine import backward, grad
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                        set_grad_enabled)

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "is_grad_enabled", "engine", "grad_mode", "forward_ad", "functional", "function",
           "Function", "FunctionCtx", "once_differentiable"]
