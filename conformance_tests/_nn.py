"""Composite-op calls shared by the composites, fused and autograd sections
(not a section itself: leading underscore).

``CALLS[name][shape class](rng)`` builds one call of the composite ``name``
(``devicekit.nn.functional``) as a :class:`Call`: floating operands as float64
numpy arrays (each section rounds them to the dtype under test), other operands
(ids, targets, bool masks) as they are, keyword attributes, and ``n``, the
number of elements each output element is reduced over (1 for elementwise
ops), which scales the tolerance.

Tolerance (:func:`tolerance`), documented once for all three sections:
the dtype's default (devicekit.testing.oracle.TOLERANCES); the transcendental
override (oracle.TRANSCENDENTAL: polynomial exp/log/erf/tanh/rsqrt, ~34 ulp in
float32) for composites built on them; times sqrt(n) for composites that reduce
n elements, the rule of the accumulating base ops (oracle.ACCUMULATING).
float16/bfloat16 composites compute in float32 and round once, so the default
1-2 ulp of the narrow dtype is what they must meet.
"""

import math
from dataclasses import dataclass, field

import numpy as np

import devicekit as dk
import devicekit.nn.functional as F
from devicekit.testing import oracle as O
from devicekit.testing import oracle_nn as N

LOW_PRECISION = ("float16", "bfloat16")


@dataclass
class Call:
    args: list
    kwargs: dict = field(default_factory=dict)
    n: int = 1  # elements reduced into each output element (tolerance scale)


def _u(rng, *shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape)


def _rows(shape, axis=-1):
    return shape[axis] if shape else 1


def _with_neg_inf(rng, shape):
    x = _u(rng, *shape)
    x[..., 0] = -np.inf  # one excluded entry per row (never a whole row)
    return x


def _logsumexp_rows(rng):
    x = _u(rng, 4, 6)
    x[1] = -np.inf  # an all -inf row: -inf, not NaN
    return x


def _sdpa(rng, b, hq, hkv, lq, lk, d, dv, mask=None, **kw):
    args = [_u(rng, b, hq, lq, d), _u(rng, b, hkv, lk, d), _u(rng, b, hkv, lk, dv)]
    if mask is not None:
        kw["attn_mask"] = mask
    return Call(args, kw, n=max(lk, d))


def _fully_masked(rng):
    mask = rng.random((5, 7)) < 0.6
    mask[:, 0] = True
    mask[3] = False  # a query with no visible key: output 0, gradient 0
    return _sdpa(rng, 1, 2, 2, 5, 7, 4, 4, mask=mask)


def _float_mask(rng):
    mask = _u(rng, 4, 6)
    mask[2] = -np.inf  # fully masked by -inf: output 0
    return _sdpa(rng, 2, 2, 1, 4, 6, 3, 5, mask=mask)


def _large_masked(rng, kind):
    """150 queries x 300 keys (3 query tiles of 64 and 3 key tiles of 128, both
    ragged), GQA, a mask per query head: random keys, one key tile masked
    whole for one query tile, fully masked rows (output 0), -inf entries in
    the additive kind."""
    lq, lk = 150, 300
    if kind == "bool":
        mask = rng.random((2, lq, lk)) < 0.7
        mask[0, :64, 128:256] = False
        mask[1, 70] = mask[0, 149] = False
    else:
        mask = _u(rng, 2, lq, lk) * 3
        mask[rng.random(mask.shape) < 0.2] = -np.inf
        mask[1, :64, 128:256] = -np.inf
        mask[0, 3] = -np.inf
    return _sdpa(rng, 1, 2, 1, lq, lk, 16, 8, mask=mask)


def _ce(rng, n, c, ignore=0, spatial=(), reduction="mean", scale=1.0):
    target = rng.integers(0, c, (n, *spatial))
    if ignore:
        target.reshape(-1)[:ignore] = -100
    return Call([_u(rng, n, c, *spatial) * scale, target], {"reduction": reduction},
                n=c * (target.size if reduction != "none" else 1))


def _large_logits(rng, rows, d):
    """Logits of magnitude ~100 (exp overflows float32 without the max
    subtraction); the row maximum sits first, last, in the vector tail or in
    the middle, so a max taken over only some lanes is seen."""
    x = _u(rng, rows, d) * 50
    for i in range(rows):  # ~100 above the rest: exp(x - partial max) overflows float32
        x[i, [0, d - 1, d - 3, d // 2][i % 4]] = 195.0
    return x


def _tiny_rows(rng, rows, d, scale):
    """Rows of magnitude ``scale``, where eps is not negligible against the
    variance (an eps added outside the square root, or forgotten, is seen)."""
    return _u(rng, rows, d) * scale


def _adamw(rng, shape):
    m, v = _u(rng, *shape), rng.uniform(0.1, 2.0, shape)
    return Call([_u(rng, *shape), _u(rng, *shape), m, v], {"step": 3, "lr": 0.01})


# name -> {shape class -> rng -> Call}. Every composite has a size-1 class and
# an odd-size class; the rest are the cases its semantics single out.
CALLS = {
    "softmax": {
        "one": lambda r: Call([_u(r, 1, 1)], {"axis": -1}),
        "odd": lambda r: Call([_u(r, 7, 13) * 4], {"axis": -1}, n=13),
        "axis0": lambda r: Call([_u(r, 5, 3, 7)], {"axis": 0}, n=5),
        "neg_inf": lambda r: Call([_with_neg_inf(r, (3, 9))], {"axis": -1}, n=9),
        "large_logits": lambda r: Call([_large_logits(r, 8, 37)], {"axis": -1}, n=37),
        "long_rows": lambda r: Call([_u(r, 3, 1031) * 8], {"axis": -1}, n=1031),
    },
    "log_softmax": {
        "one": lambda r: Call([_u(r, 1, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13) * 4], n=13),
        "axis1": lambda r: Call([_u(r, 2, 5, 3)], {"axis": 1}, n=5),
        "large_logits": lambda r: Call([_large_logits(r, 8, 37)], n=37),
    },
    "logsumexp": {
        "one": lambda r: Call([_u(r, 1)], {"axis": 0}),
        "odd": lambda r: Call([_u(r, 7, 13) * 4], {"axis": 1}, n=13),
        "keepdims": lambda r: Call([_u(r, 5, 3)], {"axis": 0, "keepdims": True}, n=5),
        "neg_inf_row": lambda r: Call([_logsumexp_rows(r)], {"axis": 1}, n=6),
        "large_logits": lambda r: Call([_large_logits(r, 8, 37)], {"axis": 1}, n=37),
    },
    "mean": {
        "one": lambda r: Call([_u(r, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13)], {"axis": 1}, n=13),
        "all": lambda r: Call([_u(r, 3, 5, 7)], n=105),
    },
    "var": {
        "odd": lambda r: Call([_u(r, 7, 13)], {"axis": 1}, n=13),
        "all_biased": lambda r: Call([_u(r, 3, 5, 7)], {"correction": 0}, n=105),
        "offset": lambda r: Call([_u(r, 4, 11) + 100.0], {"axis": 1}, n=11),  # two-pass needed
    },
    "layer_norm": {
        "one": lambda r: Call([_u(r, 3, 1)], n=1),
        "odd": lambda r: Call([_u(r, 7, 13), _u(r, 13), _u(r, 13)], n=13),
        "offset": lambda r: Call([_u(r, 2, 3, 17) + 50.0], {"eps": 1e-3}, n=17),
        "tiny_rows": lambda r: Call([_tiny_rows(r, 5, 33, 1e-3), _u(r, 33), _u(r, 33)],
                                    {"eps": 1e-5}, n=33),
        "long_rows": lambda r: Call([_u(r, 3, 4099), _u(r, 4099)], n=4099),
    },
    "rms_norm": {
        "one": lambda r: Call([_u(r, 1, 1), _u(r, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13), _u(r, 13)], n=13),
        "no_weight": lambda r: Call([_u(r, 2, 3, 17)], {"eps": 1e-5}, n=17),
        "tiny_rows": lambda r: Call([_tiny_rows(r, 5, 33, 1e-4), _u(r, 33)], {"eps": 1e-6}, n=33),
        "long_rows": lambda r: Call([_u(r, 3, 4099), _u(r, 4099)], n=4099),
    },
    "relu": {
        "one": lambda r: Call([_u(r, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13)]),
    },
    "sigmoid": {
        "one": lambda r: Call([_u(r, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13)]),
        "wide": lambda r: Call([_u(r, 5, 9) * 40]),  # exp only of -|x|: no overflow
    },
    "silu": {
        "one": lambda r: Call([_u(r, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13) * 3]),
    },
    "gelu": {
        "one": lambda r: Call([_u(r, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13) * 3]),
        "tanh": lambda r: Call([_u(r, 7, 13) * 3], {"approximate": "tanh"}),
        # the tails (x * Phi(x) -> 0 on the left, -> x on the right), and
        # sizes past a kernel's parallel chunks
        "wide": lambda r: Call([_u(r, 5, 9) * 6]),
        "tanh_wide": lambda r: Call([_u(r, 5, 9) * 6], {"approximate": "tanh"}),
        "large": lambda r: Call([_u(r, 3, 67, 129) * 3]),
        "tanh_large": lambda r: Call([_u(r, 3, 67, 129) * 3], {"approximate": "tanh"}),
    },
    "swiglu": {
        "one": lambda r: Call([_u(r, 1, 2)]),
        "odd": lambda r: Call([_u(r, 7, 26)]),
    },
    "linear": {
        "one": lambda r: Call([_u(r, 1, 1), _u(r, 1, 1)]),
        "odd": lambda r: Call([_u(r, 7, 13), _u(r, 5, 13), _u(r, 5)], n=13),
        "batched": lambda r: Call([_u(r, 2, 3, 9), _u(r, 4, 9)], n=9),
    },
    "embedding": {
        "one": lambda r: Call([np.zeros((1,), np.int64), _u(r, 1, 1)]),
        "odd": lambda r: Call([r.integers(0, 7, (3, 5)), _u(r, 7, 13)]),  # repeated ids
    },
    "rotary_embedding": {
        "one": lambda r: Call([_u(r, 1, 2), _u(r, 1, 2), _u(r, 1, 2)]),
        "odd": lambda r: Call([_u(r, 2, 3, 5, 8), _u(r, 5, 8), _u(r, 5, 8)]),
    },
    "cross_entropy": {
        "one": lambda r: _ce(r, 1, 1),
        "odd": lambda r: _ce(r, 7, 13),
        "ignore_index": lambda r: _ce(r, 7, 5, ignore=3),
        "spatial_none": lambda r: _ce(r, 2, 5, spatial=(3,), reduction="none", ignore=1),
        "sum": lambda r: _ce(r, 5, 4, reduction="sum"),
        "all_ignored": lambda r: _ce(r, 3, 4, ignore=3),  # mean of nothing: NaN
        "large_logits": lambda r: _ce(r, 9, 37, scale=60.0),
    },
    "dropout": {
        "one": lambda r: Call([_u(r, 1)], {"p": 0.5, "seed": 7}),
        "odd": lambda r: Call([_u(r, 7, 13)], {"p": 0.3, "seed": 11}),
    },
    "scaled_dot_product_attention": {
        "one": lambda r: _sdpa(r, 1, 1, 1, 1, 1, 1, 1),
        "odd": lambda r: _sdpa(r, 2, 2, 2, 5, 7, 3, 5),
        "gqa": lambda r: _sdpa(r, 1, 4, 2, 3, 6, 4, 4),
        "causal_lq_ne_lk": lambda r: _sdpa(r, 1, 2, 2, 3, 5, 4, 4, is_causal=True, scale=0.7),
        "bool_mask_bcast": lambda r: _sdpa(r, 2, 2, 2, 4, 6, 4, 4, mask=r.random((6,)) < 0.7),
        "float_mask": _float_mask,
        "fully_masked": _fully_masked,
        # no keys at all (Lk = 0), GQA: every query sees nothing, output 0 and
        # gradient 0 (a kernel's "no visible key" path without any mask)
        "no_keys": lambda r: _sdpa(r, 1, 2, 1, 3, 0, 4, 4),
        # an empty batch (B = 0): every output and gradient is empty, nothing to compute
        "empty_batch": lambda r: _sdpa(r, 0, 2, 1, 3, 5, 4, 4),
        # head dim 0 (D = 0, Dv > 0; the scale given, 1/sqrt(D) being inf): every score
        # is 0, so each output row is the plain mean of v's rows and q, k get empty grads
        "head_dim_0": lambda r: _sdpa(r, 1, 2, 1, 3, 5, 0, 4, scale=0.5),
        # lengths spanning several 64-query / 128-key tiles (online rescaling
        # across key tiles, the causal boundary inside and between tiles)
        "large_tiles": lambda r: _sdpa(r, 1, 2, 2, 150, 300, 16, 8),
        "large_causal": lambda r: _sdpa(r, 1, 1, 1, 200, 200, 16, 16, is_causal=True),
        "large_causal_lq_ne_lk": lambda r: _sdpa(r, 1, 2, 1, 130, 260, 8, 8, is_causal=True),
        # causal, 65 queries: one past a multiple of 32 and of 64, so the last
        # query's own key starts a new key tile; a kernel that bounds a query
        # block's causal key tiles by its last row (not one past it) skips
        # that tile. (The name is not "large_": CI's emulated coverage run
        # keeps it; 65 x 65 is small.)
        "causal_tile_edge": lambda r: _sdpa(r, 1, 1, 1, 65, 65, 8, 8, is_causal=True),
        "large_scores": lambda r: _sdpa(r, 1, 1, 1, 70, 270, 32, 8, scale=2.0),
        # a mask across several query and key tiles, ragged at both ends
        "large_bool_mask": lambda r: _large_masked(r, "bool"),
        "large_float_mask": lambda r: _large_masked(r, "float"),
    },
    "conv2d": {
        "one": lambda r: Call([_u(r, 1, 1, 1, 1), _u(r, 1, 1, 1, 1)]),
        "odd": lambda r: Call([_u(r, 2, 3, 5, 6), _u(r, 4, 3, 3, 2), _u(r, 4)],
                              {"stride": (2, 1), "padding": 1}, n=18),
    },
    "max_pool2d": {
        "one": lambda r: Call([_u(r, 1, 1, 1, 1)], {"kernel_size": 1}),
        "odd": lambda r: Call([_u(r, 2, 2, 5, 5)], {"kernel_size": 3, "stride": 2, "padding": 1}),
    },
    "avg_pool2d": {
        "one": lambda r: Call([_u(r, 1, 1, 1, 1)], {"kernel_size": 1}),
        "odd": lambda r: Call([_u(r, 1, 2, 5, 7)], {"kernel_size": (2, 3)}, n=6),
    },
    "adamw_step": {
        "one": lambda r: _adamw(r, (1,)),
        "odd": lambda r: _adamw(r, (7, 13)),
    },
}


# ---- Every combination of optional parts -----------------------------------------
# The spec marks a fused op's optional inputs with "?" (fused_ops in
# base_ops.json). Each subset of them present is one class "opt_<present>"
# ("opt_none": none), generated here from the spec rather than written out, so
# that an optional input the spec adds becomes classes without anyone listing
# them. Attention's mask comes in the two kinds DK_SdpaAttrs tells apart
# (bool, additive); every class also with grouped-query heads ("_gqa"), and
# without a mask also with is_causal ("_causal": the SDK refuses a mask
# together with is_causal, as PyTorch does, so no kernel receives that pair).
# Sizes are small: the autograd section differentiates every class
# numerically, and the fused and autograd sections take each subset of the
# floating inputs requiring grad on these classes (:func:`grad_subsets`).


def _fused_inputs(op):
    from devicekit.conformance.registry import spec

    return next((o["inputs"] for o in spec()["fused_ops"] if o["name"] == op), ())


def optional_inputs(op):
    """The names of ``op``'s optional inputs, in the spec's order ([] if none)."""
    return [i[:-1] for i in _fused_inputs(op) if i.endswith("?")]


def _present_subsets(names):
    return [[n for i, n in enumerate(names) if m >> i & 1] for m in range(1 << len(names))]


def _norm_call(present, centered):
    def make(r):
        args = [_u(r, 2, 3, 21), _u(r, 21) if "weight" in present else None]
        if centered:
            args.append(_u(r, 21) if "bias" in present else None)
        while args[-1] is None:  # a trailing absent input is left out, as callers do
            args.pop()
        return Call(args, {"eps": 1e-4}, n=21)
    return make


def _sdpa_call(mask, causal, gqa):
    def make(r):
        m = None
        if mask == "bool":  # one query row sees nothing (output 0)
            m = r.random((3, 5)) < 0.6
            m[:, 2], m[1] = True, False
        elif mask == "additive":
            m = _u(r, 1, 3, 5)
            m[0, 0, 1] = m[0, 2] = -np.inf
        hq, hkv = (4, 2) if gqa else (2, 2)
        kw = {"is_causal": True} if causal else {}
        if gqa:  # the default scale otherwise (the SDK passes 1/sqrt(D))
            kw["scale"] = 0.6
        return _sdpa(r, 1, hq, hkv, 3, 5, 4, 3, mask=m, **kw)
    return make


def _optional_classes():
    """{op: {"opt_...": rng -> Call}} for every fused op with optional inputs."""
    out = {}
    for op in ("rms_norm", "layer_norm"):
        out[op] = {"opt_" + ("_".join(p) or "none"): _norm_call(set(p), op == "layer_norm")
                   for p in _present_subsets(optional_inputs(op))}
    sdpa = "scaled_dot_product_attention"
    classes = {}
    for p in _present_subsets(optional_inputs(sdpa)):
        for kind in (("bool", "additive") if p else (None,)):
            for causal in ((False,) if p else (False, True)):
                for gqa in (False, True):
                    name = "opt_" + ("_".join(p) + f"_{kind}" if p else "none")
                    name += "_causal" * causal + "_gqa" * gqa
                    classes[name] = _sdpa_call(kind, causal, gqa)
    out[sdpa] = classes
    return out


for _op, _classes in _optional_classes().items():
    CALLS[_op].update(_classes)


def grad_subsets(op, shape):
    """[(label, input indices)] for class ``shape`` of fused op ``op``: each
    non-empty subset of its floating positional inputs that may require grad,
    the whole set first, labelled by the spec's input names ("grad_x_bias")."""
    names = [i.rstrip("?") for i in _fused_inputs(op)]
    call = CALLS[op][shape](np.random.default_rng(0))  # the structure, not the values
    floating = [i for i, a in enumerate(call.args) if is_float(a)]
    out = []
    for m in range((1 << len(floating)) - 1, 0, -1):
        idx = [i for k, i in enumerate(floating) if m >> k & 1]
        out.append(("grad_" + "_".join(names[i] for i in idx), idx))
    return out


# Composites whose value goes through exp/log/erf/tanh/rsqrt/sqrt (the
# transcendental tolerance override applies).
TRANSCENDENTAL = {"softmax", "log_softmax", "logsumexp", "layer_norm", "rms_norm", "sigmoid",
                  "silu", "gelu", "swiglu", "cross_entropy", "scaled_dot_product_attention",
                  "adamw_step"}


def function(name):
    return getattr(F, name)


def oracle(name):
    return getattr(N, name)


def tolerance(name, dtype, n):
    """(rtol, atol) for composite ``name`` on ``dtype`` reducing ``n`` elements."""
    rtol, atol = O.tolerance(dtype, "exp" if name in TRANSCENDENTAL else None)
    f = math.sqrt(max(int(n), 1))
    return rtol * f, atol * f


def is_float(a):
    return isinstance(a, np.ndarray) and a.dtype == np.float64


def rounded(call, dtype):
    """The call's floating operands (and float kwargs arrays) rounded to ``dtype``."""
    args = [O.round_to(a, dtype) if is_float(a) else a for a in call.args]
    kwargs = {k: O.round_to(v, dtype) if is_float(v) else v for k, v in call.kwargs.items()}
    return args, kwargs


def to_device(value, device, requires_grad=False):
    if isinstance(value, np.ndarray):
        return dk.tensor(value, device=device, requires_grad=requires_grad)
    return value


def expected(name, args, kwargs, dtype):
    """The oracle's results (a tuple) on the exact rounded inputs, rounded to ``dtype``."""
    want = oracle(name)(*args, **kwargs)
    want = want if isinstance(want, tuple) else (want,)
    return tuple(O.round_to(np.asarray(w, np.float64), dtype) for w in want)


def outputs(result):
    return result if isinstance(result, tuple) else (result,)
