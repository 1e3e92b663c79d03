"""The reference CPU plugin's float16 / bfloat16 fused kernels (cpu.<op>_f16,
cpu.<op>_bf16): for each fused op, forward and backward, and each 16-bit
dtype, the SDK picks the 16-bit kernel (composite_stats names it, nothing is
decomposed) and its result matches the float64 oracle within the bound the
conformance suite sets for that op and dtype (``_nn.tolerance``: float32
accumulation, one rounding to the output). Sizes cross the kernels' row
blocks and parallel chunks; attention also on permuted q/k/v views and with
16-bit and float32 additive masks. Mixed dtypes are declined (test_fused.py).

Needs: the reference CPU plugin (and its float64, for the gradients' oracle).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import devicekit as dk
import devicekit.nn.functional as F
from devicekit import _fused
from devicekit.testing import oracle as O
from devicekit.testing import oracle_nn as N

SDPA = "scaled_dot_product_attention"
SUFFIX = {"bfloat16": "bf16", "float16": "f16"}
KERNEL = {"rms_norm": "cpu.rms_norm", "layer_norm": "cpu.layer_norm",
          "softmax": "cpu.softmax_lastdim", SDPA: "cpu.sdpa_flash", "gelu": "cpu.gelu"}
BACKWARD_KERNEL = {"rms_norm": "cpu.rms_norm_backward",
                   "layer_norm": "cpu.layer_norm_backward",
                   "softmax": "cpu.softmax_lastdim_backward", SDPA: "cpu.sdpa_backward",
                   "gelu": "cpu.gelu_backward"}


def _u(rng, *shape, scale=2.0):
    return rng.uniform(-scale, scale, shape)


def _sdpa_mask(rng, lq, lk):
    m = _u(rng, lq, lk)
    m[1] = -np.inf  # a fully masked row: output 0
    return m


# name -> (op, rng -> (float64 args, kwargs), n: elements each output reduces)
CALLS = {
    "rms_norm": ("rms_norm", lambda r: ([_u(r, 5, 37), _u(r, 37)], {}), 37),
    # 1500 rows of 64: several 512-row blocks per thread, a ragged last one
    "rms_norm_many_rows": ("rms_norm", lambda r: ([_u(r, 1500, 64), None], {}), 64),
    "layer_norm": ("layer_norm", lambda r: ([_u(r, 4, 3, 50) + 3.0, _u(r, 50), _u(r, 50)], {}),
                   50),
    "softmax": ("softmax", lambda r: ([_u(r, 6, 129, scale=8.0)], {}), 129),
    "softmax_long_rows": ("softmax", lambda r: ([_u(r, 3, 40000, scale=4.0)], {}), 40000),
    "gelu": ("gelu", lambda r: ([_u(r, 3, 7000, scale=6.0)], {}), 1),
    "gelu_tanh": ("gelu", lambda r: ([_u(r, 5, 999, scale=6.0)], {"approximate": "tanh"}), 1),
    "sdpa_causal_gqa": (SDPA, lambda r: ([_u(r, 2, 4, 9, 16), _u(r, 2, 2, 9, 16),
                                          _u(r, 2, 2, 9, 8)], {"is_causal": True}), 16),
    "sdpa_additive_mask": (SDPA, lambda r: ([_u(r, 1, 2, 5, 8), _u(r, 1, 2, 7, 8),
                                             _u(r, 1, 2, 7, 4)],
                                            {"attn_mask": _sdpa_mask(r, 5, 7)}), 8),
    "sdpa_bool_mask": (SDPA, lambda r: ([_u(r, 1, 2, 6, 4), _u(r, 1, 2, 6, 4),
                                         _u(r, 1, 2, 6, 4)],
                                        {"attn_mask": r.random((6,)) < 0.6}), 6),
    # several 64-query / 128-key tiles of the flash kernel
    "sdpa_large": (SDPA, lambda r: ([_u(r, 1, 2, 150, 16), _u(r, 1, 2, 300, 16),
                                     _u(r, 1, 2, 300, 8)], {}), 300),
}
FORWARD = sorted(CALLS)
# The backward on calls of every op (small ones: the float64 reference
# differentiates the decomposition)
BACKWARD = ["rms_norm", "layer_norm", "softmax", "gelu", "gelu_tanh", "sdpa_causal_gqa",
            "sdpa_additive_mask", "sdpa_bool_mask"]


def _kernel(op, dtype, backward=False):
    return f"{(BACKWARD_KERNEL if backward else KERNEL)[op]}_{SUFFIX[dtype]}"


def _tolerance(op, dtype, n):
    """The conformance bound (conformance_tests/_nn.tolerance): the dtype's
    transcendental tolerance times sqrt(n)."""
    rtol, atol = O.tolerance(dtype, "exp")
    f = math.sqrt(max(int(n), 1))
    return rtol * f, atol * f


def _call(name, dtype, seed):
    op, make, n = CALLS[name]
    args, kwargs = make(np.random.default_rng(seed))
    round_ = lambda a: O.round_to(a, dtype) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a  # noqa: E731
    return op, [None if a is None else round_(a) for a in args], \
        {k: round_(v) for k, v in kwargs.items()}, n


def _dev(a, dtype=None, requires_grad=False):
    if not isinstance(a, np.ndarray):
        return a
    return dk.tensor(a, device="cpu:0", dtype=dtype, requires_grad=requires_grad)


@pytest.mark.parametrize("dtype", sorted(SUFFIX))
@pytest.mark.parametrize("name", FORWARD)
def test_forward_runs_the_16_bit_kernel_and_matches_float64(name, dtype):
    op, args, kwargs, n = _call(name, dtype, 7)
    _fused.reset_composite_stats()
    out = getattr(F, op)(*[_dev(a) for a in args], **{k: _dev(v) for k, v in kwargs.items()})
    assert str(out.dtype) == dtype
    got = out.numpy()
    stats = _fused.composite_stats()[op]
    assert stats["fused"] == {_kernel(op, dtype): 1} and stats["decomposed"] == 0, stats
    want = O.round_to(getattr(N, op)(*args, **kwargs), dtype)
    O.assert_close(got, want, dtype, op=op, tol=_tolerance(op, dtype, n),
                   case=f"{name} {dtype} fused vs float64")


def _grads(op, args, kwargs, cot, dtype, fused):
    """Gradients of every floating input (in ``dtype``), and composite_stats."""
    leaves = [None if a is None else _dev(a, dtype, requires_grad=True) for a in args]
    kw = {k: _dev(v, dtype if isinstance(v, np.ndarray) and v.dtype != bool else None)
          for k, v in kwargs.items()}
    _fused.reset_composite_stats()
    with dk.fused_kernels(fused):
        out = getattr(F, op)(*leaves, **kw)
        out.backward(dk.tensor(cot, device="cpu:0", dtype=dtype))
    return [None if t is None else t.grad.numpy() for t in leaves], _fused.composite_stats()


@pytest.mark.parametrize("dtype", sorted(SUFFIX))
@pytest.mark.parametrize("name", BACKWARD)
def test_backward_runs_the_16_bit_kernels_and_matches_float64(name, dtype):
    op, args, kwargs, n = _call(name, dtype, 11)
    with dk.no_grad():
        shape = getattr(F, op)(*[_dev(a) for a in args],
                               **{k: _dev(v) for k, v in kwargs.items()}).shape
    cot = O.round_to(np.random.default_rng(3).standard_normal(tuple(shape)), dtype)
    got, stats = _grads(op, args, kwargs, cot, dtype, True)
    assert stats[op]["fused"] == {_kernel(op, dtype): 1}, stats
    assert stats[op + "_backward"]["fused"] == {_kernel(op, dtype, backward=True): 1}, stats
    assert stats[op + "_backward"]["decomposed"] == 0, stats
    wide = [None if a is None else np.asarray(a, np.float64) for a in args]
    exact, _ = _grads(op, wide, kwargs, cot.astype(np.float64), "float64", False)
    # As conformance's fused section: each gradient element sums up to one
    # product per element of the largest input; twice the bound (the float64
    # decomposition's gradient is itself an approximation of the exact one).
    n = max([n] + [a.size for a in args if a is not None])
    rtol, atol = _tolerance(op, dtype, n)
    for i, (g, w) in enumerate(zip(got, exact)):
        if g is None:
            continue
        assert str(g.dtype) == dtype
        O.assert_close(g, O.round_to(w, dtype), dtype, op=op, tol=(2 * rtol, 2 * atol),
                       case=f"{name} {dtype}: gradient of input {i} vs float64")


def _blhd_view(a, dtype):
    """[B,H,L,D] values as the permuted view x.reshape(B, L, H, D).transpose(1, 2)."""
    b, h, n, d = a.shape
    x = dk.tensor(np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(b, n, h * d),
                  device="cpu:0", dtype=dtype)
    return x.reshape(b, n, h, d).transpose(1, 2)


@pytest.mark.parametrize("dtype", sorted(SUFFIX))
def test_attention_reads_permuted_16_bit_views_in_place(dtype):
    _, args, kwargs, n = _call("sdpa_causal_gqa", dtype, 5)
    views = [_blhd_view(a, dtype) for a in args]
    assert not views[0].is_contiguous()
    _fused.reset_composite_stats()
    got = F.scaled_dot_product_attention(*views, **kwargs).numpy()
    assert _fused.composite_stats()[SDPA]["fused"] == {_kernel(SDPA, dtype): 1}
    want = O.round_to(N.scaled_dot_product_attention(*args, **kwargs), dtype)
    O.assert_close(got, want, dtype, op=SDPA, tol=_tolerance(SDPA, dtype, n),
                   case=f"permuted {dtype}")


@pytest.mark.parametrize("dtype", sorted(SUFFIX))
def test_attention_takes_a_float32_additive_mask_with_16_bit_q_k_v(dtype):
    """A float32 mask beside 16-bit q/k/v (a mask built once in float32) runs
    fused, forward and backward, as the decomposition computes it."""
    op, args, kwargs, n = _call("sdpa_additive_mask", dtype, 9)
    mask = dk.tensor(kwargs["attn_mask"].astype(np.float32), device="cpu:0")
    leaves = [_dev(a, dtype, requires_grad=True) for a in args]
    _fused.reset_composite_stats()
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask)
    out.backward(dk.ones(list(out.shape), device="cpu:0", dtype=dtype))
    stats = _fused.composite_stats()
    assert stats[SDPA]["fused"] == {_kernel(SDPA, dtype): 1}, stats
    assert stats[SDPA + "_backward"]["fused"] == {_kernel(SDPA, dtype, True): 1}, stats
    want = O.round_to(N.scaled_dot_product_attention(*args, **kwargs), dtype)
    O.assert_close(out.numpy(), want, dtype, op=SDPA, tol=_tolerance(SDPA, dtype, n),
                   case=f"float32 mask {dtype}")
