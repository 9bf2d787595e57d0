"""Autograd errors: type and wording, checked against the message PyTorch itself raises
for the same program (run in the test), and the guarantee that a failed backward
writes no partial ``.grad``."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import graphgrad as gg


def error_of(fn, lib):
    """The exception ``fn(lib)`` raises (the test fails if it raises none)."""
    try:
        fn(lib)
    except Exception as e:  # noqa: BLE001 - we inspect whatever comes out
        return e
    pytest.fail(f"{lib.__name__}: no error raised")


def both_errors(fn):
    return error_of(fn, gg), error_of(fn, torch)


def normalized(msg: str) -> str:
    """PyTorch's message with ``torch.`` spelled as graphgrad does."""
    return msg.replace("torch.", "graphgrad.")


# ---- backward's seeds ----------------------------------------------------------------

IMPLICIT = "grad can be implicitly created only for scalar outputs"


def test_non_scalar_backward_without_gradient():
    def fn(lib):
        (lib.tensor([1.0, 2.0], requires_grad=True) * 2).backward()

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert IMPLICIT in str(t) and IMPLICIT in str(g)


def test_non_scalar_autograd_grad_without_grad_outputs():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        lib.autograd.grad(x * 2, x)

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert IMPLICIT in str(t) and IMPLICIT in str(g)


NO_GRAD_FN = "element 0 of tensors does not require grad and does not have a grad_fn"


@pytest.mark.parametrize("case", ["backward", "non-scalar backward", "autograd.grad",
                                  "under no_grad"])
def test_output_does_not_require_grad(case):
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        if case == "backward":
            lib.tensor([1.0, 2.0]).sum().backward()
        elif case == "non-scalar backward":  # message 3 wins over the scalar check
            lib.tensor([1.0, 2.0]).backward()
        elif case == "autograd.grad":
            lib.autograd.grad(lib.tensor([1.0, 2.0]).sum(), x)
        else:
            with lib.no_grad():
                y = (x * 2).sum()
            y.backward()

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert NO_GRAD_FN in str(t)
    assert NO_GRAD_FN in str(g)


def test_element_index_in_message():
    def fn(lib):
        x = lib.tensor([1.0], requires_grad=True)
        lib.autograd.backward([(x * 2).sum(), lib.tensor(1.0)])

    g, t = both_errors(fn)
    key = "element 1 of tensors does not require grad and does not have a grad_fn"
    assert key in str(t) and key in str(g)


def test_gradient_shape_mismatch():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        (x * 2).backward(lib.ones(3))

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    expected = ("Mismatch in shape: grad_output[0] has a shape of graphgrad.Size([3]) and "
                "output[0] has a shape of graphgrad.Size([2]).")
    assert normalized(str(t)) == expected
    assert expected in str(g)


def test_grad_outputs_shape_mismatch_in_autograd_grad():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        lib.autograd.grad(x * 2, x, grad_outputs=lib.ones(2, 1))

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    key = normalized(str(t)).split("\n")[0]
    assert key.startswith("Mismatch in shape: grad_output[0] has a shape of")
    assert key in str(g)


def test_gradient_of_wrong_type():
    def fn(lib):
        lib.autograd.backward([(lib.tensor([1.0], requires_grad=True) * 2).sum()],
                              grad_tensors=["one"])

    g, t = both_errors(fn)
    assert type(g) is type(t) is TypeError
    key = "gradients can be either Tensors or None, but got str"
    assert key in str(t) and key in str(g)


def test_empty_inputs_to_backward():
    def fn(lib):
        (lib.tensor([1.0], requires_grad=True) * 2).sum().backward(inputs=[])

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) in str(g)


def test_backward_with_create_graph_warns_about_reference_cycle():
    key = "Using backward() with create_graph=True will create a reference cycle"
    for lib in (torch, gg):
        x = lib.tensor([1.0], requires_grad=True)
        with pytest.warns(UserWarning, match=re.escape(key)):
            (x * x).sum().backward(create_graph=True)


# ---- freed graphs ----------------------------------------------------------------------

TWICE = ("Trying to backward through the graph a second time (or directly access saved "
         "tensors after they have already been freed). Saved intermediate values of the graph "
         "are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if "
         "you need to backward through the graph a second time or if you need to access saved "
         "tensors after calling backward.")


@pytest.mark.parametrize("second", ["backward", "autograd.grad"])
@pytest.mark.parametrize("first", ["backward", "autograd.grad"])
def test_second_backward_through_freed_graph(first, second):
    def fn(lib):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        b = lib.tensor([3.0, 4.0], requires_grad=True)
        y = (a * b).sum()
        for how in (first, second):
            if how == "backward":
                y.backward()
            else:
                lib.autograd.grad(y, [a, b])

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) == TWICE
    assert TWICE in str(g)


def test_second_backward_through_add_works_as_in_torch():
    # AddBackward saves nothing, so freeing leaves it runnable: PyTorch allows this
    for lib in (gg, torch):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        b = lib.tensor([3.0, 4.0], requires_grad=True)
        y = (a + b).sum()
        y.backward()
        y.backward()
        assert a.grad.tolist() == [2.0, 2.0] and b.grad.tolist() == [2.0, 2.0], lib


def test_second_backward_fails_when_any_node_saved_something():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = ((x + 1) * 2 + x.exp()).sum()  # exp saves its output
        y.backward()
        y.backward()

    g, t = both_errors(fn)
    assert str(t) == TWICE and TWICE in str(g)


def test_retain_graph_allows_a_second_pass_then_frees():
    a = gg.tensor([1.0, 2.0], requires_grad=True)
    y = (a * a).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert a.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError) as e:
        y.backward()
    assert TWICE in str(e.value)


def test_shared_subgraph_freed_by_another_output():
    # y1 and y2 share h; a backward of y1 frees h's saved values, so y2's pass fails
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x.exp()
        y1, y2 = h.sum(), (h * 2).sum()
        y1.backward()
        y2.backward()

    g, t = both_errors(fn)
    assert str(t) == TWICE and TWICE in str(g)


# ---- autograd.grad inputs --------------------------------------------------------------

UNUSED = ("One of the differentiated Tensors appears to not have been used in the graph. "
          "Set allow_unused=True if this is the desired behavior.")


def test_unused_input_without_allow_unused():
    def fn(lib):
        x = lib.tensor([1.0], requires_grad=True)
        u = lib.tensor([1.0], requires_grad=True)
        lib.autograd.grad((x * 2).sum(), [x, u])

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert UNUSED in str(g)
    # PyTorch 2.13 names the index ("The differentiated Tensor at index 1 appears ...");
    # the sentence users search for is common to both
    key = "appears to not have been used in the graph. Set allow_unused=True if this is the " \
          "desired behavior."
    assert key in str(t) and key in str(g)


def test_allow_unused_false_explicitly():
    x = gg.tensor([1.0], requires_grad=True)
    u = gg.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape(UNUSED)):
        gg.autograd.grad((x * 2).sum(), [x, u], allow_unused=False)


def test_input_not_requiring_grad():
    def fn(lib):
        x = lib.tensor([1.0], requires_grad=True)
        c = lib.tensor([1.0])
        lib.autograd.grad((x * c).sum(), [x, c])

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    key = "One of the differentiated Tensors does not require grad"
    assert key in str(t) and key in str(g)


def test_materialize_grads_with_allow_unused_false():
    def fn(lib):
        x = lib.tensor([1.0], requires_grad=True)
        lib.autograd.grad((x * 2).sum(), x, allow_unused=False, materialize_grads=True)

    g, t = both_errors(fn)
    assert type(g) is type(t) is ValueError
    assert str(t) in str(g)


# ---- in-place modification of saved tensors --------------------------------------------

MODIFIED = "one of the variables needed for gradient computation has been modified by an " \
           "inplace operation"


def _version_part(msg: str) -> str:
    m = re.search(r"is at version \d+; expected version \d+ instead", msg)
    assert m, msg
    return m.group(0)


def _shape_part(msg: str) -> str:
    m = re.search(r"\[(torch|graphgrad)\.\w+ \[[\d, ]*\]\]", msg)
    assert m, msg
    return normalized(m.group(0))


def _inplace_cases():
    def exp_output(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x.exp()  # exp saves its output
        y.add_(1)
        y.sum().backward()

    def sigmoid_output_mul_(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x.sigmoid()
        y.mul_(2)
        y.sum().backward()

    def exp_output_div_(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x.exp()
        y.div_(2)
        y.sum().backward()

    def tanh_output_twice(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x.tanh()
        y.add_(1)
        y.add_(1)
        y.sum().backward()

    def mul_input(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor([3.0, 4.0], requires_grad=True)
        a = x * 1
        z = a * w  # mul saves both inputs
        a.add_(1)
        z.sum().backward()

    def mul_input_setitem(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        a = x + 0
        z = a * w
        a[0, 0] = 3.0
        z.sum().backward()

    def sin_input(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        a = x * 2
        z = a.sin()  # sin saves its input
        a.zero_()
        z.sum().backward()

    def matmul_input(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        w = lib.tensor([[1.0], [2.0]], requires_grad=True)
        h = x * 1
        z = h @ w
        h.mul_(2)
        z.sum().backward()

    def through_detach(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x.sigmoid()
        y.detach().zero_()  # detach shares the version counter
        y.sum().backward()

    def leaf_under_no_grad(lib):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        x = lib.tensor([3.0, 4.0], requires_grad=True)
        z = (w * x).sum()  # saves w
        with lib.no_grad():
            w.add_(1)  # e.g. an optimizer step before backward
        z.backward()

    def pow_input(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        a = x + 1
        z = a ** 3
        a.sub_(1)
        z.sum().backward()

    return {f.__name__: f for f in (exp_output, sigmoid_output_mul_, exp_output_div_,
                                    tanh_output_twice,
                                    mul_input, mul_input_setitem, sin_input, matmul_input,
                                    through_detach, leaf_under_no_grad, pow_input)}


INPLACE_CASES = _inplace_cases()


@pytest.mark.parametrize("name", sorted(INPLACE_CASES))
def test_inplace_modification_of_saved_tensor(name):
    g, t = both_errors(INPLACE_CASES[name])
    assert type(g) is type(t) is RuntimeError
    assert str(t).startswith(MODIFIED)
    assert str(g).startswith(MODIFIED)
    # the same tensor type and size, and the same versions, as PyTorch reports
    assert _shape_part(str(g)) == _shape_part(str(t))
    assert _version_part(str(g)) == _version_part(str(t))
    assert "Hint: enable anomaly detection" in str(g)


def test_inplace_message_names_the_grad_fn():
    e = error_of(INPLACE_CASES["exp_output"], gg)
    assert "which is output 0 of" in str(e) and "is at version 1; expected version 0" in str(e)


def test_inplace_on_unsaved_output_is_fine():
    # add and the cast save nothing: modifying their results in place is allowed
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x + 1
        y.add_(1)
        z = x * 1
        z.mul_(3)
        (y + z).sum().backward()
        assert x.grad.tolist() == [4.0, 4.0], lib


# ---- in-place on leaves, requires_grad -------------------------------------------------

LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."


@pytest.mark.parametrize("how", ["add_", "mul_", "+=", "zero_", "fill_", "copy_", "setitem"])
def test_inplace_on_leaf_requiring_grad(how):
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        if how == "add_":
            x.add_(1)
        elif how == "mul_":
            x.mul_(2)
        elif how == "+=":
            x += 1
        elif how == "zero_":
            x.zero_()
        elif how == "fill_":
            x.fill_(3.0)
        elif how == "copy_":
            x.copy_(lib.tensor([5.0, 6.0]))
        else:
            x[0] = 1.0

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    # PyTorch says "a view of a leaf Variable..." for setitem (it writes through a view);
    # the sentence is the same
    assert LEAF_INPLACE in str(t)
    assert LEAF_INPLACE in str(g)


def test_inplace_on_view_of_leaf_requiring_grad():
    def fn(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        x[0].mul_(2)

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) == "a view of a leaf Variable that requires grad is being used in an " \
                     "in-place operation."
    assert str(t) in str(g)


def test_inplace_on_0d_view_of_leaf_requiring_grad():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        x[0].mul_(2)

    g, t = both_errors(fn)
    assert str(t) in str(g)


def test_inplace_on_leaf_allowed_under_no_grad():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    with gg.no_grad():
        x.add_(1)
    assert x.tolist() == [2.0, 3.0]


FLOAT_ONLY = "Only Tensors of floating point and complex dtype can require gradients"


@pytest.mark.parametrize("how", ["factory", "attribute"])
def test_requires_grad_on_int_tensor(how):
    def fn(lib):
        if how == "factory":
            lib.tensor([1, 2], requires_grad=True)
        else:
            t = lib.tensor([1, 2])
            t.requires_grad = True

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) in str(g)
    assert FLOAT_ONLY.lower() in str(g).lower()


def test_requires_grad_method_on_int_tensor():
    def fn(lib):
        lib.tensor([1, 2]).requires_grad_()

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) in str(g)


def test_requires_grad_on_other_int_factories():
    for make in (lambda: gg.arange(3), lambda: gg.zeros(2, dtype=gg.int64),
                 lambda: gg.tensor([True, False])):
        with pytest.raises(RuntimeError, match="floating point"):
            make().requires_grad_()


NON_LEAF = "you can only change requires_grad flags of leaf variables."
DETACH_HINT = (" If you want to use a computed variable in a subgraph that doesn't require "
               "differentiation use var_no_grad = var.detach().")


@pytest.mark.parametrize("how", ["attr False", "attr True", "method False"])
def test_changing_requires_grad_of_non_leaf(how):
    def fn(lib):
        y = lib.tensor([1.0], requires_grad=True) * 2
        if how == "attr False":
            y.requires_grad = False
        elif how == "attr True":
            y.requires_grad = True
        else:
            y.requires_grad_(False)

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(g) == str(t)
    assert str(g) == (NON_LEAF + DETACH_HINT if "False" in how else NON_LEAF)


def test_numpy_on_tensor_requiring_grad():
    def fn(lib):
        lib.tensor([1.0], requires_grad=True).numpy()

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) == "Can't call numpy() on Tensor that requires grad. Use " \
                     "tensor.detach().numpy() instead."
    assert str(g) == str(t)
    # also for a non-leaf; and detach().numpy() works
    with pytest.raises(RuntimeError, match=re.escape("Can't call numpy()")):
        (gg.tensor([1.0], requires_grad=True) * 2).numpy()
    assert gg.tensor([1.0], requires_grad=True).detach().numpy().tolist() == [1.0]


def test_retain_grad_and_hooks_on_tensor_not_requiring_grad():
    def retain(lib):
        lib.tensor([1.0]).retain_grad()

    def hook(lib):
        lib.tensor([1.0]).register_hook(lambda g: g)

    def post_hook(lib):
        lib.tensor([1.0]).register_post_accumulate_grad_hook(lambda p: None)

    for fn in (retain, hook, post_hook):
        g, t = both_errors(fn)
        assert type(g) is type(t) is RuntimeError, fn.__name__
        assert str(t) in str(g), fn.__name__


def test_assigning_grad_of_wrong_shape():
    def fn(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        x.grad = lib.zeros(3)

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert str(t) in str(g)


def test_assigning_grad_of_wrong_type():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError):
        x.grad = [1.0, 2.0]
    with pytest.raises(TypeError):
        torch.tensor([1.0, 2.0], requires_grad=True).grad = [1.0, 2.0]


# ---- shape errors --------------------------------------------------------------------


def test_matmul_shape_mismatch_names_op_and_shapes():
    def fn(lib):
        lib.ones(2, 3) @ lib.ones(4, 5)

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    assert "matmul: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)" in str(g)
    assert str(t) in str(g)  # PyTorch's wording, after the op's name


@pytest.mark.parametrize("a,b", [((3,), (4,)), ((2, 2, 3), (2, 4, 5)), ((5, 3), (2,))])
def test_matmul_mismatch_other_ranks(a, b):
    with pytest.raises(RuntimeError) as e:
        gg.ones(*a) @ gg.ones(*b)
    msg = str(e.value)
    assert msg.startswith("matmul: ") and str(a) in msg and str(b) in msg
    with pytest.raises(RuntimeError):
        torch.ones(*a) @ torch.ones(*b)


def test_matmul_mismatch_in_backward_graph_and_with_grad():
    x = gg.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape("matmul: mat1 and mat2 shapes cannot be "
                                                     "multiplied (2x3 and 4x5)")):
        x @ gg.ones(4, 5)


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div"])
def test_broadcasting_mismatch(op):
    def fn(lib):
        a, b = lib.ones(2, 3), lib.ones(2, 5)
        return {"add": lambda: a + b, "mul": lambda: a * b, "sub": lambda: a - b,
                "div": lambda: a / b}[op]()

    g, t = both_errors(fn)
    assert type(g) is type(t) is RuntimeError
    key = "The size of tensor a (3) must match the size of tensor b (5) at non-singleton " \
          "dimension 1"
    assert str(t) == key
    assert key in str(g)
    assert str(g).startswith(op)  # graphgrad names the op


def test_broadcasting_mismatch_reports_first_clash_from_the_right():
    def fn(lib):
        lib.ones(4, 1, 3) * lib.ones(5, 2)

    g, t = both_errors(fn)
    assert str(t) in str(g)


# ---- no partial results ----------------------------------------------------------------


def _failing_graph():
    """A loss whose first branch fails in backward (exp output modified in place) while
    its second branch, reached first by the engine or not, reaches ``a`` and ``m``."""
    a = gg.tensor([1.0, 2.0], requires_grad=True)
    b = gg.tensor([3.0, 4.0], requires_grad=True)
    m = a * 3
    m.retain_grad()
    y = b.exp()
    y.add_(1)
    return a, b, m, y.sum() + (m * 2).sum() + (a * a).sum()


def test_failed_backward_writes_no_partial_grad():
    a, b, m, loss = _failing_graph()
    reached = []
    a.register_hook(lambda g: reached.append("a"))
    m.register_hook(lambda g: reached.append("m"))
    post = []
    a.register_post_accumulate_grad_hook(lambda p: post.append("a"))
    with pytest.raises(RuntimeError, match=MODIFIED):
        loss.backward()
    assert reached, "the test graph must reach a leaf before the failing node"
    assert a.grad is None and b.grad is None and m.grad is None
    assert post == []


def test_failed_backward_keeps_existing_grad_unchanged():
    a, b, m, loss = _failing_graph()
    (a * 10).sum().backward()
    before = a.grad.numpy().copy()
    with pytest.raises(RuntimeError, match=MODIFIED):
        loss.backward()
    np.testing.assert_array_equal(a.grad.numpy(), before)
    assert b.grad is None


def test_failed_backward_with_inputs_and_autograd_grad():
    a, b, m, loss = _failing_graph()
    with pytest.raises(RuntimeError, match=MODIFIED):
        loss.backward(inputs=[a, b])
    assert a.grad is None and b.grad is None
    # the nodes the failed pass ran before the failure were released as it left them
    # (a * a's saved inputs among them), as in PyTorch, whose second try says the same
    with pytest.raises(RuntimeError, match=re.escape(TWICE)):
        gg.autograd.grad(loss, [a, b])
    assert a.grad is None
    ta, tb = (torch.tensor([1.0, 2.0], requires_grad=True) for _ in range(2))
    ty = tb.exp()
    ty.add_(1)
    tloss = ty.sum() + (ta * 3 * 2).sum() + (ta * ta).sum()
    with pytest.raises(RuntimeError, match=MODIFIED):
        tloss.backward(inputs=[ta, tb])
    with pytest.raises(RuntimeError, match=re.escape(TWICE)):
        torch.autograd.grad(tloss, [ta, tb])


def test_failed_backward_with_retain_graph_can_be_retried():
    a, b, m, loss = _failing_graph()
    for _ in range(2):  # nothing released: the same failure again
        with pytest.raises(RuntimeError, match=MODIFIED):
            loss.backward(inputs=[a, b], retain_graph=True)


def test_failed_backward_by_freed_graph_writes_nothing():
    a = gg.tensor([1.0, 2.0], requires_grad=True)
    b = gg.tensor([3.0, 4.0], requires_grad=True)
    h = b.exp()
    first = h.sum()
    first.backward()  # frees h's saved output
    b.grad = None
    loss = (a * 2).sum() + h.sum()
    with pytest.raises(RuntimeError, match=re.escape(TWICE)):
        loss.backward()
    assert a.grad is None and b.grad is None
