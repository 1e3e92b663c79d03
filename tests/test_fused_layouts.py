"""The reference CPU plugin's fused attention on the layouts attention code
hands it: q, k, v as permuted views (``x.reshape(b, n, h, d).transpose(1, 2)``,
pieces of one qkv projection), sliced, broadcast; and the layouts it declines.

The kernel reads q/k/v through their strides and does the same arithmetic in
the same order whatever the layout, so a view must give exactly (bit for bit)
what the dense copy of it gives; the dense result is checked against the
decomposition with the float32 tolerance of the composite (test_fused.py
checks the dense kernel against numpy float64).

Needs: the reference CPU plugin (its default build, with the flash kernel).
"""

from __future__ import annotations

import numpy as np
import pytest

import devicekit
import devicekit.nn.functional as F
from devicekit import _fused
from devicekit.testing.oracle import assert_close, tolerance

RNG = np.random.default_rng(4321)
SDPA = "scaled_dot_product_attention"
KERNEL = "cpu.sdpa_flash_f32"


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _t(a):
    return devicekit.tensor(a, device="cpu:0")


def _heads_view(a):
    """[B,H,L,D] array -> the equal view x.reshape(B, L, H, D).transpose(1, 2)
    of a dense [B, L, H*D] tensor x."""
    b, h, n, d = a.shape
    x = _t(np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(b, n, h * d))
    return x.reshape(b, n, h, d).transpose(1, 2)


def _attend(q, k, v, causal, mask=None):
    """(output, {kernel: launches}, decomposed calls) of one call."""
    _fused.reset_composite_stats()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal).numpy()
    st = _fused.composite_stats().get(SDPA, {"fused": {}, "decomposed": 0})
    return out, st["fused"], st["decomposed"]


def _same_as_dense(views, causal, case, mask=None):
    """The call on ``views`` runs the kernel and gives the dense call's bits;
    the dense call matches the decomposition."""
    out, fused, decomposed = _attend(*views, causal, mask)
    assert fused == {KERNEL: 1} and decomposed == 0, (case, fused, decomposed)
    dense = [_t(np.ascontiguousarray(v.numpy())) for v in views]
    want, fused, _ = _attend(*dense, causal, mask)
    assert fused == {KERNEL: 1}, (case, fused)
    np.testing.assert_array_equal(out, want, err_msg=case)
    with devicekit.fused_kernels(False):
        ref, _, _ = _attend(*dense, causal, mask)
    # the conformance fused section's bound: the transcendental float32
    # tolerance times sqrt(elements reduced), twice (both sides approximate)
    rtol, atol = tolerance("float32", "exp")
    f = 2 * np.sqrt(max(dense[1].shape[2], dense[0].shape[3], 1))
    assert_close(out, ref, np.float32, tol=(rtol * f, atol * f), case=case + " vs decomposition")


# b, hq, hkv, lq, lk, d, dv: GQA, Lq != Lk, D != Dv, lengths across the
# 64-query / 128-key tiles, head dims that are and are not vector multiples
# (V rows read in place or packed)
SHAPES = {
    "small": (2, 2, 2, 5, 7, 8, 8),
    "gqa": (1, 8, 2, 9, 13, 16, 8),
    "odd tiles": (1, 2, 1, 70, 131, 24, 40),
    "many key tiles": (1, 2, 2, 100, 300, 64, 64),
    "dv < d, odd": (2, 3, 1, 33, 67, 80, 13),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_permuted_heads_views(cpu, name, causal):
    b, hq, hkv, lq, lk, d, dv = SHAPES[name]
    views = [_heads_view(a) for a in (_randn(b, hq, lq, d), _randn(b, hkv, lk, d),
                                      _randn(b, hkv, lk, dv))]
    assert not views[0].is_contiguous()
    _same_as_dense(views, causal, f"{name} causal={causal}")


@pytest.mark.parametrize("causal", [False, True])
def test_pieces_of_one_qkv_tensor(cpu, causal):
    """q, k, v interleaved in one buffer (rows 3*H*D apart, overlapping spans);
    without causal, a bool mask broadcast over batch and heads."""
    b, n, h, d = 2, 150, 2, 32
    qkv = _t(_randn(b, n, 3 * h * d))
    views = [t.transpose(1, 2) for t in qkv.reshape(b, n, 3 * h, d).split(h, dim=2)]
    assert views[0].strides == (n * 3 * h * d, d, 3 * h * d, 1)
    mask = None if causal else _t(RNG.random((n, n)) < 0.8)
    _same_as_dense(views, causal, f"split causal={causal}", mask=mask)


def test_sliced_broadcast_and_size_one_rows(cpu):
    big = _randn(2, 4, 9, 16)
    # sliced heads and positions: an offset data pointer, strides of the big tensor
    q = _t(big)[:, 1:3, 2:7, :]
    k, v = _t(_randn(2, 2, 6, 16)), _t(_randn(2, 2, 6, 16))
    _same_as_dense([q, k, v], False, "sliced q")
    # k and v broadcast over heads (stride 0)
    kb = _t(_randn(2, 1, 6, 16)).expand(2, 2, 6, 16)
    vb = _t(_randn(2, 1, 6, 16)).expand(2, 2, 6, 16)
    assert kb.strides[1] == 0
    _same_as_dense([q, kb, vb], True, "broadcast k, v")
    # a last dim of size 1 whose stride is not 1 (any stride is right for it)
    q1, k1, v1 = (_t(_randn(1, 2, 1, n)).transpose(2, 3) for n in (5, 4, 4))
    assert q1.shape == (1, 2, 5, 1) and q1.strides[3] == 5
    _same_as_dense([q1, k1, v1], False, "size-1 rows")


def test_permuted_views_with_empty_dims(cpu):
    q = _heads_view(_randn(1, 2, 4, 8))
    k, v = (_heads_view(np.zeros((1, 2, 0, 8), np.float32)) for _ in range(2))
    out, fused, _ = _attend(q, k, v, False)
    assert fused == {KERNEL: 1} and out.shape == (1, 2, 4, 8) and (out == 0).all()
    out, fused, _ = _attend(_heads_view(np.zeros((1, 2, 0, 8), np.float32)),
                            _heads_view(_randn(1, 2, 5, 8)), _heads_view(_randn(1, 2, 5, 8)),
                            True)
    assert out.shape == (1, 2, 0, 8)


def test_the_layout_attention_code_makes_runs_fused(cpu):
    """qkv.split, reshape, transpose(1, 2), no .contiguous(): the kernel
    takes it (this layout was once declined and decomposed)."""
    b, n, h, d = 2, 5, 2, 4
    qkv = _t(_randn(b, n, 3 * h * d))
    q, k, v = (x.reshape(b, n, h, d).transpose(1, 2) for x in qkv.split(h * d, dim=2))
    _same_as_dense([q, k, v], True, "split, reshape, transpose")


def test_a_strided_last_dim_is_declined_with_the_reason(cpu):
    """k transposed in memory (its rows strided) is declined: the decomposition
    runs, counted with the kernel's reason."""
    q, v = _t(_randn(1, 2, 4, 8)), _t(_randn(1, 2, 6, 8))
    k = _t(_randn(1, 2, 8, 6)).transpose(2, 3)
    out, fused, decomposed = _attend(q, k, v, False)
    assert fused == {} and decomposed == 1
    assert _fused.composite_stats()[SDPA]["why_decomposed"] == {
        f"{KERNEL}, cpu.sdpa_flash_bf16, cpu.sdpa_flash_f16 declined "
        "(operands: float32 dense, float32 strided, float32 dense, none)": 1}
    with devicekit.fused_kernels(False):
        ref, _, _ = _attend(q, k, v, False)
    np.testing.assert_array_equal(out, ref)
