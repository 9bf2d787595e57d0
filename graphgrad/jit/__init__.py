"""Layer ``jit``: TorchScript-style capture. ``trace`` records the ops one run on
example inputs performs (``tracing.py``); ``script`` translates the function's source
(``scripting.py``). Both emit a ``graphgrad.graph.Graph``."""

import importlib

_EXPORTS = {"trace": "tracing", "TracedFunction": "tracing", "TracerWarning": "tracing",
            "script": "scripting", "ScriptFunction": "scripting", "ScriptError": "scripting"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    # each half loads on first use, so one can be imported without the other (the files
    # are not named trace.py/script.py: importing a submodule would shadow the function)
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'graphgrad.jit' has no attribute '{name}'")
