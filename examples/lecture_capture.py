"""The lecture's three functions for the capture report (``graphgrad capture``):

    graphgrad capture examples/lecture_capture.py:branch --example "gg.tensor(1.)"
    graphgrad capture examples/lecture_capture.py:shape_dependent --example "gg.randn(2, 3)"
    graphgrad capture examples/lecture_capture.py:external --example "gg.randn(3)"

``python examples/lecture_capture.py`` prints all three reports.
"""

import numpy as np

import graphgrad as gg


def branch(x):                 # data-dependent control flow
    if x < 0:                  # x is a 0-d tensor
        return x + 1
    return x - 1


def shape_dependent(x):        # Python code that needs the input's shape
    n, m = x.shape
    return x.reshape(m, n) * n


def external(x):               # a call into code outside the framework
    return x + np.random.rand()


def main() -> None:
    from graphgrad.capture import report

    for fn, example in ((branch, gg.tensor(1.0)), (shape_dependent, gg.randn(2, 3)),
                        (external, gg.randn(3))):
        print(report(fn, example).table())
        print()


if __name__ == "__main__":
    main()
