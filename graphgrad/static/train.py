"""Layer ``static``: ``train.GradientDescentOptimizer`` and ``train.AdamOptimizer``: the
update is built into the graph (gradients by graph extension, then ``assign`` nodes)
and ``minimize`` returns the op to run in the session each step."""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.graph import Symbol

from .control_flow import control_dependencies, group
from .gradients import gradients
from .graph import get_default_graph
from .math_ops import sqrt
from .tensors import Variable, assign, assign_add, assign_sub, constant

__all__ = ["Optimizer", "GradientDescentOptimizer", "AdamOptimizer", "MomentumOptimizer"]


def _zeros_like(v: Variable):
    """A slot's initial value: zeros shaped like ``v`` (a constant when the shape is
    static, so that a random initial value is not drawn again for it)."""
    spec = v._node.spec
    if spec.shape is not None and None not in spec.shape:
        return constant(xp.zeros(spec.shape, spec.dtype))
    return v.initial_value * 0


class Optimizer:
    def __init__(self, learning_rate: float, name: str):
        self.learning_rate = learning_rate
        self.name = name

    def compute_gradients(self, loss: Symbol, var_list=None) -> list[tuple]:
        if var_list is None:
            var_list = get_default_graph().trainable_variables
        if not var_list:
            raise ValueError("No variables to optimize.")
        grads = gradients(loss, list(var_list))
        return list(zip(grads, var_list, strict=True))

    def apply_gradients(self, grads_and_vars, global_step=None, name: str | None = None):
        grads_and_vars = list(grads_and_vars)
        if all(g is None for g, _ in grads_and_vars):
            raise ValueError(f"No gradients provided for any variable, check your graph for "
                             f"ops that do not support gradients, between variables "
                             f"{[str(v) for _, v in grads_and_vars]} and loss.")
        updates = [self._apply(g, v) for g, v in grads_and_vars if g is not None]
        if global_step is not None:
            with control_dependencies(updates):
                updates = [assign_add(global_step, 1)]
        return group(*updates, name=name or self.name)

    def minimize(self, loss: Symbol, global_step=None, var_list=None, name: str | None = None):
        """compute_gradients + apply_gradients: the op that takes one step."""
        gv = self.compute_gradients(loss, var_list)
        if all(g is None for g, _ in gv):
            raise ValueError(f"No gradients provided for any variable, check your graph for "
                             f"ops that do not support gradients, between variables "
                             f"{[str(v) for _, v in gv]} and loss {loss}.")
        return self.apply_gradients(gv, global_step, name)

    def _apply(self, g, v):
        raise NotImplementedError


class GradientDescentOptimizer(Optimizer):
    def __init__(self, learning_rate: float, use_locking: bool = False,
                 name: str = "GradientDescent"):
        super().__init__(learning_rate, name)

    def _apply(self, g, v):
        return assign_sub(v, g * self.learning_rate)


class MomentumOptimizer(Optimizer):
    def __init__(self, learning_rate: float, momentum: float, name: str = "Momentum"):
        super().__init__(learning_rate, name)
        self.momentum = momentum

    def _apply(self, g, v):
        acc = Variable(_zeros_like(v), name=f"{v.op_name}_Momentum", trainable=False)
        acc_new = assign(acc, acc * self.momentum + g)
        return assign_sub(v, acc_new * self.learning_rate)


class AdamOptimizer(Optimizer):
    """TF1's Adam: slots m, v per variable and shared beta powers, all variables (so
    ``global_variables_initializer`` made after ``minimize`` initializes them)."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, name: str = "Adam"):
        super().__init__(learning_rate, name)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def apply_gradients(self, grads_and_vars, global_step=None, name: str | None = None):
        self._b1p = Variable(self.beta1, name="beta1_power", trainable=False)
        self._b2p = Variable(self.beta2, name="beta2_power", trainable=False)
        step = super().apply_gradients(grads_and_vars, None, name)
        with control_dependencies([step]):
            finish = [assign(self._b1p, self._b1p * self.beta1),
                      assign(self._b2p, self._b2p * self.beta2)]
            if global_step is not None:
                finish.append(assign_add(global_step, 1))
        return group(*finish, name=name or self.name)

    def _apply(self, g, v):
        zeros = _zeros_like(v)
        m = Variable(zeros, name=f"{v.op_name}_Adam", trainable=False)
        s = Variable(zeros, name=f"{v.op_name}_Adam_1", trainable=False)
        lr = self.learning_rate * sqrt(1 - self._b2p) / (1 - self._b1p)
        m_new = assign(m, m * self.beta1 + g * (1 - self.beta1))
        s_new = assign(s, s * self.beta2 + (g * g) * (1 - self.beta2))
        return assign_sub(v, lr * m_new / (sqrt(s_new) + self.epsilon))
