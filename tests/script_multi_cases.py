"""Functions for tests/test_jit_script_multi.py (jit.script reads their source): calls that
need a rank and return several tensors or a Python value, and subscript assignment."""

import graphgrad as gg


def max_dim(x):
    v, i = x.max(dim=-1)
    return v * 2, i


def max_values(x):
    return gg.max(x, -1).values + gg.min(x, dim=-1)[0]


def topk_sum(x):
    v, i = gg.topk(x, 2, dim=-1)
    return v.sum(-1), i


def sort_last(x):
    out = x.sort(dim=-1)
    return out.values - out.indices


def split_add(x):
    a, b = x.split(2, dim=-1)
    return a + b


def chunk_mul(x):
    a, b = x.chunk(2, dim=-1)
    return a * b


def mean_by_numel(x):
    return x.sum() / x.numel()


def scale_by_size(x):
    return x / x.size(-1)


def zero_first_column(x):
    y = x.clone()
    y[..., 0] = 0.0
    return y * 3
