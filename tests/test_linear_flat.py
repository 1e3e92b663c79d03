"""matmul folds [..., M, K] @ [K, N] into one [(...)*M, K] @ [K, N] product
(as torch.matmul does) instead of a batched one that repacks the 2-D operand
per batch row, with and without autograd; F.linear goes through it. Forward
results must be bit-identical to the batched product it replaces; under
autograd the 2-D operand's gradient is one product over all rows."""

import numpy as np
import pytest

import devicekit as dk
import devicekit.nn.functional as F
from devicekit import ops

SHAPES = [(8, 32, 64, 192), (64, 32, 64, 65), (3, 7, 5, 9), (2, 3, 17, 33, 65), (4, 32, 300, 383)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flat_linear_is_bit_identical_to_the_batched_product(cpu, shape):
    *lead, d, o = shape
    rng = np.random.default_rng(len(shape) * 1000 + o)
    x = dk.tensor(rng.standard_normal((*lead, d)).astype(np.float32))
    w = dk.tensor(rng.standard_normal((o, d)).astype(np.float32))
    b = dk.tensor(rng.standard_normal(o).astype(np.float32))
    with dk.no_grad():
        batched = (ops.matmul(x, w.transpose(0, 1)) + b).numpy()
        got = F.linear(x, w, b)
    assert got.shape == tuple(batched.shape)
    np.testing.assert_array_equal(got.numpy(), batched)


def _kernel_launches(fn):
    dk.synchronize()
    dk.reset_dispatch_stats()
    fn()
    dk.synchronize()
    return {op: s["kernel"] for op, s in dk.dispatch_stats().items() if s.get("kernel")}


def test_folded_matmul_under_autograd_is_one_product_each_way(cpu):
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((4, 8, 6)).astype(np.float32)
    ws = rng.standard_normal((6, 5)).astype(np.float32)
    gs = rng.standard_normal((4, 8, 5)).astype(np.float32)
    x = dk.tensor(xs, requires_grad=True)
    w = dk.tensor(ws, requires_grad=True)
    y = ops.matmul(x, w)
    assert y.shape == (4, 8, 5)
    np.testing.assert_allclose(y.numpy(), xs @ ws, rtol=1e-5, atol=1e-6)
    launches = _kernel_launches(lambda: y.backward(dk.tensor(gs)))
    # dx = g @ w^T and dw = x^T @ g over all 32 rows: two products, no
    # per-batch-row products summed by reduce_sum.
    assert launches.get("matmul") == 2 and "reduce_sum" not in launches, launches
    np.testing.assert_allclose(x.grad.numpy(), gs @ ws.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), xs.reshape(32, 6).T @ gs.reshape(32, 5),
                               rtol=1e-5, atol=1e-5)


def test_matmul_on_a_view_that_cannot_fold_stays_batched(cpu):
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((8, 4, 6)).astype(np.float32)
    ws = rng.standard_normal((6, 5)).astype(np.float32)
    x = dk.tensor(xs).transpose(0, 1)  # [4, 8, 6] whose rows are not one block
    got = ops.matmul(x, dk.tensor(ws))
    np.testing.assert_allclose(got.numpy(), xs.transpose(1, 0, 2) @ ws, rtol=1e-5, atol=1e-6)


def test_linear_under_autograd_still_gives_the_weight_gradient(cpu):
    rng = np.random.default_rng(3)
    x = dk.tensor(rng.standard_normal((4, 5, 6)).astype(np.float32))
    w = dk.tensor(rng.standard_normal((3, 6)).astype(np.float32), requires_grad=True)
    F.linear(x, w).sum().backward()  # d/dw of sum(x @ w^T): every row is x summed over rows
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(x.numpy().sum((0, 1)), (3, 6)),
                               rtol=1e-5)


@pytest.mark.parametrize("sa, sb", [((2, 3, 0), (0, 4)), ((0, 3, 5), (5, 4)), ((2, 0, 5), (5, 4))],
                         ids=["k0", "empty_batch", "m0"])
def test_folded_matmul_of_empty_operands(cpu, sa, sb):
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    got = ops.matmul(dk.tensor(a), dk.tensor(b))
    assert got.shape == (*sa[:-1], sb[1])
    np.testing.assert_array_equal(got.numpy(), a @ b)


@pytest.mark.parametrize("sa, sb", [((2, 3, 4), (4, 0)), ((2, 0, 4), (4, 3))], ids=["n0", "m0"])
def test_folded_matmul_gradients_of_empty_products(cpu, sa, sb):
    x = dk.tensor(np.ones(sa, np.float32), requires_grad=True)
    w = dk.tensor(np.ones(sb, np.float32), requires_grad=True)
    ops.matmul(x, w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((*sa[:-1], sb[1])) @ np.ones(sb).T)
    np.testing.assert_array_equal(w.grad.numpy(), np.full(sb, sa[0] * sa[1], np.float32))
