"""Layer ``static``: the declarative, TensorFlow-1 style API (``tf.compat.v1``) on the
graph IR: build once (placeholders, variables, ops, ``cond`` with both branches,
``while_loop``, ``gradients`` of any order, random ops, optimizers), then run many
times with ``Session.run`` (random ops draw afresh at every run).

    import graphgrad.static as tf
    x = tf.placeholder(tf.float32, shape=(None, 3), name="x")
    w = tf.Variable(tf.ones((3, 1)))
    y = tf.matmul(x, w)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(y, feed_dict={x: [[1., 2., 3.]]})   # array([[6.]], dtype=float32)
"""

from graphgrad.backend import bool_ as bool  # noqa: A004
from graphgrad.backend import float16, float32, float64, int8, int16, int32, int64, uint8

from . import errors, train
from .control_flow import cond, control_dependencies, group, identity, no_op
from .errors import FailedPreconditionError, InvalidArgumentError, OpError
from .gradients import UnconnectedGradients, gradients
from .graph import Graph, get_default_graph, reset_default_graph
from .math_ops import *  # noqa: F401,F403
from .math_ops import nn
from .session import InteractiveSession, Session
from .tensors import (Variable, assign, assign_add, assign_sub, constant, convert_to_tensor,
                      global_variables, global_variables_initializer, placeholder,
                      trainable_variables, variables_initializer)
from .while_loop import while_loop

__all__ = ["Graph", "get_default_graph", "reset_default_graph", "placeholder", "constant",
           "Variable", "global_variables_initializer", "variables_initializer", "assign",
           "assign_add", "assign_sub", "convert_to_tensor", "global_variables",
           "trainable_variables", "Session", "InteractiveSession", "cond", "while_loop",
           "control_dependencies", "group", "identity", "no_op", "gradients", "train",
           "UnconnectedGradients",
           "errors", "nn", "OpError", "InvalidArgumentError", "FailedPreconditionError",
           "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]
