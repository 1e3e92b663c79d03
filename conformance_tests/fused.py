"""Section "fused": every fused kernel the plugin registers
(``Plugin.fused_kernels()``, device API 1.2) against the decomposition it
replaces and the float64 oracle, through the SDK's dispatcher
(``devicekit.nn.functional`` -> ``_fused.dispatch``).

For each kernel K of composite op OP:

- ``fused/K/accepts_some_call``: K accepts at least one of the calls below
  (``composite_stats()`` counts a launch of K). A kernel whose predicate
  declines everything is dead code the vendor believes runs: a failure. The
  call K accepted is made again and K must accept it again (``supports`` is
  pure).
- ``fused/K/<dtype>/<class>``: OP's calls (``_nn.CALLS[OP]``) in float32,
  float16 and bfloat16. With fused kernels on, the result must match the
  decomposition run on the same inputs (fused kernels off) and the oracle.
  When K declines the call, the path that did run was still checked and the
  case is *skipped* (reason given): K itself was not tested by it. OP's
  classes here also include this section's own (``EXTRA``, below): empty
  operands, a row past a row kernel's 32 Ki-element chunk, IEEE special
  values (NaN, +-inf), an attention mask of another dtype than q.
- ``fused/K/rejects/<kind>``: inputs a predicate typically declines (float64,
  a non-contiguous view, ...; for attention ``wide_head``, head dims past 128
  in each dtype, and ``mask_dtype``, an additive mask of another dtype than
  q/k/v: float32 with float16 / bfloat16, float64 with each). Whichever path
  runs, fused or decomposition, must be right; the message of a failure says
  which ran.
- ``fused/K/permuted/<kind>/<class>`` (attention kernels only): q/k/v as the
  permuted views attention code makes (the block at the end of this file).
  Skipped, with the reason, when K declines them; checked like a call above.

A kernel K of a backward op (``<op>_backward``, device API 1.3) gets the same
cases, run through autograd: OP's calls with every floating input requiring
grad, its output's gradient a fixed random cotangent. The gradients with
fused kernels on (OP's forward kernel, then K) must match the gradients
autograd takes through OP's decomposition (fused kernels off) in the same
dtype, and, when the device has float64, the decomposition's gradients in
float64. A call where K did not run is skipped with the path that did.

A plugin with no fused kernels gets one skipped case saying so (never a pass).
Tolerances: ``_nn.tolerance`` against the oracle, twice that against the
decomposition (both approximate the same float64 value).
"""

import functools

import numpy as np

from devicekit.conformance.case import Case, Section, Skip

from . import _nn
from ._common import O, dk

DTYPES = ("float32",) + _nn.LOW_PRECISION
MIN_REJECT_CASES = 2  # float64 and non-contiguous exist for every fused op


def _available(target):
    import devicekit
    if not hasattr(devicekit, "fused_kernels"):
        return "no fused-kernel API in this DeviceKit"
    return None


def _kernels(target):
    return list(target.device.plugin.fused_kernels())


def _floor(target):
    """Per registered kernel: its accepts_some_call case and its reject cases."""
    return len(_kernels(target)) * (1 + MIN_REJECT_CASES) or None


SECTION = Section("fused", "Registered fused kernels vs their decomposition", order=50,
                  available=_available, min_cases=_floor)


def _noncontiguous(a, dev):
    """A device view equal to ``a`` whose last two dims are transposed in memory."""
    t = dk.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), device=dev)
    return t.transpose(a.ndim - 2, a.ndim - 1)


def _to_float64(call):
    return call, "float64", False


def _first_noncontiguous(call):
    return call, "float32", True


# op -> kind -> rng -> (Call, dtype, first operand non-contiguous)
REJECTS = {
    "rms_norm": {"float64": lambda r: _to_float64(_nn.CALLS["rms_norm"]["odd"](r)),
                 "non_contiguous": lambda r: _first_noncontiguous(_nn.CALLS["rms_norm"]["odd"](r))},
    "layer_norm": {"float64": lambda r: _to_float64(_nn.CALLS["layer_norm"]["odd"](r)),
                   "non_contiguous": lambda r: _first_noncontiguous(
                       _nn.CALLS["layer_norm"]["odd"](r))},
    "softmax": {"float64": lambda r: _to_float64(_nn.CALLS["softmax"]["odd"](r)),
                "non_contiguous": lambda r: _first_noncontiguous(_nn.CALLS["softmax"]["odd"](r)),
                "axis0": lambda r: (_nn.CALLS["softmax"]["axis0"](r), "float32", False)},
    "gelu": {"float64": lambda r: _to_float64(_nn.CALLS["gelu"]["tanh"](r)),
             "non_contiguous": lambda r: _first_noncontiguous(_nn.CALLS["gelu"]["odd"](r))},
    "scaled_dot_product_attention": {
        "float64": lambda r: _to_float64(_nn.CALLS["scaled_dot_product_attention"]["gqa"](r)),
        "non_contiguous": lambda r: _first_noncontiguous(
            _nn.CALLS["scaled_dot_product_attention"]["odd"](r)),
        # head dims past 128 (a kernel may bound them), D != Dv, in each dtype
        "wide_head": lambda r: [(_nn._sdpa(r, 1, 2, 1, 3, 5, 129, 130), dtype, False)
                                for dtype in DTYPES],
        # an additive mask of another dtype than q/k/v: float32 with float16 or
        # bfloat16 q/k/v (a kernel may read it as is), float64 with each dtype
        "mask_dtype": lambda r: [
            (_nn.CALLS["scaled_dot_product_attention"]["float_mask"](r), dtype, False,
             {"attn_mask": mask})
            for dtype, mask in (("float16", "float32"), ("bfloat16", "float32"),
                                ("float32", "float64"), ("float16", "float64"),
                                ("bfloat16", "float64"))]},
}


# ---- Calls only this section makes ----------------------------------------------
# op -> class -> rng -> Call, run like OP's ``_nn.CALLS`` classes (case ids
# ``fused/K/<dtype>/<class>``) but kept out of ``_nn.CALLS``: the autograd
# section differentiates those numerically and the composites section runs
# them everywhere, while these are aimed at a fused kernel's own paths:
# empty operands (a launch with nothing to compute; a norm's backward over no
# rows still owes zero weight and bias gradients), one row longer than a row
# kernel's parallel chunk (32 Ki elements: fewer rows than one per chunk), and
# IEEE special values (NaN propagates through a row's maximum; gelu's +-inf
# follow the formulas: gelu(+inf) = +inf, gelu(-inf) and both derivatives at
# +-inf NaN; |x| up to 40, where exp's argument reaches its clamp, in the
# tanh form's e^(-2|u|) from |x| ~ 22 and the erf form's from |x| ~ 38).

def _special(rng, shape, scale=3.0):
    """Random values with NaN, +-inf, +-0, +-22 and +-40 scattered through
    them (in a row's vector part and its tail)."""
    x = _nn._u(rng, *shape) * scale
    flat = x.reshape(-1)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 22.0, -22.0, 40.0, -40.0, 23.5, -38.5]
    at = rng.choice(flat.size, len(specials), replace=False)
    flat[at] = specials
    flat[-1] = -np.inf
    return x


def _softmax_special(rng):
    """Two NaN rows (the NaN in a row's vector part, and in its tail past
    the last 16 elements), a +inf row, a row with a -inf (never a whole
    row), a plain row; 300 long, so a row kernel of 32 lanes a warp reduces
    over several warps, the first NaN in the second one."""
    x = _nn._u(rng, 5, 300) * 4
    x[0, 100], x[1, 299], x[2, 3], x[3, 295] = np.nan, np.inf, -np.inf, np.nan
    return _nn.Call([x], {"axis": -1}, n=300)


def _sdpa_nan(rng):
    """One NaN in q: every score of that query row is NaN, so is its output
    row (as the decomposition's softmax makes it); the other rows are plain."""
    call = _nn._sdpa(rng, 1, 2, 1, 3, 5, 4, 4)
    call.args[0][0, 1, 2, 3] = np.nan
    return call


WIDE = 32769  # one row past 2**15 elements: a row kernel's chunk holds less than one row

EXTRA = {
    "softmax": {
        "empty": lambda r: _nn.Call([np.zeros((0, 5))], {"axis": -1}, n=5),
        "wide_row": lambda r: _nn.Call([_nn._u(r, 1, WIDE) * 4], {"axis": -1}, n=WIDE),
        "special": _softmax_special,
    },
    "rms_norm": {
        "empty": lambda r: _nn.Call([np.zeros((0, 7)), _nn._u(r, 7)], n=7),
        "empty_rows": lambda r: _nn.Call([np.zeros((3, 0)), np.zeros(0)], n=1),
        "wide_row": lambda r: _nn.Call([_nn._u(r, 1, WIDE), _nn._u(r, WIDE)], n=WIDE),
    },
    "layer_norm": {
        "empty": lambda r: _nn.Call([np.zeros((0, 7)), _nn._u(r, 7), _nn._u(r, 7)], n=7),
        "empty_rows": lambda r: _nn.Call([np.zeros((3, 0)), np.zeros(0), np.zeros(0)], n=1),
        "wide_row": lambda r: _nn.Call([_nn._u(r, 1, WIDE), _nn._u(r, WIDE), _nn._u(r, WIDE)],
                                       n=WIDE),
    },
    # attention: a head dim past 2**15, dims of size 0 the kernels' empty-view paths take (no queries:
    # dk, dv are zeros; value dim 0: out is empty, dq, dk zeros; no query heads),
    # a NaN in q, and an additive mask of another floating dtype than q (float16: a float32
    # or bfloat16 kernel declines it, a float16 kernel reads it)
    "scaled_dot_product_attention": {
        # one query and two keys with a head dim past a row kernel's chunk
        # (a 16-bit kernel widens q and k in chunks of 32 Ki elements)
        "wide_head_dim": lambda r: _nn._sdpa(r, 1, 1, 1, 1, 2, WIDE, 4),
        "no_queries": lambda r: _nn._sdpa(r, 1, 2, 1, 0, 5, 4, 4),
        "value_dim_0": lambda r: _nn._sdpa(r, 1, 2, 1, 3, 5, 4, 0),
        "no_query_heads": lambda r: _nn._sdpa(r, 1, 0, 1, 3, 5, 4, 4),
        "nan_query": _sdpa_nan,
        "float16_mask": lambda r: _nn._sdpa(r, 1, 2, 2, 3, 5, 4, 4,
                                            mask=(_nn._u(r, 3, 5) * 2).astype(np.float16)),
    },
    "gelu": {
        "special": lambda r: _nn.Call([_special(r, (3, 37))]),
        "tanh_special": lambda r: _nn.Call([_special(r, (3, 37))], {"approximate": "tanh"}),
    },
}


def _calls(op):
    """OP's call classes in this section: ``_nn.CALLS[op]``, then EXTRA's."""
    return {**_nn.CALLS[op], **EXTRA.get(op, {})}


def _placer(ctx, place):
    """``place(key, value)``: the device operand of positional input ``key`` (an
    index) or keyword ``key``; by default a dense copy (the fuzz section lays
    operands out as views)."""
    return place or (lambda key, value: _nn.to_device(value, ctx.device))


def _run(ctx, op, args, kwargs, fused, noncontig=False, place=None):
    """(host outputs, {kernel name: launches}, decomposed calls) of one call."""
    dev, place = ctx.device, _placer(ctx, place)
    dev_args = [place(i, a) for i, a in enumerate(args)]
    if noncontig:
        dev_args[0] = _noncontiguous(args[0], dev)
    dk.reset_composite_stats()
    with dk.fused_kernels(fused):
        out = _nn.function(op)(*dev_args, **{k: place(k, v) for k, v in kwargs.items()})
        got = [o.numpy() for o in _nn.outputs(out)]
    st = dk.composite_stats().get(op, {"decomposed": 0, "fused": {}})
    return got, st["fused"], st["decomposed"]


def _compare(ctx, op, call, args, kwargs, dtype, noncontig, note, place=None):
    """Runs the call fused-on and fused-off; checks both against the oracle and
    each other. Returns {kernel: launches} of the fused-on run."""
    got, launched, _ = _run(ctx, op, args, kwargs, True, noncontig, place)
    ref, _, _ = _run(ctx, op, args, kwargs, False, noncontig, place)
    want = _nn.expected(op, args, kwargs, dtype)
    rtol, atol = _nn.tolerance(op, dtype, call.n)
    path = f"ran: {', '.join(launched) or 'the decomposition'}"
    for g, r, w in zip(got, ref, want):
        case = f"{note} n={call.n} seed={ctx.seed}; {path}"
        O.assert_close(g, w, dtype, op=op, tol=(rtol, atol), case=case + " vs oracle")
        O.assert_close(g, r, dtype, op=op, tol=(2 * rtol, 2 * atol), case=case + " vs decomposition")
    return launched


def check_call(ctx, kernel, op, dtype, shape, backward=False, wrt=None):
    """``op``'s call class ``shape``: through ``kernel`` (the op's fused
    kernel, or with ``backward`` its backward kernel) vs the decomposition.
    ``wrt``: the inputs that require grad (default: every floating one)."""
    call = _calls(op)[shape](ctx.rng())
    args, kwargs = _nn.rounded(call, dtype)
    note = f"{kernel} {dtype} {shape}"
    if backward:
        launched = _compare_grads(ctx, op, call, args, kwargs, dtype, False, note, wrt=wrt)
    else:
        launched = _compare(ctx, op, call, args, kwargs, dtype, False, note)
    if not launched.get(kernel):
        other = ", ".join(launched) or "the decomposition" + ("'s gradient" if backward else "")
        raise Skip(f"{kernel} {'was not asked or declined' if backward else 'declined'} this "
                   f"call ({other} ran and was right)")


def check_reject(ctx, kernel, op, kind, backward=False):
    """REJECTS[op][kind]: (call, dtype, first operand non-contiguous[, {keyword
    argument: its own dtype}]), or a list of them, each checked in turn."""
    made = REJECTS[op][kind](ctx.rng())
    ran, missing = 0, set()
    for call, dtype, noncontig, *own in made if isinstance(made, list) else [made]:
        own = own[0] if own else {}
        lacking = {dtype, *own.values()} - set(ctx.target.dtypes)
        if lacking:
            missing |= lacking
            continue
        args, kwargs = _nn.rounded(call, dtype)
        kwargs.update({k: O.round_to(call.kwargs[k], d) for k, d in own.items()})
        note = f"{kernel} rejects/{kind} {dtype}" + "".join(f", {k} {d}" for k, d in own.items())
        compare = _compare_grads if backward else _compare
        compare(ctx, op, call, args, kwargs, dtype, noncontig, note)
        ran += 1
    if not ran:
        raise Skip(f"the device has no {', '.join(sorted(missing))}")


def _launched(ctx, op, args, kwargs, dtype, backward):
    """{kernel: launches} of one call of ``op`` (forward, or forward and backward)."""
    if backward:
        return _grads(ctx, op, args, kwargs, _cotangent(ctx, op, args, kwargs, dtype), True)[1]
    return _run(ctx, op, args, kwargs, True)[1]


def check_accepts(ctx, kernel, op, backward=False):
    tried = 0
    for dtype in DTYPES:
        if dtype not in ctx.target.dtypes:
            continue
        for make in _nn.CALLS[op].values():
            args, kwargs = _nn.rounded(make(ctx.rng()), dtype)
            tried += 1
            if _launched(ctx, op, args, kwargs, dtype, backward).get(kernel):
                # supports must be pure: the same call again gets the same answer
                if not _launched(ctx, op, args, kwargs, dtype, backward).get(kernel):
                    raise AssertionError(
                        f"fused kernel {kernel} ({op}{'_backward' if backward else ''}) ran for "
                        f"a {dtype} call and not for the same call made again: its supports() "
                        f"must be pure (the same args give the same answer)")
                return
    calls = f"{tried} calls ({', '.join(DTYPES)} x {', '.join(_nn.CALLS[op])})"
    if backward:
        raise AssertionError(f"fused backward kernel {kernel} ({op}_backward) ran for none of "
                             f"{calls}: either its supports() declines everything or the plugin "
                             f"has no fused {op} kernel that accepts them (the SDK runs a backward "
                             f"kernel only after the op's fused forward ran)")
    raise AssertionError(f"fused kernel {kernel} ({op}) accepted none of {calls}: its supports() "
                         f"predicate declines everything, so it never runs")


def no_kernels(ctx):
    raise Skip(f"plugin '{ctx.device.plugin.name}' registers no fused kernels "
               f"(Plugin.fused_kernels() is empty): every composite op runs its decomposition")


def unknown_op(ctx, kernel, op):
    raise RuntimeError(f"fused kernel {kernel} is for op '{op}', for which this DeviceKit's "
                       f"conformance suite has no calls: upgrade devicekit")


def cases(target):
    kernels = _kernels(target)
    if not kernels:
        return [Case(id="fused/none_registered", section="fused", fn=no_kernels)]
    out = []
    for k in kernels:
        name, op = k["name"], k["op"]
        base = dict(section="fused", op=op)
        # A backward kernel runs through its forward op's calls, with gradients.
        backward = op in BACKWARD_OF
        fwd = BACKWARD_OF.get(op, op)
        if fwd not in _nn.CALLS or fwd not in REJECTS:
            out.append(Case(id=f"fused/{name}/unknown_op", dtype=None, **base,
                            fn=functools.partial(unknown_op, kernel=name, op=op)))
            continue
        which = dict(kernel=name, op=fwd, backward=backward)
        out.append(Case(id=f"fused/{name}/accepts_some_call", **base,
                        fn=functools.partial(check_accepts, **which)))
        for dtype in DTYPES:
            for shape in _calls(fwd):
                # Only float32 is a required dtype, as for the composites.
                out.append(Case(id=f"fused/{name}/{dtype}/{shape}", dtype=dtype,
                                required=dtype == "float32", **base,
                                fn=functools.partial(check_call, dtype=dtype, shape=shape,
                                                     **which)))
        if backward:  # each other subset of the inputs requiring grad (_nn: "opt_" classes)
            for shape in [c for c in _nn.CALLS[fwd] if c.startswith("opt_")]:
                for label, wrt in _nn.grad_subsets(fwd, shape)[1:]:
                    out.append(Case(id=f"fused/{name}/float32/{shape}/{label}", dtype="float32",
                                    **base, fn=functools.partial(check_call, dtype="float32",
                                                                 shape=shape, wrt=wrt, **which)))
        for kind in REJECTS[fwd]:
            out.append(Case(id=f"fused/{name}/rejects/{kind}", **base,
                            fn=functools.partial(check_reject, kind=kind, **which)))
    out += permuted_cases(kernels)  # the permuted q/k/v block below
    return out


# ---- Permuted q/k/v views (attention) ------------------------------------------
# Attention code hands q, k and v to scaled_dot_product_attention as [B,H,L,D]
# views of [B,L,H*D] projections, x.reshape(b, n, h, d).transpose(1, 2), often
# pieces of one fused qkv projection: rows (the last dim) unit-stride, heads
# and positions strided. A kernel may decline such views (the SDK then
# decomposes, and the case is skipped with the reason, as check_call does); a
# kernel that accepts them must read through their strides. Each case runs the
# call fused and decomposed on the same views and checks both against the
# oracle with check_call's tolerances.
#
# kind "heads": each of q, k, v a view of its own dense [B, L, H*D] tensor,
# over the existing calls in which q has several heads (GQA, masks, Lq != Lk,
# D != Dv, lengths across the kernels' tiles).
# kind "split": q, k, v pieces of one [B, L, 3*H*D] tensor, so their rows
# are 3*H*D apart and their spans interleave. The split is taken after the
# reshape (qkv.reshape(b, n, 3*h, d).split(h, dim=2)): a piece of
# qkv.split(h*d, dim=2) is not contiguous, so DeviceKit's reshape of it copies
# and the kernel would see the "heads" layout again.

SDPA = "scaled_dot_product_attention"
PERMUTED_HEADS = ("odd", "gqa", "causal_lq_ne_lk", "bool_mask_bcast", "float_mask",
                  "fully_masked", "large_tiles", "large_causal_lq_ne_lk")
PERMUTED_SPLIT = {
    "causal": lambda r: _nn._sdpa(r, 2, 3, 3, 9, 9, 8, 8, is_causal=True),
    "bool_mask": lambda r: _nn._sdpa(r, 1, 2, 2, 6, 6, 5, 5, mask=r.random((6, 6)) < 0.7),
    # 150 rows: several 64-query / 128-key tiles, the causal boundary inside
    # them; head dim 32, a multiple of every vector width, so a tiled kernel
    # reads V rows in place (other head dims make it pack them)
    "large_causal": lambda r: _nn._sdpa(r, 1, 2, 2, 150, 150, 32, 32, is_causal=True, scale=0.5),
}


def _blhd(a):
    """[B,H,L,D] -> the same values laid out [B, L, H*D] (what a projection makes)."""
    b, h, n, d = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(b, n, h * d)


def _heads_views(qkv, dev):
    out = []
    for a in qkv:
        b, h, n, d = a.shape
        out.append(dk.tensor(_blhd(a), device=dev).reshape(b, n, h, d).transpose(1, 2))
    return out


def _split_views(qkv, dev):
    b, h, n, d = qkv[0].shape
    x = dk.tensor(np.concatenate([_blhd(a) for a in qkv], axis=2), device=dev)
    return [t.transpose(1, 2) for t in x.reshape(b, n, 3 * h, d).split(h, dim=2)]


def _permuted_views(kind, qkv, dev):
    """The device views of q, k, v (numpy [B,H,L,D]) that ``kind`` makes; checks
    that they are what this block means to test (else the case proves nothing)."""
    views = (_heads_views if kind == "heads" else _split_views)(qkv, dev)
    b, h, n, d = qkv[0].shape
    q = views[0]
    want = [n * h * d * (3 if kind == "split" else 1), d, h * d * (3 if kind == "split" else 1), 1]
    if list(q.strides) != want or any(list(v.shape) != list(a.shape) for v, a in zip(views, qkv)):
        raise AssertionError(f"permuted/{kind}: built q of shape {list(q.shape)} and strides "
                             f"{list(q.strides)}; expected strides {want}: this DeviceKit's "
                             f"reshape/split/transpose no longer make the views this case tests")
    return views


def _run_permuted(ctx, kind, args, kwargs, fused):
    """(host output, composite_stats entry) of one call on permuted views."""
    dev = ctx.device
    q, k, v = _permuted_views(kind, args[:3], dev)
    dk.reset_composite_stats()
    with dk.fused_kernels(fused):
        out = _nn.function(SDPA)(q, k, v, **{n: _nn.to_device(a, dev) for n, a in kwargs.items()})
        got = out.numpy()
    return got, dk.composite_stats().get(SDPA, {"fused": {}, "why_decomposed": {}})


def check_permuted(ctx, kernel, kind, shape):
    dtype = "float32"
    make = _nn.CALLS[SDPA][shape] if kind == "heads" else PERMUTED_SPLIT[shape]
    call = make(ctx.rng())
    args, kwargs = _nn.rounded(call, dtype)
    got, stats = _run_permuted(ctx, kind, args, kwargs, True)
    ref, _ = _run_permuted(ctx, kind, args, kwargs, False)
    (want,) = _nn.expected(SDPA, args, kwargs, dtype)
    rtol, atol = _nn.tolerance(SDPA, dtype, call.n)
    launched = stats["fused"]
    case = (f"{kernel} permuted/{kind}/{shape} n={call.n} seed={ctx.seed}; "
            f"ran: {', '.join(launched) or 'the decomposition'}")
    O.assert_close(got, want, dtype, op=SDPA, tol=(rtol, atol), case=case + " vs oracle")
    O.assert_close(got, ref, dtype, op=SDPA, tol=(2 * rtol, 2 * atol),
                   case=case + " vs decomposition")
    if not launched.get(kernel):
        ran = ", ".join(launched) or "the decomposition"
        why = "; ".join(stats.get("why_decomposed", {})) or "another kernel accepted first"
        raise Skip(f"{kernel} did not run on permuted q/k/v views ({why}); {ran} ran and was right")


def permuted_cases(kernels):
    out = []
    for k in kernels:
        if k["op"] != SDPA:
            continue
        classes = [("heads", c) for c in PERMUTED_HEADS] + [("split", c) for c in PERMUTED_SPLIT]
        for kind, shape in classes:
            out.append(Case(id=f"fused/{k['name']}/permuted/{kind}/{shape}", section="fused",
                            op=SDPA, dtype="float32",
                            fn=functools.partial(check_permuted, kernel=k["name"], kind=kind,
                                                 shape=shape)))
    return out


# ---- backward kernels (device API 1.3) ---------------------------------------------

try:
    from devicekit._op_facts import FUSED_BACKWARD as _FUSED_BACKWARD
except ImportError:  # a DeviceKit before device API 1.3
    _FUSED_BACKWARD = {}
BACKWARD_OF = {b: f for f, b in _FUSED_BACKWARD.items()}


def _floating(a):
    """A floating operand (float16/32/64 or bfloat16 array): it requires grad."""
    return isinstance(a, np.ndarray) and (a.dtype.kind == "f" or a.dtype.name == "bfloat16")


def _wrt(args, wrt):
    """The indices of the inputs that require grad: ``wrt``, else every floating one."""
    return [i for i, a in enumerate(args) if _floating(a)] if wrt is None else list(wrt)


def _grads(ctx, fwd, args, kwargs, cot, fused, noncontig=False, wrt=None, place=None):
    """(gradients of the inputs ``wrt`` (default: every floating one),
    {backward kernel: launches}) of one call of ``fwd`` whose output gradient
    is ``cot``. An input that does not require grad must get no gradient."""
    dev, wrt, place = ctx.device, _wrt(args, wrt), _placer(ctx, place)
    dev_args = [place(i, a) for i, a in enumerate(args)]
    if noncontig:
        dev_args[0] = _noncontiguous(args[0], dev)
    dev_args = [t.detach().requires_grad_(True) if i in wrt else t for i, t in enumerate(dev_args)]
    kw = {k: place(k, v) for k, v in kwargs.items()}  # masks: never differentiated
    dk.reset_composite_stats()
    with dk.fused_kernels(fused):
        out = _nn.function(fwd)(*dev_args, **kw)
        out.backward(dk.tensor(cot, device=dev))
    stray = [i for i, t in enumerate(dev_args) if i not in wrt and getattr(t, "grad", None) is not None]
    assert not stray, (f"{fwd}: inputs {stray} got a gradient though they do not require grad "
                       f"(only inputs {wrt} do)")
    grads = [dev_args[i].grad.numpy() for i in wrt]
    st = dk.composite_stats().get(fwd + "_backward", {"fused": {}})
    return grads, st["fused"]


def _cotangent(ctx, fwd, args, kwargs, dtype):
    """A fixed random output gradient of the call's output shape, in ``dtype``."""
    dev = ctx.device
    with dk.no_grad():
        out = _nn.function(fwd)(*[_nn.to_device(a, dev) for a in args],
                                **{k: _nn.to_device(v, dev) for k, v in kwargs.items()})
    return O.round_to(ctx.rng().standard_normal(tuple(out.shape)), dtype)


def _compare_grads(ctx, fwd, call, args, kwargs, dtype, noncontig, note, wrt=None, place=None):
    wrt = _wrt(args, wrt)
    cot = _cotangent(ctx, fwd, args, kwargs, dtype)
    got, launched = _grads(ctx, fwd, args, kwargs, cot, True, noncontig, wrt, place)
    ref, _ = _grads(ctx, fwd, args, kwargs, cot, False, noncontig, wrt, place)
    # Each gradient element sums up to one product per element of the largest input.
    n = max([call.n] + [int(np.prod(a.shape)) for a in args if _floating(a)])
    rtol, atol = _nn.tolerance(fwd, dtype, n)
    path = f"ran: {', '.join(launched) or 'the decomposition'}"
    case = f"{note} n={call.n} seed={ctx.seed}; {path}"
    for i, g, r in zip(wrt, got, ref):
        O.assert_close(g, r, dtype, op=fwd, tol=(2 * rtol, 2 * atol),
                       case=f"{case}: gradient of input {i} vs the decomposition's")
    if "float64" in ctx.target.dtypes and dtype != "float64":
        wide = [a.astype(np.float64) if _floating(a) else a for a in args]
        wide_kw = {k: v.astype(np.float64) if _floating(v) else v for k, v in kwargs.items()}
        exact, _ = _grads(ctx, fwd, wide, wide_kw, cot.astype(np.float64), False, noncontig, wrt,
                          place)
        for i, g, w in zip(wrt, got, exact):
            O.assert_close(g, O.round_to(w, dtype), dtype, op=fwd, tol=(2 * rtol, 2 * atol),
                           case=f"{case}: gradient of input {i} vs the float64 decomposition's")
    return launched


