"""Autograd: the tape, gradient rules of every differentiable base op and view
(against float64 central differences), tie rules, and error paths.

Needs: the reference CPU plugin (cpu:0, float64 kernels).
"""

import numpy as np
import pytest

import devicekit as dk
from devicekit import ops
from devicekit.testing.gradcheck import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape)


UNARY = {
    "neg": (ops.neg, rand(2, 3)),
    "abs": (ops.abs, rand(2, 3, low=0.2) * np.array([1, -1, 1])),
    "exp": (ops.exp, rand(2, 3)),
    "log": (ops.log, rand(2, 3, low=0.2)),
    "sqrt": (ops.sqrt, rand(2, 3, low=0.2)),
    "rsqrt": (ops.rsqrt, rand(2, 3, low=0.2)),
    "reciprocal": (ops.reciprocal, rand(2, 3, low=0.5)),
    "sin": (ops.sin, rand(2, 3)),
    "cos": (ops.cos, rand(2, 3)),
    "tanh": (ops.tanh, rand(2, 3)),
    "erf": (ops.erf, rand(2, 3)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(name):
    fn, x = UNARY[name]
    gradcheck(fn, x)


# Shapes broadcast against each other: the gradient must be summed back.
BINARY = {
    "add": (ops.add, rand(3, 1, 4), rand(2, 4)),
    "sub": (ops.sub, rand(3, 1, 4), rand(2, 4)),
    "mul": (ops.mul, rand(3, 1, 4), rand(2, 4)),
    "div": (ops.div, rand(3, 1, 4), rand(2, 4, low=0.5)),
    "pow": (ops.pow, rand(3, 1, 4, low=0.5), rand(2, 4)),
    "maximum": (ops.maximum, rand(3, 1, 4), rand(2, 4)),
    "minimum": (ops.minimum, rand(3, 1, 4), rand(2, 4)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients_with_broadcasting(name):
    fn, a, b = BINARY[name]
    gradcheck(fn, a, b)


@pytest.mark.parametrize("fn", [
    lambda x: x + 2.0, lambda x: 2.0 + x, lambda x: 3.0 - x, lambda x: x * 3.0,
    lambda x: 2.0 / x, lambda x: x ** 3.0, lambda x: 2.0 ** x, lambda x: x ** 0.0,
    lambda x: ops.maximum(x, 0.5), lambda x: ops.minimum(0.5, x),
], ids=["add", "radd", "rsub", "mul", "rdiv", "pow", "rpow", "pow0", "maximum", "minimum"])
def test_python_scalar_operands(fn):
    gradcheck(fn, rand(2, 3, low=0.6))


def test_where_gradient_broadcasts():
    cond = dk.tensor(np.array([[True], [False], [True]]))
    gradcheck(lambda a, b: ops.where(cond, a, b), rand(1, 4), rand(3, 4))
    gradcheck(lambda a: ops.where(cond, a, 1.5), rand(3, 4))


@pytest.mark.parametrize("name", ["sum", "max", "min"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_reduction_gradients(name, axis, keepdims):
    fn = getattr(ops, name)
    gradcheck(lambda x: fn(x, axis, keepdims), rand(2, 3, 4))


def test_mean_gradient():
    gradcheck(lambda x: ops.mean(x, (0, 1)), rand(2, 3, 2))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_gradient(axis):
    gradcheck(lambda x: ops.cumsum(x, axis), rand(3, 4))


def test_gather_and_scatter_add_gradients():
    index = dk.tensor(np.array([[0, 2, 2], [1, 0, 0]]))  # repeated indices accumulate
    gradcheck(lambda x: ops.gather(x, 1, index), rand(2, 4))
    gradcheck(lambda x, src: ops.scatter_add(x, 1, index, src), rand(2, 4), rand(2, 3))


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((2, 1, 2, 3), (3, 3, 2)),
                                   ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,))])
def test_matmul_gradients(sa, sb):
    gradcheck(ops.matmul, rand(*sa), rand(*sb))


# matmul operands stored transposed (a view whose last two dims swapped are
# contiguous, as linear's weight.transpose(0, 1)): the folded [.., k] @ [k, n]
# case, the 2-D case for either operand, and a batched one.
TRANSPOSED = {
    "folded_b": (lambda a, w: ops.matmul(a, w.transpose(0, 1)), (2, 3, 4), (5, 4)),
    "2d_b": (lambda a, w: ops.matmul(a, w.transpose(0, 1)), (3, 4), (5, 4)),
    "2d_a": (lambda w, b: ops.matmul(w.transpose(0, 1), b), (4, 3), (4, 5)),
    "batched_both": (lambda a, b: ops.matmul(a.transpose(-1, -2), b.transpose(-1, -2)),
                     (2, 4, 3), (2, 5, 4)),
    "2d_a_broadcast_over_batched_b": (lambda w, b: ops.matmul(w.transpose(0, 1), b), (4, 3), (2, 4, 5)),
}


@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_matmul_gradients_of_transposed_operands(name):
    fn, sa, sb = TRANSPOSED[name]
    gradcheck(fn, rand(*sa), rand(*sb))


def test_linear_weight_grad_is_contiguous_like_the_weight():
    # linear multiplies by weight.transpose(0, 1); the weight's .grad comes
    # back in the weight's own (contiguous) layout, not as a transposed view
    # that every per-parameter consumer would read column-wise.
    x = dk.tensor(rand(2, 3, 4), requires_grad=True)
    w = dk.tensor(rand(5, 4), requires_grad=True)
    dk.ops.sum(dk.nn.functional.linear(x, w) * dk.tensor(rand(2, 3, 5))).backward()
    assert w.grad.is_contiguous() and x.grad.is_contiguous()
    w2 = dk.tensor(rand(4, 3), requires_grad=True)
    dk.ops.sum(ops.matmul(w2.transpose(0, 1), dk.tensor(rand(4, 2)))).backward()
    assert w2.grad.is_contiguous()


VIEWS = {
    "reshape": (lambda x: x.reshape(4, -1), (2, 3, 2)),
    "permute": (lambda x: x.permute(2, 0, 1), (2, 3, 2)),
    "transpose": (lambda x: x.transpose(0, 2) * 1.0, (2, 3, 2)),
    "T": (lambda x: x.T @ x, (3, 2)),
    "expand": (lambda x: x.expand(2, 3, 4), (3, 1)),
    "getitem_slices": (lambda x: x[1:, ::2], (3, 5)),
    "getitem_int_none_ellipsis": (lambda x: x[..., 1, None], (2, 3, 4)),
    "getitem_of_permuted": (lambda x: x.permute(1, 0)[1:3], (3, 4)),
    "contiguous": (lambda x: x.T.contiguous(), (3, 2)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_gradients(name):
    fn, shape = VIEWS[name]
    gradcheck(fn, rand(*shape))


def test_cast_gradient_comes_back_in_the_input_dtype():
    x = dk.tensor(rand(2, 3), requires_grad=True)
    y = ops.cast(x, dk.float32) * dk.tensor(np.full((2, 3), 3.0, np.float32))
    ops.sum(y.to(dk.float64)).backward()
    assert x.grad.dtype == dk.float64
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 3.0))


def test_type_promotion_gradient_has_leaf_dtype():
    x = dk.tensor(np.ones(3, np.float32), requires_grad=True)
    ops.sum(x * dk.tensor(np.array([1.0, 2.0, 3.0]))).backward()  # float32 * float64
    assert x.grad.dtype == dk.float32
    np.testing.assert_array_equal(x.grad.numpy(), [1, 2, 3])


def test_composed_graph_and_accumulation():
    x = dk.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = x * x + x  # x used three times: the grads must add up
    ops.sum(y).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 5, 7])
    ops.sum(x * 2.0).backward()  # accumulates into .grad
    np.testing.assert_array_equal(x.grad.numpy(), [5, 7, 9])


def test_diamond_graph_order():
    # b depends on a twice through different paths; a's grad must be complete
    # before it is propagated (topological order).
    x = dk.tensor(np.array([2.0]), requires_grad=True)
    a = x * 3.0
    b = a * a + ops.exp(a * 0.0) * a
    ops.sum(b).backward()
    np.testing.assert_allclose(x.grad.numpy(), [2 * 6.0 * 3 + 3.0])


def test_gradient_argument_for_non_scalar():
    x = dk.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (x * x).backward(gradient=dk.tensor(np.array([1.0, 10.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 40.0])


def test_maximum_minimum_ties_split_half():
    a = dk.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    b = dk.tensor(np.array([1.0, 5.0, 0.0]), requires_grad=True)
    ops.sum(ops.maximum(a, b)).backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0, 1])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1, 0])
    a.grad = b.grad = None
    ops.sum(ops.minimum(a, b)).backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1, 0])


def test_max_min_reduction_ties_split_evenly():
    x = dk.tensor(np.array([[1.0, 3.0, 3.0, 3.0], [0.0, 0.0, 2.0, 1.0]]), requires_grad=True)
    ops.sum(ops.max(x, 1)).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 1 / 3, 1 / 3, 1 / 3], [0, 0, 1, 0]])
    x.grad = None
    ops.sum(ops.min(x, 1)).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1, 0, 0, 0], [0.5, 0.5, 0, 0]])


def test_non_differentiable_results_do_not_require_grad():
    x = dk.tensor(rand(2, 3), requires_grad=True)
    for out in (x < 0.0, x == x, ops.ge(x, 0.0), ops.floor(x), ops.sign(x), ops.argmax(x),
                ops.logical_not(x > 0.0), ops.cast(x, dk.int32), ops.rand([2], 0)):
        assert not out.requires_grad and out.grad_fn is None
    assert ops.floor(x).dtype == dk.float64


def test_no_grad_detach_and_leaf_attributes():
    x = dk.tensor(rand(3), requires_grad=True)
    assert x.is_leaf and x.grad is None and x.grad_fn is None
    with dk.no_grad():
        y = x * 2.0 + x
    assert not y.requires_grad and y.grad_fn is None
    z = x * 2.0 + 1.0
    assert z.requires_grad and not z.is_leaf and z.grad_fn.name == "add"
    d = z.detach()
    assert not d.requires_grad and d.grad_fn is None
    np.testing.assert_array_equal(d.numpy(), z.numpy())
    w = dk.tensor(rand(3)).requires_grad_()
    assert w.requires_grad and w.is_leaf


def test_add_hot_path_records_every_spelling():
    x = dk.tensor(np.array([1.0, 2.0]), requires_grad=True)
    c = dk.tensor(np.array([5.0, 5.0]))
    for out in (x + c, c + x, ops.add(x, c), ops.add(c, x), ops.add(x, 1.0), ops.add(1.0, x),
                1.0 + x, x + 1):
        assert out.grad_fn is not None and out.grad_fn.name == "add"
        out.backward(gradient=dk.tensor(np.array([1.0, 1.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 8.0])
    assert (c + c).grad_fn is None


def test_error_backward_without_gradient_on_non_scalar():
    x = dk.tensor(rand(2, 3), requires_grad=True)
    with pytest.raises(dk.InvalidArgumentError, match=r"one-element.*\[2, 3\]"):
        (x * 2.0).backward()
    with pytest.raises(dk.InvalidArgumentError, match=r"gradient has shape \[3\]"):
        (x * 2.0).backward(gradient=dk.tensor(np.ones(3)))


def test_error_backward_on_untracked_tensor():
    with pytest.raises(dk.InvalidArgumentError, match=r"does not require grad"):
        ops.sum(dk.tensor(rand(3))).backward()


def test_error_requires_grad_on_integer_and_non_leaf():
    with pytest.raises(dk.DTypeError, match=r"floating-point.*int64\[3\]"):
        dk.tensor(np.arange(3), requires_grad=True)
    x = dk.tensor(rand(3), requires_grad=True)
    with pytest.raises(dk.InvalidArgumentError, match=r"leaf.*mul"):
        (x * 2.0).requires_grad = False


def test_float16_gradient():
    x = dk.tensor(np.array([1.0, 2.0], np.float16), requires_grad=True)
    ops.sum(x * x).backward()
    assert x.grad.dtype == dk.float16
    np.testing.assert_array_equal(x.grad.numpy(), np.array([2.0, 4.0], np.float16))


def test_against_torch():
    torch = pytest.importorskip("torch")
    a, b = rand(2, 3, 4), rand(4, 5)
    x, y = dk.tensor(a, requires_grad=True), dk.tensor(b, requires_grad=True)
    ops.sum(ops.tanh(x @ y) * ops.max(x, -1, keepdims=True)).backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.tanh(tx @ ty) * tx.amax(-1, keepdim=True)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12, atol=1e-12)
