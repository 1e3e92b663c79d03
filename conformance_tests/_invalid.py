"""Invalid kernel calls, one per argument rule (not a section itself).

Each rule of ``arg_rules.json`` (``_rules``) has one function here, under its
id, that breaks exactly that rule in an otherwise valid call of an op: the
call the kernels section's ``plan`` makes for the op (inputs, output shape
and dtype, attributes). :func:`check` runs it through ``_raw`` and judges it
by the rule's ``when``:

- ``call``: the kernel returns DK_ERROR_INVALID_ARGUMENT from the call itself,
  the stream stays healthy and the output (pre-filled with canary bytes,
  between guard bands) is untouched;
- ``run``: an error comes back from the call or from the synchronize of its
  stream, once, and nothing is written outside the output.

A function gets the valid call and the case's parameters (``cases`` in the
rule) and returns the broken :class:`Call`, or a string: why this plugin
cannot have the case (an unmet ``needs``), which the coverage count reports.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from devicekit.conformance.case import Skip
from devicekit.conformance.registry import spec_dtypes
from devicekit.testing import oracle as O

from . import _raw, _rules

UNKNOWN_DTYPE_ID = 42


@dataclass
class Call:
    """One raw kernel call: inputs [(array, dtype)], the output's shape and
    dtype, attribute bytes; ``mangle(in_views, out_views, operands)`` edits the
    views after allocation; ``malformed``: DK_Kernel_Args overrides;
    ``outputs``: how many outputs to pass; ``alloc``: {input index: (lead,
    tail)} bytes around that input in its allocation (``_raw.Operand``);
    ``guard_inputs``: every input between guard bands (room for views that
    overlap it)."""

    ins: list
    out_shape: tuple
    out_dtype: str
    attrs: Optional[bytes]
    mangle: Optional[Callable] = None
    malformed: dict = field(default_factory=dict)
    outputs: int = 1
    alloc: dict = field(default_factory=dict)
    guard_inputs: bool = False

    def but(self, **changes):
        return dataclasses.replace(self, **changes)


def base_call(plan, op, dtype, rng):
    ins, out_shape, out_dtype, attr, _, _, _ = plan(op, dtype, rng)
    return Call(list(ins), tuple(out_shape), out_dtype, attr)


# ---- what a rule needs of the plugin ---------------------------------------------

def other_dtype(target, op, dtype):
    """A dtype the plugin declares for ``op`` other than ``dtype`` (or None),
    one of the same size first (float32 vs int32): a check that compares only
    element sizes lets that through."""
    others = [d for d in spec_dtypes(op)[0] if d != dtype and d in target.declared.get(op, ())]
    size = O.np_dtype(dtype).itemsize
    others.sort(key=lambda d: O.np_dtype(d).itemsize != size)
    return others[0] if others else None


def undeclared_dtype(target, op):
    dts = [d for d in spec_dtypes(op)[0] if d not in target.declared.get(op, ())]
    dts += [d for d in _raw.DTYPE_IDS if d not in spec_dtypes(op)[0]]
    return dts[0] if dts else None


def _wrong_out(target, op, call):
    """An output dtype the op never gives this call: int32 (float32 where it
    gives int32); for ops without inputs, a dtype the plugin does not declare."""
    if not call.ins:
        return next((d for d in _raw.DTYPE_IDS if d not in target.declared.get(op, ())), None)
    return "int32" if call.out_dtype != "int32" else "float32"


def _value_inputs(call, dtype):
    return [i for i, (_, d) in enumerate(call.ins) if d == dtype]


NEEDS = {
    "malformed_args": lambda target, op, dtype, call: None if _raw.supports_malformed_args() else
    "this DeviceKit's raw_kernel_call cannot malform DK_Kernel_Args",
    "malformed_views": lambda target, op, dtype, call: None if _raw.supports_malformed_views()
    else "this DeviceKit's raw_kernel_call cannot pass NULL views, a NULL stream or another device",
    "wrong_output_dtype": lambda target, op, dtype, call: None if _wrong_out(target, op, call) else
    f"{op} has no inputs and the plugin declares every dtype for its output",
    "undeclared_dtype": lambda target, op, dtype, call: None if undeclared_dtype(target, op) else
    f"the plugin declares every dtype there is for {op}",
}


def unmet_needs(target, r, op, dtype, call):
    """Why rule ``r``'s case cannot be built for this plugin's ``op``, or None."""
    for need in r.get("needs", ()):
        why = NEEDS[need](target, op, dtype, call)
        if why:
            return why
    return None


# ---- view edits ------------------------------------------------------------------

def _dense(shape):
    return _raw._strides(list(shape))


def _not_dense(shape):
    """Strides that address exactly the elements of a dense array of ``shape``
    but not in row-major order (the array transposed in place), or, when every
    such order is row-major (one dim > 1), that dim's stride doubled (the view
    then reaches past the array by less than a guard band for these shapes)."""
    shape = list(shape)
    strides = list(reversed(_dense(list(reversed(shape)))))
    if not _raw.contiguous(shape, strides):
        return strides
    strides = _dense(shape)
    d = max(range(len(shape)), key=lambda i: shape[i])
    strides[d] *= 2
    return strides


def _edit(which, index, **fields):
    """A mangle that replaces ``fields`` (addr, dtype, shape, strides) of view
    ``index`` of the inputs or the outputs; a callable value gets the operands."""
    pos = {"addr": 0, "dtype": 1, "shape": 2, "strides": 3}

    def mangle(in_views, out_views, operands):
        views = list(in_views if which == "in" else out_views)
        v = list(views[index])
        for k, value in fields.items():
            v[pos[k]] = value(operands) if callable(value) else value
        views[index] = tuple(v)
        return (views, out_views) if which == "in" else (in_views, views)
    return mangle


def _replace_input(call, i, arr, dtype=None):
    ins = list(call.ins)
    ins[i] = (arr, dtype or ins[i][1])
    return call.but(ins=ins)


def _dense_input(index, shape):
    """A mangle giving input ``index`` the view ``shape``, dense row-major."""
    return _edit("in", index, shape=list(shape), strides=_dense(list(shape)))


def _grow(shape, dim, by=1):
    s = list(shape)
    s[dim] += by
    return tuple(s)


# ---- one function per rule: (target, op, dtype, call, params) -> Call or why not --------

def _out_rank_above_max(t, op, dt, c, p):
    shape = (1,) * (_raw.MAX_RANK + 1 - len(c.out_shape)) + tuple(c.out_shape)
    return c.but(mangle=_edit("out", 0, shape=list(shape), strides=_dense(shape)))


def _output_aliases(t, op, dt, c, p, index=0, offset_elems=0):
    """Output 0 at input ``index``'s address (plus ``offset_elems`` of its
    elements), with room in that input's allocation for the whole output."""
    a = c.ins[index][0]
    room = max(0, int(np.prod(c.out_shape)) * O.np_dtype(c.out_dtype).itemsize - a.nbytes)

    def addr(operands):
        return operands["in"][index].view()[0] + offset_elems * a.itemsize
    return c.but(guard_inputs=True, alloc={index: (_raw.GUARD, _raw.GUARD + room)},
                 mangle=_edit("out", 0, addr=addr))


def _mixed(t, op, dt, c, p):
    other = other_dtype(t, op, dt) or next(d for d in _raw.DTYPE_IDS if d != dt)
    j = _value_inputs(c, dt)[-1]
    a = c.ins[j][0]
    return _replace_input(c, j, O.round_to(a.astype(np.float64) if a.dtype != np.bool_ else a,
                                           other), other)


def _undeclared(t, op, dt, c, p):
    bad = undeclared_dtype(t, op)
    x = np.zeros(c.ins[0][0].shape, O.np_dtype(bad))
    return c.but(ins=[(x, bad)] + c.ins[1:], out_dtype=bad if c.out_dtype == dt else c.out_dtype)


def _past_allocation(t, op, dt, c, p, lead=0):
    return c.but(alloc={0: (lead, -O.np_dtype(c.ins[0][1]).itemsize)})


def _named_input(op, name):
    return _rules.op_spec(op)["inputs"].index(name)


def _index_input(op, c, fn):
    i = _named_input(op, "index")
    return _replace_input(c, i, fn(c.ins[i][0]))


def _gather_like(op, c, index, src=None):
    """The call with a new index (and src, or out, following it)."""
    i = _named_input(op, "index")
    ins = list(c.ins)
    ins[i] = (index, "int64")
    if op == "scatter_add":
        ins[2] = (src if src is not None else np.zeros(index.shape, ins[2][0].dtype), ins[2][1])
        return c.but(ins=ins)
    return c.but(ins=ins, out_shape=tuple(index.shape))


def _scalar_attrs(op, bad, field="start"):
    """``op``'s attributes with DK_Scalar ``bad`` in its scalar ``field``
    (fill has one, value; iota's start or step)."""
    if op == "fill":
        return _raw.attrs("DK_FillAttrs", value=bad)
    good = {"start": _raw.scalar(0), "step": _raw.scalar(1)}
    return _raw.attrs("DK_IotaAttrs", axis=1, **{**good, field: bad})


def _then(*mangles):
    """One mangle that applies ``mangles`` in order."""
    def mangle(in_views, out_views, operands):
        for m in mangles:
            in_views, out_views = m(in_views, out_views, operands)
        return in_views, out_views
    return mangle


def _negative_stride(c, i):
    dense = _dense(c.ins[i][0].shape)
    return c.but(mangle=_edit("in", i, strides=[-abs(dense[0]) - 1] + dense[1:]))


def _aliases_broadcast_input(t, op, dt, c, p):
    """Output 0 at input 0's address, input 0 a view of size 1 in dim 0 (a
    broadcast input, when the kernel declares DK_KERNEL_CAP_BROADCAST)."""
    aliased = _output_aliases(t, op, dt, c, p)
    return aliased.but(mangle=_then(_dense_input(0, [1, *c.ins[0][0].shape[1:]]),
                                    aliased.mangle))


def _bad_index(value):
    def edit(idx):
        idx = idx.copy()
        idx[1, 3, 1] = value
        return idx
    return edit


def _reduce_attrs(c, **fields):
    return c.but(attrs=_raw.attrs("DK_ReduceAttrs", **fields))


def _axis_attrs(op, axis):
    if op == "iota":
        return _raw.attrs("DK_IotaAttrs", axis=axis, start=_raw.scalar(0), step=_raw.scalar(1))
    return _raw.attrs("DK_AxisAttrs", axis=axis)


BREAK = {
    # DK_Kernel_Args
    "args_struct_size_0": lambda t, op, dt, c, p: c.but(malformed={"args_struct_size": 0}),
    "args_op_mismatch": lambda t, op, dt, c, p: c.but(
        malformed={"op_field": _raw.op_id("neg" if op != "neg" else "abs")}),
    "args_device_out_of_range": lambda t, op, dt, c, p: c.but(malformed={"device_field": 4096}),
    "args_stream_null": lambda t, op, dt, c, p: c.but(malformed={"stream_null": True}),
    "missing_input": lambda t, op, dt, c, p: c.but(ins=c.ins[:-1]),
    "extra_input": lambda t, op, dt, c, p: c.but(
        ins=c.ins + [(np.zeros(c.out_shape, O.np_dtype(c.out_dtype)), c.out_dtype)]),
    "missing_output": lambda t, op, dt, c, p: c.but(outputs=0),
    "extra_output": lambda t, op, dt, c, p: c.but(outputs=2),
    # views
    "input_view_null": lambda t, op, dt, c, p: c.but(malformed={"null_view": "in0"}),
    "output_view_null": lambda t, op, dt, c, p: c.but(malformed={"null_view": "out0"}),
    "output_view_struct_size_0": lambda t, op, dt, c, p: c.but(malformed={"view_struct_size": 0}),
    "input_unknown_dtype_id": lambda t, op, dt, c, p: c.but(
        mangle=_edit("in", 0, dtype=UNKNOWN_DTYPE_ID)),
    "output_unknown_dtype_id": lambda t, op, dt, c, p: c.but(
        mangle=_edit("out", 0, dtype=UNKNOWN_DTYPE_ID)),
    "input_negative_stride": lambda t, op, dt, c, p: _negative_stride(c, 0),
    "input_2_negative_stride": lambda t, op, dt, c, p: _negative_stride(c, 2),
    "input_negative_size": lambda t, op, dt, c, p: c.but(mangle=_edit(
        "in", 0, shape=[-1] + list(c.ins[0][0].shape[1:]))),
    "output_null_data": lambda t, op, dt, c, p: c.but(mangle=_edit("out", 0, addr=0)),
    "input_null_data": lambda t, op, dt, c, p: c.but(mangle=_edit("in", 0, addr=0)),
    "input_1_null_data": lambda t, op, dt, c, p: c.but(mangle=_edit("in", 1, addr=0)),
    "output_rank_above_max": _out_rank_above_max,
    "input_not_dense": lambda t, op, dt, c, p: c.but(
        mangle=_edit("in", 0, strides=_not_dense(c.ins[0][0].shape))),
    "output_not_dense": lambda t, op, dt, c, p: c.but(
        mangle=_edit("out", 0, strides=_not_dense(c.out_shape))),
    "input_needs_broadcast": lambda t, op, dt, c, p: c.but(
        mangle=_dense_input(0, [1, *c.ins[0][0].shape[1:]])),
    "input_rank_above_output": lambda t, op, dt, c, p: c.but(
        mangle=_dense_input(0, [1, *c.ins[0][0].shape])),
    "copy_output_writes_twice": lambda t, op, dt, c, p: c.but(
        mangle=_edit("out", 0, strides=[0] + _dense(c.out_shape)[1:])),
    # memory
    "output_aliases_input": _output_aliases,
    "output_overlaps_input": lambda t, op, dt, c, p: _output_aliases(t, op, dt, c, p, offset_elems=1),
    "output_aliases_input_1": lambda t, op, dt, c, p: _output_aliases(t, op, dt, c, p, index=1),
    "output_aliases_broadcast_input": _aliases_broadcast_input,
    "input_past_allocation": _past_allocation,
    "input_offset_past_allocation": lambda t, op, dt, c, p: _past_allocation(t, op, dt, c, p,
                                                                             lead=_raw.GUARD),
    # dtypes
    "out_dtype": lambda t, op, dt, c, p: c.but(out_dtype=_wrong_out(t, op, c)),
    "mixed_dtypes": _mixed,
    "undeclared_dtype": _undeclared,
    "index_dtype": lambda t, op, dt, c, p: _replace_input(
        c, _named_input(op, "index"), c.ins[_named_input(op, "index")][0].astype(np.int32), "int32"),
    "cond_dtype": lambda t, op, dt, c, p: _replace_input(
        c, _named_input(op, "cond"), c.ins[_named_input(op, "cond")][0].astype(np.uint8), "uint8"),
    # shapes
    "out_shape": lambda t, op, dt, c, p: c.but(out_shape=_grow(c.out_shape, p["dim"])),
    "out_rank": lambda t, op, dt, c, p: c.but(out_shape=tuple(c.out_shape) + (1, 2)),
    "out_not_reduced": lambda t, op, dt, c, p: c.but(out_shape=tuple(c.ins[0][0].shape)),
    "input_shape": lambda t, op, dt, c, p: _replace_input(
        c, len(c.ins) - 1, np.concatenate([c.ins[-1][0], c.ins[-1][0][..., :1]], axis=-1)),
    "matmul_inner_dims_differ": lambda t, op, dt, c, p: _replace_input(
        c, 1, np.concatenate([c.ins[1][0], c.ins[1][0][:, :1]], axis=1)),
    "matmul_batch_dims_differ": lambda t, op, dt, c, p: _replace_input(
        c, 1, np.concatenate([c.ins[1][0], c.ins[1][0][:1]], axis=0)),
    "matmul_batch_rank_differs": lambda t, op, dt, c, p: _replace_input(c, 1, c.ins[1][0][0]),
    "matmul_rank_below_2": lambda t, op, dt, c, p: _replace_input(
        _replace_input(c, 0, c.ins[0][0][0, 0].copy()), 1, c.ins[1][0][0, :, 0].copy()).but(
        out_shape=(1,)),
    "index_rank_differs": lambda t, op, dt, c, p: _gather_like(
        op, c, c.ins[1][0][..., 0].copy(), c.ins[2][0][..., 0].copy() if op == "scatter_add" else None),
    "index_larger_than_x": lambda t, op, dt, c, p: _gather_like(
        op, c, np.concatenate([c.ins[1][0], c.ins[1][0][:1]], axis=0),
        np.concatenate([c.ins[2][0], c.ins[2][0][:1]], axis=0) if op == "scatter_add" else None),
    "scatter_src_shape": lambda t, op, dt, c, p: _replace_input(c, 2, c.ins[2][0][..., :-1].copy()),
    # attributes
    "attrs_null": lambda t, op, dt, c, p: c.but(attrs=None),
    "attrs_struct_size_0": lambda t, op, dt, c, p: c.but(attrs=b"\0" * len(c.attrs)),
    "axes_0": lambda t, op, dt, c, p: _reduce_attrs(c, axes=0),
    "axes_beyond_rank": lambda t, op, dt, c, p: _reduce_attrs(c, axes=0b1101),
    "axis_range": lambda t, op, dt, c, p: c.but(attrs=_axis_attrs(op, p["axis"])),
    "scalar_dtype": lambda t, op, dt, c, p: c.but(attrs=_scalar_attrs(
        op, _raw.Scalar(_raw.DTYPE_IDS["float32"], _raw._Value(f=1.0)), "step")),
    "scalar_bool_not_01": lambda t, op, dt, c, p: c.but(attrs=_scalar_attrs(
        op, _raw.Scalar(_raw.DTYPE_IDS["bool"], _raw._Value(i=2)))),
    # indices, found while the kernel runs
    "index_negative": lambda t, op, dt, c, p: _index_input(op, c, _bad_index(-1)),
    "index_equals_size": lambda t, op, dt, c, p: _index_input(op, c, _bad_index(7)),
    "index_beyond_int32": lambda t, op, dt, c, p: _index_input(op, c, _bad_index(2**32 + 1)),
}


def broken_call(target, r, op, dtype, call, params):
    """Rule ``r``'s broken version of ``call`` (a valid call of ``op``), a
    string saying why this plugin cannot have it, or None when this suite does
    not know how to break the rule (a rule added to the data alone: the
    coverage count then reports its pairs as without a case)."""
    if r["id"] not in BREAK:
        return None
    return unmet_needs(target, r, op, dtype, call) or BREAK[r["id"]](target, op, dtype, call,
                                                                        params)


# ---- running and judging ------------------------------------------------------------

def launch(dev, op, call):
    """Allocates the call's operands, calls the kernel, frees them. Returns
    ((launch code, message, sync code, message), outputs' (array, bands intact?))."""
    operands = {"in": [], "out": []}
    try:
        for i, (a, d) in enumerate(call.ins):
            lead, tail = call.alloc.get(i, (None, None))
            operands["in"].append(_raw.operand(dev, a, d, guard=call.guard_inputs, lead=lead,
                                               tail=tail))
        for _ in range(call.outputs):
            operands["out"].append(_raw.output(dev, call.out_shape, call.out_dtype))
        in_views = [o.view() for o in operands["in"]]
        out_views = [o.view() for o in operands["out"]]
        if call.mangle is not None:
            in_views, out_views = call.mangle(in_views, out_views, operands)
        codes = _raw.call(dev, op, in_views, out_views, call.attrs, **call.malformed)
        fetched = [o.fetch() for o in operands["out"]]
    finally:
        for o in operands["in"] + operands["out"]:
            o.free()
    return codes, fetched


def check(ctx, op, dtype, rule_id, case, plan):
    """Runs rule ``rule_id``'s case ``case`` on ``op`` and judges it by the rule's ``when``."""
    r = _rules.rule(rule_id)
    call = broken_call(ctx.target, r, op, dtype, base_call(plan, op, dtype, ctx.rng()),
                       _rules.case_names(r)[case])
    if isinstance(call, str):
        raise Skip(call)  # (not generated in the first place; a stale case list)
    if rule_id == "input_offset_past_allocation":
        _require_bounds_checks(ctx, op, dtype, plan)
    (lc, lmsg, sc, smsg), fetched = launch(ctx.device, op, call)
    what = f"{op} ({case}: {r['rule']})"
    if r["when"] == "run":
        assert lc != 0 or sc != 0, (
            f"{what}: neither the call nor the synchronize of its stream reported an error; "
            f"the header says the kernel reports it")
        assert all(ok for _, ok in fetched), f"{what}: the kernel wrote outside its output"
        ctx.device.synchronize()  # reported once: the device is clean again
        return
    if rule_id == "input_past_allocation" and lc == 0:
        raise Skip(_NO_BOUNDS_CHECKS)
    codes = r.get("codes", ["DK_ERROR_INVALID_ARGUMENT"])
    assert lc in [_raw.CODES[c] for c in codes], (
        f"{what}: the kernel returned code {lc} ({lmsg or 'success'}); the header requires "
        f"{' or '.join(codes)} from the call itself")
    assert sc == 0, f"{what}: the stream reports an error after a rejected call: {smsg}"
    for got, bands_ok in fetched:
        raw = np.ascontiguousarray(got).view(np.uint8)
        assert bands_ok and (raw == _raw.CANARY).all(), f"{what}: a rejected call wrote to its output"


_NO_BOUNDS_CHECKS = ("the plugin does not check views against its allocations (input 0 running "
                     "past the end of its allocation was accepted); the header leaves that to the "
                     "caller, so the memory-bound rules do not apply to it")


def _require_bounds_checks(ctx, op, dtype, plan):
    """Skips unless ``op``'s kernel rejects a view past the end of its allocation."""
    call = base_call(plan, op, dtype, ctx.rng())
    (lc, _, sc, _), _ = launch(ctx.device, op, _past_allocation(None, op, dtype, call, {}))
    if lc == 0:
        raise Skip(_NO_BOUNDS_CHECKS)
