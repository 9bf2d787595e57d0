"""Layer ``ops``: ``einsum``, Einstein summation over labelled dims, as a composite.

Each operand first loses its repeated labels (``diagonal``) and the labels no other
operand and not the output uses (``sum``); then the operands are contracted left to
right, two at a time, as one batched ``matmul`` (shared labels that are still needed are
the batch, shared ones that are not are contracted, the rest are the rows and columns);
the result is summed and permuted into the output's order. Values, dtypes and
derivatives of any order are those of the ops used.

Supported: letters ``a-zA-Z``, one ``...`` per term (broadcast from the right across
operands), the explicit (``->``) and implicit forms, the sublist form
(``einsum(a, [0, 1], b, [1, 2], [0, 2])``), size-1 dims broadcasting against each other
as in PyTorch. Not supported: ``path`` optimization (the order is left to right).
"""

from __future__ import annotations

import math
import string

from graphgrad.tensor import Value

__all__ = ["einsum"]

_LETTERS = set(string.ascii_letters)


def _parse_term(term: str, operand: int, start: int = 0) -> list:
    """The labels of one input term: letters, and ``...`` as one ``"..."`` item.
    ``start`` is where the term begins in the equation (for the error message)."""
    labels, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            if "..." in labels:
                raise RuntimeError(f"einsum(): found '.' for operand {operand} for which an "
                                   f"ellipsis was already found")
            labels.append("...")
            i += 3
            continue
        c = term[i]
        if c == ".":
            raise RuntimeError(f"einsum(): found '.' for operand {operand} that is not part "
                               f"of any ellipsis")
        if c not in _LETTERS:
            raise RuntimeError(f"einsum(): invalid subscript given at index {start + i} in the "
                               f"equation string, subscripts must be in [a-zA-Z]")
        labels.append(c)
        i += 1
    return labels


def _expand_ellipsis(labels: list, ndim: int, operand: int) -> list:
    """Labels, one per dim: the dims of ``...`` get ints counted from the right (so they
    line up across operands as broadcasting does)."""
    letters = [label for label in labels if label != "..."]
    if "..." not in labels:
        if len(letters) != ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                               f"({len(letters)}) does not match the number of dimensions "
                               f"({ndim}) for operand {operand} and no ellipsis was given")
        return letters
    covered = ndim - len(letters)
    if covered < 0:
        raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                           f"({len(letters)}) is more than the number of dimensions ({ndim}) "
                           f"for operand {operand}")
    at = labels.index("...")
    return labels[:at] + list(range(covered - 1, -1, -1)) + labels[at + 1:]


def _output_labels(out_term, inputs: list, start: int) -> list:
    """The output's labels: from ``out_term`` (None: the implicit form), which begins at
    ``start`` in the equation."""
    ellipsis = sorted({lb for labels in inputs for lb in labels if isinstance(lb, int)},
                      reverse=True)
    if out_term is None:  # implicit: ... first, then the letters seen once, sorted
        counts: dict = {}
        for labels in inputs:
            for lb in labels:
                if isinstance(lb, str):
                    counts[lb] = counts.get(lb, 0) + 1
        return ellipsis + sorted(lb for lb, n in counts.items() if n == 1)
    out = []
    seen = {lb for labels in inputs for lb in labels}
    if "." in out_term.replace("...", "", 1):
        raise RuntimeError("einsum(): found '.' for output that is not part of any ellipsis")
    for lb in _parse_term(out_term, 0, start):
        if lb == "...":
            out += ellipsis
            continue
        if lb in out:
            raise RuntimeError(f"einsum(): output subscript {lb} appears more than once in "
                               f"the output")
        if lb not in seen:
            raise RuntimeError(f"einsum(): output subscript {lb} does not appear in the "
                               f"equation for any input operand")
        out.append(lb)
    return out


def _take_diagonals(t, labels: list, operand: int):
    """Repeated labels of one operand become one dim (the diagonal), put last."""
    from .diagonals import diagonal
    labels = list(labels)
    while True:
        repeated = next((lb for lb in labels if labels.count(lb) > 1), None)
        if repeated is None:
            return t, labels
        d1 = labels.index(repeated)
        d2 = labels.index(repeated, d1 + 1)
        if t.shape[d1] != t.shape[d2]:
            raise RuntimeError(f"einsum(): subscript {repeated} is repeated for operand "
                               f"{operand} but the sizes don't match, {t.shape[d2]} != "
                               f"{t.shape[d1]}")
        t = diagonal(t, 0, d1, d2)
        labels = [lb for i, lb in enumerate(labels) if i not in (d1, d2)] + [repeated]


def _sum_labels(t, labels: list, drop: set):
    dims = tuple(i for i, lb in enumerate(labels) if lb in drop)
    if not dims:
        return t, labels
    return t.sum(dim=dims), [lb for lb in labels if lb not in drop]


def _label_name(lb) -> str:
    return lb if isinstance(lb, str) else "..."


def _sizes(operands, labels_list) -> dict:
    """Each label's size; size-1 dims broadcast against the others."""
    sizes: dict = {}
    for k, (t, labels) in enumerate(zip(operands, labels_list, strict=True)):
        for lb, n in zip(labels, t.shape, strict=True):
            seen = sizes.get(lb)
            if seen is None or seen == 1:
                sizes[lb] = n
            elif n not in (1, seen):
                raise RuntimeError(f"einsum(): subscript {_label_name(lb)} has size {n} for "
                                   f"operand {k} which does not broadcast with previously "
                                   f"seen size {seen}")
    return sizes


def _arrange(t, labels: list, order: list, sizes: dict):
    """``t`` with its dims in ``order`` (all of them its labels), each at full size."""
    t = t.permute(*[labels.index(lb) for lb in order]) if order != labels else t
    full = tuple(sizes[lb] for lb in order)
    return t.expand(*full) if tuple(t.shape) != full else t


def _contract(a, la: list, b, lb: list, keep: set, sizes: dict):
    """The product of two operands, summed over the labels they share that ``keep``
    (the labels still needed) lacks: one batched matmul."""
    batch = [x for x in la if x in lb and x in keep]
    summed = [x for x in la if x in lb and x not in keep]
    rows = [x for x in la if x not in lb]
    cols = [x for x in lb if x not in la]
    a = _arrange(a, la, batch + rows + summed, sizes)
    b = _arrange(b, lb, batch + summed + cols, sizes)
    bshape = [sizes[x] for x in batch]
    n_rows = math.prod(sizes[x] for x in rows)
    n_sum = math.prod(sizes[x] for x in summed)
    n_cols = math.prod(sizes[x] for x in cols)
    product = a.reshape(*bshape, n_rows, n_sum) @ b.reshape(*bshape, n_sum, n_cols)
    shape = bshape + [sizes[x] for x in rows] + [sizes[x] for x in cols]
    return product.reshape(*shape), batch + rows + cols


def _sublist_term(sublist) -> str:
    """A sublist (ints in [0, 52) and Ellipsis) as an equation term."""
    out = []
    for s in sublist:
        if s is Ellipsis:
            out.append("...")
        elif not 0 <= s < len(string.ascii_letters):
            raise RuntimeError("einsum(): subscript in subscript list is not within the valid "
                               "range [0, 52)")
        else:
            out.append(string.ascii_letters[s])
    return "".join(out)


def _from_sublists(args: tuple) -> tuple[str, tuple]:
    """``(op0, sub0, op1, sub1, ..., [out])`` as an equation and the operands."""
    operands, terms = args[0:len(args) - len(args) % 2:2], args[1::2]
    equation = ",".join(_sublist_term(t) for t in terms[:len(operands)])
    if len(args) % 2:
        equation += "->" + _sublist_term(args[-1])
    return equation, tuple(operands)


def einsum(equation, *operands):
    """Einstein summation: ``einsum("bij,bjk->bik", a, b)`` is a batched matmul,
    ``einsum("ii", a)`` a trace, ``einsum("i,j->ij", u, v)`` an outer product; or in
    the sublist form, ``einsum(a, [0, 1], b, [1, 2], [0, 2])``."""
    if not isinstance(equation, str):
        equation, operands = _from_sublists((equation, *operands))
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for t in operands:
        if not isinstance(t, Value):
            raise TypeError(f"einsum(): operands must be tensors, got {type(t).__name__}")
    equation = equation.replace(" ", "")
    lhs, arrow, out_term = equation.partition("->")
    if "->" in out_term:
        raise RuntimeError("einsum(): found '->' more than once in the equation")
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           "equation")
    if len(terms) < len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation")
    starts = [sum(len(term) + 1 for term in terms[:k]) for k in range(len(terms))]
    inputs = [_expand_ellipsis(_parse_term(term, k, start), t.ndim, k)
              for k, (term, start, t) in enumerate(zip(terms, starts, operands, strict=True))]
    output = _output_labels(out_term if arrow else None, inputs, len(lhs) + 2)

    current, labels = [], []
    for k, (t, lbs) in enumerate(zip(operands, inputs, strict=True)):
        t, lbs = _take_diagonals(t, lbs, k)
        current.append(t)
        labels.append(lbs)
    sizes = _sizes(current, labels)
    # labels that one operand alone has and the output lacks are summed at once
    for k in range(len(current)):
        others = {lb for j, lbs in enumerate(labels) if j != k for lb in lbs}
        lonely = {lb for lb in labels[k] if lb not in others and lb not in output}
        current[k], labels[k] = _sum_labels(current[k], labels[k], lonely)

    result, result_labels = current[0], labels[0]
    for k in range(1, len(current)):
        keep = set(output).union(*[set(lbs) for lbs in labels[k + 1:]])
        result, result_labels = _contract(result, result_labels, current[k], labels[k],
                                          keep, sizes)
    result, result_labels = _sum_labels(result, result_labels,
                                        {lb for lb in result_labels if lb not in output})
    return _arrange(result, result_labels, output, sizes)
