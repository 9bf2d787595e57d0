"""Layer ``ops``: every operator, each defined once (forward on arrays, vjp in graphgrad
ops, shape/dtype rule), and the functions and Tensor methods that call them."""

from . import arithmetic, bce, compare, index, join, linalg, nll, reduce, shape, unary  # noqa: F401
from . import compound, contractions, cumulative, diagonals, einsum_notation, refusals  # noqa: F401
from . import grids, logarithmic, random, shifts, sorting, sparse_coo, triangular  # noqa: F401
from . import cross_entropy, gathering, moments, norms, repeats, scattering, signs  # noqa: F401
from . import addmm_activation, attention, dropout, layer_norm, pooling, recurrent  # noqa: F401
from .signs import *  # noqa: F401,F403
from .arithmetic import *  # noqa: F401,F403
from .base import REGISTRY, NO_PARAMS, Op, Spec, spec_of  # noqa: F401
from .compare import *  # noqa: F401,F403
from .compound import *  # noqa: F401,F403
from .contractions import *  # noqa: F401,F403
from .convolution import convolution  # (the function: it shadows its module's name)
from .cumulative import *  # noqa: F401,F403
from .diagonals import *  # noqa: F401,F403
from .einsum_notation import *  # noqa: F401,F403
from .gelu import gelu  # (the function: it shadows its module's name)
from .grids import *  # noqa: F401,F403
from .index import *  # noqa: F401,F403
from .gathering import *  # noqa: F401,F403
from .join import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .logarithmic import *  # noqa: F401,F403
from .methods import install as _install
from .moments import *  # noqa: F401,F403
from .norms import *  # noqa: F401,F403
from .random import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .repeats import *  # noqa: F401,F403
from .scattering import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .shifts import *  # noqa: F401,F403
from .softmax import softmax, log_softmax  # (the functions: softmax shadows its module)
from .sorting import *  # noqa: F401,F403
from .sparse_coo import *  # noqa: F401,F403
from .triangular import *  # noqa: F401,F403
from .unary import *  # noqa: F401,F403

__all__ = sorted({*arithmetic.__all__, *compare.__all__, *index.__all__, *join.__all__,
                  *gathering.__all__, *linalg.__all__, *reduce.__all__, *moments.__all__,
                  *norms.__all__, "softmax", "log_softmax",
                  *shape.__all__, "gelu", *unary.__all__,
                  *compound.__all__, *contractions.__all__, "convolution", *cumulative.__all__,
                  *diagonals.__all__, *einsum_notation.__all__, *grids.__all__,
                  *logarithmic.__all__, *random.__all__,
                  *shifts.__all__, *signs.__all__, *repeats.__all__, *scattering.__all__,
                  *sorting.__all__, *sparse_coo.__all__, *triangular.__all__,
                  "REGISTRY", "Op", "Spec"})

_install()
sparse_coo.install()

from .aliases import with_numpy_aliases as _with_numpy_aliases  # noqa: E402

for _name in __all__:  # the functions accept axis/keepdims, as PyTorch's do
    globals()[_name] = _with_numpy_aliases(globals()[_name])
