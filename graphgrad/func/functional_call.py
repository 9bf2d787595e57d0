"""Layer ``func``: ``functional_call`` (a module called with other tensors in place of its
parameters and buffers) and ``stack_module_state`` (the states of several copies of a
model stacked along a new leading dim, for ``vmap`` over model ensembles).

The module is swapped in place for the call and restored afterwards, even when the call
raises, as PyTorch's ``torch.nn.utils.stateless`` does: the function is then pure in the
given tensors, so ``grad``/``vmap``/``jacrev`` of it differentiate or batch the module.
This layer sits below ``nn``: a module is only used through its public methods and its
``_parameters``/``_buffers`` tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from graphgrad.ops import stack
from graphgrad.tensor import Tensor

__all__ = ["functional_call", "stack_module_state"]

_MISSING = object()  # a name the module does not have (it is deleted again on restore)


def functional_call(module, parameter_and_buffer_dicts, args: Any = None,
                    kwargs: dict | None = None, *, tie_weights: bool = True,
                    strict: bool = False) -> Any:
    """``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts`` (a
    dict from dotted names to tensors, or a tuple of dicts with distinct keys) in place
    of the module's own. With ``tie_weights``, a value given for one of several tied
    names serves them all; with ``strict``, the keys must be exactly the module's."""
    if isinstance(parameter_and_buffer_dicts, dict):
        given = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be "
                             "dictionaries")
        counts: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of "
                             f"functional call is ambiguous")
        given = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(parameter_and_buffer_dicts)}")
    if not isinstance(args, tuple):
        args = (args,)
    with _reparametrize(module, given, tie_weights, strict):
        return module(*args, **(kwargs or {}))


def _named_tensors(module) -> dict:
    """Every parameter and buffer under every name it has (tied ones more than once)."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def _untie(module, given: dict) -> dict:
    """``given`` with a value for every name tied to a given name (PyTorch's
    ``_untie_named_tensors_map``): one tensor shared by several names gets one value."""
    names_of: dict[int, set] = {}
    for name, t in _named_tensors(module).items():
        names_of.setdefault(id(t), set()).add(name)
    tied = {name: names for names in names_of.values() if len(names) > 1 for name in names}
    given_tied = [name for name in given if name in tied]
    for name in given_tied:
        names = tied[name]
        if len(names.intersection(given_tied)) > 1 and \
                len({id(given[n]) for n in names if n in given}) != 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, "
                             f"which are tied. Consider using tie_weights=False")
    untied = dict(given)
    for name in given_tied:
        for other in tied[name]:
            untied[other] = given[name]
    return untied


def _swap(module, path: str, value):
    """Put ``value`` at the dotted ``path`` of ``module`` (``_MISSING``: remove it);
    return what was there (``_MISSING`` when nothing was)."""
    prefix, _, name = path.rpartition(".")
    owner = module.get_submodule(prefix)
    if value is not _MISSING and value is not None and not isinstance(value, Tensor):
        raise TypeError(f"{value} is not an instance of torch.Tensor")
    for table in (owner._parameters, owner._buffers):
        if name in table:
            old = table[name]
            if value is _MISSING:
                del table[name]
            else:
                table[name] = value
            return old
    old = getattr(owner, name, _MISSING)
    if old is not _MISSING and old is not None and not isinstance(old, Tensor):
        raise TypeError(f"attribute `{name}`: {old} is not an instance of torch.Tensor")
    if value is not _MISSING:
        setattr(owner, name, value)
    elif old is not _MISSING:
        delattr(owner, name)
    return old


def _swap_all(module, values: dict) -> dict:
    """Swap in every value; on a failure part-way, swap the done ones back and re-raise."""
    originals: dict = {}
    try:
        for path, value in values.items():
            originals[path] = _swap(module, path, value)
    except Exception:
        for path, old in originals.items():
            _swap(module, path, old)
        raise
    return originals


@contextlib.contextmanager
def _reparametrize(module, given: dict, tie_weights: bool, strict: bool) -> Iterator[None]:
    values = _untie(module, given) if tie_weights else given
    if strict:
        valid = set(_named_tensors(module))
        missing, unexpected = sorted(valid - set(values)), sorted(set(values) - valid)
        msgs = []
        if unexpected:
            msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if msgs:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t"
                               + "\n\t".join(msgs))
    originals: dict = {}
    try:
        originals = _swap_all(module, values)
        yield
    finally:
        now = _swap_all(module, originals)
        # as PyTorch: the caller's dict sees what the call left there (an in-place update
        # or a reassignment of a buffer)
        given.update({k: now[k] for k in given if k in now})


def stack_module_state(models) -> tuple[dict, dict]:
    """``(params, buffers)``: each name's tensors of all ``models`` stacked along a new dim
    0; stacked parameters are new leaves that require grad, as the originals do."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or not any(m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(named: list) -> dict:
        return {k: _stacked_leaf([d[k] for d in named], k) for k in named[0]}

    return (stacked([dict(m.named_parameters()) for m in models]),
            stacked([dict(m.named_buffers()) for m in models]))


def _stacked_leaf(tensors: list, name: str) -> Tensor:
    needs = [t.requires_grad for t in tensors]
    if any(needs) and not all(needs):
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    result = stack(tensors)
    return result.detach().requires_grad_() if all(needs) else result
