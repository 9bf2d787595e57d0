"""Layer ``graph``: the run-time errors of executing a Graph, with TensorFlow's class names
(``tf.errors.*``) so that TF1 users recognise them."""

from __future__ import annotations

__all__ = ["OpError", "InvalidArgumentError", "FailedPreconditionError", "GraphError"]


class OpError(Exception):
    """An op failed at run time (TF's ``tf.errors.OpError``)."""

    def __init__(self, message: str, node=None):
        super().__init__(message)
        self.message = message
        self.node = node


class InvalidArgumentError(OpError):
    pass


class FailedPreconditionError(OpError):
    pass


class GraphError(ValueError):
    """A malformed graph, found by the verifier: the message names the nodes."""
