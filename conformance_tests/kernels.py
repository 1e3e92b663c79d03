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
- ``kernels/cast/<dtype>/ladder``: cast from dtype to every declared dtype at
  every length of :data:`LADDER` (short lengths with different tails, then a
  geometric ladder to a budget of 2**17 + 1 elements), each its own call, on
  values every dtype holds exactly, judged exactly.
- ``kernels/<op>/invalid/<case>``: one call per argument rule the header
  states (``device_api/spec/arg_rules.json``: operand counts, dtypes, shapes
  with batch dims, strides, NULL data, aliasing, views past their allocation,
  attributes, index values), for every op it applies to, each breaking that
  one rule (``_invalid``): a call the header forbids must return
  DK_ERROR_INVALID_ARGUMENT from the kernel call itself, write nothing, and
  leave the stream healthy; a bad index must be reported, from the call or
  the synchronize. :func:`rule_coverage` counts the (rule, op) pairs that got
  their cases (the status line shows it; tests/test_arg_rules.py requires
  all of them).
"""

import functools

import numpy as np

from devicekit.conformance.case import Case, Section
from devicekit.conformance.registry import op_cases, spec, spec_dtypes
from devicekit.testing import oracle as O
from devicekit.testing.inputs import rand

from . import _invalid, _raw, _rules

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
        x = x.reshape(2, 5, 8)  # rank 3 like every plan: the invalid calls break each dim
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


def check_direct(ctx, op, dtype, shape):
    ins, out_shape, out_dtype, attr, want, n, scale = plan(op, dtype, ctx.rng())
    call = _invalid.Call(list(ins), tuple(out_shape), out_dtype, attr)
    (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, op, call)
    assert lc == 0, f"{op} {dtype}: the kernel rejected a valid call [{lc}]: {lmsg}"
    assert sc == 0, f"{op} {dtype}: the stream reported an error [{sc}]: {smsg}"
    assert bands_ok, f"{op} {dtype}: the kernel wrote outside its output (guard bands changed)"
    ctx.ran.add((op, dtype))
    O.assert_close(got, want, call.out_dtype, op=op, n=n, scale=scale,
                   signed_zeros=op in O.SIGNED_ZEROS, case=f"direct {dtype} seed={ctx.seed}")


#: Lengths of the cast ladder, each its own call: short ones whose tails
#: differ for 4-, 8-, 16- and 32-wide vectors, then a geometric ladder (x8)
#: to the budget of 2**17 + 1 elements per call: past every common vector
#: width and unroll, and past any size at which a kernel might split its work
#: over threads, without knowing where a plugin puts that. Per call cost
#: dominates, so the ladder is short: 81 dtype pairs x 9 lengths.
LADDER = (1, 7, 17, 33, 127, 2**10 + 1, 2**13 + 3, 2**16 - 1, 2**17 + 1)


def _in_every_range(x):
    """x moved into [0, 100] (quarters for floats): exactly representable in
    every dtype, so each cast has one right answer."""
    if x.dtype == np.bool_:
        return x
    v = np.clip(x.astype(np.float64), -100, 100)
    v = np.abs(np.round(v * 4) / 4) if x.dtype.kind == "f" or "float" in str(x.dtype) \
        else np.abs(np.round(v))
    return v.astype(x.dtype)


def check_cast_ladder(ctx, op, dtype, shape):
    """cast from dtype to every declared dtype at every LADDER length, each
    its own call (a tail is a per-call property), exact as the spec says."""
    rng = ctx.rng()
    dsts = [d for d in spec_dtypes("cast")[0] if d in ctx.target.declared.get("cast", ())]
    pool = _in_every_range(rand(dtype, (LADDER[-1],), rng))
    for dst in dsts:
        for n in LADDER:
            x = pool[:n].copy()
            call = _invalid.Call([(x, dtype)], (n,), dst, None)
            (lc, lmsg, sc, smsg), [(got, bands_ok)] = _invalid.launch(ctx.device, "cast", call)
            assert lc == 0 and sc == 0, f"cast {dtype}->{dst} n={n}: [{lc}] {lmsg} [{sc}] {smsg}"
            assert bands_ok, f"cast {dtype}->{dst} n={n}: wrote outside its output"
            O.assert_close(got, O.cast(x, dst), dst, op="cast",
                           case=f"ladder {dtype}->{dst} n={n} seed={ctx.seed}")
    ctx.ran.add(("cast", dtype))


def _make_direct(op, dtype, shape):
    return functools.partial(check_direct, op=op, dtype=dtype, shape=shape)


def invalid_dtype(target, op):
    """The dtype an op's invalid calls are made in: float32 where declared."""
    dts = [d for d in spec_dtypes(op)[0] if d in target.declared.get(op, ())]
    return ("float32" if "float32" in dts else dts[0]) if dts else None


def invalid_cases(target, op):
    """[(rule, case name)] of ``op``'s invalid calls, and {rule id: why not}
    for the rules that apply to it but cannot be built for this plugin."""
    dtype = invalid_dtype(target, op)
    if dtype is None:
        return [], {}
    call = _invalid.base_call(plan, op, dtype, np.random.default_rng(0))
    made, why_not = [], {}
    for r in _rules.pairs_of(target, op):
        for name, params in _rules.case_names(r).items():
            broken = _invalid.broken_call(target, r, op, dtype, call, params)
            if isinstance(broken, str):
                why_not[r["id"]] = broken
                break
            if broken is not None:
                made.append((r, name))
    return made, why_not


def rule_coverage(target, cases):
    """The (rule, op) pairs of the argument rules (``_rules.pairs_of`` each
    op the plugin implements) and how many have their cases in ``cases``:
    {rules, pairs, covered, uncovered: [rule/op], not_applicable: [rule/op:
    why], sdk_cases, sdk_missing}. A pair whose case cannot be built for this
    plugin (it declares every dtype there is, so none is undeclared; an older
    core that cannot malform the call) is not applicable and says why; every
    other pair must be covered by all the rule's case names."""
    ids = {c.id for c in cases}
    covered, uncovered, not_applicable = 0, [], []
    for op in sorted(target.declared):
        if op not in _rules.spec_ops():
            continue
        _, why_not = invalid_cases(target, op)
        for r in _rules.pairs_of(target, op):
            if all(f"kernels/{op}/invalid/{n}" in ids for n in _rules.case_names(r)):
                covered += 1
            elif r["id"] in why_not:
                not_applicable.append(f"{r['id']}/{op}: {why_not[r['id']]}")
            else:
                uncovered.append(f"{r['id']}/{op}")
    sdk = [n for r in _rules.rules() for n in r.get("sdk_cases", ())]
    sdk_missing = [n for n in sdk if f"errors/invalid_argument/{n}" not in ids]
    return {"rules": len(_rules.rules()), "pairs": covered + len(uncovered), "covered": covered,
            "uncovered": uncovered, "not_applicable": not_applicable,
            "sdk_cases": len(sdk) - len(sdk_missing), "sdk_missing": sdk_missing}


def status(target):
    """The rule coverage for the status line and the report's implementation
    entry (registry.implementation_status): the counts, what is uncovered, and
    one line."""
    from . import errors

    cov = rule_coverage(target, cases(target) + errors.cases(target))
    return {"arg_rules": cov["rules"], "rule_pairs": cov["pairs"],
            "rule_pairs_covered": cov["covered"], "rule_pairs_uncovered": cov["uncovered"],
            "rule_pairs_not_applicable": cov["not_applicable"], "line": _rules.coverage_line(cov)}


def cases(target):
    out = []
    for o in spec()["ops"]:
        op = o["name"]
        out += op_cases(target, "kernels", op, ["direct"], _make_direct)
        if op == "cast":
            out += op_cases(target, "kernels", op, ["ladder"], lambda o, d, s:
                            functools.partial(check_cast_ladder, op=o, dtype=d, shape=s))
        dtype = invalid_dtype(target, op)
        for r, name in invalid_cases(target, op)[0]:
            out.append(Case(id=f"kernels/{op}/invalid/{name}", section="kernels", op=op,
                            dtype=dtype, fn=functools.partial(
                                _invalid.check, op=op, dtype=dtype, rule_id=r["id"], case=name,
                                plan=plan)))
    return out
