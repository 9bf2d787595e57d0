"""The lecture's three test functions, exactly as docs/lecture_cases.md gives them
(the same functions as examples/lecture_capture.py). Every capture frontend's
tests and the capture report run these."""

import numpy as np

import graphgrad as gg  # noqa: F401 - the functions are written against graphgrad


def branch(x):                 # data-dependent control flow
    if x < 0:                  # x is a 0-d tensor
        return x + 1
    return x - 1


def shape_dependent(x):        # Python code that needs the input's shape
    n, m = x.shape
    return x.reshape(m, n) * n


def external(x):               # a call into code outside the framework
    return x + np.random.rand()
