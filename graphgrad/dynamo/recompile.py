"""Layer ``dynamo``: what happens when a call fits no cached root entry: the reason (the
first guard that failed), and Dynamo's limits on recompiling.

As ``torch._dynamo`` 2.13: at most ``config.recompile_limit`` (8) entries per code object
(module instances of one class share entries: they are guarded by type) and
``config.accumulated_recompile_limit`` (256) recompiles in all. Past a limit a warning
names the function and the last failing guard, once, and calls that fit no entry run
eagerly; ``config.fail_on_recompile_limit_hit`` (or ``fullgraph=True``) raises
``FailOnRecompileLimitHit`` instead, and ``config.error_on_recompile`` makes every
recompile a ``RecompileError``.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import config
from .capture import eval_source
from .exc import FailOnRecompileLimitHit, RecompileError
from .stats import counters

__all__ = ["recompile_reason"]


def recompile_reason(cf: Any, failed: Any, a: tuple, k: dict) -> str | None:
    """The reason to recompile ``cf`` (a ``CompiledFunction``) for these arguments, or
    None when a limit says to run them eagerly (after warning once)."""
    limit = "recompile_limit" if len(cf.roots) >= config.recompile_limit else \
        "accumulated_recompile_limit" if counters["recompiles"] >= \
        config.accumulated_recompile_limit else None
    if limit is not None:
        _limit_hit(cf, limit, failed)
        return None
    if config.error_on_recompile:
        raise RecompileError(f"Recompiling function {_where(cf)}\n    triggered by the "
                             f"following guard failure(s):\n    - {_reason_id(cf, failed)}")
    return f"guard failed: {failed.text}{_now(failed, a, k)}" if failed is not None \
        else "guards failed"


def _where(cf: Any) -> str:
    code = cf.fn.__code__
    return f"{code.co_name} in {code.co_filename}:{code.co_firstlineno}"


def _reason_id(cf: Any, failed: Any) -> str:
    """``0/<entry>: <guard>``, as Dynamo's recompile reasons read."""
    return f"0/{len(cf.roots) - 1}: {failed.text if failed is not None else '?'}"


def _limit_hit(cf: Any, limit: str, failed: Any) -> None:
    if config.fail_on_recompile_limit_hit or cf.fullgraph:
        why = "fail_on_recompile_limit_hit" if config.fail_on_recompile_limit_hit else \
            "fullgraph=True"
        raise FailOnRecompileLimitHit(f"Hard failure due to {why}: graphgrad.compile hit "
                                      f"config.{limit} ({getattr(config, limit)}) for "
                                      f"{_where(cf)}; last reason: {_reason_id(cf, failed)}")
    if cf._limit_warned:
        return
    cf._limit_warned = True
    code = cf.fn.__code__
    warnings.warn(
        f"graphgrad.compile hit config.{limit} ({getattr(config, limit)})\n"
        f"   function: '{code.co_name}' ({code.co_filename}:{code.co_firstlineno})\n"
        f"   last reason: {_reason_id(cf, failed)}\n"
        f"Calls that fit no cached entry run eagerly from now on "
        f"(graphgrad.compiler.describe shows the cached entries).",
        RuntimeWarning, stacklevel=5)


def _now(guard: Any, a: tuple, k: dict) -> str:
    """What the guarded value is now (for the recompile message)."""
    try:
        v = eval_source(guard.source, a, k, ())
    except Exception:  # noqa: BLE001 - gone altogether: say so
        return " (now missing)"
    if hasattr(v, "_array"):
        return f" (now {type(v).__name__} shape={tuple(v._array.shape)} " \
               f"dtype={v._array.dtype} requires_grad={bool(v.requires_grad)})"
    text = repr(v)
    return f" (now {text[:60]})"
