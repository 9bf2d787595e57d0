"""The lecture's three functions for the capture report (``graphgrad capture``):

    graphgrad capture examples/lecture_capture.py:branch --example "gg.tensor(1.)"
    graphgrad capture examples/lecture_capture.py:shape_dependent --example "gg.randn(2, 3)"
    graphgrad capture examples/lecture_capture.py:external --example "gg.randn(3)"

and each one rewritten for the static API (TF1), which cannot run the Python as written:
``FUNC_static`` is what the report's ``static (rewritten)`` row runs next to the failing
``static`` row (``--static-rewrite`` names another function).

``batchnorm``, a module in train mode, updates buffers (its running statistics) at every
call; the report compares them with eager's, so a capture that drops the update is
silently wrong:

    graphgrad capture examples/lecture_capture.py:batchnorm --example "gg.randn(8, 3)"

``python examples/lecture_capture.py`` prints the three functions' reports.
"""

import numpy as np

import graphgrad as gg
import graphgrad.static as static


def branch(x):                 # data-dependent control flow
    if x < 0:                  # x is a 0-d tensor
        return x + 1
    return x - 1


def shape_dependent(x):        # Python code that needs the input's shape
    n, m = x.shape
    return x.reshape(m, n) * n


def external(x):               # a call into code outside the framework
    return x + np.random.rand()


batchnorm = gg.nn.BatchNorm1d(3)   # train mode: running_mean/var move at every call


def branch_static(x):          # both branches in the graph; the predicate picks at run time
    return static.cond(x < 0, lambda: x + 1, lambda: x - 1)


def shape_dependent_static(x):  # the shape as a tensor of the graph, read at run time
    s = static.shape(x)
    n, m = s[0], s[1]
    return static.reshape(x, [m, n]) * static.cast(n, x.dtype)


def external_static(x):        # a random op of the graph: a fresh number at every run
    return x + static.random_uniform(())


def main() -> None:
    from graphgrad.capture import report

    for fn, rewrite, example in ((branch, branch_static, gg.tensor(1.0)),
                                 (shape_dependent, shape_dependent_static, gg.randn(2, 3)),
                                 (external, external_static, gg.randn(3))):
        print(report(fn, example, static_rewrite=rewrite).table())
        print()


if __name__ == "__main__":
    main()
