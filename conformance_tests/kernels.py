"""Section "kernels": every kernel called directly, below the SDK.

The SDK is careful (it sums integers as int64, never passes mismatched
dtypes, pads allocations), so some plugin bugs are unreachable through it.
Here each kernel is called through ``devicekit._core.raw_kernel_call`` with
views the case builds itself (``_raw``):

- ``kernels/<op>/<dtype>/direct``: every (op, dtype) the spec allows, in
  exactly that dtype (int8 ``reduce_sum`` wraps in int8, ``cumsum`` of uint8
  in uint8 ...); outputs sit between guard bands of canary bytes, checked after
  the kernel, and start as canaries, so an element never written is seen too;
  the result is checked against the oracle with the op's spec bound.
- ``kernels/<op>/invalid/<what>``: calls the header forbids (an input of
  another dtype, an undeclared dtype, an output of the wrong shape, rank or
  dtype, a wrong operand count, missing, short or out-of-range attributes)
  must return DK_ERROR_INVALID_ARGUMENT from the kernel call itself, write
  nothing, and leave the stream healthy.
"""

import functools

import numpy as np

from devicekit.conformance.case import Case, Section
from devicekit.conformance.registry import op_cases, spec, spec_dtypes
from devicekit.testing import oracle as O
from devicekit.testing.inputs import rand

from . import _raw

SECTION = Section("kernels", "Kernels called directly: declared dtypes, guard bands, invalid "
                             "calls", order=25,
                  available=lambda t: None if _raw.available() else
                  "this DeviceKit's core has no raw_kernel_call")

FLOATS = ("float32", "float16", "bfloat16", "float64")
UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "erf",
         "floor", "sign"}
BINARY = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"}
COMPARE = {"eq", "ne", "lt", "le"}
LOGICAL = {"logical_and", "logical_or", "logical_xor"}
SHAPE = (5, 7, 3)  # odd sizes, rank 3: no power-of-two path, no inner dim of 1


def _sample(rng, op, dtype, shape, kind="normal"):
    if op in ("log", "sqrt", "rsqrt") or (op == "pow" and kind == "base"):
        kind = "positive"
    x = rand(dtype, shape, rng, kind)
    if op == "pow" and kind == "positive" and dtype in FLOATS:
        x = np.minimum(x.astype(np.float64), 4).astype(x.dtype)
    return x


def plan(op, dtype, rng):
    """(inputs [(array, dtype)], out shape, out dtype, attrs bytes, expected, n, scale)."""
    s, n, scale = SHAPE, None, None
    if op in UNARY or op == "copy":
        x = _sample(rng, op, dtype, s)
        want = x.copy() if op == "copy" else O.unary(op, x)
        return [(x, dtype)], s, dtype, None, want, n, scale
    if op in BINARY or op in COMPARE or op in LOGICAL:
        a = _sample(rng, op, dtype, s, "base" if op == "pow" else "normal")
        b = _sample(rng, op, dtype, s, "small" if op == "pow" else "normal")
        if op in COMPARE:
            b = np.where(rng.random(s) < 0.3, a, b).astype(a.dtype)
            return [(a, dtype), (b, dtype)], s, "bool", None, O.compare(op, a, b), n, scale
        if op in LOGICAL:
            return [(a, dtype), (b, dtype)], s, "bool", None, O.logical(op, a, b), n, scale
        return [(a, dtype), (b, dtype)], s, dtype, None, O.binary(op, a, b), n, scale
    if op == "logical_not":
        x = rand(dtype, s, rng)
        return [(x, dtype)], s, "bool", None, O.logical(op, x), n, scale
    if op == "where":
        c, a, b = rng.random(s) < 0.5, rand(dtype, s, rng), rand(dtype, s, rng)
        return [(c, "bool"), (a, dtype), (b, dtype)], s, dtype, None, O.where(c, a, b), n, scale
    if op == "fill":
        v = 1.0 / 3.0 if dtype in FLOATS else (True if dtype == "bool" else 77)
        return [], s, dtype, _raw.attrs("DK_FillAttrs", value=_raw.scalar(v)), \
            O.fill(s, v, dtype), n, scale
    if op == "cast":
        x = np.concatenate([rand(dtype, (40,), rng), rand(dtype, (40,), rng, "small")])
        dst = "float32" if dtype != "float32" else "int32"
        return [(x, dtype)], x.shape, dst, None, O.cast(x, dst), n, scale
    if op in ("reduce_sum", "reduce_max", "reduce_min"):
        x = rand(dtype, s, rng)
        want = getattr(O, op)(x, (0, 2), keepdims=True)
        if op == "reduce_sum":
            n, scale = 15, O.reduce_sum(np.abs(x.astype(np.float64)), (0, 2)) \
                if dtype in FLOATS else None
        return [(x, dtype)], want.shape, dtype, _raw.attrs("DK_ReduceAttrs", axes=0b101), \
            want, n, scale
    if op == "argmax":
        x = rand(dtype, s, rng, "small")
        want = O.argmax(x, 1, keepdims=True)
        return [(x, dtype)], want.shape, "int64", _raw.attrs("DK_AxisAttrs", axis=1), want, n, scale
    if op == "cumsum":
        x = rand(dtype, s, rng)
        scale = O.cumsum(np.abs(x.astype(np.float64)), 1) if dtype in FLOATS else None
        return [(x, dtype)], s, dtype, _raw.attrs("DK_AxisAttrs", axis=1), O.cumsum(x, 1), 7, scale
    if op == "iota":
        start, step = (-3, 2) if dtype not in FLOATS else (0.1, 0.3)
        if dtype == "uint8":
            start = 3
        return [], s, dtype, _raw.attrs("DK_IotaAttrs", axis=1, start=_raw.scalar(start),
                                        step=_raw.scalar(step)), O.iota(s, 1, start, step, dtype), \
            n, scale
    if op in ("gather", "scatter_add"):
        x = rand(dtype, s, rng)
        idx = rng.integers(0, s[1], size=(5, 9, 3)).astype(np.int64)
        if op == "gather":
            return [(x, dtype), (idx, "int64")], idx.shape, dtype, \
                _raw.attrs("DK_AxisAttrs", axis=1), O.gather(x, 1, idx), n, scale
        src = rand(dtype, idx.shape, rng)
        n = O.scatter_count(s, 1, idx)
        scale = O.scatter_add(np.abs(x.astype(np.float64)), 1, idx,
                              np.abs(src.astype(np.float64))) if dtype in FLOATS else None
        return [(x, dtype), (idx, "int64"), (src, dtype)], s, dtype, \
            _raw.attrs("DK_AxisAttrs", axis=1), O.scatter_add(x, 1, idx, src), n, scale
    if op == "matmul":
        a, b = rand(dtype, (3, 5, 9), rng), rand(dtype, (3, 9, 4), rng)
        scale = O.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))) \
            if dtype in FLOATS else None
        return [(a, dtype), (b, dtype)], (3, 5, 4), dtype, None, O.matmul(a, b), 9, scale
    if op in ("random_bits", "random_uniform"):
        seed, offset = 0x9E3779B97F4A7C15, 2**32 - 1
        want = O.random_bits(s, seed, offset) if op == "random_bits" else \
            O.random_uniform(s, seed, offset, dtype)
        return [], s, dtype, _raw.attrs("DK_RandomAttrs", seed=seed, offset=offset), want, n, scale
    raise KeyError(op)


def _launch(ctx, op, ins, out_shape, out_dtype, attr, mangle=None, malformed=None):
    dev = ctx.device
    operands = [_raw.operand(dev, a, d) for a, d in ins]
    out = _raw.output(dev, out_shape, out_dtype)
    try:
        views = ([o.view() for o in operands], [out.view()])
        if mangle is not None:
            views = mangle(*views) or views
        codes = _raw.call(dev, op, views[0], views[1], attr, **(malformed or {}))
        got, bands_ok = out.fetch()
    finally:
        for o in operands + [out]:
            o.free()
    return codes, got, bands_ok


def check_direct(ctx, op, dtype, shape):
    ins, out_shape, out_dtype, attr, want, n, scale = plan(op, dtype, ctx.rng())
    (lc, lmsg, sc, smsg), got, bands_ok = _launch(ctx, op, ins, out_shape, out_dtype, attr)
    assert lc == 0, f"{op} {dtype}: the kernel rejected a valid call [{lc}]: {lmsg}"
    assert sc == 0, f"{op} {dtype}: the stream reported an error [{sc}]: {smsg}"
    assert bands_ok, f"{op} {dtype}: the kernel wrote outside its output (guard bands changed)"
    ctx.ran.add((op, dtype))
    O.assert_close(got, want, out_dtype, op=op, n=n, scale=scale,
                   signed_zeros=op in O.SIGNED_ZEROS, case=f"direct {dtype} seed={ctx.seed}")


def _other_dtype(target, op, dtype):
    """A dtype the plugin declares for ``op`` other than ``dtype`` (or None),
    one of the same size first (float32 vs int32): a check that compares only
    element sizes lets that through."""
    others = [d for d in spec_dtypes(op)[0] if d != dtype and d in target.declared.get(op, ())]
    size = O.np_dtype(dtype).itemsize
    others.sort(key=lambda d: O.np_dtype(d).itemsize != size)
    return others[0] if others else None


def _undeclared_dtype(target, op):
    dts = [d for d in spec_dtypes(op)[0] if d not in target.declared.get(op, ())]
    dts += [d for d in _raw.DTYPE_IDS if d not in spec_dtypes(op)[0]]
    return dts[0] if dts else None


def invalid_variants(target, op, dtype, rng):
    """{what: (inputs [(array, dtype)], out shape, out dtype, attrs)} the header forbids."""
    ins, out_shape, out_dtype, attr, _, _, _ = plan(op, dtype, rng)
    v = {}
    if ins:  # (fill, iota, random_*: any output shape is valid)
        bad_shape = tuple(out_shape[:-1]) + (out_shape[-1] + 1,)
        v["out_shape"] = (ins, bad_shape, out_dtype, attr)
        v["out_rank"] = (ins, tuple(out_shape) + (1, 2), out_dtype, attr)
    wrong_out = "int32" if out_dtype != "int32" else "float32"
    if op != "cast" and (ins or wrong_out not in target.declared.get(op, ())):
        v["out_dtype"] = (ins, out_shape, wrong_out, attr)  # (cast: any output dtype)
    if ins:
        v["missing_input"] = (ins[:-1], out_shape, out_dtype, attr)
    v["extra_input"] = (ins + [(np.zeros(out_shape, O.np_dtype(out_dtype)), out_dtype)],
                        out_shape, out_dtype, attr)
    other = _other_dtype(target, op, dtype)
    value_inputs = [i for i, (_, d) in enumerate(ins) if d == dtype]
    if other and len(value_inputs) >= 2:  # operands that must share one dtype do not
        j = value_inputs[-1]
        changed = list(ins)
        changed[j] = (O.round_to(ins[j][0].astype(np.float64) if ins[j][0].dtype != np.bool_
                                 else ins[j][0], other), other)
        v["mixed_dtypes"] = (changed, out_shape, out_dtype, attr)
    bad = _undeclared_dtype(target, op)
    if bad and ins and op not in ("cast",):
        x = np.zeros(ins[0][0].shape, O.np_dtype(bad))
        v["undeclared_dtype"] = ([(x, bad)] + ins[1:], out_shape,
                                 bad if out_dtype == dtype else out_dtype, attr)
    if ins:  # views the header forbids: a negative stride, an unknown dtype id
        v["input_negative_stride"] = (ins, out_shape, out_dtype, attr, _negative_stride)
        v["input_unknown_dtype_id"] = (ins, out_shape, out_dtype, attr, _unknown_dtype)
    v["output_null_data"] = (ins, out_shape, out_dtype, attr, _null_output)
    inplace = _caps(target, op) & 4  # DK_KERNEL_CAP_INPLACE
    if ins and not inplace and ins[0][1] == out_dtype and tuple(ins[0][0].shape) == tuple(out_shape):
        v["output_aliases_input"] = (ins, out_shape, out_dtype, attr, _alias_output)
    if _raw.supports_malformed_args():  # DK_Kernel_Args itself malformed
        other_op = "neg" if op != "neg" else "abs"
        v["args_op_mismatch"] = (ins, out_shape, out_dtype, attr, None,
                                 {"op_field": _raw.op_id(other_op)})
        v["args_struct_size_0"] = (ins, out_shape, out_dtype, attr, None,
                                   {"args_struct_size": 0})
    if attr is not None:
        v["attrs_null"] = (ins, out_shape, out_dtype, None)
        v["attrs_struct_size_0"] = (ins, out_shape, out_dtype, b"\0" * len(attr))
    if op in ("reduce_sum", "reduce_max", "reduce_min"):
        v["axes_0"] = (ins, out_shape, out_dtype, _raw.attrs("DK_ReduceAttrs", axes=0))
        v["axes_beyond_rank"] = (ins, out_shape, out_dtype,
                                 _raw.attrs("DK_ReduceAttrs", axes=0b1101))
    if op in ("argmax", "cumsum", "gather", "scatter_add", "iota"):
        name = "DK_IotaAttrs" if op == "iota" else "DK_AxisAttrs"
        extra = {"start": _raw.scalar(0), "step": _raw.scalar(1)} if op == "iota" else {}
        for axis in (-1, len(SHAPE)):
            v[f"axis_{axis}"] = (ins, out_shape, out_dtype, _raw.attrs(name, axis=axis, **extra))
    return v


def _negative_stride(in_views, out_views):
    addr, dt, shape, strides = in_views[0]
    strides = list(strides)
    if not shape:
        return None
    strides[0] = -abs(strides[0]) - 1
    return [(addr, dt, shape, strides)] + in_views[1:], out_views


def _unknown_dtype(in_views, out_views):
    addr, _, shape, strides = in_views[0]
    return [(addr, 42, shape, strides)] + in_views[1:], out_views


def _caps(target, op):
    try:
        kernels = target.device.plugin.kernels()
    except AttributeError:  # (a stand-in target without a plugin)
        return 0
    return next((k["caps"] for k in kernels if k["op"] == op), 0)


def _alias_output(in_views, out_views):
    """The output is input 0's memory: without DK_KERNEL_CAP_INPLACE the header
    says no output aliases an input."""
    _, dt, shape, strides = out_views[0]
    return in_views, [(in_views[0][0], dt, shape, strides)]


def _null_output(in_views, out_views):
    _, dt, shape, strides = out_views[0]
    return in_views, [(0, dt, shape, strides)]


def check_invalid(ctx, op, dtype, what):
    variants = invalid_variants(ctx.target, op, dtype, ctx.rng())
    ins, out_shape, out_dtype, attr, *extra = variants[what]
    mangle, malformed = (extra + [None, None])[:2]
    (lc, lmsg, sc, smsg), got, bands_ok = _launch(ctx, op, ins, out_shape, out_dtype, attr,
                                                  mangle, malformed or {})
    assert lc == _raw.INVALID_ARGUMENT, (
        f"{op} ({what}): the kernel returned code {lc} ({lmsg or 'success'}); the header "
        f"requires DK_ERROR_INVALID_ARGUMENT from the call itself")
    assert sc == 0, f"{op} ({what}): the stream reports an error after a rejected call: {smsg}"
    raw = np.ascontiguousarray(got).view(np.uint8)
    assert bands_ok and (raw == _raw.CANARY).all(), \
        f"{op} ({what}): a rejected call wrote to its output"


def _make_direct(op, dtype, shape):
    return functools.partial(check_direct, op=op, dtype=dtype, shape=shape)


def cases(target):
    out = []
    for o in spec()["ops"]:
        op = o["name"]
        out += op_cases(target, "kernels", op, ["direct"], _make_direct)
        dts = [d for d in spec_dtypes(op)[0] if d in target.declared.get(op, ())]
        if not dts:
            continue
        dtype = "float32" if "float32" in dts else dts[0]
        for what in invalid_variants(target, op, dtype, np.random.default_rng(0)):
            out.append(Case(id=f"kernels/{op}/invalid/{what}", section="kernels", op=op,
                            dtype=dtype, fn=functools.partial(check_invalid, op=op, dtype=dtype,
                                                              what=what)))
    return out
