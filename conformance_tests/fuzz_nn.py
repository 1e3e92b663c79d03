"""Section "fuzz", part 2: seeded random calls of the composite ops a plugin
may fuse (softmax, rms_norm, layer_norm, scaled_dot_product_attention, gelu),
forward and backward, level full only.

- ``fuzz/<op>/<dtype>/s<seed>`` (float32, float16, bfloat16): one call drawn
  from the seed: shapes at the kernels' thresholds (rows and the reduced dim
  large together, attention lengths around and across 64-query / 128-key
  tiles with ragged tails), each optional input present or not, every
  attribute (axis, eps, approximate, mask kind, causal, GQA, scale), random
  masks (broadcast shapes, fully masked rows, whole tiles masked, -inf
  entries) and operands laid out as random views. Checked as the fused
  section checks a call: fused kernels on and off, both against the float64
  oracle and each other (whichever path ran: a kernel that declines is not a
  failure here).
- ``fuzz/<op>_backward/float32/s<seed>``: a smaller call, a random non-empty
  subset of its floating inputs requiring grad; the gradients with fused
  kernels on against the decomposition's, in float32 and float64.

A composite the plugin cannot decompose (a base op it lacks) is not
implemented, as in the composites section.
"""

import functools

import numpy as np

from devicekit.conformance.case import Case

from . import _fuzz as F
from . import _nn, fused
from .composites import _missing
from .fuzz import SECTION  # noqa: F401  (one section, two files)

OPS = ("softmax", "rms_norm", "layer_norm", "scaled_dot_product_attention", "gelu")
FORWARD_CAP, BACKWARD_CAP = 1 << 17, 1 << 14  # elements of x, or of the score matrix
# float32 norms also get outputs past 16 MiB in a quarter of their cases: the size
# above which a norm kernel may store differently (larger than the caches)
LARGE_OUTPUT = (1 << 22) + (1 << 18)


def _positive(shape):
    return tuple(max(s, 1) for s in shape)


def _softmax(rng, cap, backward):
    sh = _positive(F.shape(rng, min_rank=1, max_rank=4, cap=cap))
    axis = -1 if rng.random() < 0.6 else int(rng.integers(-len(sh), len(sh)))
    x = rng.standard_normal(sh) * float(rng.choice([1.0, 4.0, 60.0]))
    if rng.random() < 0.3:  # excluded entries, never a whole row
        x[rng.random(sh) < 0.2] = -np.inf
        np.moveaxis(x, axis, -1)[..., int(rng.integers(0, sh[axis]))] = 0.0
    return _nn.Call([x], {"axis": axis}, n=sh[axis])


def _norm(rng, cap, backward, centered):
    # Rows a float32 norm cannot get to tolerance, whatever it does, are left
    # out: the gradient over 1 or 2 elements (~0 by cancellation: the output
    # is +-1 whatever x), and layer_norm over 2 to 7 elements, where many rows
    # of a large tensor have values so close that x - mean cancels.
    d = max(F.size(rng), 3 if backward else 1)
    if centered and 1 < d < 8:
        d = int(rng.choice([8, 9, 13, 16, 17]))
    rows = F.shape(rng, max_rank=3, cap=max(1, min(cap, FORWARD_CAP) // d))
    if cap >= LARGE_OUTPUT and rng.random() < 0.25:  # rows and d large together, ragged
        d = int(rng.choice([1023, 4097, 4099, 8193]))
        rows = (-(-LARGE_OUTPUT // d),) if rng.random() < 0.5 else (3, -(-LARGE_OUTPUT // (3 * d)))
    # (a gradient grows as 1/scale while its tolerance's atol does not: backward
    # rows keep a scale near 1, as the fused section's classes do)
    scale = 10.0 ** (rng.uniform(-0.5, 1) if backward else rng.uniform(-3, 3))
    x = rng.standard_normal(rows + (d,)) * scale
    if centered and rng.random() < 0.3:  # the mean dominates: a one-pass variance cancels
        x = x + 30.0 * scale  # (the ops section's "offset" ratio; far more is ill-conditioned)
    args = [x, rng.standard_normal(d) if rng.random() < 0.6 else None]
    if centered:
        args.append(rng.standard_normal(d) if rng.random() < 0.6 else None)
    while args[-1] is None:
        args.pop()
    return _nn.Call(args, {"eps": float(rng.choice([1e-6, 1e-5, 1e-3]))}, n=d)


def _gelu(rng, cap, backward):
    x = np.asarray(rng.standard_normal(F.shape(rng, cap=cap)) * float(rng.choice([1.0, 3.0, 6.0])))
    return _nn.Call([x], {"approximate": str(rng.choice(["none", "tanh"]))})


# Attention lengths: around and across 64-query / 128-key tiles, ragged tails
LENGTHS = (1, 2, 3, 5, 7, 17, 31, 63, 64, 65, 127, 128, 129, 150, 191, 255, 256, 257, 300, 333)
HEAD_DIMS = (1, 2, 3, 4, 7, 8, 16, 17, 32, 33, 64)


def _mask(rng, kind, full):
    b, hq, lq, lk = full
    rank = int(rng.integers(2, 5))
    sh = tuple(1 if rng.random() < 0.4 else s for s in full[4 - rank:-2])
    sh += (1 if rng.random() < 0.2 else lq, lk)
    if kind == "bool":
        m = rng.random(sh) < rng.uniform(0.3, 0.95)
    else:
        m = rng.standard_normal(sh) * 3
        m[rng.random(sh) < rng.uniform(0, 0.3)] = -np.inf
    block = np.zeros(sh, bool)
    if rng.random() < 0.3:  # a whole key tile hidden from a query tile
        i0, j0 = int(rng.integers(0, sh[-2])) // 64 * 64, int(rng.integers(0, lk)) // 128 * 128
        block[..., i0:i0 + 64, j0:j0 + 128] = True
    if rng.random() < 0.3:  # fully masked query rows: output 0
        block[..., rng.random(sh[-2]) < 0.2, :] = True
    m[block] = False if kind == "bool" else -np.inf
    return m


def _sdpa(rng, cap, backward):
    b, hkv = int(rng.choice([1, 2])), int(rng.choice([1, 2, 3]))
    hq = hkv * int(rng.choice([1, 1, 2, 3]))
    lq, lk = int(rng.choice(LENGTHS)), int(rng.choice(LENGTHS))
    while b * hq * lq * lk > cap:
        lq, lk = (lq // 2 or 1, lk) if lq > lk else (lq, lk // 2 or 1)
    d, dv = int(rng.choice(HEAD_DIMS)), int(rng.choice(HEAD_DIMS))
    kind = str(rng.choice(["none", "bool", "additive"], p=[0.4, 0.3, 0.3]))
    kw = {}
    if kind != "none":
        kw["attn_mask"] = _mask(rng, kind, (b, hq, lq, lk))
    elif rng.random() < 0.5:
        kw["is_causal"] = True
    if rng.random() < 0.5:
        kw["scale"] = float(rng.uniform(0.05, 2.0))
    # values of the composites section's magnitude: its tolerance assumes them
    args = [rng.standard_normal(s) for s in ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, dv))]
    return _nn.Call(args, kw, n=max(lk, d))


DRAW = {"softmax": _softmax, "gelu": _gelu, "scaled_dot_product_attention": _sdpa,
        "rms_norm": functools.partial(_norm, centered=False),
        "layer_norm": functools.partial(_norm, centered=True)}


def draw(op, dtype, seed, backward=False):
    """(Call, {input key: Layout or None}, inputs requiring grad or None) of
    case ``fuzz/<op>[_backward]/<dtype>/s<seed>``."""
    rng = F.generator(op + "_backward" * backward, dtype, seed)
    cap = BACKWARD_CAP if backward else LARGE_OUTPUT if dtype == "float32" and "norm" in op \
        else FORWARD_CAP
    call = DRAW[op](rng, cap, backward)
    keyed = list(enumerate(call.args)) + list(call.kwargs.items())
    layouts = {k: F.layout(rng, v.shape, expand=False) if rng.random() < 0.5 else None
               for k, v in keyed if isinstance(v, np.ndarray)}  # (values not constant anywhere)
    wrt = None
    if backward:
        floating = [i for i, a in enumerate(call.args) if isinstance(a, np.ndarray)]
        wrt = [i for i in floating if rng.random() < 0.6] or [int(rng.choice(floating))]
    return call, layouts, wrt


def check(ctx, op, dtype, seed, backward=False):
    call, layouts, wrt = draw(op, dtype, seed, backward)
    args, kwargs = _nn.rounded(call, dtype)

    def place(key, value):
        if not isinstance(value, (np.ndarray, np.generic)):  # (rounding makes 0-d arrays scalars)
            return value
        return F.place(ctx.device, F.Operand(np.asarray(value), layouts.get(key)))

    shapes = {k: list(np.shape(v)) for k, v in list(enumerate(args)) + list(kwargs.items())
              if isinstance(v, np.ndarray)}
    attrs = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)}
    note = (f"fuzz case {op}{'_backward' * backward}/{dtype}/s{seed}: inputs {shapes}, {attrs}, "
            f"layouts { {k: str(v) for k, v in layouts.items() if v} }"
            + (f", requires grad {wrt}" if backward else ""))
    if backward:
        fused._compare_grads(ctx, op, call, args, kwargs, dtype, False, note, wrt=wrt, place=place)
    else:
        fused._compare(ctx, op, call, args, kwargs, dtype, False, note, place=place)


def cases(target):
    if target.level != "full":
        return []
    out = []
    for op in OPS:
        runs = [(dt, False) for dt in fused.DTYPES] + [("float32", True)]
        for dtype, backward in runs:
            name = op + "_backward" * backward
            why = _missing(target, op, dtype)
            out += [Case(id=f"fuzz/{name}/{dtype}/s{s}", section="fuzz", op=name, dtype=dtype,
                         required=dtype == "float32", not_implemented=why, level="full",
                         fn=functools.partial(check, op=op, dtype=dtype, seed=s,
                                              backward=backward)) for s in F.seeds()]
    return out
