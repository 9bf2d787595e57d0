"""Layer ``fx``: ``symbolic_trace``, the entry point (torch.fx's, plus example inputs).

torch.fx records Python calls and needs no shapes. graphgrad's IR records ops with
their shape rules, so code whose ops need the rank (a ``dim=-1``, a reduction, a
transpose) needs to know the inputs' ranks: ``example_inputs`` gives them. The graph is
then traced with every size unknown (it serves inputs of any size of that rank); where a
shape rule needs the sizes themselves (or a leaf module's output rank cannot be found
without them), it is traced again for the example's exact shapes, and the GraphModule
checks that its inputs have them. (Tracing twice runs the function's external calls
twice; the second trace's values are the ones frozen.) The graph runs on any dtype unless
graphgrad code read a traced value's dtype while tracing (``new_zeros``, ``x.to(x.dtype)``):
then that dtype is baked in, and the GraphModule checks its inputs have it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

from graphgrad.graph import Spec
from graphgrad.nn import Module
from graphgrad.tensor import Value

from .errors import TraceError, UnknownShapeError
from .graph_module import GraphModule
from .tracer import Tracer

__all__ = ["symbolic_trace"]

_BASIC = (bool, int, float, complex, str, type(None))
_NOT_ASSERTED = ("Was not able to add assertion to guarantee correct input {name} to "
                 "specialized function. It is up to the user to make sure that your inputs "
                 "match the inputs you specialized the function with.")


def _specs(examples: tuple, exact: bool) -> tuple:
    out = []
    for x in examples:
        if not isinstance(x, Value):
            raise TypeError(f"symbolic_trace: example inputs must be tensors, got "
                            f"{type(x).__name__}")
        shape = x._array.shape if exact else (None,) * x._array.ndim
        out.append(Spec(tuple(shape), x._array.dtype))
    return tuple(out)


def symbolic_trace(root: Module | Callable,
                   concrete_args: dict[str, Any] | tuple | None = None, *,
                   example_inputs: tuple | None = None) -> GraphModule:
    """Trace ``root`` (a module or a function) on Proxies into a ``GraphModule``.

    ``concrete_args`` bakes arguments in (``PH`` keeps one a placeholder), guarded when
    the module is called. ``example_inputs`` (graphgrad's addition, one tensor per traced
    argument) tells the tracer the inputs' ranks and dtypes; without it their ranks are
    unknown and code that needs one raises a TraceError that says so."""
    tracer = Tracer()
    if example_inputs is None:
        graph = tracer.trace(root, concrete_args)
    else:
        try:
            graph = tracer.trace(root, concrete_args, input_specs=_specs(example_inputs, False))
        except TraceError as e:
            if not isinstance(e, UnknownShapeError):
                raise   # Python control flow on a traced value: sizes would not help
            graph, tracer = _trace_exact(root, concrete_args, example_inputs)
        except Exception:  # noqa: BLE001 - a shape rule or a check needed a size (e.g.
            # F.layer_norm's normalized_shape): trace for the example's exact shapes
            # instead; the GraphModule checks that its inputs have them
            graph, tracer = _trace_exact(root, concrete_args, example_inputs)
    for name, value in tracer.concrete.items():
        if not isinstance(value, _BASIC):
            warnings.warn(_NOT_ASSERTED.format(name=name), stacklevel=2)
    gm = GraphModule(tracer.root, graph, graph.name)
    d = gm.__dict__
    d["_signature"] = _call_signature(tracer.signature, tracer.concrete)
    d["_out_spec"] = tracer.out_spec
    d["_concrete"] = dict(tracer.concrete)
    d["_dtype_baked"] = tracer.dtype_read
    return gm


def _trace_exact(root, concrete_args, example_inputs) -> tuple:
    tracer = Tracer()
    return tracer.trace(root, concrete_args, input_specs=_specs(example_inputs, True)), tracer


def _call_signature(sig: inspect.Signature, concrete: dict) -> inspect.Signature:
    """The traced function's signature, with the concrete arguments defaulting to the values
    they were specialized to."""
    params = [p.replace(default=concrete[p.name]) if p.name in concrete else p
              for p in sig.parameters.values()]
    try:  # a defaulted argument before one without a default is not a valid signature:
        # then the caller passes the baked argument (and the guard checks it)
        return sig.replace(parameters=params)
    except ValueError:
        return sig
