"""Layer ``func``: composable function transforms (``torch.func``): grad, vjp, jvp,
jacrev, jacfwd, hessian, hvp, linearize, vmap; jet and taylor_derivatives (Taylor
mode); laplacian and linear_operator (PDE operators); functional_call and stack_module_state."""

from .functional_call import functional_call, stack_module_state
from .jet import jet, taylor_derivatives
from .laplacian import laplacian, linear_operator
from .pytree import tree_flatten, tree_map, tree_unflatten
from .transforms import grad, grad_and_value, hessian, hvp, jacfwd, jacrev, jvp, linearize, vjp
from .vmap import BatchedTensor, vmap

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "hvp", "jet", "taylor_derivatives", "laplacian", "linear_operator", "vmap",
           "BatchedTensor", "functional_call", "stack_module_state", "tree_flatten",
           "tree_unflatten", "tree_map"]
