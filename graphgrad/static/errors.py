"""Layer ``static``: ``tf.errors``: the run-time error classes (defined by the graph
layer, which raises them)."""

from graphgrad.graph.errors import FailedPreconditionError, InvalidArgumentError, OpError

__all__ = ["OpError", "InvalidArgumentError", "FailedPreconditionError"]
