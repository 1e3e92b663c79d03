"""Section "hostile": numerically hostile data, judged against the exact answer.

Random normal data cannot tell a careful kernel from a careless one: a naive
float32 running sum, a softmax without the max subtraction, a one-pass
variance and a float16 accumulator all pass it. These cases draw data that
punishes each careless algorithm, compute the exact answer in Python
(``math.fsum``, integer-valued sums, float64 where that is exact enough: each
case says which) and judge the device's result with a bound a careful kernel
meets, never with any plugin's output. Every length comes from :data:`LADDER`
(short lengths whose tails differ for 4- to 32-wide vectors, then a geometric
ladder x8), so no plugin's thresholds are known here.

- ``hostile/reduce_sum/<float32|float64>/absorb``: ``[B, s, s, ..., s]`` with
  ``s`` below half an ulp of ``B``: a running sum that starts from ``B`` drops
  every ``s`` (error ``(n-1)*s``, linear in n); a pairwise or blocked sum keeps
  them. ``/cancel``: ``[B, s, ..., s, -B]`` (the answer is the small terms
  alone). ``/columns``: the same data down the rows of ``[n, 19]``, reduced
  over axis 0 (the kept-inner-dim path, 19 = 16 + a ragged tail of 3). Bound:
  the spec's accumulated bound (ulp + 4 sqrt(n) u sum|x|, Higham and Mary),
  which a pairwise sum meets by orders of magnitude and a naive one misses
  by ``(n-1)*s``.
- ``hostile/reduce_sum/<float16|bfloat16>/exact``: positive multiples of 1/8
  up to 2: every partial sum is exact in float32, the accumulation the spec
  promises, so the result is the exact sum rounded once (ties included):
  compared bit for bit. A 16-bit accumulator stalls at 2048 (256).
- ``hostile/mean/float32/offset``, ``hostile/var/float32/large_mean``: data
  ``3000 + 0.5 z``: the mean within the sum's bound / n; the variance within
  n/(n-1) d^2 + (4 sqrt(n) + 2) u sum(x - mean)^2 / (n - 1) + 2 ulp, d the mean's
  bound (two-pass: a shifted mean adds d^2, x - mean is exact by Sterbenz). A
  one-pass E[x^2] - E[x]^2 loses every digit (x^2 ~ 9e6 has ulp 1; var is 0.25).
- ``hostile/layer_norm/float32/large_mean`` (fused kernel if any) and
  ``.../large_mean_decomposed`` (base ops): the same rows. Bound per element
  r*d + |y|*(d^2/var/2 + (2 sqrt(n) + 6) u) + ulp(y), r = rsqrt(var + eps):
  the mean's error d moves every centred value, the variance's relative error
  moves the scale. ``hostile/rms_norm/float32/long_rows``: rows at every
  ladder length with one value 2^10 times the rest, bound |y| (2 sqrt(n) + 6) u
  + ulp(y).
- ``hostile/softmax/<dtype>/offset`` (fused) and ``.../offset_decomposed``:
  rows of ``100 + z``: ``exp(100)`` overflows float32, so a softmax without
  the max subtraction gives inf/inf = NaN. Bound y (4 sqrt(n) + 16) u + ulp
  of the output dtype (exp 2 ulp, the sum's accumulated bound, one divide).
  ``hostile/log_softmax/float32/offset``: the same rows, bound 2 ulp(lse) +
  (4 sqrt(n) + 16) u + ulp(out).
- ``hostile/sdpa/float32/offset`` (fused) and ``.../offset_decomposed``:
  scores ``s = q k^T / 4`` near 100 (one component of q and k is 20, D = 16):
  unshifted exp overflows. Bound (2 ds + (4 sqrt(Lk) + 16) u) max|v| + ulp,
  ds = (D + 2) u scale sum|q k| the scores' own float32 error (softmax
  moves by at most 2 ds).
- ``hostile/matmul/<float16|bfloat16>/exact``: ``[3, 3, K] @ [3, K, 5]``
  positive multiples of 1/4 and 1/2 (and a batch of ones: the results K land
  on rounding ties): every partial sum exact in float32, the accumulation the
  spec promises, so bit for bit. ``hostile/matmul/float32/mixed``: magnitudes
  from 2^-20 to 2^20 in random order and sign, full 24-bit significands,
  judged with the spec's accumulated bound against ``math.fsum`` of the exact
  float64 products.

float32 cases are required where the op (or the composite's base ops) is
declared; the other dtypes are optional, as in the spec.
"""

import functools
import math

import numpy as np

from devicekit.conformance.case import Case, Section
from devicekit.testing import bounds as _bounds

from ._common import O, dk, run

SECTION = Section("hostile", "Numerically hostile data against the exact answer", order=27)

#: Row lengths: tails for 4-, 8-, 16- and 32-wide vectors, then x8 to 2**17 + 1.
LADDER = (1, 7, 17, 33, 127, 2**10 + 1, 2**13 + 3, 2**16 - 1, 2**17 + 1)
SHORT = LADDER[:7]  # per-row ops whose cost grows with the row (up to 8195)
U32 = 2.0 ** -24  # float32 unit roundoff: also the promised accumulation of 16-bit floats
LAMBDA = 4  # the spec's accumulated-bound constant (base_ops.json)
#: Whether a case checks that the op's own kernel ran (``_common.run``); the
#: project's tests turn it off to run a careless Python kernel through the cases.
KERNEL_CHECK = True


def _f(x):
    return np.asarray(x, np.float64)


def _fail(what, got, want, bound, extra=""):
    g, w, b = _f(got), _f(want), _f(bound)
    with np.errstate(all="ignore"):
        err = np.abs(g - w)
    bad = ~(err <= b)
    if not bad.any():
        return
    i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(err / np.maximum(b, 1e-300),
                                                                nan=np.inf), -1)), bad.shape)
    raise AssertionError(
        f"{what}: {int(bad.sum())} of {bad.size} elements outside the bound{extra}; worst at "
        f"{tuple(int(v) for v in i)}: got {g[i]!r}, exact {w[i]!r}, |error| {err[i]:.6g}, "
        f"bound {b[i]:.6g}")


def _dev(ctx, op, name, *arrays, **kw):
    """``IMPL[name]`` on ``arrays`` moved to the device, its result on the host;
    with ``op``, checks that op's kernel ran (a fused call names no base op:
    which path ran is the fused section's concern)."""
    dev = ctx.device
    return run(ctx, op, lambda: IMPL[name](*(dk.tensor(a, device=dev) for a in arrays), **kw),
               check=KERNEL_CHECK and op is not None)


#: The device computations the cases make, one place (the project's tests
#: swap in careless kernels here to show the cases fail them).
IMPL = {
    "reduce_sum": lambda x, axes: dk.ops.sum(x, axes, keepdims=True),
    "mean": lambda x: dk.ops.mean(x, -1, keepdims=True),
    "var": lambda x: dk.nn.functional.var(x, -1, keepdims=True, correction=1),
    "layer_norm": lambda x: dk.nn.functional.layer_norm(x, eps=1e-5),
    "rms_norm": lambda x: dk.nn.functional.rms_norm(x, eps=1e-6),
    "softmax": lambda x: dk.nn.functional.softmax(x, -1),
    "log_softmax": lambda x: dk.nn.functional.log_softmax(x, -1),
    "sdpa": lambda q, k, v: dk.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.25),
    "matmul": lambda a, b: dk.ops.matmul(a, b),
}


# ---- reduce_sum --------------------------------------------------------------

def _absorb(rng, n, dtype, cancel):
    """[B, s, ..., s(, -B)] with B = 2^(p) and every s in [0.5, 1) (multiples
    of 1/256): each s is below half an ulp of B in dtype."""
    big = 2.0 ** (24 if dtype == "float32" else 53)
    s = rng.integers(128, 256, n) / 256.0
    s[0] = big
    if cancel and n > 1:
        s[-1] = -big
    return s.astype(O.np_dtype(dtype))


def check_sum_absorb(ctx, op, dtype, shape):
    rng = ctx.rng()
    for n in LADDER:
        x = _absorb(rng, n, dtype, cancel=shape == "cancel")
        if shape == "columns":
            cols = np.stack([np.roll(x, c) for c in range(19)], axis=1)  # B in a different row
            got = _dev(ctx, "reduce_sum", "reduce_sum", cols, axes=(0,))
            exact = np.array([[math.fsum(_f(cols[:, c])) for c in range(19)]])
            scale = np.abs(_f(cols)).sum(axis=0, keepdims=True)
        else:
            got = _dev(ctx, "reduce_sum", "reduce_sum", x, axes=(0,))
            exact, scale = np.array([math.fsum(_f(x))]), np.array([math.fsum(np.abs(_f(x)))])
        bound = _bounds.bound("reduce_sum", dtype, exact, n=n, scale=scale)
        _fail(f"reduce_sum {dtype} {shape} n={n} (B={float(x[0]):g} then small terms)",
              got.reshape(exact.shape), exact, bound,
              " (the spec's accumulated bound: a pairwise or blocked sum keeps the small terms)")


def _eighths(rng, shape, top=16):
    """Positive multiples of 1/8 up to top/8: exact in float16 and bfloat16."""
    return rng.integers(1, top + 1, shape) / 8.0


def _bits_equal(what, got, want):
    g, w = np.ascontiguousarray(got), np.ascontiguousarray(want)
    if g.shape == w.shape and np.array_equal(g.view(np.uint16), w.view(np.uint16)):
        return
    bad = np.flatnonzero(g.reshape(-1).view(np.uint16) != w.reshape(-1).view(np.uint16)) \
        if g.shape == w.shape else [0]
    i = int(bad[0])
    raise AssertionError(f"{what}: {len(bad)} elements differ from the exact result rounded "
                         f"once; first at flat index {i}: got {_f(g.reshape(-1)[i])!r}, "
                         f"expected {_f(w.reshape(-1)[i])!r} (every partial sum is exact in the "
                         f"float32 accumulation the spec promises)")


def check_sum_exact(ctx, op, dtype, shape):
    rng = ctx.rng()
    for n in LADDER[:8]:  # to 65535 terms: float16 holds their sum (below 65504)
        x = _eighths(rng, (n,), 16 if n < 2**15 else 8)  # at most 1 each past 2^15 terms
        exact = math.fsum(x)  # multiples of 1/8 below 2^16: 19 bits, exact in float32
        xs = x.astype(O.np_dtype(dtype))
        got = _dev(ctx, "reduce_sum", "reduce_sum", xs, axes=(0,))
        _bits_equal(f"reduce_sum {dtype} of {n} multiples of 1/8", got.reshape(1),
                    O.cast(np.array([exact]), dtype))


# ---- mean, var, the norms -------------------------------------------------------

def _offset_rows(rng, n, rows=2, offset=3000.0, sigma=0.5):
    return (offset + sigma * rng.standard_normal((rows, n))).astype(np.float32)


def _mean_bound(x):
    """|computed mean - mean| a careful float32 mean meets: the sum's spec
    bound over n, and the divide's rounding."""
    n = x.shape[-1]
    s = np.array([math.fsum(r) for r in _f(x)])
    m = s / n
    return m, (_bounds.bound("reduce_sum", "float32", s, n=n, scale=np.abs(_f(x)).sum(-1)) / n
               + _bounds.ulp(m, "float32"))


def check_mean(ctx, op, dtype, shape):
    rng = ctx.rng()
    for n in SHORT:
        x = _offset_rows(rng, n)
        got = _dev(ctx, "reduce_sum", "mean", x)
        m, d = _mean_bound(x)
        _fail(f"mean float32 of rows 3000 + 0.5 z, n={n}", got.reshape(-1), m, d)


def _exact_var(x, correction):
    """Two-pass in float64 on float32 data near 3000: its error (~1e-16 relative
    to the mean, squared) is far below any float32 bound."""
    xf = _f(x)
    d = xf - xf.mean(-1, keepdims=True)
    ss = (d * d).sum(-1)
    return ss / max(x.shape[-1] - correction, 0), ss


def check_var(ctx, op, dtype, shape):
    rng = ctx.rng()
    for n in SHORT[1:]:  # n = 1 divides by zero (n - 1 = 0)
        x = _offset_rows(rng, n)
        got = _dev(ctx, "reduce_sum", "var", x)
        var, ss = _exact_var(x, 1)
        _, d = _mean_bound(x)
        bound = (n / (n - 1) * d * d + (LAMBDA * math.sqrt(n) + 2) * U32 * ss / (n - 1)
                 + 2 * _bounds.ulp(var, "float32"))
        _fail(f"var float32 (two-pass) of rows 3000 + 0.5 z, n={n}", got.reshape(-1), var, bound,
              " (a one-pass E[x^2] - E[x]^2 loses every digit here)")


def check_layer_norm(ctx, op, dtype, shape):
    rng = ctx.rng()
    eps = 1e-5
    with dk.fused_kernels(not shape.endswith("_decomposed")):
        for n in SHORT:
            x = _offset_rows(rng, n)
            got = _dev(ctx, "reduce_sum" if shape.endswith("_decomposed") else None,
                       "layer_norm", x)
            var, _ = _exact_var(x, 0)
            _, d = _mean_bound(x)
            xf = _f(x)
            r = 1.0 / np.sqrt(var + eps)
            y = (xf - xf.mean(-1, keepdims=True)) * r[:, None]
            rel = (d * d / np.maximum(var, eps) / 2 + (2 * math.sqrt(n) + 6) * U32)[:, None]
            bound = (r * d)[:, None] + np.abs(y) * rel + _bounds.ulp(y, "float32")
            _fail(f"layer_norm float32 ({shape}) of rows 3000 + 0.5 z, n={n}", got, y, bound,
                  " (a one-pass variance E[x^2] - E[x]^2 loses every digit here)")


def check_rms_norm(ctx, op, dtype, shape):
    rng = ctx.rng()
    eps = 1e-6
    for n in LADDER:
        x = rng.standard_normal((2, n))
        x[:, n // 2] = 1024.0  # one term 2^10 times the rest: the others are small against it
        x = x.astype(np.float32)
        got = _dev(ctx, None, "rms_norm", x)
        xf = _f(x)
        ms = np.array([math.fsum(r) for r in xf * xf]) / n  # squares of float32 are exact
        y = xf / np.sqrt(ms + eps)[:, None]
        bound = np.abs(y) * (2 * math.sqrt(n) + 6) * U32 + _bounds.ulp(y, "float32")
        _fail(f"rms_norm float32 n={n} (one element 2^10 times the rest)", got, y, bound)


# ---- softmax, log_softmax, attention ---------------------------------------------

def _softmax_exact(xf):
    m = xf.max(-1, keepdims=True)  # shift-invariant: exact enough in float64 (error ~1e-16)
    e = np.exp(xf - m)
    return e / e.sum(-1, keepdims=True)


def check_softmax(ctx, op, dtype, shape):
    rng = ctx.rng()
    decomposed = shape.endswith("_decomposed")
    with dk.fused_kernels(not decomposed):
        for n in LADDER[:8]:
            x = O.cast(100.0 + 2.0 * rng.standard_normal((2, n)), dtype)
            got = _dev(ctx, "exp" if decomposed else None, "softmax", x)
            y = _softmax_exact(_f(x))
            bound = y * (LAMBDA * math.sqrt(n) + 16) * U32 + _bounds.ulp(y, dtype)
            _fail(f"softmax {dtype} ({shape}) of rows 100 + 2 z, n={n}", got, y, bound,
                  " (exp(100) overflows float32: the max must be subtracted first)")


def check_log_softmax(ctx, op, dtype, shape):
    rng = ctx.rng()
    for n in LADDER[:8]:
        x = (100.0 + 2.0 * rng.standard_normal((2, n))).astype(np.float32)
        got = _dev(ctx, "exp", "log_softmax", x)
        xf = _f(x)
        m = xf.max(-1, keepdims=True)
        log_s = np.log(np.exp(xf - m).sum(-1, keepdims=True))
        want = xf - m - log_s
        bound = (2 * _bounds.ulp(m + log_s, "float32") + 2 * _bounds.ulp(log_s, "float32")
                 + (LAMBDA * math.sqrt(n) + 16) * U32 + _bounds.ulp(want, "float32"))
        _fail(f"log_softmax float32 of rows 100 + 2 z, n={n}", got, want, bound,
              " (the sum of exp(100 + ...) overflows float32 without the max subtracted)")


def check_sdpa(ctx, op, dtype, shape):
    rng = ctx.rng()
    decomposed = shape.endswith("_decomposed")
    b, h, lq, d, dv, scale = 1, 2, 5, 16, 8, 0.25
    with dk.fused_kernels(not decomposed):
        for lk in SHORT[:6]:
            q = rng.standard_normal((b, h, lq, d))
            k = rng.standard_normal((b, h, lk, d))
            q[..., 0], k[..., 0] = 20.0, 20.0  # every score near 20 * 20 / 4 = 100
            v = rng.standard_normal((b, h, lk, dv))
            q, k, v = (t.astype(np.float32) for t in (q, k, v))
            got = _dev(ctx, "exp" if decomposed else None, "sdpa", q, k, v)
            qf, kf, vf = _f(q), _f(k), _f(v)
            s = scale * qf @ np.swapaxes(kf, -1, -2)
            want = _softmax_exact(s) @ vf
            ds = (d + 2) * U32 * scale * (np.abs(qf) @ np.swapaxes(np.abs(kf), -1, -2))
            vmax = np.abs(vf).max(axis=(-2, -1), keepdims=True)
            bound = ((2 * ds.max(-1, keepdims=True) + (LAMBDA * math.sqrt(lk) + 16) * U32) * vmax
                     + _bounds.ulp(want, "float32"))
            _fail(f"scaled_dot_product_attention float32 ({shape}) scores near 100, Lk={lk}",
                  got, want, bound,
                  " (exp(100) overflows float32: the row max must be subtracted first)")


# ---- matmul ------------------------------------------------------------------------

def check_matmul_exact(ctx, op, dtype, shape):
    rng = ctx.rng()
    for kk in SHORT:
        a = rng.integers(1, 9, (3, 3, kk)) / 4.0  # 1/4 .. 2
        bm = rng.integers(1, 5, (3, kk, 5)) / 2.0  # 1/2 .. 2: products multiples of 1/8
        a[2], bm[2] = 1.0, 1.0  # sums equal to K: 2049, 8195 ... land on float16 ties
        exact = np.einsum("bik,bkj->bij", a, bm)  # multiples of 1/8 below 2^16: exact in float64
        an, bn = a.astype(O.np_dtype(dtype)), bm.astype(O.np_dtype(dtype))
        got = _dev(ctx, "matmul", "matmul", an, bn)
        _bits_equal(f"matmul {dtype} K={kk} of positive multiples of 1/4", got,
                    O.cast(exact, dtype))


def check_matmul_mixed(ctx, op, dtype, shape):
    rng = ctx.rng()
    for kk in SHORT:
        def draw(shape_):
            mag = np.ldexp(1.0 + rng.random(shape_), rng.integers(-20, 21, shape_))
            return (mag * rng.choice([-1.0, 1.0], shape_)).astype(np.float32)
        a, bm = draw((2, 3, kk)), draw((2, kk, 4))
        got = _dev(ctx, "matmul", "matmul", a, bm)
        af, bf = _f(a), _f(bm)
        prods = af[:, :, :, None] * bf[:, None, :, :]  # float32 x float32: exact in float64
        exact = np.array([[[math.fsum(prods[z, i, :, j]) for j in range(4)] for i in range(3)]
                          for z in range(2)])
        bound = _bounds.bound("matmul", "float32", exact, n=kk, scale=np.abs(prods).sum(2))
        _fail(f"matmul float32 K={kk}, magnitudes 2^-20 .. 2^20 of both signs", got, exact, bound,
              " (the spec's accumulated bound)")


# ---- the case list ---------------------------------------------------------------------

#: (op or composite, dtype, shape class, function, base ops it needs in that dtype)
PLAN = [
    ("reduce_sum", "float32", "absorb", check_sum_absorb, ("reduce_sum",)),
    ("reduce_sum", "float32", "cancel", check_sum_absorb, ("reduce_sum",)),
    ("reduce_sum", "float32", "columns", check_sum_absorb, ("reduce_sum",)),
    ("reduce_sum", "float64", "absorb", check_sum_absorb, ("reduce_sum",)),
    ("reduce_sum", "float64", "cancel", check_sum_absorb, ("reduce_sum",)),
    ("reduce_sum", "float16", "exact", check_sum_exact, ("reduce_sum",)),
    ("reduce_sum", "bfloat16", "exact", check_sum_exact, ("reduce_sum",)),
    ("mean", "float32", "offset", check_mean, ("reduce_sum", "div")),
    ("var", "float32", "large_mean", check_var, ("reduce_sum", "div", "sub", "mul")),
    ("layer_norm", "float32", "large_mean", check_layer_norm, ("reduce_sum", "sub", "mul",
                                                               "div", "rsqrt", "add")),
    ("layer_norm", "float32", "large_mean_decomposed", check_layer_norm,
     ("reduce_sum", "sub", "mul", "div", "rsqrt", "add")),
    ("rms_norm", "float32", "long_rows", check_rms_norm, ("reduce_sum", "mul", "div", "rsqrt",
                                                          "add")),
    ("softmax", "float32", "offset", check_softmax, ("reduce_max", "reduce_sum", "exp", "sub",
                                                     "div")),
    ("softmax", "float32", "offset_decomposed", check_softmax,
     ("reduce_max", "reduce_sum", "exp", "sub", "div")),
    ("softmax", "float16", "offset", check_softmax, ("reduce_max", "reduce_sum", "exp", "sub",
                                                     "div")),
    ("softmax", "bfloat16", "offset", check_softmax, ("reduce_max", "reduce_sum", "exp", "sub",
                                                      "div")),
    ("log_softmax", "float32", "offset", check_log_softmax,
     ("reduce_max", "reduce_sum", "exp", "log", "sub", "add")),
    ("sdpa", "float32", "offset", check_sdpa, ("matmul", "reduce_max", "reduce_sum", "exp",
                                               "sub", "div")),
    ("sdpa", "float32", "offset_decomposed", check_sdpa,
     ("matmul", "reduce_max", "reduce_sum", "exp", "sub", "div")),
    ("matmul", "float16", "exact", check_matmul_exact, ("matmul",)),
    ("matmul", "bfloat16", "exact", check_matmul_exact, ("matmul",)),
    ("matmul", "float32", "mixed", check_matmul_mixed, ("matmul",)),
]


def _why_not(target, dtype, needs):
    """Why the plugin cannot run a case: an op it lacks in float32 (composites
    compute in float32), or the case's own dtype for its first op (and cast,
    which the SDK uses to compute 16-bit composites in float32)."""
    lacking = sorted(op for op in needs if "float32" not in target.declared.get(op, ()))
    if lacking and dtype == "float32":
        return f"needs base ops the plugin lacks in float32: {lacking}"
    if dtype != "float32":
        if dtype not in target.declared.get(needs[0], ()):
            return f"the plugin does not declare {dtype} for '{needs[0]}'"
        if len(needs) > 1 and dtype not in target.declared.get("cast", ()):
            return f"the plugin does not declare {dtype} for 'cast'"
    return None


def cases(target):
    out = []
    for op, dtype, shape, fn, needs in PLAN:
        out.append(Case(id=f"hostile/{op}/{dtype}/{shape}", section="hostile", op=op,
                        dtype=dtype, required=dtype == "float32",
                        not_implemented=_why_not(target, dtype, needs),
                        fn=functools.partial(fn, op=op, dtype=dtype, shape=shape)))
    return out
