"""Layer ``numdiff``: numerical differentiation, the oracle for autodiff: finite
differences (``finite``: evaluates ``f`` only, never autograd), the complex step
(``complex_step``), gradcheck, and the step-size error study."""

from .api import derivative, gradient, hessian, jacobian
from .complex_step import ComplexStepError, complex_step_mode
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .study import classic_function, plot_study, run_study, step_study, write_csv

__all__ = ["derivative", "gradient", "jacobian", "hessian", "complex_step_mode",
           "ComplexStepError", "gradcheck", "gradgradcheck", "GradcheckError", "step_study",
           "classic_function", "run_study", "write_csv", "plot_study"]
