"""Fused backward kernels (device API 1.3; gelu's 1.4) through autograd: the SDK runs a
composite fused while recording when the plugin has its backward kernel, the
gradients match the decomposition's, optional gradients are asked only when
wanted, and a backward kernel that declines falls back to the decomposition
(recomputed, counted with its reason). The kernels themselves are checked
case by case by the conformance suite's fused section.

Needs: the reference CPU plugin (float32 forward and backward kernels).
"""

from __future__ import annotations

import numpy as np
import pytest

import devicekit
import devicekit.nn.functional as F
from devicekit import _core, _fused
from devicekit.testing.oracle import assert_close

RNG = np.random.default_rng(99)
SDPA = "scaled_dot_product_attention"


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _leaf(a, requires_grad=True):
    return devicekit.tensor(a, device="cpu:0", requires_grad=requires_grad)


def _grads(fn, arrays, needs, cot, fused):
    """Gradients (None where not required) of ``fn(*leaves)`` for cotangent ``cot``."""
    leaves = [None if a is None else _leaf(a, n) for a, n in zip(arrays, needs)]
    _fused.reset_composite_stats()
    with devicekit.fused_kernels(fused):
        out = fn(*leaves)
        out.backward(devicekit.tensor(cot, device="cpu:0"))
    stats = _fused.composite_stats()
    return [t.grad.numpy() if t is not None and t.grad is not None else None
            for t in leaves], stats


def _check(fn, arrays, needs, op, kernel, n=64):
    with devicekit.no_grad():
        shape = fn(*[None if a is None else _leaf(a, False) for a in arrays]).shape
    cot = _randn(*shape)
    got, stats = _grads(fn, arrays, needs, cot, True)
    want, _ = _grads(fn, arrays, needs, cot, False)
    assert stats[op + "_backward"]["fused"] == {kernel: 1}, stats
    assert stats[op]["decomposed"] == 0, stats
    tol = 4e-6 * np.sqrt(n)
    for i, (g, w, need) in enumerate(zip(got, want, needs)):
        if not need:
            assert g is None, f"input {i} needs no gradient but got one"
            continue
        assert_close(g, w, np.float32, tol=(tol, tol), case=f"{op} gradient of input {i}")


@pytest.mark.parametrize("needs", [(True, True, True), (True, False, True), (False, True, False),
                                   (True, True, False)], ids=str)
def test_layer_norm_gradients_match_the_decomposition(needs):
    x, w, b = _randn(6, 5, 32), _randn(32), _randn(32)
    _check(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b], needs, "layer_norm",
           "cpu.layer_norm_backward_f32", n=30)


def test_layer_norm_without_affine_and_rms_norm():
    x = _randn(7, 13)
    _check(lambda x: F.layer_norm(x), [x], [True], "layer_norm", "cpu.layer_norm_backward_f32")
    _check(lambda x, w: F.rms_norm(x, w), [x, _randn(13)], [True, True], "rms_norm",
           "cpu.rms_norm_backward_f32")
    _check(lambda x: F.rms_norm(x), [x], [True], "rms_norm", "cpu.rms_norm_backward_f32")


def test_softmax_gradient_matches_the_decomposition():
    _check(lambda x: F.softmax(x, axis=-1), [_randn(9, 17) * 3], [True], "softmax",
           "cpu.softmax_lastdim_backward_f32")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradient_matches_the_decomposition(approximate):
    _check(lambda x: F.gelu(x, approximate=approximate), [_randn(5, 7, 33) * 3], [True], "gelu",
           "cpu.gelu_backward_f32", n=1)


@pytest.mark.parametrize("kind", ["causal", "gqa", "bool_mask", "additive_mask", "permuted"])
def test_attention_gradients_match_the_decomposition(kind):
    b, h, n, d = 2, 4, 9, 8
    q, k, v = _randn(b, h, n, d), _randn(b, h, n, d), _randn(b, h, n, d)
    kw = {}
    if kind == "causal":
        kw["is_causal"] = True
    if kind == "gqa":
        k, v = _randn(b, 2, n, d), _randn(b, 2, n, d)
    if kind == "bool_mask":
        mask = RNG.random((n, n)) < 0.7
        mask[3] = False  # a query with no visible key: zero gradient from it
        kw["attn_mask"] = devicekit.tensor(mask, device="cpu:0")
    if kind == "additive_mask":
        kw["attn_mask"] = devicekit.tensor(_randn(n, n), device="cpu:0")

    def fn(q, k, v):
        if kind == "permuted":  # [B, L, H*D] pieces viewed as [B, H, L, D], as models make them
            q, k, v = (t.reshape(b, n, h, d).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, **kw)

    if kind == "permuted":
        q, k, v = (a.transpose(0, 2, 1, 3).reshape(b, n, h * d) for a in (q, k, v))
        # The forward kernel may decline strided q/k/v; the backward is then not asked.
        with devicekit.no_grad():
            _fused.reset_composite_stats()
            fn(*[_leaf(a, False) for a in (q, k, v)])
        if _fused.composite_stats()[SDPA]["decomposed"]:
            pytest.skip("the forward kernel declines permuted q/k/v in this build")
    _check(fn, [q, k, v], [True] * 3, SDPA, "cpu.sdpa_backward_f32", n=n * d)


def test_a_declined_backward_recomputes_the_decomposition_and_says_why(monkeypatch):
    real = _core.try_fused

    def decline_backwards(op, inputs, attrs, want=()):
        return "test: declined" if op.endswith("_backward") else real(op, inputs, attrs)

    x, w, b = _randn(4, 16), _randn(16), _randn(16)
    cot = _randn(4, 16)
    want, _ = _grads(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b], [True] * 3, cot, False)
    monkeypatch.setattr(_core, "try_fused", decline_backwards)
    got, stats = _grads(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b], [True] * 3, cot, True)
    assert stats["layer_norm"]["fused"] == {"cpu.layer_norm_f32": 1}
    assert stats["layer_norm_backward"] == {"decomposed": 1, "fused": {},
                                            "why_decomposed": {"test: declined": 1}}
    for g, r in zip(got, want):
        assert_close(g, r, np.float32, tol=(1e-5, 1e-5), case="recomputed gradient")


def test_a_mask_that_requires_grad_keeps_the_decomposition():
    q = _leaf(_randn(1, 2, 3, 4))
    mask = _leaf(_randn(3, 3))
    _fused.reset_composite_stats()
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    out.sum().backward()
    assert mask.grad is not None
    assert _fused.composite_stats()[SDPA]["why_decomposed"] == {
        "autograd is recording (the mask requires grad; the fused backward gives none)": 1}


def test_optional_gradients_are_asked_only_when_wanted(monkeypatch):
    seen = []
    real = _core.try_fused

    def spy(op, inputs, attrs, want=()):
        if op.endswith("_backward"):
            seen.append((op, list(want)))
        return real(op, inputs, attrs, want)

    monkeypatch.setattr(_core, "try_fused", spy)
    x, w, b = _leaf(_randn(3, 8)), _leaf(_randn(8), False), _leaf(_randn(8))
    F.layer_norm(x, w, b).sum().backward()
    assert seen == [("layer_norm_backward", [True, False, True])]
    assert w.grad is None and b.grad is not None and x.grad is not None


def test_backward_call_that_does_not_fit_is_declined_not_run():
    x = devicekit.tensor(_randn(3, 8), device="cpu:0")
    wrong = devicekit.tensor(_randn(3, 9), device="cpu:0")  # dout of another shape
    assert _core.try_fused("layer_norm_backward", [wrong, x, None], {"eps": 1e-5},
                           [True, False, False]) == "the operands do not fit the op's signature"
    with pytest.raises(devicekit.DeviceKitError, match="output flags"):
        _core.try_fused("layer_norm_backward", [x, x, None], {"eps": 1e-5}, [True])
