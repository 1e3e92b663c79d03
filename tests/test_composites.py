"""Composite ops (devicekit.nn.functional): forward against the float64 oracle
(oracle_nn) in float32/float16/bfloat16, gradients against float64 central
differences, the fused-dispatch contract, edge cases and error paths.

Needs: the reference CPU plugin (cpu:0).
"""

import math

import numpy as np
import pytest

import devicekit as dk
import devicekit.nn.functional as F
from devicekit import _fused, ops
from devicekit.testing import oracle as O
from devicekit.testing import oracle_nn as N
from devicekit.testing.gradcheck import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape)


def check(actual, expected, dtype="float32", k=None, case=""):
    """actual (Tensor) vs the oracle's float64 result rounded to dtype; k: the
    accumulation length for matmul-like ops (scales the tolerance)."""
    assert actual.dtype == dtype, (actual.dtype, dtype)
    O.assert_close(actual.numpy(), O.round_to(np.asarray(expected, np.float64), dtype), dtype,
                   op="matmul" if k else "composite", n=k, case=case)


def t(a, dtype="float32"):
    return dk.tensor(np.asarray(a).astype(O.np_dtype(dtype)))


# Each case: (F function, oracle function, float64 inputs, kwargs, accumulation length)
X = rand(3, 8)
W8, B8 = rand(8), rand(8)
FORWARD = {
    "softmax": (F.softmax, N.softmax, [X], {"axis": 0}, None),
    "log_softmax": (F.log_softmax, N.log_softmax, [X], {}, None),
    "logsumexp": (F.logsumexp, N.logsumexp, [X], {"axis": 1, "keepdims": True}, None),
    "mean": (F.mean, N.mean, [X], {"axis": 1}, None),
    "var": (F.var, N.var, [X], {"axis": 1}, None),
    "var_all_biased": (F.var, N.var, [X], {"correction": 0}, None),
    "layer_norm": (F.layer_norm, N.layer_norm, [X, W8, B8], {}, None),
    "layer_norm_plain": (F.layer_norm, N.layer_norm, [X], {"eps": 1e-3}, None),
    "rms_norm": (F.rms_norm, N.rms_norm, [X, W8], {}, None),
    "relu": (F.relu, N.relu, [X], {}, None),
    "sigmoid": (F.sigmoid, N.sigmoid, [X * 10], {}, None),
    "silu": (F.silu, N.silu, [X], {}, None),
    "gelu": (F.gelu, N.gelu, [X], {}, None),
    "gelu_tanh": (F.gelu, N.gelu, [X], {"approximate": "tanh"}, None),
    "swiglu": (F.swiglu, N.swiglu, [X], {}, None),
    "linear": (F.linear, N.linear, [X, rand(5, 8), rand(5)], {}, 8),
    "rotary": (F.rotary_embedding, N.rotary_embedding, [rand(2, 3, 8), rand(3, 8), rand(3, 8)], {}, None),
    "conv2d": (F.conv2d, N.conv2d, [rand(2, 3, 5, 6), rand(4, 3, 3, 2), rand(4)],
               {"stride": (2, 1), "padding": 1}, 18),
    "max_pool2d": (F.max_pool2d, N.max_pool2d, [rand(2, 2, 5, 5)], {"kernel_size": 3, "stride": 2,
                                                                     "padding": 1}, None),
    "avg_pool2d": (F.avg_pool2d, N.avg_pool2d, [rand(1, 2, 4, 6)], {"kernel_size": (2, 3)}, 6),
    "sdpa_gqa": (F.scaled_dot_product_attention, N.scaled_dot_product_attention,
                 [rand(2, 4, 3, 5), rand(2, 2, 6, 5), rand(2, 2, 6, 3)], {}, 6),
    "sdpa_causal_lq_ne_lk": (F.scaled_dot_product_attention, N.scaled_dot_product_attention,
                             [rand(1, 2, 3, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)],
                             {"is_causal": True, "scale": 0.7}, 5),
    "sdpa_float_mask_batch_dims": (F.scaled_dot_product_attention, N.scaled_dot_product_attention,
                                   [rand(2, 1, 2, 3, 4), rand(2, 1, 2, 4, 4), rand(2, 1, 2, 4, 4),
                                    rand(3, 4)], {}, 4),
}


@pytest.mark.parametrize("name", sorted(FORWARD))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_forward_against_oracle(name, dtype):
    fn, ref, inputs, kwargs, k = FORWARD[name]
    rounded = [O.round_to(a, dtype) for a in inputs]  # the oracle sees the exact inputs
    check(fn(*[t(a, dtype) for a in rounded], **kwargs), ref(*rounded, **kwargs), dtype, k, name)


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_gradient_against_finite_differences(name):
    fn, _, inputs, kwargs, _ = FORWARD[name]
    gradcheck(lambda *xs: fn(*xs, **kwargs), *inputs)


def test_mask_bool_and_fully_masked_rows_give_zero_output_and_gradient():
    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 4, 4), rand(1, 2, 4, 2)
    mask = np.array([[True, False, True, False], [False] * 4, [True] * 4])[None, None]
    out = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=dk.tensor(mask))
    check(out, N.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert np.all(out.numpy()[..., 1, :] == 0)
    float_mask = np.where(mask, 0.0, -np.inf)
    out = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(float_mask))
    check(out, N.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=dk.tensor(mask)),
              q, k, v)
    qt = dk.tensor(q, requires_grad=True)
    ops.sum(F.scaled_dot_product_attention(qt, dk.tensor(k), dk.tensor(v),
                                           attn_mask=dk.tensor(mask))).backward()
    grad = qt.grad.numpy()
    assert np.all(np.isfinite(grad)) and np.all(grad[..., 1, :] == 0)


def test_causal_with_more_queries_than_keys_masks_nothing_beyond_the_diagonal():
    q, k, v = rand(1, 1, 4, 2), rand(1, 1, 2, 2), rand(1, 1, 2, 2)
    out = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True)
    check(out, N.scaled_dot_product_attention(q, k, v, is_causal=True))
    np.testing.assert_allclose(out.numpy()[0, 0, 0], v[0, 0, 0], rtol=1e-6)  # row 0 sees key 0 only


def test_logsumexp_special_rows():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [1000.0, 1000.0], [-np.inf, 0.0]])
    out = F.logsumexp(t(x), 1)
    check(out, N.logsumexp(x, 1))
    np.testing.assert_array_equal(out.numpy()[:2], [-np.inf, np.inf])
    empty = F.logsumexp(dk.zeros(2, 0), 1)
    assert empty.shape == (2,) and np.all(empty.numpy() == -np.inf)


def test_nan_propagates_and_empty_and_size_one():
    x = np.array([[1.0, np.nan, 2.0], [0.5, 0.5, 0.5]])
    for fn, ref in ((F.softmax, N.softmax), (F.relu, N.relu), (F.sigmoid, N.sigmoid),
                    (F.layer_norm, N.layer_norm), (F.rms_norm, N.rms_norm)):
        check(fn(t(x)), ref(x), case=fn.__name__)
    e = np.zeros((0, 4))
    for fn, ref in ((F.softmax, N.softmax), (F.gelu, N.gelu), (F.layer_norm, N.layer_norm),
                    (F.silu, N.silu)):
        check(fn(t(e)), ref(e), case="empty " + fn.__name__)
    one = rand(3, 1)
    check(F.softmax(t(one)), np.ones((3, 1)))
    check(F.layer_norm(t(one)), np.zeros((3, 1)))
    check(F.var(t(one), 0), N.var(one, 0))


def test_cross_entropy_reductions_ignore_index_and_all_ignored():
    logits, target = rand(5, 4), np.array([0, 3, -100, 1, 2])
    for reduction in ("mean", "sum", "none"):
        out = F.cross_entropy(t(logits), dk.tensor(target), reduction=reduction)
        check(out, N.cross_entropy(logits, target, reduction=reduction), case=reduction)
    spatial, target2 = rand(2, 3, 2, 2), np.array([[[0, 2], [1, -100]], [[2, 2], [0, 1]]])
    check(F.cross_entropy(t(spatial), dk.tensor(target2)), N.cross_entropy(spatial, target2))
    check(F.cross_entropy(t(logits[0]), dk.tensor(np.array(3))), N.cross_entropy(logits[0], 3))
    assert math.isnan(F.cross_entropy(t(logits), dk.tensor(np.full(5, -100))).item())
    gradcheck(lambda x: F.cross_entropy(x, dk.tensor(target)), logits)
    gradcheck(lambda x: F.cross_entropy(x, dk.tensor(target2), reduction="sum"), spatial)


def test_embedding_forward_and_gradient():
    table, ids = rand(5, 3), np.array([[0, 4, 4], [2, 1, 0]], np.int32)
    check(F.embedding(dk.tensor(ids), t(table)), N.embedding(ids, table))
    gradcheck(lambda w: F.embedding(dk.tensor(ids), w), table)  # repeated ids accumulate


def test_dropout_mask_scale_and_limits():
    x = rand(4, 50)
    for p in (0.0, 0.3, 1.0):
        check(F.dropout(t(x), p, seed=7), N.dropout(x, p, 7), case=f"p={p}")
    out = F.dropout(t(x), 0.5, seed=7).numpy()
    assert 0.3 < np.mean(out == 0) < 0.7
    assert F.dropout(t(x), 0.5, seed=7, training=False).numpy().tolist() == t(x).numpy().tolist()
    gradcheck(lambda a: F.dropout(a, 0.4, seed=3), rand(3, 4))


def test_adamw_step_against_oracle_and_torch():
    p, g, m, v = rand(3, 4), rand(3, 4), rand(3, 4), rand(3, 4, low=0.0)
    args = dict(step=3, lr=1e-2, weight_decay=0.1)
    out = F.adamw_step(t(p), t(g), t(m), t(v), **args)
    for got, want in zip(out, N.adamw_step(p, g, m, v, **args)):
        check(got, want)
    torch = pytest.importorskip("torch")
    tp = torch.tensor(p, requires_grad=True)
    opt = torch.optim.AdamW([tp], lr=1e-2, weight_decay=0.1)
    new = (dk.tensor(p), dk.tensor(np.zeros_like(p)), dk.tensor(np.zeros_like(p)))
    for step in (1, 2, 3):
        tp.grad = torch.tensor(g * step)
        opt.step()
        new = F.adamw_step(new[0], dk.tensor(g * step), new[1], new[2], step, lr=1e-2,
                           weight_decay=0.1)
    np.testing.assert_allclose(new[0].numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_against_torch_functional():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    q, k, v = rand(1, 4, 3, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    ours = F.scaled_dot_product_attention(dk.tensor(q), dk.tensor(k), dk.tensor(v), is_causal=True)
    theirs = tf.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                                             is_causal=True, enable_gqa=True)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
    x = rand(2, 3, 6, 6)
    w = rand(4, 3, 3, 3)
    np.testing.assert_allclose(F.conv2d(dk.tensor(x), dk.tensor(w), stride=2, padding=1).numpy(),
                               tf.conv2d(torch.tensor(x), torch.tensor(w), stride=2, padding=1).numpy(),
                               rtol=1e-12, atol=1e-12)


def test_fused_dispatch_contract(monkeypatch):
    seen = []
    monkeypatch.setattr(_fused, "_try_fused", lambda op, inputs, attrs: seen.append((op, inputs, attrs)))
    x, w, b = t(X), t(W8), t(B8)
    F.rms_norm(x, w, eps=1e-5)
    F.layer_norm(x, None, b)
    F.softmax(x, axis=-2)
    q = t(rand(1, 2, 3, 4))
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert [(op, len(inputs), attrs) for op, inputs, attrs in seen] == [
        ("rms_norm", 2, {"eps": 1e-5}), ("layer_norm", 3, {"eps": 1e-5}), ("softmax", 1, {"axis": 0}),
        ("scaled_dot_product_attention", 4, {"scale": 0.5, "is_causal": True})]
    assert seen[0][1][0] is x and seen[0][1][1] is w and seen[1][1][1] is None and seen[1][1][2] is b
    assert seen[3][1][3] is None


def test_tensor_methods():
    x = t(X)
    check(x.softmax(0), N.softmax(X, 0))
    check(x.relu(), N.relu(X))
    check(x.log_softmax(-1), N.log_softmax(X))
    check(x.sigmoid(), N.sigmoid(X))
    check(x.var(1), N.var(X, 1))


ERRORS = [
    (lambda: F.layer_norm(t(X), t(rand(7))), dk.InvalidArgumentError, r"layer_norm: weight.*\[8\].*\[7\]"),
    (lambda: F.rms_norm(t(1.0), None), dk.InvalidArgumentError, r"rms_norm: x must have rank >= 1"),
    (lambda: F.softmax(t(X), 2), dk.InvalidArgumentError, r"softmax: axis 2.*\[3, 8\]"),
    (lambda: F.linear(t(X), t(rand(5, 7))), dk.InvalidArgumentError, r"linear: x \[3, 8\].*\[5, 7\]"),
    (lambda: F.embedding(t(X), t(X)), dk.DTypeError, r"embedding: ids"),
    (lambda: F.cross_entropy(t(X), t(np.zeros(3))), dk.DTypeError, r"cross_entropy: target"),
    (lambda: F.cross_entropy(t(X), dk.tensor(np.zeros(4, np.int64))), dk.InvalidArgumentError,
     r"target \[4\].*\[3, 8\]"),
    (lambda: F.dropout(t(X), 1.5, 0), dk.InvalidArgumentError, r"dropout: p must be in \[0, 1\]"),
    (lambda: F.swiglu(t(rand(2, 3))), dk.InvalidArgumentError, r"swiglu.*even.*\[2, 3\]"),
    (lambda: F.gelu(t(X), "fast"), dk.InvalidArgumentError, r"gelu: approximate"),
    (lambda: F.scaled_dot_product_attention(t(rand(1, 3, 2, 4)), t(rand(1, 2, 2, 4)), t(rand(1, 2, 2, 4))),
     dk.InvalidArgumentError, r"multiple of k/v heads.*q \[1, 3, 2, 4\]"),
    (lambda: F.scaled_dot_product_attention(t(rand(1, 2, 2, 4)), t(rand(1, 2, 2, 3)), t(rand(1, 2, 2, 4))),
     dk.InvalidArgumentError, r"head dim"),
    (lambda: F.scaled_dot_product_attention(t(rand(2, 4)), t(rand(2, 4)), t(rand(2, 4))),
     dk.InvalidArgumentError, r"q must have rank >= 3"),
    (lambda: F.scaled_dot_product_attention(t(rand(1, 2, 2, 4)), t(rand(1, 2, 3, 4)), t(rand(1, 2, 3, 4)),
                                            attn_mask=t(rand(2, 2))), dk.InvalidArgumentError,
     r"attn_mask \[2, 2\] does not broadcast to \[1, 2, 2, 3\]"),
    (lambda: F.rotary_embedding(t(rand(2, 4)), t(rand(3, 4)), t(rand(3, 4))), dk.InvalidArgumentError,
     r"rotary_embedding: cos \[3, 4\]"),
    (lambda: F.conv2d(t(rand(1, 2, 4, 4)), t(rand(3, 1, 2, 2))), dk.InvalidArgumentError,
     r"conv2d: x \[1, 2, 4, 4\] has 2 channels"),
    (lambda: F.max_pool2d(t(rand(1, 1, 2, 2)), 3), dk.InvalidArgumentError, r"max_pool2d: kernel"),
    (lambda: F.adamw_step(t(X), t(W8), t(X), t(X), 1, 1e-3), dk.InvalidArgumentError,
     r"adamw_step: grad \[8\]"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_name_the_op_and_shapes(case):
    fn, exc, pattern = ERRORS[case]
    with pytest.raises(exc, match=pattern):
        fn()
