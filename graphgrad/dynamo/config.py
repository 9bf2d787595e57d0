"""Layer ``dynamo``: the knobs of ``graphgrad.compile`` (as ``torch._dynamo.config``).

Change them at run time: ``graphgrad.dynamo.config.recompile_limit = 4``.
"""

import sys
import types

# cached root entries per code object before new guard failures run eagerly (Dynamo's
# recompile_limit, alias cache_size_limit); also the most variants kept after one graph
# break. Module instances of one class share entries (they are guarded by type).
recompile_limit: int = 8
# recompiles of all code objects together before every new one runs eagerly (alias
# accumulated_cache_size_limit)
accumulated_recompile_limit: int = 256
# raise FailOnRecompileLimitHit instead of running eagerly past the limit (alias
# fail_on_cache_limit_hit)
fail_on_recompile_limit_hit: bool = False
# raise RecompileError on any recompile
error_on_recompile: bool = False
# deepest chain of inlined Python calls
max_inline_depth: int = 32
# instructions one segment may interpret (a long Python loop is unrolled into the graph)
max_instructions: int = 200_000
# segments one call may capture (a loop with a graph break in each iteration that
# changes Python state every time); past it the rest of the call runs on real values
max_segments_per_call: int = 64
# mark changed dims dynamic after a shape-changing recompile (Dynamo's automatic_dynamic)
automatic_dynamic_shapes: bool = True
# an error inside the capture machinery falls back to running the code for real; set
# False to see it instead (tests do)
suppress_errors: bool = True
# check every handler's stack effect against dis.stack_effect (a bug detector; tests)
check_stack_effect: bool = False


# PyTorch's old names, read and written through to the new ones
_ALIASES = {"cache_size_limit": "recompile_limit",
            "accumulated_cache_size_limit": "accumulated_recompile_limit",
            "fail_on_cache_limit_hit": "fail_on_recompile_limit_hit"}


class _Config(types.ModuleType):
    def __getattr__(self, name: str):
        if name in _ALIASES:
            return getattr(self, _ALIASES[name])
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(_ALIASES.get(name, name), value)


sys.modules[__name__].__class__ = _Config
