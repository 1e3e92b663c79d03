"""Fused kernels (device API 1.2): the registry, the SDK's dispatch to it, and
the reference CPU plugin's kernels against an independent numpy float64
computation (written here: the composite-op oracle lives elsewhere).

Needs: the reference CPU plugin; the registry tests also a C compiler
(``bad_plugins``). The composites in devicekit.nn.functional are not needed:
``dispatch`` is driven with a fake decomposition that records its calls.
"""

from __future__ import annotations

import numpy as np
import pytest

import devicekit
from devicekit import DeviceError, PluginLoadError, _fused
from devicekit.testing.oracle import assert_close

RNG = np.random.default_rng(1234)
SDPA = "scaled_dot_product_attention"


def _randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _t(a):
    return devicekit.tensor(a, device="cpu:0")


def _fused_run(op, inputs, attrs, kernel):
    """Runs ``op`` through the fused path; it must be taken, by ``kernel``."""
    hit = _fused._try_fused(op, tuple(inputs), attrs)
    assert hit is not None, f"{op}: no fused kernel accepted the call"
    out, name = hit
    assert name == kernel
    return out.numpy()


# ---- numpy float64 references --------------------------------------------------

def ref_rms_norm(x, w, eps):
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) if x.shape[-1] else x
    return (y if w is None else y * w.astype(np.float64)).astype(np.float32)


def ref_layer_norm(x, w, b, eps):
    x = x.astype(np.float64)
    if x.shape[-1]:
        mean = np.mean(x, axis=-1, keepdims=True)
        x = (x - mean) / np.sqrt(np.mean((x - mean) ** 2, axis=-1, keepdims=True) + eps)
    if w is not None:
        x = x * w
    if b is not None:
        x = x + b
    return x.astype(np.float32)


def ref_softmax(x, axis):
    x = x.astype(np.float64)
    if x.size == 0:
        return x.astype(np.float32)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(np.float32)


def ref_sdpa(q, k, v, mask, scale, causal):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    lq, lk = q.shape[2], k.shape[2]
    s = (q * scale) @ np.swapaxes(k, -1, -2)
    visible = np.ones(s.shape, bool)
    if causal:
        visible &= np.tril(np.ones((lq, lk), bool))
    if mask is not None and mask.dtype == np.bool_:
        visible &= np.broadcast_to(mask, s.shape)
    elif mask is not None:
        s = s + mask.astype(np.float64)
    s = np.where(visible, s, -np.inf)
    with np.errstate(invalid="ignore"):
        m = np.max(s, axis=-1, keepdims=True) if lk else np.zeros(s.shape[:-1] + (1,))
        p = np.where(np.isneginf(s), 0.0, np.exp(s - m))  # excluded keys contribute nothing
        denom = np.sum(p, axis=-1, keepdims=True)
        out = (p @ v) / np.where(denom == 0, 1.0, denom)
    return np.where(denom == 0, 0.0, out).astype(np.float32)  # fully masked row -> 0


# ---- the registry ----------------------------------------------------------------

def test_cpu_plugin_registers_its_fused_kernels(cpu):
    assert cpu.plugin.api_version == devicekit.API_VERSION == "1.5"
    # one kernel per op and dtype, float32 first (the SDK asks them in this order)
    assert cpu.plugin.fused_kernels() == [
        {"op": op, "name": f"{name}_{dt}"} for op, name in (
            ("rms_norm", "cpu.rms_norm"), ("layer_norm", "cpu.layer_norm"),
            ("softmax", "cpu.softmax_lastdim"), (SDPA, "cpu.sdpa_flash"),
            ("rms_norm_backward", "cpu.rms_norm_backward"),
            ("layer_norm_backward", "cpu.layer_norm_backward"),
            ("softmax_backward", "cpu.softmax_lastdim_backward"),
            (SDPA + "_backward", "cpu.sdpa_backward"),
            ("gelu", "cpu.gelu"), ("gelu_backward", "cpu.gelu_backward"))
        for dt in ("f32", "bf16", "f16")]


def test_a_1_1_plugin_without_the_field_still_loads(bad_plugins):
    # api_1_1.c leaves a bogus pointer past its 1.1 struct_size: reading it would crash.
    plugin = devicekit.load_plugin(bad_plugins["api_1_1"])
    assert plugin.api_version == "1.1"
    assert plugin.fused_kernels() == []


def test_a_malformed_fused_table_is_refused_with_its_cause(bad_plugins):
    path = bad_plugins["fused_bad_op"]
    with pytest.raises(PluginLoadError) as excinfo:
        devicekit.load_plugin(path)
    msg = str(excinfo.value)
    for fragment in (str(path), "DK_FusedKernelTable.kernels[1]", "'bad_fused_op.op99'",
                     "op 99", "DK_FusedOpId"):
        assert fragment in msg, f"{fragment!r} not in {msg!r}"


def test_a_failing_fused_kernel_raises_naming_kernel_op_operands_device_plugin(
        bad_plugins, plugin_path):
    plugin_path([bad_plugins["errors_plugin"]])
    dev = devicekit.device("errplug:0")
    x = devicekit.tensor(np.ones((2, 3), np.float32), device=dev)
    with pytest.raises(DeviceError) as excinfo:
        _fused.dispatch("rms_norm", (x, None), {"eps": 1e-5}, lambda *_: pytest.fail("decomposed"))
    msg = str(excinfo.value)
    assert excinfo.value.code == "INVALID_ARGUMENT"
    for fragment in ("errors_plugin.rms_norm: deliberate failure", "errplug.rms_norm_fails",
                     "'rms_norm'", "float32[2, 3] on errplug:0", "None", "plugin 'errplug'",
                     "device errplug:0"):
        assert fragment in msg, f"{fragment!r} not in {msg!r}"


# ---- dispatch: which path runs, and that it is counted ------------------------------

class FakeDecomposition:
    def __init__(self):
        self.calls = 0

    def __call__(self, *inputs):
        self.calls += 1
        return "decomposed"


def test_dispatch_prefers_the_fused_kernel_and_counts_it(cpu):
    _fused.reset_composite_stats()
    decompose = FakeDecomposition()
    x = _randn(4, 8)
    out = _fused.dispatch("softmax", (_t(x),), {"axis": 1}, decompose)
    assert decompose.calls == 0
    assert_close(out.numpy(), ref_softmax(x, 1), np.float32, case="dispatch")
    assert _fused.composite_stats()["softmax"] == {
        "decomposed": 0, "fused": {"cpu.softmax_lastdim_f32": 1}, "why_decomposed": {}}


def test_fused_kernels_false_forces_the_decomposition(cpu):
    _fused.reset_composite_stats()
    decompose = FakeDecomposition()
    with devicekit.fused_kernels(False):
        assert _fused.dispatch("rms_norm", (_t(_randn(2, 4)), None), {"eps": 1e-6},
                               decompose) == "decomposed"
    assert decompose.calls == 1
    assert _fused.composite_stats()["rms_norm"] == {
        "decomposed": 1, "fused": {}, "why_decomposed": {"fused_kernels(False)": 1}}


def _rejected_cases():
    x64 = _randn(3, 4, dtype=np.float64)
    x = _randn(4, 6)
    q, k, v = _randn(1, 2, 3, 4), _randn(1, 2, 5, 4), _randn(1, 2, 5, 4)
    sdpa = {"scale": 0.5, "is_causal": False}
    return {
        "float64 rms_norm": ("rms_norm", lambda: (_t(x64), None), {"eps": 1e-5}),
        "float64 layer_norm": ("layer_norm", lambda: (_t(x64), None, None), {"eps": 1e-5}),
        "float64 softmax": ("softmax", lambda: (_t(x64),), {"axis": 1}),
        "non-contiguous rms_norm": ("rms_norm", lambda: (_t(x).transpose(0, 1), None),
                                    {"eps": 1e-5}),
        "non-contiguous softmax": ("softmax", lambda: (_t(x).transpose(0, 1),), {"axis": 1}),
        "softmax over axis 0": ("softmax", lambda: (_t(x),), {"axis": 0}),
        "weight of another length": ("rms_norm", lambda: (_t(x), _t(_randn(5))), {"eps": 1e-5}),
        "float64 weight": ("rms_norm", lambda: (_t(x), _t(_randn(6, dtype=np.float64))),
                           {"eps": 1e-5}),
        # mixed dtypes: every kernel takes one dtype for all its operands
        "bfloat16 x, float32 weight": ("rms_norm", lambda: (_t(x).to("bfloat16"), _t(_randn(6))),
                                       {"eps": 1e-5}),
        "float16 q, bfloat16 k and v": (SDPA, lambda: (_t(q).to("float16"), _t(k).to("bfloat16"),
                                                       _t(v).to("bfloat16"), None), sdpa),
        "float64 sdpa": (SDPA, lambda: tuple(_t(a.astype(np.float64)) for a in (q, k, v)) + (None,),
                         sdpa),
        "non-contiguous q": (SDPA, lambda: (_t(_randn(1, 2, 4, 3)).transpose(2, 3), _t(k), _t(v),
                                            None), sdpa),
        "integer mask": (SDPA, lambda: (_t(q), _t(k), _t(v), _t(np.ones((3, 5), np.int32))), sdpa),
        "float64 additive mask": (SDPA, lambda: (_t(q), _t(k), _t(v),
                                                 _t(np.zeros((3, 5), np.float64))), sdpa),
        "heads not a multiple": (SDPA, lambda: (_t(_randn(1, 3, 3, 4)), _t(k), _t(v), None), sdpa),
        "not a fused op": ("silu", lambda: (_t(x),), {}),
    }


@pytest.mark.parametrize("case", sorted(_rejected_cases()))
def test_calls_no_kernel_accepts_go_to_the_decomposition(cpu, case):
    op, make_inputs, attrs = _rejected_cases()[case]
    inputs = make_inputs()
    assert _fused._try_fused(op, inputs, attrs) is None
    _fused.reset_composite_stats()
    decompose = FakeDecomposition()
    assert _fused.dispatch(op, inputs, attrs, decompose) == "decomposed"
    assert decompose.calls == 1
    stats = _fused.composite_stats()[op]
    assert stats["decomposed"] == 1 and stats["fused"] == {}
    # Never silent: the one decomposed call is counted with its reason.
    assert stats["why_decomposed"] == {DECLINED[case]: 1}


def _no(kernel):
    """The reason when all of a kernel's dtype variants (_f32, _bf16, _f16) declined."""
    return ", ".join(f"{kernel}_{dt}" for dt in ("f32", "bf16", "f16")) + " declined (operands: "


_SDPA_NO = _no("cpu.sdpa_flash")
_RMS_NO, _SOFTMAX_NO = _no("cpu.rms_norm"), _no("cpu.softmax_lastdim")
_MISFIT = "the operands do not fit the op's signature"
DECLINED = {  # what composite_stats says about each case of _rejected_cases
    "float64 rms_norm": _RMS_NO + "float64 dense, none)",
    "float64 layer_norm": _no("cpu.layer_norm") + "float64 dense, none, none)",
    "float64 softmax": _SOFTMAX_NO + "float64 dense)",
    "non-contiguous rms_norm": _RMS_NO + "float32 strided, none)",
    "non-contiguous softmax": _SOFTMAX_NO + "float32 strided)",
    "softmax over axis 0": _SOFTMAX_NO + "float32 dense)",
    "weight of another length": _MISFIT,
    "float64 weight": _RMS_NO + "float32 dense, float64 dense)",
    "bfloat16 x, float32 weight": _RMS_NO + "bfloat16 dense, float32 dense)",
    "float16 q, bfloat16 k and v": _SDPA_NO + "float16 dense, bfloat16 dense, bfloat16 dense, none)",
    "float64 sdpa": _SDPA_NO + "float64 dense, float64 dense, float64 dense, none)",
    "non-contiguous q": _SDPA_NO + "float32 strided, float32 dense, float32 dense, none)",
    "integer mask": _MISFIT,
    # the mask as the kernel would see it: broadcast to [B, H, Lq, Lk]
    "float64 additive mask": _SDPA_NO + "float32 dense, float32 dense, float32 dense, float64 strided)",
    "heads not a multiple": _MISFIT,
    "not a fused op": "not a fused op of the device API",
}


def test_autograd_recording_without_a_backward_kernel_is_a_counted_reason(cpu, monkeypatch):
    import devicekit.nn.functional as F
    x = _t(_randn(3, 4))
    x.requires_grad = True
    _fused.reset_composite_stats()
    y = F.softmax(x, axis=-1)  # the cpu plugin has both kernels: fused, with one fused node
    assert y.grad_fn.name == "fused:softmax"
    assert _fused.composite_stats()["softmax"] == {
        "decomposed": 0, "fused": {"cpu.softmax_lastdim_f32": 1}, "why_decomposed": {}}
    # A plugin with the forward kernel and no backward one: the decomposition
    # records itself, and the reason names the missing kernel.
    real = _fused._core.has_fused_kernel
    monkeypatch.setattr(_fused._core, "has_fused_kernel",
                        lambda op, t: not op.endswith("_backward") and real(op, t))
    _fused.reset_composite_stats()
    y = F.softmax(x, axis=-1)
    assert y.grad_fn.name != "fused:softmax"
    assert _fused.composite_stats()["softmax"]["why_decomposed"] == {
        "autograd is recording (no softmax_backward kernel registered)": 1}


# ---- the CPU kernels against numpy float64 ---------------------------------------------

# (4100, 1025): over 16 MiB, so the norms write with streaming stores; odd rows
# start unaligned (the head and tail of each row use normal stores).
NORM_SHAPES = [(4, 8), (3, 5, 17), (1, 1), (7, 1), (2, 4099), (2, 0), (0, 16), (33,), (4100, 1025)]


@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm(cpu, shape, with_weight):
    x = _randn(*shape) * 3
    w = _randn(shape[-1]) if with_weight else None
    out = _fused_run("rms_norm", (_t(x), None if w is None else _t(w)), {"eps": 1e-6},
                     "cpu.rms_norm_f32")
    assert_close(out, ref_rms_norm(x, w, 1e-6), np.float32, case=f"{shape} weight={with_weight}")


@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
def test_layer_norm(cpu, shape, affine):
    x = _randn(*shape) + 5  # an offset mean: the two-pass variance matters
    w = _randn(shape[-1]) if affine in ("weight", "both") else None
    b = _randn(shape[-1]) if affine in ("bias", "both") else None
    out = _fused_run("layer_norm", (_t(x), *(None if a is None else _t(a) for a in (w, b))),
                     {"eps": 1e-5}, "cpu.layer_norm_f32")
    assert_close(out, ref_layer_norm(x, w, b, 1e-5), np.float32, case=f"{shape} {affine}")


def test_norms_propagate_nan_to_their_row_only(cpu):
    x = _randn(3, 10)
    x[1, 4] = np.nan
    for op, inputs, ref, kernel in (
            ("rms_norm", (_t(x), None), ref_rms_norm(x, None, 1e-6), "cpu.rms_norm_f32"),
            ("layer_norm", (_t(x), None, None), ref_layer_norm(x, None, None, 1e-6),
             "cpu.layer_norm_f32")):
        out = _fused_run(op, inputs, {"eps": 1e-6}, kernel)
        assert np.isnan(out[1]).all() and not np.isnan(out[[0, 2]]).any()
        assert_close(out, ref, np.float32, case=f"{op} NaN")


@pytest.mark.parametrize("shape", NORM_SHAPES + [(2, 3, 1000)], ids=str)
def test_softmax_last_axis(cpu, shape):
    x = _randn(*shape) * 4
    out = _fused_run("softmax", (_t(x),), {"axis": len(shape) - 1}, "cpu.softmax_lastdim_f32")
    assert_close(out, ref_softmax(x, -1), np.float32, case=str(shape))


def test_softmax_special_values(cpu):
    x = np.array([[0.0, -np.inf, 1.0, 2.0],      # -inf: weight 0
                  [np.nan, 1.0, 2.0, 3.0],       # NaN: the whole row
                  [-np.inf] * 4,                 # all -inf: NaN, as the decomposition gives
                  [1e30, -1e30, 0.0, 1e30]], np.float32)  # max-subtracted: no overflow
    out = _fused_run("softmax", (_t(x),), {"axis": 1}, "cpu.softmax_lastdim_f32")
    assert_close(out, ref_softmax(x, 1), np.float32, case="specials")
    assert out[0, 1] == 0.0 and np.isnan(out[1]).all() and np.isnan(out[2]).all()


def _sdpa_case(b, hq, hkv, lq, lk, d, dv, mask=None, causal=False, scale=None):
    q, k, v = _randn(b, hq, lq, d), _randn(b, hkv, lk, d), _randn(b, hkv, lk, dv)
    scale = 1.0 / np.sqrt(max(d, 1)) if scale is None else scale
    out = _fused_run(SDPA, (_t(q), _t(k), _t(v), None if mask is None else _t(mask)),
                     {"scale": scale, "is_causal": causal}, "cpu.sdpa_flash_f32")
    return out, ref_sdpa(q, k, v, mask, scale, causal)


SDPA_SHAPES = {  # b, hq, hkv, lq, lk, d, dv
    "tiny": (1, 1, 1, 1, 1, 1, 1),
    "small": (2, 2, 2, 5, 7, 8, 8),
    "gqa": (1, 8, 2, 9, 13, 16, 8),
    "multi-query": (2, 4, 1, 3, 6, 4, 5),
    "odd tiles": (1, 2, 1, 70, 131, 24, 40),
    "lq > lk": (1, 2, 2, 37, 5, 8, 8),
    "long": (1, 1, 1, 200, 300, 64, 64),
    "many key tiles": (1, 2, 1, 100, 1000, 64, 64),
    "odd d, dv > d": (1, 2, 2, 65, 129, 7, 70),
    "dv < d, odd": (2, 3, 1, 33, 67, 80, 13),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", sorted(SDPA_SHAPES))
def test_sdpa_without_mask(cpu, name, causal):
    out, ref = _sdpa_case(*SDPA_SHAPES[name], causal=causal)
    assert_close(out, ref, np.float32, case=f"{name} causal={causal}")


@pytest.mark.parametrize("mask_shape", [(70, 131), (1, 1, 70, 131), (1, 2, 70, 131), (131,)],
                         ids=str)
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_with_broadcast_masks(cpu, mask_shape, kind, causal):
    if kind == "bool":
        mask = RNG.random(mask_shape) < 0.7
    else:
        mask = (RNG.standard_normal(mask_shape) * 2).astype(np.float32)
    out, ref = _sdpa_case(1, 2, 1, 70, 131, 24, 40, mask=mask, causal=causal)
    assert_close(out, ref, np.float32, case=f"{kind} {mask_shape} causal={causal}")


def test_sdpa_fully_masked_rows_give_zero(cpu):
    lq, lk = 6, 9
    bool_mask = np.ones((lq, lk), bool)
    bool_mask[2] = False
    add_mask = np.zeros((lq, lk), np.float32)
    add_mask[4] = -np.inf
    for mask in (bool_mask, add_mask):
        out, ref = _sdpa_case(1, 2, 2, lq, lk, 8, 8, mask=mask)
        assert_close(out, ref, np.float32, case=f"fully masked {mask.dtype}")
        row = 2 if mask.dtype == np.bool_ else 4
        assert (out[:, :, row] == 0).all() and not np.isnan(out).any()


def test_sdpa_empty_keys_give_zero_and_empty_queries_give_empty(cpu):
    out, _ = _sdpa_case(1, 2, 2, 4, 0, 8, 8)
    assert out.shape == (1, 2, 4, 8) and (out == 0).all()
    out, ref = _sdpa_case(1, 2, 2, 0, 5, 8, 8)
    assert out.shape == (1, 2, 0, 8) == ref.shape
    out, ref = _sdpa_case(0, 2, 2, 3, 5, 8, 8)
    assert out.shape == (0, 2, 3, 8)


def test_sdpa_nan_in_q_propagates_to_its_row(cpu):
    q, k, v = _randn(1, 1, 4, 8), _randn(1, 1, 6, 8), _randn(1, 1, 6, 8)
    q[0, 0, 1, 3] = np.nan
    out = _fused_run(SDPA, (_t(q), _t(k), _t(v), None), {"scale": 0.5, "is_causal": False},
                     "cpu.sdpa_flash_f32")
    assert np.isnan(out[0, 0, 1]).all() and not np.isnan(out[0, 0, [0, 2, 3]]).any()
    assert_close(out, ref_sdpa(q, k, v, None, 0.5, False), np.float32, case="NaN in q")


def test_sdpa_large_scores_do_not_overflow(cpu):
    # Scores near 1e4: the online max keeps every exp argument <= 0.
    out, ref = _sdpa_case(1, 2, 2, 40, 100, 16, 16, scale=300.0, causal=True)
    assert_close(out, ref, np.float32, case="large scores")


def test_sdpa_band_mask_masks_whole_key_tiles_for_some_rows(cpu):
    # A sliding window of 40 keys: most key tiles are fully masked for most
    # rows, the rest partially; with causal, the diagonal tiles are partial too.
    lq, lk = 150, 300
    i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
    mask = (j <= i + 100) & (j > i + 60)
    for causal in (False, True):
        out, ref = _sdpa_case(1, 2, 1, lq, lk, 32, 48, mask=mask, causal=causal)
        assert_close(out, ref, np.float32, case=f"band mask causal={causal}")


def test_sdpa_nan_in_k_propagates_to_the_rows_that_see_it(cpu):
    q, k, v = _randn(1, 1, 6, 8), _randn(1, 1, 6, 8), _randn(1, 1, 6, 8)
    k[0, 0, 3, 2] = np.nan
    out = _fused_run(SDPA, (_t(q), _t(k), _t(v), None), {"scale": 0.5, "is_causal": True},
                     "cpu.sdpa_flash_f32")
    assert np.isnan(out[0, 0, 3:]).all() and not np.isnan(out[0, 0, :3]).any()
    assert_close(out, ref_sdpa(q, k, v, None, 0.5, True), np.float32, case="NaN in k")


def test_sdpa_does_not_read_key_tiles_in_the_causal_future(cpu):
    # The spec lets a kernel skip keys masked for all the queries it computes
    # together; a NaN in v at a masked key it does read may propagate (0 * NaN),
    # as in the decomposition. This kernel's query blocks (64 rows) below 128
    # never visit key 150; rows >= 150 see it.
    q, k, v = _randn(1, 1, 200, 16), _randn(1, 1, 200, 16), _randn(1, 1, 200, 16)
    v[0, 0, 150, 5] = np.nan
    out = _fused_run(SDPA, (_t(q), _t(k), _t(v), None), {"scale": 0.25, "is_causal": True},
                     "cpu.sdpa_flash_f32")
    assert not np.isnan(out[0, 0, :128]).any() and np.isnan(out[0, 0, 150:, 5]).all()
    v[0, 0, 150, 5] = 0.0  # rows < 150 do not see key 150: any value gives their reference
    ref = ref_sdpa(q, k, v, None, 0.25, True)
    assert_close(out[..., :128, :], ref[..., :128, :], np.float32, case="causal future NaN")
