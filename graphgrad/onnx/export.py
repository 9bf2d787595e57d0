"""Layer ``onnx``: ``graphgrad.onnx.export``, PyTorch's ``torch.onnx.export`` on graphgrad's
IR.

The model (an ``nn.Module``, put in eval mode for the export as PyTorch does, or a
function of tensors) is captured with ``graphgrad.jit.trace``, the graph is optimized by
``graphgrad.passes.optimize``, and every node is mapped to ONNX operators by the table
of ``mapping.py`` (an op without a mapping raises ``UnsupportedOperatorError`` naming it).
The traced module's parameters and buffers become initializers named by their
state-dict names (graph inputs with ``export_params=False``); ``dynamic_axes`` become
symbolic dims; the sizes a trace reads with ``x.shape`` stay computed in the graph
(``Shape``), so a dynamic batch axis runs at any batch size. The file is checked with
``onnx.checker`` (full check, with shape inference) before it is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import IO, Any

from graphgrad.graph import Graph, Node
from graphgrad.nn import Module
from graphgrad.passes import optimize
from graphgrad.tensor import Tensor, Value

from . import map_elementwise, map_layers, map_norm, map_reduce, map_shape  # noqa: F401
from .emitter import Emitter, Val, onnx_package
from .errors import OnnxExporterError, UnsupportedOperatorError
from .mapping import MAPPINGS

__all__ = ["export", "is_in_onnx_export", "DEFAULT_OPSET", "SUPPORTED_OPSETS"]

DEFAULT_OPSET = 17
SUPPORTED_OPSETS = range(17, 22)  # checked against onnxruntime at 17, 18 and 20
_exporting = [False]


def is_in_onnx_export() -> bool:
    """True while ``export`` is tracing the model (``torch.onnx.is_in_onnx_export``)."""
    return _exporting[0]


@contextlib.contextmanager
def _export_mode(model: Any):
    was_training = isinstance(model, Module) and model.training
    if was_training:
        model.eval()  # PyTorch exports in eval mode (training=TrainingMode.EVAL)
    _exporting[0] = True
    try:
        yield
    finally:
        _exporting[0] = False
        if was_training:
            model.train()


def _dynamic_axes(dynamic_axes: dict | None, names: list[str]) -> dict[str, dict[int, str]]:
    """``{name: {axis: dim_name}}`` from PyTorch's two spellings (a list of axes gets
    generated names, as PyTorch's ``<name>_dynamic_axes_<k>``)."""
    out: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if name not in names:
            raise ValueError(f"dynamic_axes names {name!r}, which is not an input or output "
                             f"name ({', '.join(names)})")
        if isinstance(axes, dict):
            out[name] = {int(a): str(d) for a, d in axes.items()}
        else:
            out[name] = {int(a): f"{name}_dynamic_axes_{k + 1}" for k, a in enumerate(axes)}
    return out


class _Builder:
    """Maps one optimized graph to ONNX nodes through an Emitter."""

    def __init__(self, em: Emitter, do_constant_folding: bool):
        self.em = em
        self.fold = do_constant_folding
        self.values: dict[Node, Val] = {}
        em.memo["values"] = self.values  # for mappings that match a pattern of nodes

    def arg(self, x: Any) -> Any:
        return self.values[x] if isinstance(x, Node) else x

    def run(self, graph: Graph) -> None:
        for node in graph.nodes:
            if node.kind in ("placeholder", "output"):
                continue
            if node.kind == "constant":
                self.values[node] = self.em.known(self.em.fresh(node.name), node.value,
                                                  node.spec.dtype, len(node.spec.shape))
            elif node.kind == "shape":
                x = self.values[node.inputs[0]]
                self.values[node] = Val(self.em.op("Shape", [x.name]), "int64", 1)
            elif node.kind == "call":
                self.values[node] = self.call(node)
            else:
                reason = {"random": "Random draws (dropout in training mode, rand) are not "
                                    "exported: call model.eval() or remove them."}.get(
                    node.kind, f"Graph nodes of kind {node.kind!r} have no ONNX mapping.")
                raise UnsupportedOperatorError(node.target_name, self.em.opset, reason)

    def call(self, node: Node) -> Val:
        args = [self.arg(x) for x in node.inputs]
        spec = node.spec
        if self.fold and self.foldable(node, args):
            out = node.op.apply(*[Tensor._make(a.array) if isinstance(a, Val) else a
                                  for a in args[:node.nargs]], **node.params)
            return self.em.known(self.em.fresh(node.name), out._array, spec.dtype,
                                 len(spec.shape))
        mapping = MAPPINGS.get(node.op.__name__)
        if mapping is None:
            raise UnsupportedOperatorError(node.op.__name__, self.em.opset)
        return Val(mapping(self.em, node, args), spec.dtype, len(spec.shape))

    @staticmethod
    def foldable(node: Node, args: list) -> bool:
        # an op whose data inputs are all known arrays and whose params bind no run-time
        # value: its result is a constant (a parameter's reshape, a weight's transpose)
        if getattr(node.op, "impure", False) or node.nargs != len(node.inputs):
            return False
        vals = [a for a in args if isinstance(a, Val)]
        return bool(vals) and all(a.array is not None for a in vals)


def _as_tuple(args: Any) -> tuple:
    if isinstance(args, Value):
        return (args,)
    if isinstance(args, (tuple, list)) and all(isinstance(a, Value) for a in args):
        return tuple(args)
    raise TypeError("graphgrad.onnx.export: args must be a Tensor or a tuple of Tensors")


def export(model: Module | Callable, args: Any, f: str | os.PathLike | IO[bytes] | None = None,
           *, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None, dynamic_axes: dict | None = None,
           opset_version: int | None = None, do_constant_folding: bool = True,
           export_params: bool = True, verbose: bool = False, **kwargs: Any) -> Any:
    """Export ``model`` run on ``args`` to the ONNX file ``f`` (a path or a binary file;
    None: only return the model) and return the ``onnx.ModelProto``. PyTorch's names:
    ``input_names``/``output_names`` name the graph's inputs and outputs,
    ``dynamic_axes`` (``{"x": {0: "batch"}}`` or ``{"x": [0]}``) makes dims symbolic,
    ``opset_version`` (default 17; 17 to 21), ``do_constant_folding`` computes ops on
    parameters once, ``export_params=False`` makes parameters graph inputs. Run the file
    with onnxruntime: ``onnxruntime.InferenceSession(path).run(None, {"x": array})``."""
    onnx = onnx_package()
    if kwargs.pop("dynamo", False):
        raise ValueError("graphgrad.onnx.export: dynamo=True (torch.export) is not "
                         "supported; graphgrad exports from its jit.trace graph")
    if kwargs:  # PyTorch's other options (training=, operator_export_type=...) are not here
        raise TypeError(f"graphgrad.onnx.export() got unexpected keyword arguments "
                        f"{sorted(kwargs)}")
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    if opset not in SUPPORTED_OPSETS:
        raise ValueError(f"graphgrad.onnx.export: opset_version {opset} is not supported "
                         f"(17 to {SUPPORTED_OPSETS[-1]})")
    inputs = _as_tuple(args)
    from graphgrad.jit import trace
    with _export_mode(model):
        traced = trace(model, inputs, check_trace=False)
    try:
        graph, _ = optimize(traced.ir)
    except NotImplementedError as e:
        # the passes re-run every shape rule, and a few ops have none for unknown dims
        # (Pad after a Reshape by the batch size): then the traced graph is exported as is
        graph = traced.ir
        if verbose:
            print(f"graphgrad.onnx.export: graph passes skipped ({e})")
    n_user = len(inputs)
    placeholders = list(graph.inputs)
    captures = traced._captures
    if len(placeholders) != n_user + len(captures):
        raise OnnxExporterError("graphgrad.onnx.export: the optimized graph's inputs do not "
                                "match the traced inputs")
    in_names = list(input_names or [p.name for p in placeholders[:n_user]])
    if len(in_names) != n_user:
        raise ValueError(f"input_names has {len(in_names)} names for {n_user} inputs")
    outputs = list(graph.outputs)
    out_names = list(output_names or [f"output_{k}" if len(outputs) > 1 else "output"
                                      for k in range(len(outputs))])
    if len(out_names) != len(outputs):
        raise ValueError(f"output_names has {len(out_names)} names for {len(outputs)} outputs")
    dyn = _dynamic_axes(dynamic_axes, in_names + out_names)

    em = Emitter(opset)
    helper = onnx.helper
    builder = _Builder(em, do_constant_folding)
    graph_inputs = []
    for node, name, x in zip(placeholders[:n_user], in_names, inputs, strict=True):
        dims = [dyn.get(name, {}).get(k, n) for k, n in enumerate(x.shape)]
        builder.values[node] = Val(name, node.spec.dtype, len(x.shape))
        graph_inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(node.spec.dtype), dims))
    module = traced.module
    for node, capture in zip(placeholders[n_user:], captures, strict=True):
        value = capture.value(module)
        name = capture.path or node.name
        if export_params:
            builder.values[node] = em.known(name, value.detach()._array, node.spec.dtype,
                                            value.ndim)
        else:
            builder.values[node] = Val(name, node.spec.dtype, value.ndim)
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(node.spec.dtype), list(value.shape)))
    builder.run(graph)

    graph_outputs = []
    for k, (out, name) in enumerate(zip(outputs, out_names, strict=True)):
        v = builder.arg(out)
        if not isinstance(v, Val):
            raise OnnxExporterError(f"graphgrad.onnx.export: output {k} is not a tensor")
        em.nodes.append(helper.make_node("Identity", [em.use(v.name)], [name],
                                         name=f"output_{k}"))
        spec = out.spec
        # with dynamic axes the traced sizes need not hold: unnamed dims stay unknown
        dims = [dyn.get(name, {}).get(i, None if dyn else n)
                for i, n in enumerate(spec.shape)]
        graph_outputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(spec.dtype), dims))

    em.prune(out_names)
    numpy_helper = onnx.numpy_helper
    initializers = [numpy_helper.from_array(a, name) for name, a in em.initializers.items()]
    onnx_graph = helper.make_graph(em.nodes, traced.ir.name, graph_inputs, graph_outputs,
                                   initializer=initializers)
    proto = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="graphgrad")
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as e:
        raise OnnxExporterError(f"graphgrad.onnx.export: the exported model fails "
                                f"onnx.checker: {e}") from e
    if verbose:
        print(helper.printable_graph(proto.graph))
    if f is not None:
        onnx.save_model(proto, f if not isinstance(f, os.PathLike) else os.fspath(f))
    return proto
