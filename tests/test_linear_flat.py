"""F.linear without autograd multiplies [N, in] @ [in, out] once instead of a
batched product that copies the weight per batch row; the
results must be bit-identical to the batched product it replaces."""

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


def test_linear_under_autograd_still_gives_the_weight_gradient(cpu):
    rng = np.random.default_rng(3)
    x = dk.tensor(rng.standard_normal((4, 5, 6)).astype(np.float32))
    w = dk.tensor(rng.standard_normal((3, 6)).astype(np.float32), requires_grad=True)
    F.linear(x, w).sum().backward()  # d/dw of sum(x @ w^T): every row is x summed over rows
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(x.numpy().sum((0, 1)), (3, 6)),
                               rtol=1e-5)
