"""Layer ``dynamo``: the recompile errors of ``graphgrad.compile`` (``torch._dynamo.exc``'s
names; ``Unsupported`` lives with the capture that raises it)."""

__all__ = ["RecompileError", "FailOnRecompileLimitHit"]


class RecompileError(RuntimeError):
    """A cached graph did not fit and ``config.error_on_recompile`` is set."""


class FailOnRecompileLimitHit(Exception):  # noqa: N818 - PyTorch's name
    """``config.recompile_limit`` was reached and ``config.fail_on_recompile_limit_hit``
    (or ``fullgraph=True``) asks for an error instead of running eagerly."""
