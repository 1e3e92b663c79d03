"""The CUDA plugin's fused kernels (cuda.<op>_<f32|f16|bf16>), run in its
emulated build: for each fused op (rms_norm, layer_norm, softmax, gelu in
both forms, scaled_dot_product_attention), forward and backward, and each
of float32, float16 and bfloat16, the SDK picks the cuda.* kernel
(composite_stats names it, nothing is decomposed) and its result matches the
float64 oracle within the bound the conformance suite sets for that op and
dtype (``_nn.tolerance``'s: the dtype's transcendental tolerance times
sqrt(n)). The kernels run under the SIMT emulator's checks (shared memory
bounds, unwritten reads, races, divergent barriers and shuffles), so a
finding there fails the call. Sizes cross the kernels' tiles (32-key
attention tiles, 8-row query blocks, rows longer than a block); attention
also on permuted q/k/v views, with causal, bool and additive masks (a fully
masked row), grouped-query heads and Lq != Lk. The predicates' exactness:
mixed dtypes and what a kernel does not take are declined.

Needs: the cuda_sim plugin (installed, or built for the session by
conftest.py with cmake and a C++ compiler) and the
reference CPU plugin (float64 gradients of the decomposition).
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

DEV = "cuda_sim:0"
SDPA = "scaled_dot_product_attention"
SUFFIX = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
DTYPES = sorted(SUFFIX)


# The installed cuda_sim, or one built and loaded for the session (conftest.py).
pytestmark = pytest.mark.usefixtures("cuda_sim_device")


def _u(rng, *shape, scale=2.0):
    return rng.uniform(-scale, scale, shape)


def _sdpa_mask(rng, lq, lk):
    m = _u(rng, lq, lk)
    m[1] = -np.inf  # a fully masked row: output 0, no gradient
    return m


# name -> (op, rng -> (float64 args, kwargs), n: elements each output reduces)
CALLS = {
    "rms_norm": ("rms_norm", lambda r: ([_u(r, 5, 37), _u(r, 37)], {}), 37),
    "rms_norm_no_weight": ("rms_norm", lambda r: ([_u(r, 7, 3, 20), None], {}), 20),
    # rows longer than a block (256 threads): each thread strides
    "rms_norm_long_rows": ("rms_norm", lambda r: ([_u(r, 3, 2100), _u(r, 2100)], {}), 2100),
    "layer_norm": ("layer_norm", lambda r: ([_u(r, 4, 3, 50) + 3.0, _u(r, 50), _u(r, 50)], {}),
                   50),
    "layer_norm_no_affine": ("layer_norm", lambda r: ([_u(r, 9, 33), None, None], {}), 33),
    "softmax": ("softmax", lambda r: ([_u(r, 6, 129, scale=8.0)], {}), 129),
    "softmax_long_rows": ("softmax", lambda r: ([_u(r, 3, 3000, scale=4.0)], {}), 3000),
    # an axis other than the last: rows strided in memory
    "softmax_axis1": ("softmax", lambda r: ([_u(r, 3, 17, 5, scale=4.0)], {"axis": 1}), 17),
    "gelu": ("gelu", lambda r: ([_u(r, 3, 700, scale=6.0)], {}), 1),
    "gelu_tanh": ("gelu", lambda r: ([_u(r, 5, 99, scale=6.0)], {"approximate": "tanh"}), 1),
    "sdpa_causal_gqa": (SDPA, lambda r: ([_u(r, 2, 4, 9, 16), _u(r, 2, 2, 9, 16),
                                          _u(r, 2, 2, 9, 8)], {"is_causal": True}), 16),
    "sdpa_additive_mask": (SDPA, lambda r: ([_u(r, 1, 2, 5, 8), _u(r, 1, 2, 7, 8),
                                             _u(r, 1, 2, 7, 4)],
                                            {"attn_mask": _sdpa_mask(r, 5, 7)}), 8),
    "sdpa_bool_mask": (SDPA, lambda r: ([_u(r, 1, 2, 6, 4), _u(r, 1, 2, 6, 4),
                                         _u(r, 1, 2, 6, 4)],
                                        {"attn_mask": r.random((6,)) < 0.6}), 6),
    "sdpa_scale_lq_ne_lk": (SDPA, lambda r: ([_u(r, 1, 2, 3, 5), _u(r, 1, 2, 40, 5),
                                              _u(r, 1, 2, 40, 3)],
                                             {"is_causal": True, "scale": 0.7}), 40),
    # several 32-key tiles and 8-row query blocks, ragged at the ends
    "sdpa_large": (SDPA, lambda r: ([_u(r, 1, 2, 37, 16), _u(r, 1, 2, 70, 16),
                                     _u(r, 1, 2, 70, 8)], {}), 70),
}
FORWARD = sorted(CALLS)
# The backward on calls of every op (small ones: the float64 reference
# differentiates the decomposition on the CPU plugin).
BACKWARD = ["rms_norm", "rms_norm_no_weight", "layer_norm", "layer_norm_no_affine", "softmax",
            "gelu", "gelu_tanh", "sdpa_causal_gqa", "sdpa_additive_mask",
            "sdpa_bool_mask", "sdpa_scale_lq_ne_lk", "sdpa_large"]


def _kernel(op, dtype, backward=False):
    return f"cuda.{op}{'_backward' if backward else ''}_{SUFFIX[dtype]}"


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


def _dev(a, dtype=None, requires_grad=False, device=DEV):
    if not isinstance(a, np.ndarray):
        return a
    return dk.tensor(a, device=device, dtype=dtype, requires_grad=requires_grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FORWARD)
def test_forward_runs_the_cuda_kernel_and_matches_float64(name, dtype):
    op, args, kwargs, n = _call(name, dtype, 7)
    _fused.reset_composite_stats()
    out = getattr(F, op)(*[_dev(a, dtype) for a in args],
                         **{k: _dev(v, dtype if v.dtype != bool else None)
                            if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
    assert str(out.dtype) == dtype
    got = out.numpy()
    stats = _fused.composite_stats()[op]
    assert stats["fused"] == {_kernel(op, dtype): 1} and stats["decomposed"] == 0, stats
    want = O.round_to(getattr(N, op)(*args, **kwargs), dtype)
    O.assert_close(got, want, dtype, op=op, tol=_tolerance(op, dtype, n),
                   case=f"{name} {dtype} cuda fused vs float64")


def _grads(op, args, kwargs, cot, dtype, fused, device):
    """Gradients of every floating input (in ``dtype``), and composite_stats."""
    leaves = [None if a is None else _dev(a, dtype, True, device) for a in args]
    kw = {k: _dev(v, dtype if v.dtype != bool else None, device=device)
          if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    _fused.reset_composite_stats()
    with dk.fused_kernels(fused):
        out = getattr(F, op)(*leaves, **kw)
        out.backward(dk.tensor(cot, device=device, dtype=dtype))
    return [None if t is None else t.grad.numpy() for t in leaves], _fused.composite_stats()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKWARD)
def test_backward_runs_the_cuda_kernels_and_matches_float64(name, dtype):
    op, args, kwargs, n = _call(name, dtype, 11)
    shape = getattr(N, op)(*args, **kwargs).shape
    cot = O.round_to(np.random.default_rng(3).standard_normal(tuple(shape)), dtype)
    got, stats = _grads(op, args, kwargs, cot, dtype, True, DEV)
    assert stats[op]["fused"] == {_kernel(op, dtype): 1}, stats
    assert stats[op + "_backward"]["fused"] == {_kernel(op, dtype, backward=True): 1}, stats
    assert stats[op + "_backward"]["decomposed"] == 0, stats
    wide = [None if a is None else np.asarray(a, np.float64) for a in args]
    exact, _ = _grads(op, wide, kwargs, cot.astype(np.float64), "float64", False, "cpu:0")
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
                  device=DEV, dtype=dtype)
    return x.reshape(b, n, h, d).transpose(1, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_reads_permuted_views_in_place(dtype):
    _, args, kwargs, n = _call("sdpa_causal_gqa", dtype, 5)
    views = [_blhd_view(a, dtype) for a in args]
    assert not views[0].is_contiguous()
    _fused.reset_composite_stats()
    got = F.scaled_dot_product_attention(*views, **kwargs).numpy()
    assert _fused.composite_stats()[SDPA]["fused"] == {_kernel(SDPA, dtype): 1}
    want = O.round_to(N.scaled_dot_product_attention(*args, **kwargs), dtype)
    O.assert_close(got, want, dtype, op=SDPA, tol=_tolerance(SDPA, dtype, n),
                   case=f"permuted {dtype}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_attention_takes_a_float32_additive_mask_with_16_bit_q_k_v(dtype):
    op, args, kwargs, n = _call("sdpa_additive_mask", dtype, 9)
    mask = dk.tensor(kwargs["attn_mask"].astype(np.float32), device=DEV)
    leaves = [_dev(a, dtype, requires_grad=True) for a in args]
    _fused.reset_composite_stats()
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask)
    out.backward(dk.ones(list(out.shape), device=DEV, dtype=dtype))
    stats = _fused.composite_stats()
    assert stats[SDPA]["fused"] == {_kernel(SDPA, dtype): 1}, stats
    assert stats[SDPA + "_backward"]["fused"] == {_kernel(SDPA, dtype, True): 1}, stats
    want = O.round_to(N.scaled_dot_product_attention(*args, **kwargs), dtype)
    O.assert_close(out.numpy(), want, dtype, op=SDPA, tol=_tolerance(SDPA, dtype, n),
                   case=f"float32 mask {dtype}")


def test_mixed_dtypes_are_declined_and_decomposed():
    """rms_norm with a float16 x and a float32 weight: no cuda kernel takes
    mixed dtypes, so the SDK decomposes (and still computes it right)."""
    r = np.random.default_rng(2)
    x, w = O.round_to(_u(r, 4, 16), "float16"), _u(r, 16)
    _fused.reset_composite_stats()
    try:
        out = F.rms_norm(_dev(x, "float16"), _dev(w, "float32"))
    except dk.DeviceKitError as e:  # a decomposition needing base ops the build lacks
        pytest.skip(f"the decomposition cannot run on {DEV}: {e}")
    stats = _fused.composite_stats()["rms_norm"]
    assert stats["fused"] == {} and stats["decomposed"] == 1, stats
    assert out.shape == [4, 16] or tuple(out.shape) == (4, 16)


def test_every_registry_entry_is_named_by_op_and_dtype():
    """30 entries: 5 ops x (forward, backward) x 3 dtypes, cuda.<op>_<dtype>."""
    names = {k["name"] for k in dk.device(DEV).plugin.fused_kernels()}
    want = {_kernel(op, dt, bw) for op in ("rms_norm", "layer_norm", "softmax", "gelu", SDPA)
            for dt in DTYPES for bw in (False, True)}
    assert want <= names, sorted(want - names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_backward_off_the_last_axis_runs_in_float32_only(dtype):
    """softmax over axis 1: the forward kernel takes it in every dtype; the
    backward kernel only in float32 (a 16-bit out's rounding cancels in
    dout - sum(dout * out); the SDK differentiates the decomposition
    instead), and the gradient is right either way."""
    op, args, kwargs, n = _call("softmax_axis1", dtype, 11)
    cot = O.round_to(np.random.default_rng(3).standard_normal(args[0].shape), dtype)
    try:
        got, stats = _grads(op, args, kwargs, cot, dtype, True, DEV)
    except dk.DeviceKitError as e:  # the decomposition's base ops missing from this build
        pytest.skip(f"the decomposition cannot run on {DEV}: {e}")
    backward = stats[op + "_backward"]
    if dtype == "float32":
        assert backward["fused"] == {_kernel(op, dtype, True): 1}, stats
    else:
        assert stats[op]["fused"] == {_kernel(op, dtype): 1}, stats
        assert backward["fused"] == {} and backward["decomposed"] == 1, stats
    exact, _ = _grads(op, [np.asarray(args[0], np.float64)], kwargs, cot.astype(np.float64),
                      "float64", False, "cpu:0")
    rtol, atol = _tolerance(op, dtype, n)
    O.assert_close(got[0], O.round_to(exact[0], dtype), dtype, op=op, tol=(2 * rtol, 2 * atol),
                   case=f"softmax axis 1 {dtype}: gradient vs float64")


@pytest.mark.parametrize("name", ["sdpa_large", "layer_norm"])
def test_backward_is_bitwise_reproducible(name):
    """No float atomics: every gradient element is summed by one thread in a
    fixed order, so two runs give the same bits although the emulator runs
    the blocks in a different shuffled order each launch."""
    op, args, kwargs, _ = _call(name, "float32", 13)
    cot = np.random.default_rng(4).standard_normal(getattr(N, op)(*args, **kwargs).shape)
    first, stats = _grads(op, args, kwargs, cot.astype(np.float32), "float32", True, DEV)
    assert stats[op + "_backward"]["fused"] == {_kernel(op, "float32", True): 1}, stats
    second, _ = _grads(op, args, kwargs, cot.astype(np.float32), "float32", True, DEV)
    for a, b in zip(first, second):
        if a is not None:
            assert a.tobytes() == b.tobytes()
