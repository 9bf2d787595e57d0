"""Layer ``autograd``: the reverse-mode engine.

Backward walks the graph from the outputs in reverse topological order and calls
each op's vjp rule. The rules are graphgrad ops, so the walk *extends* the graph: with
``create_graph=True`` the gradients are recorded like any other computation and can
be differentiated again, to any order. Every walk is iterative (no recursion limit).

After a pass without ``retain_graph`` the saved values are released: each node's
inputs are replaced by stand-ins that keep only shape, dtype and structure, so the
arrays are freed as soon as the user drops them, and a second pass through a node
whose rule needs saved values raises PyTorch's "backward through the graph a second
time" error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from graphgrad.backend import stand_in, xp
from graphgrad.ops.base import tensor_type_name
from graphgrad.ops.unbroadcast import unbroadcast
from graphgrad.tensor import Tensor, Value, active_modes, set_grad_mode
from graphgrad.tensor.grad_fn import op_backward_name
from graphgrad.tensor.sparse_tensor import leaf_of
from graphgrad.tensor.toposort import toposort
from graphgrad.tensor.views import identity_at, refresh_if_stale

from .sharing import sharing

__all__ = ["backward", "grad"]

_TWICE = ("Trying to backward through the graph a second time (or directly access saved "
          "tensors after they have already been freed). Saved intermediate values of the graph "
          "are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if "
          "you need to backward through the graph a second time or if you need to access saved "
          "tensors after calling backward.")
_HINT = (" Hint: enable anomaly detection to find the operation that failed to compute its "
         "gradient, with torch.autograd.set_detect_anomaly(True).")


# ---- the graph walk ------------------------------------------------------------------

def _edges(node: Value):
    """(input position, parent node) for each input that requires grad."""
    sv = node._saved_versions
    for i, p in enumerate(node.inputs):
        if isinstance(p, Value) and p._requires_grad:
            yield i, (identity_at(p, sv[i] if sv is not None else 0) if p._extras is not None
                      else p)


class Freed(tuple):
    """The saved input versions of a node whose saved values a backward pass released;
    its type marks the node as freed."""

    __slots__ = ()


# ---- checks --------------------------------------------------------------------------

def _type_str(t: Value) -> str:
    return tensor_type_name(t._array.dtype)


def modified_error(t: Value, current: int, expected: int) -> RuntimeError:
    which = f", which is output 0 of {op_backward_name(t.op)}," if t.op is not None else ""
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{_type_str(t)} {list(t._array.shape)}]{which} is at version {current}; "
        f"expected version {expected} instead." + _HINT)


def _check_saved(node: Value) -> None:
    """Raise PyTorch's errors if ``node``'s saved values were freed by an earlier pass or
    changed in place since the node was made. Runs for every node of every pass, so
    the common case (no input changed since) costs one loop comparing versions; only
    a version that moved makes it ask the op which inputs it saved (for some ops, a
    function of the inputs)."""
    sv = node._saved_versions
    if sv is not None and type(sv) is Freed:
        raise RuntimeError(_TWICE)
    op = node.op
    if op.saves_inputs:
        for i, p in enumerate(node.inputs):
            if isinstance(p, Value):
                vc = p._version_counter
                if (vc[0] if vc is not None else 0) != (sv[i] if sv is not None else 0):
                    _check_saved_inputs(node, sv)
                    break
    if op.saves_output:
        vc = node._version_counter
        ext = node._extras
        if vc is not None or ext is not None:
            current = vc[0] if vc is not None else 0
            expected = ext.rebased_at if ext is not None else 0
            if current != expected:
                raise modified_error(node, current, expected)


def _check_saved_inputs(node: Value, sv: tuple | None) -> None:
    """The inputs the op saved (``saves_inputs``) must be at the versions in ``sv``."""
    saves = node.op.saves_inputs
    if callable(saves):
        saves = saves(*node.inputs, **node.params)
    if not saves:
        return
    for i, p in enumerate(node.inputs):
        if isinstance(p, Value) and (saves is True or i in saves):
            current = p._version_counter[0] if p._version_counter is not None else 0
            expected = sv[i] if sv is not None else 0
            if current != expected:
                raise modified_error(p, current, expected)


def _checked_hook_result(hook, g: Tensor, new) -> Tensor:
    """A tensor hook may replace the gradient only by one of the same size and type
    (PyTorch's checks and wording)."""
    if not isinstance(new, Value):
        raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
    name = getattr(hook, "__name__", type(hook).__name__)
    if new._array.dtype != g._array.dtype:
        raise RuntimeError(f"hook '{name}' has changed the type of value (was {_type_str(g)} "
                           f"got {_type_str(new)})")
    if new._array.shape != g._array.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value")
    return new


# ---- the pass ------------------------------------------------------------------------

def run_backward(roots: Sequence[Value], seeds: Sequence[Tensor], *, retain_graph: bool,
                 create_graph: bool, targets: Sequence[Value] | None) -> dict[int, tuple]:
    """Propagate ``seeds`` from ``roots``. Returns ``{id(node): (node, grad)}`` for the
    ``targets`` reached, or (no targets) for the leaves and ``retain_grad`` tensors."""
    order = toposort(roots)
    wanted = target_ids = None
    if targets is not None:  # prune to the nodes from which a target can be reached
        target_ids = {id(t) for t in targets}
        wanted = set()
        for node in order:  # inputs come first
            if id(node) in target_ids or (node.op is not None and any(
                    id(p) in wanted for _, p in _edges(node))):
                wanted.add(id(node))
    grads: dict[int, Tensor] = {}
    for r, s in zip(roots, seeds, strict=True):
        grads[id(r)] = grads[id(r)] + s if id(r) in grads else s
    results: dict[int, tuple] = {}
    # gradient buffers this pass allocated itself (nobody else holds them), into which
    # slices' cotangents are added in place: plain eager backward only, where nothing
    # is recorded and no transform level wraps the gradients
    owned: dict[int, xp.ndarray] | None = (
        {} if not create_graph and not active_modes() else None)
    prev_mode = set_grad_mode(create_graph)
    shared = sharing() if create_graph else None  # a recorded pass shares (sharing.py)
    if shared is not None:
        shared.__enter__()
    # without retain_graph, in a graph of large values each node is released as the
    # pass leaves it, as PyTorch frees a node's saved tensors once its backward has run:
    # the forward's values go while the backward's gradients arrive, and the peak is not
    # the sum of the two. A graph of small values (all overhead) is released in one
    # sweep after the pass, which costs less per node. The values that count are the
    # ops' results: a leaf that requires grad (a parameter) is never released, so a
    # large weight under small activations (a compiled model: one node) is no reason.
    incremental = False
    if not retain_graph:
        for n in order:  # (a loop: a generator costs a microsecond a pass)
            if n.op is not None and n._array.nbytes >= _RELEASE_BYTES:
                incremental = True
                break
        n = None   # (a name left on a node would hold its value through the pass)
    nodes = _popped(order) if incremental else reversed(order)
    stand_ins: dict[int, Tensor] = {}
    last = None  # incremental: the node visited last, released before the next one's rule
    try:
        for node in nodes:
            # the previous rule's values: gone before this node's rule runs (and before
            # the release below counts who holds the previous node's inputs)
            cts = ct = p = a = c = g = inputs = None
            if last is not None:
                _release(last, stand_ins, drop_outputs=owned is not None)
                last = None
            if incremental and node.op is not None:   # (a leaf releases nothing)
                last = node
            nid = id(node)   # (read once: a call per use adds up over a pass)
            g = grads.pop(nid, None)
            if g is None or (wanted is not None and nid not in wanted):
                continue
            ext = node._extras
            if ext is not None and ext.hooks:
                for hook in list(ext.hooks):
                    replaced = hook(g)
                    if replaced is not None:
                        g = _checked_hook_result(hook, g, replaced)
            op = node.op
            if target_ids is not None:
                if nid in target_ids:
                    results[nid] = (node, g)
            elif op is None or (ext is not None and ext.retains_grad):
                results[nid] = (node, g)
            if op is None:
                continue
            if op.saves_inputs or op.saves_output:  # an op that saves nothing frees nothing
                _check_saved(node)
            inputs = node.inputs
            sv = node._saved_versions
            if owned is not None and op.cotangent_window is not None and _add_into_window(
                    node, g, grads, owned, sv):
                continue
            if op.boxed_grad:   # (the rule empties the box: ``g`` can go inside it)
                box = [g]
                del g
                cts = op.vjp(box, node, *inputs, **node.params)
                del box
            else:
                cts = op.vjp(g, node, *inputs, **node.params)
                del g
            several = len(cts) > 1
            if several:  # a list, emptied as it goes: a cotangent held nowhere but in ``grads``
                cts = list(cts)  # can take the next one in place (mul's two of x * x)
            for i, ct in enumerate(cts):
                if several:
                    cts[i] = None
                if ct is None:
                    continue
                p = inputs[i]
                if not (isinstance(p, Value) and p._requires_grad):
                    continue
                a, c = p._array, ct._array
                if a.shape != c.shape or (a.dtype is not c.dtype and a.dtype != c.dtype):
                    ct = unbroadcast(ct, a.shape, a.dtype, op.__name__)
                if p._extras is not None:
                    p = identity_at(p, sv[i] if sv is not None else 0)
                pid = id(p)
                if pid in grads:
                    buf = owned.get(pid) if owned is not None else None
                    if buf is None and owned is not None and _sole_in(grads, pid):
                        buf = owned[pid] = grads[pid]._array  # ours alone: add into it from now on
                    if buf is not None and type(ct._array) is xp.ndarray:
                        buf += ct._array
                    else:   # (a sparse cotangent adds as the layouts say)
                        if buf is not None:
                            del owned[pid]   # the sum is a new array
                        grads[pid] = grads[pid] + ct
                else:
                    grads[pid] = ct
        if last is not None:
            _release(last, stand_ins, drop_outputs=owned is not None)
            last = None
    except BaseException:
        if not retain_graph and not incremental:  # the nodes visited go, as above
            i = len(order) - 1
            while order[i] is not node:
                i -= 1
            free_graph(order[i + 1:])
        raise
    finally:
        if shared is not None:
            shared.__exit__()
        set_grad_mode(prev_mode)
    if not retain_graph and not incremental:
        free_graph(order)
    return results


def _popped(order: list):
    """The nodes of ``order`` last first, each taken off the list as it is handed out
    (the list no longer holds it: released, it can go)."""
    while order:
        yield order.pop()


def _sole_in(grads: dict, pid: int) -> bool:
    """Whether ``grads[pid]`` is the engine's alone, so that adding into it in place is
    safe, as PyTorch's input buffers accumulate: the dict holds the only reference to the
    tensor, the tensor the only one to its array, which owns writeable C-contiguous
    memory (a rule's ``g`` passed through, the one cotangent ``a + b`` gives both
    inputs, a user's seed are all held elsewhere)."""
    if sys.getrefcount(grads[pid]) > _SOLE_IN_DICT[0] or \
            sys.getrefcount(grads[pid]._array) > _SOLE_IN_DICT[1]:
        return False
    a = grads[pid]._array
    return type(a) is xp.ndarray and a.base is None and a.flags.c_contiguous and \
        a.flags.writeable   # (not a sparse array)


def _add_into_window(node: Value, g: Tensor, grads: dict, owned: dict, sv) -> bool:
    """The cotangent of a slice (``op.cotangent_window``) added in place into its
    input's gradient buffer, which this pass allocates on the first slice (a copy of
    any gradient already there): chunk's pieces then fill one buffer where each vjp
    would build a zero array and the pieces would be summed. False: not a window."""
    p = node.inputs[0]
    window = node.op.cotangent_window(*node.inputs, **node.params)
    if window is None:
        return False
    if not (isinstance(p, Value) and p._requires_grad):
        return True  # a slice of something that wants no gradient: nothing to add
    if g._array.dtype != p._array.dtype:
        return False
    if p._extras is not None:
        p = identity_at(p, sv[0] if sv is not None else 0)
    pid = id(p)
    buf = owned.get(pid)
    if buf is None:
        prev = grads.get(pid)
        a = p._array
        buf = xp.zeros(a.shape, a.dtype) if prev is None else prev._array.astype(a.dtype)
        owned[pid] = buf
        grads[pid] = Tensor._make(buf)
    buf[window] += g._array
    return True


def _stub(p: Value, inputs: tuple) -> Tensor:
    """A stand-in for ``p`` holding no data: a zero-stride array of its shape and dtype."""
    a = p._array
    if not p._requires_grad:
        return Tensor._make(stand_in(a.shape, a.dtype))
    s = Tensor._make(stand_in(a.shape, a.dtype), p.op, inputs, p.params, True)
    if s.op is not None:
        s._saved_versions = _freed_versions(p)
        if p._extras is not None:
            e = s._ensure_extras()
            e.previous, e.rebased_at = p._extras.previous, p._extras.rebased_at
    return s


_ALL_ZERO: dict[int, Freed] = {}


def _freed_versions(node: Value) -> Freed:
    sv = node._saved_versions
    if sv is None:  # every input at version 0: one shared (immutable) marker per arity
        n = len(node.inputs)
        sv = _ALL_ZERO.get(n)
        if sv is None:
            sv = _ALL_ZERO[n] = Freed((0,) * n)
        return sv
    return sv if type(sv) is Freed else Freed(sv)


def free_graph(order: list[Value]) -> None:
    """Release what the nodes in ``order`` (inputs first) saved for backward: each
    node's inputs become stand-ins (``_stub``), made after their own nodes' release, so
    ``_release``'s fix-up never applies here (kept inline: the sweep ends every pass)."""
    stubs: dict[int, Tensor] = {}
    for node in order:
        if node.op is None:
            continue
        new_inputs = []
        for p in node.inputs:
            # every input but a leaf that requires grad (a parameter) is released
            if isinstance(p, Value) and (p.op is not None or not p._requires_grad):
                s = stubs.get(id(p))
                if s is None:
                    s = stubs[id(p)] = _stub(p, p.inputs)
                p = s
            new_inputs.append(p)
        node.inputs = tuple(new_inputs)
        node._saved_versions = _freed_versions(node)


def _release(node: Value, stand_ins: dict, drop_outputs: bool = False) -> None:
    """Replace ``node``'s inputs by stand-ins holding no data (``_stub``; one per input,
    shared through ``stand_ins``). The pass releases nodes consumers first, so a
    stand-in made while its own node still held its inputs gets the released ones when
    that node goes. With ``drop_outputs`` (a plain eager pass), an input now held only
    by the pass's list of nodes still to visit, whose rule does not read its output,
    lets its value go too: PyTorch never kept such a value (conv's output under a ReLU)."""
    if node.op is None:
        return
    old = node.inputs
    new_inputs = []
    for p in old:
        # every input but a leaf that requires grad (a parameter) is released
        if isinstance(p, Value) and (p.op is not None or not p._requires_grad):
            s = stand_ins.get(id(p))
            if s is None:
                s = stand_ins[id(p)] = _stub(p, p.inputs)
            p = s
        new_inputs.append(p)
    node.inputs = tuple(new_inputs)
    node._saved_versions = _freed_versions(node)
    s = stand_ins.get(id(node))
    if s is not None and s.op is not None:
        s.inputs = node.inputs
    if drop_outputs:
        for p in old:
            if isinstance(p, Value) and p.op is not None and not p.op.saves_output and \
                    p._extras is None and sys.getrefcount(p) <= _WAITING:
                p._array = stand_in(p._array.shape, p._array.dtype)


_RELEASE_BYTES = 1 << 16  # a value this large in the graph: release as the pass goes


def _waiting_refs() -> int:
    """References to a node that only the list of nodes to visit holds, counted as
    ``_release`` counts them (the list, the old inputs tuple, the loop, the call)."""
    order = [Tensor._make(xp.zeros(1))]
    for p in (order[0],):
        return sys.getrefcount(p)
    raise AssertionError


_WAITING = _waiting_refs()


# ---- the public entry points ---------------------------------------------------------

def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, Value):
        return (x,)
    return tuple(x)


def _fresh(tensors: tuple) -> tuple:
    """The tensors, each view among them rebased on its base first if the base changed
    in place since the view's history was made (PyTorch regenerates a view's grad_fn
    when it is read): its gradient then goes through that change."""
    for t in tensors:
        if isinstance(t, Value) and t._extras is not None:
            refresh_if_stale(t)
    return tensors


def _make_seeds(outputs: tuple, grad_outputs: tuple) -> list:
    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs, strict=True)):
        if isinstance(g, Value):
            if g.shape != out.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                                   f"{g.shape!r} and output[{i}] has a shape of {out.shape!r}.")
            if g._array.dtype.kind == "c" and g._array.dtype != out._array.dtype:
                raise RuntimeError(
                    "For complex Tensors, both grad_output and output are required to have the "
                    f"same dtype. Mismatch in dtype: grad_output[{i}] has a dtype of {g.dtype} "
                    f"and output[{i}] has a dtype of {out.dtype}.")
            seeds.append(g)
        elif g is None:
            if not out._requires_grad:
                raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                                   "have a grad_fn")
            if out._array.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if out._array.dtype.kind != "f":
                raise RuntimeError(f"grad can be implicitly created only for real scalar outputs "
                                   f"but got {out.dtype}")
            one = xp.empty(out._array.shape, out._array.dtype)
            one.fill(1)   # (NumPy's ones() is Python around these two calls)
            seeds.append(Tensor._make(one))
        else:
            raise TypeError(f"gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
    for i, out in enumerate(outputs):
        if not out._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               "a grad_fn")
    return seeds


def _normalize_grads(outputs: tuple, grad_outputs) -> tuple:
    grads = _as_tuple(grad_outputs) if grad_outputs is not None else (None,) * len(outputs)
    if len(grads) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(grads)} "
                           f"grad_outputs for {len(outputs)} outputs")
    return grads


def backward(tensors, grad_tensors=None, retain_graph: bool | None = None,
             create_graph: bool = False, grad_variables=None, inputs=None) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the graph's leaves
    (or only of ``inputs``). Nothing is written unless the whole pass succeeds."""
    if grad_variables is not None:
        import warnings
        warnings.warn("`grad_variables` is deprecated. Use `grad_tensors` instead.",
                      FutureWarning, stacklevel=2)
        grad_tensors = grad_variables
    outputs = _fresh(_as_tuple(tensors))
    if create_graph:
        import warnings
        warnings.warn("Using backward() with create_graph=True will create a reference cycle "
                      "between the parameter and its gradient which can cause a memory leak. We "
                      "recommend using autograd.grad when creating the graph to avoid this. If "
                      "you have to use this function, make sure to reset the .grad fields of "
                      "your parameters to None after use to break the cycle and avoid the leak.",
                      UserWarning, stacklevel=3)
    if inputs is not None:
        inputs = _fresh(_as_tuple(inputs))
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if retain_graph is None:
        retain_graph = create_graph
    modes = active_modes()
    if modes and any(m.batches(o) for m in modes for o in outputs):
        raise RuntimeError("backward() called inside a functorch transform. This is not "
                           "supported, please use functorch.grad or functorch.vjp instead or "
                           "call backward() outside of functorch transforms.")
    seeds = _make_seeds(outputs, _normalize_grads(outputs, grad_tensors))
    results = run_backward(outputs, seeds, retain_graph=retain_graph,
                           create_graph=create_graph, targets=inputs)
    for pair in results.values():
        t = pair[0]
        if inputs is None and t.op is not None and not t.retains_grad:
            continue
        # decided before the gradient is bound to a name: that would count as a holder
        steal = not create_graph and t._grad is None and _stealable(pair)
        _accumulate(t, pair[1], create_graph, steal)


def _holders(pair: tuple) -> tuple[int, int]:
    """References to the gradient ``pair[1]`` and to its array. Both are read through a
    container (an item, an attribute), which makes exactly one new reference on every
    Python version, so the counts compare with ``_SOLE``, measured the same way
    (``_stealable`` reads them as this does, inline)."""
    return sys.getrefcount(pair[1]), sys.getrefcount(pair[1]._array)


_SOLE = _holders((None, Tensor._make(xp.zeros(1))))  # a gradient that nothing else holds
_SOLE_IN_DICT = (lambda d: (sys.getrefcount(d[0]), sys.getrefcount(d[0]._array)))(
    {0: Tensor._make(xp.zeros(1))})  # the same, for a gradient in the engine's dict


def _stealable(pair: tuple) -> bool:
    """Whether the gradient ``pair[1]`` (a ``(leaf, grad)`` item of the engine's results)
    may become ``.grad`` without a copy, as PyTorch's AccumulateGrad steals its incoming
    gradient: the results hold the only reference to the tensor, the tensor the only one
    to its array (no view of it, no other tensor on it: a user's ``grad_tensors``, a
    tensor a hook kept or returned, the one cotangent ``a + b`` gives both inputs are all
    held elsewhere), and the array owns writeable C-contiguous memory, as a copy would."""
    if sys.getrefcount(pair[1]) > _SOLE[0] or sys.getrefcount(pair[1]._array) > _SOLE[1]:
        return False
    a = pair[1]._array
    return a.base is None and a.flags.c_contiguous and a.flags.writeable


def _accumulate(t: Value, g: Tensor, create_graph: bool, steal: bool = False) -> None:
    """``t.grad += g``: in place when no graph is being built, as PyTorch does. With
    ``steal`` (see ``_stealable``) a first gradient's array becomes ``.grad`` uncopied."""
    old = t._grad
    if old is None:
        if steal and type(g) is Tensor and g.op is None and g._extras is None and \
                g._version_counter is None and not g._requires_grad:
            t._grad = g   # a plain leaf that nothing else holds: itself, as leaf_of would make
        else:
            t._grad = g if create_graph else leaf_of(g._array if steal else g._array.copy())
    elif create_graph or old._requires_grad:
        t._grad = old + g
    elif old._array.flags.writeable and old._array.dtype == g._array.dtype:
        old._array += g._array
        if old._version_counter is not None:
            old._version_counter[0] += 1
    else:
        t._grad = leaf_of(old._array + g._array)  # sparse + sparse stays sparse
    ext = t._extras
    if ext is not None and ext.post_hooks and t.op is None:
        for hook in list(ext.post_hooks):
            hook(t)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:
    """The gradients of ``outputs`` w.r.t. ``inputs`` (a tuple); ``.grad`` is not touched."""
    if not only_inputs:
        import warnings
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                      "True). To accumulate gradient for other parts of the graph, please use "
                      "torch.autograd.backward.", FutureWarning, stacklevel=2)
    if allow_unused is None:
        allow_unused = materialize_grads
    elif materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    outs = _fresh(_as_tuple(outputs))
    ins = _fresh(_as_tuple(inputs))
    for t in ins:
        if not isinstance(t, Value):
            raise TypeError(f"grad(): inputs must be Tensors, got {type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        from .functional import batched_grad  # vmap's bridge, in the same layer
        return batched_grad(outs, ins, _normalize_grads(outs, grad_outputs),
                            retain_graph=retain_graph, create_graph=create_graph,
                            allow_unused=allow_unused, materialize_grads=materialize_grads)
    seeds = _make_seeds(outs, _normalize_grads(outs, grad_outputs))
    results = run_backward(outs, seeds, retain_graph=retain_graph, create_graph=create_graph,
                           targets=ins)
    grads = []
    for t in ins:
        g = results[id(t)][1] if id(t) in results else None
        if g is None:
            if not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have been "
                                   "used in the graph. Set allow_unused=True if this is the "
                                   "desired behavior.")
            if materialize_grads:
                g = Tensor._make(xp.zeros(t._array.shape, t._array.dtype))
        elif not create_graph and g._requires_grad:
            g = g.detach()
        grads.append(g)
    return tuple(grads)
