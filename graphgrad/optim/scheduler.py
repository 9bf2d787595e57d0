"""Layer ``optim``: ``LRScheduler``, the base of the learning-rate schedulers, as
PyTorch's (2.x): a scheduler rewrites each parameter group's ``lr`` when its ``step()``
is called, once per epoch (or batch) *after* ``optimizer.step()``.

Construction takes the initial step: ``initial_lr`` is stored in each group (a fresh
run, ``last_epoch=-1``) or required there (a resumed one), and ``get_lr`` runs once
with ``_is_initial`` set, which leaves the current rate in place for the recursive
("chainable") schedules. ``step(epoch)`` (deprecated) uses the closed form where a
schedule has one. ``state_dict`` is the instance ``__dict__`` without the optimizer,
so its keys are PyTorch's; member schedulers and user callables are saved as PyTorch
saves them.
"""

from __future__ import annotations

import types
import warnings
import weakref
from contextlib import contextmanager
from functools import wraps
from typing import Any

from .optimizer import Optimizer

__all__ = ["LRScheduler", "_LRScheduler", "format_param", "group_values", "check_optimizer",
           "EPOCH_DEPRECATION_WARNING"]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being "
    "deprecated where possible. Please use `scheduler.step()` to step the "
    "scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available. "
    "Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose."
)


def format_param(name: str, optimizer: Optimizer, param) -> list:
    """One value per parameter group: a list of them as given (checked for length),
    or a single value repeated."""
    n = len(optimizer.param_groups)
    if isinstance(param, (list, tuple)):
        if len(param) != n:
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(param)} values, param_groups has {n}.")
        return list(param)
    return [param] * n


def group_values(optimizer: Optimizer, key: str) -> list:
    """``group[key]`` of every parameter group, in order."""
    return [g[key] for g in optimizer.param_groups]


def check_optimizer(optimizer) -> Optimizer:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
    return optimizer


class LRScheduler:
    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = check_optimizer(optimizer)
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming scheduler with last_epoch >= 0.\nThis typically happens "
                        "when:\n1. You're trying to resume training from a checkpoint but "
                        "haven't properly loaded the optimizer state\n2. You're using "
                        "last_epoch >= 0 for a fresh training run (not recommended)")
        self.base_lrs = group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _track_optimizer_steps(optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        with self._mode("_is_initial"):
            self.step()

    @contextmanager
    def _mode(self, flag: str):
        """Set the instance flag ``flag`` (``_is_initial``, ``_get_lr_called_within_step``)
        for the duration, as PyTorch's context managers do."""
        setattr(self, flag, True)
        try:
            yield
        finally:
            setattr(self, flag, False)

    def get_lr(self) -> list[float]:
        """The rates for ``self.last_epoch`` (the recursive form, from the groups' current
        ``lr``). Called by ``step``; to read the rates, use ``get_last_lr()``."""
        raise NotImplementedError

    def _warn_if_called_directly(self) -> None:
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=3)

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step`` set, one per parameter group."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        if self._step_count == 1:
            if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
                warnings.warn(
                    "Seems like `optimizer.step()` has been overridden after learning rate "
                    "scheduler initialization. Please, make sure to call `optimizer.step()` "
                    "before `lr_scheduler.step()`. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning, stacklevel=2)
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn(
                    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In "
                    "PyTorch 1.1.0 and later, you should call them in the opposite order: "
                    "`optimizer.step()` before `lr_scheduler.step()`.  Failure to do this "
                    "will result in PyTorch skipping the first value of the learning rate "
                    "schedule. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Advance to the next epoch (or jump to ``epoch``, by the closed form where the
        schedule has one) and write the rates into the groups."""
        with self._mode("_get_lr_called_within_step"):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = group_values(self.optimizer, "lr")

    # attributes saved by their own state: member schedulers (their state_dict), user
    # callables (a callable object's __dict__; None for functions and lambdas)
    _nested: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer: PyTorch's layout."""
        state = {k: v for k, v in self.__dict__.items() if k != "optimizer"}
        for name in self._nested:
            state[name] = _pack(state.pop(name))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)  # the caller's dict is left as it was
        nested = {name: state.pop(name) for name in self._nested}
        self.__dict__.update(state)
        for name, saved in nested.items():
            _unpack(getattr(self, name), saved)


def _pack(value):
    if isinstance(value, (list, tuple)):
        return [_pack(v) for v in value]
    if isinstance(value, LRScheduler):
        return value.state_dict()
    if value is None or isinstance(value, types.FunctionType):
        return None
    return value.__dict__.copy()


def _unpack(target, saved) -> None:
    if isinstance(target, (list, tuple)):
        for t, s in zip(target, saved, strict=True):
            _unpack(t, s)
    elif isinstance(target, LRScheduler):
        target.load_state_dict(saved)
    elif saved is not None:
        target.__dict__.update(saved)


class _LRScheduler(LRScheduler):
    """The base's old name, kept (as in PyTorch) for code that subclasses it."""


def _track_optimizer_steps(optimizer: Optimizer) -> None:
    """Wrap ``optimizer.step`` (once) so that it records ``_opt_called``: ``step`` of a
    scheduler can then warn, as PyTorch does, when it runs before the optimizer's."""
    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = weakref.ref(optimizer)
    func = optimizer.step.__func__

    @wraps(func)
    def wrapper(*args, **kwargs):
        opt = opt_ref()
        opt._opt_called = True
        return func.__get__(opt, opt.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    optimizer.step = wrapper
