"""Layer ``func``: the function transforms of ``torch.func``: grad, grad_and_value, vjp, jvp,
linearize, jacrev, jacfwd, hessian, hvp.

Reverse-mode transforms run the function on fresh aliases of the inputs that require
grad and call ``autograd.grad`` with ``create_graph=True``, so their results can be
differentiated again by an enclosing transform. Forward-mode transforms run it inside
a forward-AD level. Jacobians vmap a vjp over the rows of the identity (jacrev) or a
jvp over its columns (jacfwd): one batched pass, not a Python loop.
"""

from __future__ import annotations

import contextlib
import threading
import functools
import weakref

from graphgrad import ops
from graphgrad.autograd import enable_grad
from graphgrad.autograd import grad as autograd_grad
from graphgrad.tensor.toposort import toposort
from graphgrad.autograd.forward_ad import active_levels, dual_level, make_dual, unpack_dual
from graphgrad.tensor import Value, eye, zeros_like

from .pytree import tree_flatten, tree_map, tree_unflatten
from .vmap import unwrap, vmap

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "hvp"]


# ---- helpers -------------------------------------------------------------------------

def _norm_argnums(argnums, nargs: int, api: str) -> tuple[tuple, bool]:
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        single, nums = True, (argnums,)
    elif isinstance(argnums, tuple):
        if not argnums:
            raise RuntimeError("argnums must be non-empty")
        for a in argnums:
            if not isinstance(a, int):
                raise RuntimeError(f"argnum must be int, got: {type(a)}")
        single, nums = False, argnums
    else:
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise RuntimeError(f"Got argnum={a}, but only {nargs} positional inputs")
        out.append(a % nargs)
    if len(set(out)) != len(out):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return tuple(out), single


def _fresh(x):
    """An alias of ``x`` that requires grad: it keeps x's tangents (forward AD), its
    batching (vmap) and, when x already requires grad, its history."""
    if not isinstance(x, Value):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    y = x.view_as(x)
    if not y.requires_grad:
        y.requires_grad_(True)
        # the alias is a leaf of the logical graph and (inside vmap) its physical
        # tensor one of the physical graph: both are the transform's own
        for leaf in (y, *unwrap(y)[1][1:], unwrap(y)[0]):
            _FRESH[id(leaf)] = leaf
    return y


def _diff_args(args: tuple, argnums: tuple):
    """Replace the differentiated args by fresh aliases; return the new args, the flat
    list of fresh leaves and the per-argnum specs."""
    args = list(args)
    flat_all, specs = [], []
    for a in argnums:
        leaves, spec = tree_flatten(args[a])
        fresh = [_fresh(x) for x in leaves]
        args[a] = tree_unflatten(fresh, spec)
        flat_all.append(fresh)
        specs.append(spec)
    return tuple(args), flat_all, specs


# leaves the transforms made for themselves, by id (tensors compare elementwise)
_FRESH: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
class _Depth(threading.local):
    """How many transforms are running in this thread: only the outermost releases
    graphs (per thread, like the dispatch stack)."""

    def __init__(self):
        self.n = 0


_depth = _Depth()


@contextlib.contextmanager
def _transform():
    _depth.n += 1
    try:
        yield
    finally:
        _depth.n -= 1


def _private(t) -> bool:
    """True when nothing outside the transforms can differentiate ``t``: no transform
    encloses this one, no forward-AD level is active (the graph would carry tangents),
    and ``t``'s graph leads only to leaves the transforms made for themselves."""
    if not isinstance(t, Value) or not t.requires_grad or _depth.n or active_levels():
        return False
    for node in toposort([t]):
        if node.op is None and node.requires_grad and _FRESH.get(id(node)) is not node:
            return False
    return True


def _release(tree):
    """Return results without their graph where it is private (torch.func's results do
    not require grad unless something outside the transform does)."""
    return tree_map(lambda t: t.detach() if _private(t) else t, tree)


def _grads_to_structure(grads, flat_all, specs, single):
    out, i = [], 0
    for fresh, spec in zip(flat_all, specs, strict=True):
        part = []
        for x in fresh:
            g = grads[i]
            part.append(g if g is not None else zeros_like(x))
            i += 1
        out.append(tree_unflatten(part, spec))
    return out[0] if single else tuple(out)


# ---- reverse mode --------------------------------------------------------------------

def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``(grad, value)`` of a scalar-valued ``func`` w.r.t. the args in ``argnums``."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums, single = _norm_argnums(argnums, len(args), "grad")
        with enable_grad(), _transform():  # transforms ignore an enclosing no_grad
            new_args, flat_all, specs = _diff_args(args, nums)
            out = func(*new_args, **kwargs)
            aux = None
            if has_aux:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("grad_and_value(f)(*args): output of function f should be "
                                       "a tuple: (output, aux) if has_aux is True")
                out, aux = out
            if not isinstance(out, Value):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"Tensor, got {type(out)}")
            if out.dim() != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"scalar Tensor, got tensor with {out.dim()} dims. Maybe you "
                                   f"wanted to use the vjp or jacrev APIs instead?")
            leaves = [x for fresh in flat_all for x in fresh]
            if out.requires_grad:
                grads = autograd_grad(out, leaves, create_graph=True, allow_unused=True)
            else:
                grads = [None] * len(leaves)
        g = _grads_to_structure(grads, flat_all, specs, single)
        g, out = _release(g), _release(out)
        return (g, (out, _release(aux))) if has_aux else (g, out)
    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """The gradient of a scalar-valued ``func`` (``torch.func.grad``)."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


def vjp(func, *primals, has_aux: bool = False):
    """``(output, vjp_fn)``; ``vjp_fn(cotangents)`` returns one vjp per primal."""
    with enable_grad(), _transform():
        every = tuple(range(len(primals)))
        new_primals, flat_all, specs = _diff_args(primals, every)
        out = func(*new_primals)
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise RuntimeError("vjp(f, *primals): output of function f should be a tuple: "
                               "(output, aux) if has_aux is True")
        out, aux = out
    flat_out, out_spec = tree_flatten(out)
    if not flat_out:
        raise RuntimeError(f"vjp(f, *primals): Expected f to be a function that has non-empty "
                           f"output (got output = {out})")
    for o in flat_out:
        if not isinstance(o, Value):
            raise RuntimeError(f"vjp(f, *primals): expected f(*primals) to return only "
                               f"tensors, got unsupported type {type(o)}")
        if o._array.dtype.kind not in "fc":
            raise RuntimeError(f"vjp(f, ...): All outputs of f must be floating-point or "
                               f"complex Tensors, got Tensor with dtype {o.dtype}")
    leaves = [x for fresh in flat_all for x in fresh]

    def vjp_fn(cotangents, retain_graph: bool = True, create_graph: bool | None = None):
        flat_ct, ct_spec = tree_flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as "
                               f"pytree structure of outputs to the function. cotangents: "
                               f"{ct_spec}, primal output: {out_spec}")
        used = [(o, c) for o, c in zip(flat_out, flat_ct, strict=True) if o.requires_grad]
        with enable_grad(), _transform():
            if used:
                grads = autograd_grad([o for o, _ in used], leaves,
                                      grad_outputs=[c for _, c in used], retain_graph=True,
                                      create_graph=True, allow_unused=True)
            else:
                grads = [None] * len(leaves)
        return _release(_grads_to_structure(grads, flat_all, specs, False))

    shown = _release(out)
    return (shown, vjp_fn, _release(aux)) if has_aux else (shown, vjp_fn)


# ---- forward mode --------------------------------------------------------------------

def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """``(func(*primals), J @ tangents)`` by forward-mode AD."""
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple. E.g. it "
                           "should be valid to call f(*primals).")
    flat_p, p_spec = tree_flatten(primals)
    flat_t, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(f"jvp(f, primals, tangents): Expected primals and tangents to have "
                           f"the same python structure. For example, if primals is a tuple of "
                           f"3 tensors, tangents also must be. Got primals with structure "
                           f"{p_spec} and tangents with structure {t_spec}")
    if not flat_p:
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to contain at least one "
                           "Tensor.")
    for t in flat_t:
        if not isinstance(t, Value):
            raise RuntimeError(f"jvp(f, primals, tangents): Expected tangents to only contain "
                               f"Tensors, got {type(t)}")
    with _transform(), dual_level() as level:
        duals = [make_dual(p, t, level=level) for p, t in zip(flat_p, flat_t, strict=True)]
        out = func(*tree_unflatten(duals, p_spec))
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError("jvp(f, primals, tangents): output of function f should be a "
                                   "tuple: (output, aux) if has_aux is True")
            out, aux = out
        flat_out, out_spec = tree_flatten(out)
        primals_out, tangents_out = [], []
        for o in flat_out:
            if not isinstance(o, Value):
                raise RuntimeError(f"jvp(f, primals, tangents): expected f(*args) to return "
                                   f"only tensors, got unsupported type {type(o)}")
            p, t = unpack_dual(o, level=level)
            if t is None:
                if strict:
                    raise RuntimeError("jvp(f, primals, tangents, strict=True): The output of f "
                                       "is independent of the inputs. This is not allowed with "
                                       "strict=True.")
                t = zeros_like(o)
            primals_out.append(p)
            tangents_out.append(t)
    result = (_release(tree_unflatten(primals_out, out_spec)),
              _release(tree_unflatten(tangents_out, out_spec)))
    return (*result, aux) if has_aux else result


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)`` where ``jvp_fn(*tangents)`` is the linear map at primals."""
    out = func(*primals)

    def jvp_fn(*tangents):
        return jvp(func, primals, tangents)[1]
    return out, jvp_fn


# ---- Jacobians and Hessians ----------------------------------------------------------

def _basis(flat_outs, chunk=None):
    """Rows of the identity for the flattened outputs, one block per output."""
    sizes = [o.numel() for o in flat_outs]
    total = sum(sizes)
    ref = flat_outs[0]
    identity = eye(total, dtype=ref.dtype)
    blocks, start = [], 0
    for o, n in zip(flat_outs, sizes, strict=True):
        blocks.append(identity[:, start:start + n].reshape(total, *o.shape))
        start += n
    return blocks, sizes


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """The Jacobian by reverse mode: a vmap of the vjp over the rows of the identity.
    Layout: ``output.shape + input.shape``."""
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args):
        with _transform():
            result = _jacrev_body(func, argnums, has_aux, args, chunk_size)
        return _release(result)
    return wrapper


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """The Jacobian by forward mode: a vmap of the jvp over the columns of the identity."""
    @functools.wraps(func)
    def wrapper(*args):
        with _transform():
            result = _jacfwd_body(func, argnums, has_aux, args, randomness)
        return _release(result)
    return wrapper


def hessian(func, argnums=0):
    """``jacfwd(jacrev(func))``: forward-over-reverse."""
    return jacfwd(jacrev(func, argnums), argnums)


def hvp(func, primals, tangents):
    """Hessian-vector product ``H(primals) @ tangents`` (forward-over-reverse)."""
    return jvp(grad(func, argnums=tuple(range(len(primals)))), primals, tangents)[1]

def _jacrev_body(func, argnums, has_aux, args, chunk_size):
    nums, single = _norm_argnums(argnums, len(args), "jacrev")

    def partial(*diff):
        full = list(args)
        for a, d in zip(nums, diff, strict=True):
            full[a] = d
        return func(*full)
    diff_args = tuple(args[a] for a in nums)
    res = vjp(partial, *diff_args, has_aux=has_aux)
    out, vjp_fn = res[0], res[1]
    flat_out, out_spec = tree_flatten(out)
    for o in flat_out:
        if o.is_complex():
            raise RuntimeError("jacrev: Expected all outputs to be real but received complex "
                               "tensor")
    blocks, sizes = _basis(flat_out)
    rows = vmap(lambda *cts: vjp_fn(tree_unflatten(list(cts), out_spec)),
                chunk_size=chunk_size)(*blocks)
    # rows: per argnum a pytree of (total, *in.shape); split by output
    per_out = [[] for _ in flat_out]
    for arg_rows in rows:
        leaves, in_spec = tree_flatten(arg_rows)
        split = [ops.split(r, sizes, dim=0) for r in leaves]
        for k, o in enumerate(flat_out):
            pieces = [s[k].reshape(*o.shape, *s[k].shape[1:]) for s in split]
            per_out[k].append(tree_unflatten(pieces, in_spec))
    jac = [p[0] if single else tuple(p) for p in per_out]
    jac = tree_unflatten(jac, out_spec)
    return (jac, res[2]) if has_aux else jac


def _jacfwd_body(func, argnums, has_aux, args, randomness):
    nums, single = _norm_argnums(argnums, len(args), "jacfwd")
    diff = [args[a] for a in nums]
    flat_in, in_spec = tree_flatten(tuple(diff))
    for x in flat_in:
        if isinstance(x, Value) and x.is_complex():
            raise RuntimeError("jacfwd: Expected all inputs to be real but received complex "
                               "tensor")
    blocks, sizes = _basis(flat_in)

    def push(*tangent_leaves):
        def partial(*d):
            full = list(args)
            for a, v in zip(nums, d, strict=True):
                full[a] = v
            return func(*full)
        tangents = tree_unflatten(list(tangent_leaves), in_spec)
        res = jvp(partial, tuple(diff), tangents, has_aux=has_aux)
        return (res[1], res[2]) if has_aux else res[1]

    # aux does not depend on the tangent: out_dims None returns it unbatched
    cols = vmap(push, out_dims=(0, None) if has_aux else 0, randomness=randomness)(*blocks)
    aux = None
    if has_aux:
        cols, aux = cols
    flat_cols, out_spec = tree_flatten(cols)
    jac_leaves = []
    for c in flat_cols:  # c: (total_in, *out.shape)
        pieces = ops.split(c, sizes, dim=0)
        per_in = []
        for p, x in zip(pieces, flat_in, strict=True):
            out_nd = c.ndim - 1
            moved = p.movedim(0, -1) if out_nd else p.reshape(-1)
            per_in.append(moved.reshape(*c.shape[1:], *x.shape))
        structured = tree_unflatten(per_in, in_spec)
        jac_leaves.append(structured[0] if single else structured)
    jac = tree_unflatten(jac_leaves, out_spec)
    return (jac, aux) if has_aux else jac
