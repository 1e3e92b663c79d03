"""Hand-written torch cases for what OpInfo's samples do not reach.

OpInfo samples mostly call an op with its default arguments, on fresh
tensors, with tensor operands of one dtype. The bridge's lowerings also
branch on the rest, and these cases reach it (measured with
``benchmarks/coverage_run.py --bridge``, docs/coverage.md):

- ``args.<op>``: non-default arguments of the lowered overloads (keepdim,
  dim None / negative / tuple, ``out=``, ``alpha=``, ``reduction=``,
  ``ignore_index``, ``label_smoothing``, padding modes, ``align_corners``,
  ``approximate="tanh"``, pooling and convolution options ...);
- ``inplace.<op>``: every in-place op written through a view of a base
  tensor (a slice, a transpose, ``as_strided``, ``diagonal``), the base
  being the result, so a write that misses the base (or lands beside the
  view) is wrong;
- ``scalar.<op>``: a dk tensor of each dtype the bridge has with a host
  Python scalar (bool, int, float) and with a 0-d CPU tensor of each dtype,
  on either side, checked for the values AND the result dtype torch's type
  promotion gives; and as a clamp bound and as the value ``x[i] = v`` writes;
  and CPU index tensors of a dk tensor (``x[i]``, ``x[i] = v``), which
  torch accepts beside an accelerator tensor;
- ``draws.<op>``: random ops' call forms, kind ``draws``, judged without
  torch's generator (``Draws``: range, dtype, every value drawn, the same
  bits from the same seed);
- ``refuse.<what>``: the calls the bridge refuses (docs/torch.md, "Nothing
  silent"), kind ``raises``: torch on the CPU computes many of them, so there
  is no oracle to compare; the case runs the call on the device (no coverage
  recorder, as a user runs it) and judges the refusal itself: the documented
  error class, a message naming the ATen op and the reason, and every operand
  unchanged afterwards (a refused in-place or ``out=`` call writes nothing).

Each family entry is one case per dtype: its samples are ``(text, fn,
inputs)``; ``fn(*inputs)`` runs with the inputs on the CPU (torch, the
oracle) and moved to the device (a 0-d CPU tensor meant to stay on the CPU
is captured by ``fn``, not an input; in a refusal, an ``OnHost`` input stays
on the CPU and is checked unchanged too). Kind ``grad`` runs the floating inputs'
gradients of ``sum(out * w)`` on both sides. Nothing here imports torch at
import time: ``families(torch)`` builds the tables.
"""

#: The families, the first segment of a case's name (``torch/<family>.<op>/<dtype>/<kind>``).
FAMILIES = ("args", "inplace", "scalar", "refuse", "draws")

#: The torch dtype names the bridge maps to DeviceKit dtypes (``_device._TO_DK``).
BRIDGE_DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int32", "int64", "uint8",
                 "bool")


class Entry:
    """One case per dtype in ``dtypes``: ``samples(torch, dtype, gen)`` gives
    the (text, fn, inputs) list; ``grad``: a grad case too (float32)."""

    __slots__ = ("name", "samples", "dtypes", "grad")

    def __init__(self, name, samples, dtypes=("float32",), grad=True):
        self.name, self.samples, self.dtypes, self.grad = name, samples, dtypes, grad


class Refusal(Entry):
    """One ``raises`` case per dtype: ``samples(torch, dtype, gen)`` gives
    (text, fn, inputs, expect), expect = (error class name, ATen op, reason):
    ``fn(*inputs)`` on the device must raise that class (``HostOperandError``:
    a CPU operand; ``UnloweredOpError``: a call the op's lowering does not
    cover; ``RuntimeError``: an argument check, and then not one of those
    two) with the op's name and the reason in its message (with its notes;
    a tuple of reasons: each of them)."""

    __slots__ = ()

    def __init__(self, name, samples, dtypes=("float32",)):
        super().__init__(name, samples, dtypes, grad=False)


class Draws(Entry):
    """One ``draws`` case per dtype for a random op, judged without torch's
    generator (the bridge draws the device's Philox stream, torch's CPU its
    own): ``samples(torch, dtype, gen)`` gives (text, fn, inputs, (lo, hi));
    ``fn(*inputs)`` on the device, after ``torch.manual_seed(s)``, must keep
    the dtype and shape, give integers in ``[lo, hi)`` with every one of them
    drawn at least once, the same bits for the same seed and other bits for
    another seed."""

    __slots__ = ()

    def __init__(self, name, samples, dtypes=("float32", "int64")):
        super().__init__(name, samples, dtypes, grad=False)


class OnHost:
    """An input of a refusal that stays on the CPU (the host operand)."""

    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t


def families(torch):
    """{case name: Entry} of every family."""
    out = {}
    for e in _args(torch) + _inplace(torch) + _scalar(torch) + _refuse(torch) + _draws(torch):
        if e.name in out:
            raise RuntimeError(f"reach case {e.name} defined twice")
        out[e.name] = e
    return out


# ---- args: non-default arguments --------------------------------------------------

def _args(torch):
    F = torch.nn.functional

    def r(gen, *shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype)

    def ints(gen, hi, *shape):
        return torch.randint(0, hi, shape, generator=gen)

    def entry(name, fn_list, grad=True):
        def samples(torch, dtype, gen):
            return [(text, fn, make(gen)) for text, fn, make in fn_list]
        return Entry(f"args.{name}", samples, grad=grad)

    def x(*shape):
        return lambda gen: [r(gen, *shape)]

    def xy(*shape):
        return lambda gen: [r(gen, *shape), r(gen, *shape)]

    def xyz(*shape):
        return lambda gen: [r(gen, *shape), r(gen, *shape), r(gen, *shape)]

    def mask(gen, *shape):
        return torch.rand(*shape, generator=gen) > 0.5

    reductions = [
        entry("sum", [
            ("dim tuple, keepdim", lambda a: a.sum((0, -1), keepdim=True), x(3, 4, 5)),
            ("negative dim", lambda a: a.sum(-2), x(3, 4, 5)),
            ("dim=None, keepdim", lambda a: torch.sum(a, None, keepdim=True), x(3, 4)),
            ("empty dim list", lambda a: torch.sum(a, []), x(3, 4)),
            ("dtype=float64", lambda a: a.sum(1, dtype=torch.float64), x(3, 4)),
            ("out=", lambda a: torch.sum(a, 1, out=torch.empty(3, device=a.device)), x(3, 4)),
        ]),
        entry("mean", [
            ("dim tuple, keepdim", lambda a: a.mean((1, 2), keepdim=True), x(2, 3, 4)),
            ("negative dim", lambda a: a.mean(-1), x(2, 3, 4)),
            ("dim=None, keepdim", lambda a: torch.mean(a, None, keepdim=True), x(3, 4)),
            ("dtype=float64", lambda a: a.mean(0, dtype=torch.float64), x(3, 4)),
        ]),
        entry("amax_amin", [
            ("amax dim tuple, keepdim", lambda a: a.amax((0, 2), keepdim=True), x(2, 3, 4)),
            ("amin negative dim", lambda a: a.amin(-1), x(2, 3, 4)),
            ("amax all dims", lambda a: a.amax(), x(2, 3)),
        ]),
        entry("max_min_dim", [
            ("max dim keepdim", lambda a: a.max(1, keepdim=True), x(3, 4)),
            ("min negative dim", lambda a: a.min(-1), x(3, 4)),
            ("max all", lambda a: a.max(), x(3, 4)),
        ]),
        entry("argmax_argmin", [
            ("argmax dim=None", lambda a: a.argmax(), x(3, 4)),
            ("argmax dim=None keepdim", lambda a: torch.argmax(a, None, keepdim=True), x(3, 4)),
            ("argmin negative dim keepdim", lambda a: a.argmin(-1, keepdim=True), x(3, 4)),
        ], grad=False),
        entry("cumsum", [
            ("negative dim", lambda a: a.cumsum(-1), x(3, 4)),
            ("dtype=float64", lambda a: a.cumsum(0, dtype=torch.float64), x(3, 4)),
        ]),
        entry("var_std", [
            ("var correction=0", lambda a: a.var(1, correction=0), x(3, 5)),
            ("var dim tuple keepdim", lambda a: a.var((0, 1), keepdim=True), x(3, 5)),
            ("var dim=None", lambda a: a.var(), x(3, 5)),
            ("std correction=2, negative dim", lambda a: a.std(-1, correction=2), x(3, 5)),
            ("var_mean", lambda a: torch.var_mean(a, 0, keepdim=True), x(3, 5)),
        ]),
        entry("any_all", [
            ("any dim tuple keepdim", lambda m: m.any((0, 1), keepdim=True),
             lambda gen: [mask(gen, 2, 3, 4)]),
            ("all negative dim", lambda m: m.all(-1), lambda gen: [mask(gen, 2, 3)]),
            ("any float input", lambda a: a.any(0), x(3, 4)),
        ], grad=False),
        entry("norm", [
            ("p=1, dim, keepdim", lambda a: torch.linalg.vector_norm(a, 1, dim=1, keepdim=True),
             x(3, 4)),
            ("p=inf", lambda a: torch.linalg.vector_norm(a, float("inf")), x(3, 4)),
            ("p=3 dim tuple", lambda a: torch.linalg.vector_norm(a, 3, dim=(0, 1)), x(3, 4)),
        ]),
    ]
    pointwise = [
        entry("add_sub", [
            ("add alpha=2.5", lambda a, b: torch.add(a, b, alpha=2.5), xy(3, 4)),
            ("sub alpha=-3", lambda a, b: torch.sub(a, b, alpha=-3), xy(3, 4)),
            ("rsub alpha=0.5", lambda a, b: torch.rsub(a, b, alpha=0.5), xy(3, 4)),
            ("add Scalar alpha", lambda a: torch.add(a, 2, alpha=3), x(3, 4)),
            ("add out=", lambda a, b: torch.add(a, b, out=torch.empty(3, 4, device=a.device)),
             xy(3, 4)),
        ]),
        entry("mul_out", [
            ("mul out=", lambda a, b: torch.mul(a, b, out=torch.empty(3, 4, device=a.device)),
             xy(3, 4)),
            ("mul out= broadcast", lambda a, b: torch.mul(a, b[:1], out=torch.empty(
                3, 4, device=a.device)), xy(3, 4)),
        ], grad=False),
        entry("div_mode", [
            ("trunc", lambda a, b: torch.div(a * 4, b, rounding_mode="trunc"), xy(3, 4)),
            ("floor", lambda a, b: torch.div(a * 4, b, rounding_mode="floor"), xy(3, 4)),
            ("floor Scalar", lambda a: torch.div(a * 4, 0.7, rounding_mode="floor"), x(3, 4)),
            ("int floor", lambda a, b: torch.div(a, b, rounding_mode="floor"),
             lambda gen: [ints(gen, 20, 3, 4) - 10, ints(gen, 5, 3, 4) + 1]),
            ("int trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
             lambda gen: [ints(gen, 20, 3, 4) - 10, ints(gen, 5, 3, 4) + 1]),
        ], grad=False),
        entry("clamp", [
            ("min only", lambda a: a.clamp(min=-0.3), x(3, 4)),
            ("max only", lambda a: a.clamp(max=0.2), x(3, 4)),
            ("tensor bounds", lambda a, lo, hi: a.clamp(lo - 1, hi + 1), xyz(3, 4)),
            ("tensor min only", lambda a, lo: torch.clamp(a, min=lo), xy(3, 4)),
            ("clamp_min tensor", lambda a, lo: torch.clamp_min(a, lo), xy(3, 4)),
            ("clamp_max tensor", lambda a, hi: torch.clamp_max(a, hi), xy(3, 4)),
        ]),
        entry("lerp_addc", [
            ("lerp tensor weight", lambda a, b, w: torch.lerp(a, b, w), xyz(3, 4)),
            ("lerp scalar weight 0.75", lambda a, b: torch.lerp(a, b, 0.75), xy(3, 4)),
            ("addcmul value=-2", lambda a, b, c: torch.addcmul(a, b, c, value=-2), xyz(3, 4)),
            ("addcdiv value=0.5", lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1, value=0.5),
             xyz(3, 4)),
        ]),
        entry("tri", [
            ("tril diagonal=-1", lambda a: a.tril(-1), x(4, 5)),
            ("triu diagonal=2", lambda a: a.triu(2), x(4, 5)),
            ("tril batched diagonal=1", lambda a: a.tril(1), x(2, 3, 4)),
        ]),
        entry("where_masked_fill", [
            ("where scalar other", lambda m, a: torch.where(m, a, 2.0),
             lambda gen: [mask(gen, 3, 4), r(gen, 3, 4)]),
            ("where scalar self", lambda m, a: torch.where(m, -1.5, a),
             lambda gen: [mask(gen, 3, 4), r(gen, 3, 4)]),
            ("masked_fill 0-d tensor value", lambda a, m: a.masked_fill(m, torch.tensor(3.0)),
             lambda gen: [r(gen, 3, 4), mask(gen, 3, 4)]),
            ("masked_fill broadcast mask", lambda a, m: a.masked_fill(m, -2.0),
             lambda gen: [r(gen, 3, 4), mask(gen, 1, 4)]),
        ]),
    ]
    nn = [
        entry("gelu", [
            ("approximate=tanh", lambda a: F.gelu(a, approximate="tanh"), x(3, 4)),
        ]),
        entry("softmax", [
            ("negative dim", lambda a: F.softmax(a, -2), x(3, 4, 5)),
            ("log_softmax dim 0", lambda a: F.log_softmax(a, 0), x(3, 4)),
            ("softmax dtype=float64", lambda a: F.softmax(a, 1, dtype=torch.float64), x(3, 4)),
        ]),
        entry("cross_entropy", [
            ("reduction=sum", lambda a, t: F.cross_entropy(a, t, reduction="sum"),
             lambda gen: [r(gen, 5, 4), ints(gen, 4, 5)]),
            ("reduction=none", lambda a, t: F.cross_entropy(a, t, reduction="none"),
             lambda gen: [r(gen, 5, 4), ints(gen, 4, 5)]),
            ("ignore_index=1", lambda a, t: F.cross_entropy(a, t, ignore_index=1),
             lambda gen: [r(gen, 6, 3), torch.tensor([0, 1, 2, 1, 0, 2])]),
            ("label_smoothing=0.2", lambda a, t: F.cross_entropy(a, t, label_smoothing=0.2),
             lambda gen: [r(gen, 5, 4), ints(gen, 4, 5)]),
            ("class weights", lambda a, t, w: F.cross_entropy(a, t, weight=w.abs() + 0.5),
             lambda gen: [r(gen, 5, 4), ints(gen, 4, 5), r(gen, 4)]),
            ("weights, ignore_index, sum", lambda a, t, w: F.cross_entropy(
                a, t, weight=w.abs() + 0.5, ignore_index=0, reduction="sum"),
             lambda gen: [r(gen, 6, 3), torch.tensor([0, 1, 2, 1, 0, 2]), r(gen, 3)]),
            ("spatial (N, C, d)", lambda a, t: F.cross_entropy(a, t),
             lambda gen: [r(gen, 2, 3, 4), ints(gen, 3, 2, 4)]),
        ]),
        entry("nll_mse", [
            ("nll reduction=none", lambda a, t: F.nll_loss(a, t, reduction="none"),
             lambda gen: [r(gen, 5, 4), ints(gen, 4, 5)]),
            ("mse reduction=sum", lambda a, b: F.mse_loss(a, b, reduction="sum"), xy(3, 4)),
            ("mse reduction=none", lambda a, b: F.mse_loss(a, b, reduction="none"), xy(3, 4)),
        ]),
        entry("pad", [
            ("constant value=1.5", lambda a: F.pad(a, (1, 2, 0, 1), value=1.5), x(2, 3, 4)),
            ("negative pad (crop)", lambda a: F.pad(a, (-1, 1, 1, -1)), x(2, 3, 4)),
            ("reflect", lambda a: F.pad(a, (1, 2), mode="reflect"), x(2, 3, 5)),
            ("replicate", lambda a: F.pad(a, (1, 2, 2, 1), mode="replicate"), x(1, 2, 3, 4)),
            ("circular", lambda a: F.pad(a, (1, 2), mode="circular"), x(2, 3, 5)),
        ]),
        entry("interpolate", [
            ("bilinear align_corners=True", lambda a: F.interpolate(
                a, size=(5, 7), mode="bilinear", align_corners=True), x(1, 2, 3, 4)),
            ("bilinear align_corners=False", lambda a: F.interpolate(
                a, scale_factor=2, mode="bilinear", align_corners=False), x(1, 2, 3, 4)),
            ("nearest", lambda a: F.interpolate(a, scale_factor=2, mode="nearest"),
             x(1, 2, 3, 4)),
        ]),
        entry("norms", [
            ("layer_norm no affine", lambda a: F.layer_norm(a, (4,)), x(3, 4)),
            ("layer_norm two dims, eps", lambda a, w: F.layer_norm(a, (3, 4), w[0], None,
                                                                   eps=1e-2), xy(2, 3, 4)),
            ("group_norm no affine", lambda a: F.group_norm(a, 2), x(2, 4, 3)),
            ("batch_norm eval", lambda a, m, v: F.batch_norm(a, m, v.abs() + 0.5,
                                                             training=False),
             lambda gen: [r(gen, 4, 3), r(gen, 3), r(gen, 3)]),
            ("batch_norm training momentum", lambda a: F.batch_norm(
                a, None, None, training=True, momentum=0.3), x(4, 3, 2)),
        ]),
        entry("pool", [
            ("max_pool2d ceil_mode, padding, dilation", lambda a: F.max_pool2d(
                a, 3, stride=2, padding=1, dilation=1, ceil_mode=True), x(1, 2, 7, 6)),
            ("max_pool2d dilation=2", lambda a: F.max_pool2d(a, 2, dilation=2), x(1, 2, 7, 6)),
            ("avg_pool2d count_include_pad=False", lambda a: F.avg_pool2d(
                a, 3, stride=2, padding=1, count_include_pad=False), x(1, 2, 7, 6)),
            ("avg_pool2d ceil_mode, divisor_override", lambda a: F.avg_pool2d(
                a, 2, ceil_mode=True, divisor_override=3), x(1, 2, 5, 5)),
            ("adaptive_max_pool2d uneven", lambda a: F.adaptive_max_pool2d(a, (3, 2)),
             x(1, 2, 7, 5)),
            ("adaptive_avg_pool2d uneven", lambda a: F.adaptive_avg_pool2d(a, (3, 2)),
             x(1, 2, 7, 5)),
            ("avg_pool3d count_include_pad=False", lambda a: F.avg_pool3d(
                a, 2, padding=1, count_include_pad=False), x(1, 1, 3, 4, 4)),
        ]),
        entry("conv", [
            ("conv2d stride, padding, dilation", lambda a, w, b: F.conv2d(
                a, w, b, stride=2, padding=1, dilation=2),
             lambda gen: [r(gen, 1, 2, 7, 7), r(gen, 3, 2, 3, 3), r(gen, 3)]),
            ("conv2d groups=2, no bias", lambda a, w: F.conv2d(a, w, groups=2),
             lambda gen: [r(gen, 1, 4, 5, 5), r(gen, 4, 2, 3, 3)]),
            ("conv2d padding=same", lambda a, w: F.conv2d(a, w, padding="same"),
             lambda gen: [r(gen, 1, 2, 5, 5), r(gen, 3, 2, 3, 3)]),
            ("conv1d asymmetric", lambda a, w: F.conv1d(a, w, stride=3, padding=2),
             lambda gen: [r(gen, 2, 2, 9), r(gen, 3, 2, 4)]),
            ("conv_transpose2d output_padding", lambda a, w: F.conv_transpose2d(
                a, w, stride=2, padding=1, output_padding=1),
             lambda gen: [r(gen, 1, 2, 4, 4), r(gen, 2, 3, 3, 3)]),
        ]),
        entry("embedding", [
            ("padding_idx=1", lambda w, i: F.embedding(i, w, padding_idx=1),
             lambda gen: [r(gen, 5, 3), torch.tensor([[0, 1, 2], [1, 4, 1]])]),
            ("negative padding_idx", lambda w, i: F.embedding(i, w, padding_idx=-1),
             lambda gen: [r(gen, 5, 3), torch.tensor([0, 4, 4, 2])]),
        ]),
        entry("sdpa", [
            ("is_causal, scale", lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=0.3), xyz(1, 2, 4, 8)),
            ("bool mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda gen: [r(gen, 1, 2, 4, 8), r(gen, 1, 2, 4, 8), r(gen, 1, 2, 4, 8),
                          mask(gen, 4, 4) | torch.eye(4, dtype=torch.bool)]),
            ("float mask", lambda q, k, v, m: F.scaled_dot_product_attention(
                q, k, v, attn_mask=m), lambda gen: [r(gen, 1, 2, 4, 8), r(gen, 1, 2, 4, 8),
                                                     r(gen, 1, 2, 4, 8), r(gen, 4, 4)]),
        ]),
    ]
    select = [
        entry("index_ops", [
            ("gather negative dim", lambda a, i: a.gather(-1, i),
             lambda gen: [r(gen, 3, 4), ints(gen, 4, 3, 2)]),
            ("index_select negative dim", lambda a, i: a.index_select(-1, i),
             lambda gen: [r(gen, 3, 4), torch.tensor([3, 0, 0])]),
            ("index negative indices", lambda a, i: a[i],
             lambda gen: [r(gen, 5, 3), torch.tensor([-1, 0, -5])]),
            ("index_put accumulate", lambda a, i, v: a.index_put((i,), v, accumulate=True),
             lambda gen: [r(gen, 5, 3), torch.tensor([1, 1, 4]), r(gen, 3, 3)]),
            ("scatter reduce=add", lambda a, i, s: a.scatter(0, i, s, reduce="add"),
             lambda gen: [r(gen, 3, 4), ints(gen, 3, 2, 4), r(gen, 2, 4)]),
            ("scatter value", lambda a, i: a.scatter(1, i, -2.5),
             lambda gen: [r(gen, 3, 4), ints(gen, 4, 3, 2)]),
        ]),
        entry("sort_topk", [
            ("sort descending stable", lambda a: torch.sort(a, -1, descending=True, stable=True),
             x(3, 5)),
            ("topk largest=False, dim 0", lambda a: torch.topk(a, 2, dim=0, largest=False),
             x(4, 3)),
            ("topk sorted=True", lambda a: torch.topk(a, 3, sorted=True), x(3, 6)),
            ("argsort descending", lambda a: torch.argsort(a, 0, descending=True), x(4, 3)),
        ]),
        entry("views", [
            ("split sizes, negative dim", lambda a: torch.split(a, [1, 3], dim=-1), x(3, 4)),
            ("unbind negative dim", lambda a: a.unbind(-1), x(3, 2)),
            ("squeeze dims tuple", lambda a: a.squeeze((0, 2)), x(1, 3, 1, 2)),
            ("roll two dims", lambda a: torch.roll(a, (1, -2), (0, 1)), x(3, 4)),
            ("roll flat", lambda a: torch.roll(a, 3), x(3, 4)),
            ("cat negative dim", lambda a, b: torch.cat([a, b], -1), xy(3, 2)),
            ("stack negative dim", lambda a, b: torch.stack([a, b], -1), xy(3, 2)),
        ]),
    ]
    def half(name, fn_list):
        """Floating samples in float16 and bfloat16 (the lowerings compute 16-bit
        operands in float32 and round once: ``_lower_ops._in_float32``)."""
        def samples(torch, dtype, gen):
            dt = getattr(torch, dtype)
            return [(text, fn, [t.to(dt) if t.is_floating_point() else t for t in make(gen)])
                    for text, fn, make in fn_list]
        return Entry(f"args.{name}", samples, dtypes=("float16", "bfloat16"), grad=False)

    more = [
        entry("index_put_masks", [
            ("bool mask, one value, accumulate", lambda a, m: a.index_put(
                (m,), torch.tensor(1.5, device=a.device), accumulate=True),
             lambda gen: [r(gen, 4, 3), mask(gen, 4)]),
            ("bool mask, one row", lambda a, m, v: a.index_put((m,), v[0]),
             lambda gen: [r(gen, 4, 3), mask(gen, 4), r(gen, 1, 3)]),
            ("two adjacent index tensors", lambda a, i, j, v: a.index_put((i, j), v),
             lambda gen: [r(gen, 4, 3), torch.tensor([0, 3, 1]), torch.tensor([2, 0, 1]),
                          r(gen, 3)]),
            ("index on the second dim", lambda a, i, v: torch.ops.aten.index_put(a, [None, i], v),
             lambda gen: [r(gen, 4, 3), torch.tensor([2, 0]), r(gen, 4, 2)]),
        ]),
        entry("to_copy_fill", [
            ("to float64 and back", lambda a: a.to(torch.float64).to(torch.float32) * 2, x(3, 4)),
            ("to int32", lambda a: (a * 3).to(torch.int32), x(3, 4)),
            ("to the same device, copy=True", lambda a: a.to(a.device, copy=True) + 1, x(3, 4)),
            ("fill_ with a 0-d device tensor", lambda a: a.clone().fill_(
                torch.tensor(2.5, device=a.device)), x(3, 4)),
            ("fill_ with a 0-d CPU tensor", lambda a: a.clone().fill_(torch.tensor(-1.5)),
             x(3, 4)),
        ], grad=False),
        entry("layer_norm_affine", [
            ("weight, no bias", lambda a, w: F.layer_norm(a, (4,), w[0], None), xy(3, 4)),
            ("bias, no weight", lambda a, b: F.layer_norm(a, (4,), None, b[0]), xy(3, 4)),
        ]),
        half("half_math", [
            ("lerp scalar weight", lambda a, b: torch.lerp(a, b, 0.3), xy(3, 4)),
            ("addcmul value", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), xyz(3, 4)),
            ("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1), xyz(3, 4)),
            ("vector_norm p=3", lambda a: torch.linalg.vector_norm(a, 3, dim=1), x(3, 4)),
            ("sum dtype=float32", lambda a: a.sum(1, dtype=torch.float32), x(3, 4)),
            ("mean keepdim", lambda a: a.mean(-1, keepdim=True), x(3, 4)),
        ]),
    ]
    more += [
        entry("layer_norm_backward_own_statistics", [
            # statistics computed by the caller (torch's own decomposition of the
            # forward does so), not by devicekit's layer norm: the composite backward
            ("native_layer_norm_backward, mean and rstd made outside", _layer_norm_backward,
             lambda gen: [r(gen, 3, 4), r(gen, 3, 4), r(gen, 4), r(gen, 4)]),
            ("native_layer_norm_backward, no weight, dx only",
             lambda g, a, w, b: _layer_norm_backward(g, a, None, None, (True, False, False)),
             lambda gen: [r(gen, 2, 3, 4), r(gen, 2, 3, 4), r(gen, 4), r(gen, 4)]),
        ], grad=False),
        entry("sdpa_inference_mode", [
            # torch.inference_mode turns autograd's kernels off: the attention op
            # reaches the device below autograd (text generation runs so)
            ("inference_mode", lambda q, k, v: _inference(torch, lambda: F.scaled_dot_product_attention(
                q, k, v)), xyz(1, 2, 5, 8)),
            ("inference_mode, causal, scale", lambda q, k, v: _inference(
                torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                              scale=0.3)), xyz(1, 2, 5, 8)),
            ("inference_mode, bool mask", lambda q, k, v, m: _inference(
                torch, lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
             lambda gen: [r(gen, 1, 2, 5, 8), r(gen, 1, 2, 5, 8), r(gen, 1, 2, 5, 8),
                          mask(gen, 5, 5) | torch.eye(5, dtype=torch.bool)]),
            ("inference_mode, mask and causal", lambda q, k, v, m: _inference(
                torch, lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                              is_causal=True)),
             lambda gen: [r(gen, 1, 2, 5, 8), r(gen, 1, 2, 5, 8), r(gen, 1, 2, 5, 8),
                          r(gen, 5, 5)]),
        ], grad=False),
        entry("sdpa_mask_and_causal", [
            # both apply, as torch's CPU and CUDA kernels do (its math op refuses the pair)
            ("float mask and is_causal", lambda q, k, v, m: F.scaled_dot_product_attention(
                q, k, v, attn_mask=m, is_causal=True), lambda gen: [
                    r(gen, 2, 2, 4, 8), r(gen, 2, 2, 6, 8), r(gen, 2, 2, 6, 8), r(gen, 4, 6)]),
            ("bool mask and is_causal, fewer keys than queries", lambda q, k, v, m:
             F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True),
             lambda gen: [r(gen, 1, 2, 5, 8), r(gen, 1, 2, 3, 8), r(gen, 1, 2, 3, 8),
                          mask(gen, 1, 1, 5, 3) | torch.eye(5, 3, dtype=torch.bool)]),
        ]),
        entry("sdp_choice", [
            # torch asks the device which attention kernel to use: math exactly where
            # torch's CPU picks math (dropout), a fused kernel otherwise (the pair of a
            # mask and is_causal is left out: DeviceKit's SDPA takes one of the two, so
            # it answers math where torch's CPU answers flash)
            ("no mask: a fused kernel", lambda q, k, v: _math_chosen(torch, q, k, v),
             xyz(1, 2, 5, 8)),
            ("is_causal: a fused kernel", lambda q, k, v: _math_chosen(torch, q, k, v,
                                                                       is_causal=True),
             xyz(1, 2, 5, 8)),
            ("dropout: math", lambda q, k, v: _math_chosen(torch, q, k, v, dropout_p=0.5),
             xyz(1, 2, 5, 8)),
        ], grad=False),
        entry("scatter_views", [
            # slice_scatter / select_scatter and the backward of slicing and selecting
            # (slice_backward, select_backward): a copy and a write into the view
            ("slice_scatter, dim 1, end -1", lambda a, b: torch.slice_scatter(a, b[:, 1:], 1, 0, -1),
             xy(3, 5, 4)),
            ("slice_scatter, step 2, negative dim", lambda a, b: torch.slice_scatter(
                a, b[..., :2], -1, 1, None, 2), xy(3, 5, 4)),
            ("slice_scatter of a transposed input", lambda a, b: torch.slice_scatter(
                a.transpose(0, 2), b.transpose(0, 2)[:3], 0, 1, 4), xy(3, 5, 4)),
            ("select_scatter, negative index", lambda a, b: torch.select_scatter(a, b[:, 0], 1, -2),
             xy(3, 5, 4)),
            ("the gradient of x[:, :-1] and x[:, 3]", lambda a: a[:, :-1] * 2 + a[:, 3:4],
             x(3, 5, 4)),
            ("the gradient of x[1:, ::2] and x[..., -1]", lambda a: a[1:, ::2].sum(1) + a[1:, 0, -1:],
             x(3, 5, 4)),
        ]),
        entry("scatter_views_forms", [
            ("slice_scatter of a float64 src", lambda a, b: torch.slice_scatter(
                a, b[:, 1:].double(), 1, 1), xy(3, 5, 4)),
            ("slice_scatter of a src of another size", lambda a, b: _raised(
                lambda: torch.slice_scatter(a, b[:, :2], 1, 0, 3)), xy(3, 5, 4)),
            ("select_scatter of an index out of range", lambda a, b: _raised(
                lambda: torch.select_scatter(a, b[:, 0], 1, 5)), xy(3, 5, 4)),
        ], grad=False),
        entry("windows", [
            # torch.stft's windows made on the device (device=): periodic and symmetric,
            # the sizes where the formula has no interior (0, 1, 2), alpha and beta,
            # float64, and torch's argument errors
            ("hann_window(8)", lambda a: torch.hann_window(8, device=a.device), x(3)),
            ("hann_window(400, periodic=False, float64)", lambda a: torch.hann_window(
                400, False, dtype=torch.float64, device=a.device), x(3)),
            ("hamming_window(7, False, 0.6, 0.3)", lambda a: torch.hamming_window(
                7, False, 0.6, 0.3, device=a.device), x(3)),
            ("hamming_window(6, alpha=0.5)", lambda a: torch.hamming_window(
                6, True, 0.5, device=a.device), x(3)),
            ("bartlett_window(5) and (6, periodic=False)", lambda a: torch.cat([
                torch.bartlett_window(5, device=a.device),
                torch.bartlett_window(6, False, device=a.device)]), x(3)),
            ("blackman_window(9) and (8, periodic=False)", lambda a: torch.cat([
                torch.blackman_window(9, device=a.device),
                torch.blackman_window(8, False, device=a.device)]), x(3)),
            ("windows of 0, 1 and 2", lambda a: torch.cat([
                torch.hann_window(n, p, device=a.device) for n in (0, 1, 2)
                for p in (True, False)]), x(3)),
            ("hann_window(-1)", lambda a: _raised(lambda: torch.hann_window(-1, device=a.device)),
             x(3)),
            ("hann_window of an integer dtype", lambda a: _raised(lambda: torch.hann_window(
                4, dtype=torch.int64, device=a.device)), x(3)),
        ], grad=False),
        entry("int_remainder", [
            # integer remainder (the sign of the divisor), tensor and scalar divisors
            ("int64 % int64 of both signs", lambda a, b: torch.remainder(a, b), lambda gen: [
                torch.randint(-9, 10, (3, 4), generator=gen),
                torch.randint(1, 5, (3, 4), generator=gen) * (
                    torch.randint(0, 2, (3, 4), generator=gen) * 2 - 1)]),
            ("int32 % -3", lambda a: torch.remainder(a, -3), lambda gen: [
                torch.randint(-9, 10, (3, 4), generator=gen, dtype=torch.int32)]),
        ], grad=False),
        entry("composed_math", [
            # ceil, trunc, frac, log2, log10, log1p, expm1, fmax, fmin: composed of base ops;
            # the edges of each formula (tiny, negative, ties, -1, subnormal e^x, inf, NaN)
            (f"{name} at its edges", lambda a, name=name: getattr(torch, name)(a), lambda g: [
                torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 1e-4, -0.3, 0.5, -0.5, 2.5,
                              -2.5, 0.49999997, -0.99999994, -1.0, -1.5, 3.7, -7.2, 80.0,
                              -100.0, 8388609.0, float("inf"), float("-inf"), float("nan")])])
            for name in ("ceil", "trunc", "frac", "log2", "log10", "log1p", "expm1")
        ] + [
            ("fmax and fmin with NaNs", lambda a, b: torch.stack([torch.fmax(a, b),
                                                                 torch.fmin(a, b)]),
             lambda g: [torch.tensor([1.0, float("nan"), 2.0, float("nan"), -3.0]),
                        torch.tensor([float("nan"), 3.0, 1.0, float("nan"), -4.0])]),
            ("ceil and trunc of int64", lambda a: torch.ceil(a) * 10 + torch.trunc(a),
             lambda g: [torch.randint(-9, 10, (3, 4), generator=g)]),
            ("log2 and log10 of int64", lambda a: torch.log2(a) + torch.log10(a),
             lambda g: [torch.randint(1, 100, (3, 4), generator=g)]),
        ], grad=False),
        entry("composed_math_grad", [
            (f"{name}", lambda a, name=name: getattr(torch, name)(a), x(3, 4))
            for name in ("log1p", "expm1", "frac")
        ] + [
            ("log2 and log10", lambda a: torch.log2(a.abs() + 0.5) * torch.log10(a.abs() + 2),
             x(3, 4)),
            ("fmax, fmin", lambda a, b: torch.fmax(a, b) - torch.fmin(a, b) * 2, xy(3, 4)),
        ]),
        entry("out_forms", [
            # out= forms derived from the functional lowering: computed, then written
            # into out (a view, another layout, a wider dtype, several outs)
            ("exp(out=)", lambda a, o: torch.exp(a, out=o), xy(3, 4)),
            ("add(out=) of a scalar and alpha", lambda a, o: torch.add(a, 2, alpha=3, out=o),
             xy(3, 4)),
            ("mm(out=) into a transposed view", lambda a, b, o: torch.mm(a, b, out=o.t()),
             lambda g: [r(g, 3, 4), r(g, 4, 5), r(g, 5, 3)]),
            ("sum(dim, out=) into a column", lambda a, o: torch.sum(a, 1, out=o[:, 0]),
             xy(3, 4)),
            ("max(dim, out=(values, indices))", lambda a, o: torch.max(a, 1, out=(
                o[:, 1], torch.zeros(3, dtype=torch.int64, device=a.device))), xy(3, 4)),
            ("sort(out=)", lambda a, o: torch.sort(a, 1, descending=True, out=(
                o, torch.zeros(3, 4, dtype=torch.int64, device=a.device))), xy(3, 4)),
            ("adaptive_max_pool2d(5x5 -> 2x2, out=)", lambda a, o, i: torch._C._nn.
             adaptive_max_pool2d(a, (2, 2), out=(o, i)),
             lambda g: [r(g, 1, 2, 5, 5), r(g, 1, 2, 2, 2), torch.zeros(1, 2, 2, 2,
                                                                        dtype=torch.int64)]),
            ("float32 result into a float64 out=", lambda a, b: torch.mul(a, b, out=torch.zeros(
                3, 4, dtype=torch.float64, device=a.device)), xy(3, 4)),
            ("gt(out=) into bool", lambda a, b: torch.gt(a, b, out=torch.zeros(
                3, 4, dtype=torch.bool, device=a.device)), xy(3, 4)),
            ("exp(out=) into its own input", lambda a: (lambda c: torch.exp(c, out=c))(a * 1),
             x(3, 4)),
            ("float result into an int64 out=", lambda a: _raised(lambda: torch.exp(
                a, out=torch.zeros(3, 4, dtype=torch.int64, device=a.device))), x(3, 4)),
        ], grad=False),
        entry("fallback_cpu", [
            # devicekit.torch.fallback("cpu") on: ops DeviceKit does not lower run on the
            # CPU, their dk operands copied down and their results back
            ("kthvalue under fallback('cpu')", lambda a: _on_cpu_fallback(
                lambda: torch.kthvalue(a, 2, dim=1)), x(3, 5)),
            ("logcumsumexp under fallback('cpu')", lambda a: _on_cpu_fallback(
                lambda: torch.logcumsumexp(a, 1) * 2), x(3, 5)),
        ], grad=False),
    ]
    return reductions + pointwise + nn + select + more + _branches(torch, entry, r, x, xy, xyz,
                                                                   ints, mask)


def _layer_norm_backward(g, a, w, b, mask=(True, True, True)):
    import torch
    mean = a.mean(-1, keepdim=True)
    rstd = torch.rsqrt(a.var(-1, unbiased=False, keepdim=True) + 1e-5)
    return torch.ops.aten.native_layer_norm_backward(g, a, [a.shape[-1]], mean, rstd, w, b,
                                                     list(mask))


def _math_chosen(torch, q, k, v, **kw):
    from torch.nn.attention import SDPBackend
    return torch.tensor(torch._fused_sdp_choice(q, k, v, **kw) == int(SDPBackend.MATH))


def _inference(torch, call):
    with torch.inference_mode():
        return call()


def _on_cpu_fallback(call):
    import devicekit.torch as dkt
    with dkt.fallback("cpu"):
        return call()


def _raised(call):
    """Runs ``call()``: its result, or for an exception an int64 tensor naming
    its class (1 IndexError, 2 NotImplementedError, 3 other RuntimeError,
    4 TypeError or ValueError), so a case compares the error torch raises on
    the CPU with the bridge's. NotImplementedError is a RuntimeError: where
    torch raises a RuntimeError and the bridge refuses with a
    NotImplementedError, ``_raised_any`` compares them as RuntimeErrors."""
    import torch
    try:
        return call()
    except IndexError:
        return torch.tensor(1)
    except NotImplementedError:
        return torch.tensor(2)
    except RuntimeError:
        return torch.tensor(3)
    except (TypeError, ValueError):
        return torch.tensor(4)


def _raised_any(call):
    """As ``_raised``, a NotImplementedError counted as the RuntimeError it is."""
    out = _raised(call)
    import torch
    if isinstance(out, torch.Tensor) and out.ndim == 0 and out.device.type == "cpu" \
            and out.dtype == torch.int64 and int(out) == 2:
        return torch.tensor(3)
    return out


def _grad_of(torch, fn, inputs, wrt, fused=True):
    """d sum(fn(*inputs) * w) / d inputs[i] for i in wrt (w: ones), computed in
    the sample itself, so ``fused=False`` runs the backward under
    ``devicekit.fused_kernels(False)`` (the lowerings' decomposed gradients)."""
    import devicekit
    ins = [t.detach().requires_grad_(i in wrt) if t.is_floating_point() else t
           for i, t in enumerate(inputs)]
    out = fn(*ins)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    ws = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape).to(o.device)
          for o in outs]
    with devicekit.fused_kernels(fused):
        return torch.autograd.grad(outs, [ins[i] for i in wrt], ws)


def _foreach_inplace(torch, xs):
    xs = [t.clone() for t in xs]
    torch._foreach_mul_(xs, 2.0)
    torch._foreach_addcmul_(xs, xs, xs, 0.5)
    return xs


def _foreach_add_alpha_inplace(torch, xs, ys):
    """``_foreach_add_(xs, ys, alpha=...)``: SGD's update, alpha a keyword."""
    xs = [t.clone() for t in xs]
    torch._foreach_add_(xs, ys, alpha=-0.25)
    return xs


def _foreach_maximum_inplace(torch, xs, ys):
    """``_foreach_maximum_`` (AdamW's amsgrad with foreach=True): ATen has
    ``maximum`` but no ``maximum_``, so each element's result is copied in."""
    xs = [t.clone() for t in xs]
    torch._foreach_maximum_(xs, ys)
    return xs


def _branches(torch, entry, r, x, xy, xyz, ints, mask):
    """Cases written to reach the lowerings' branches that the ones above do
    not (``ci/bridge_coverage_exclusions.toml`` lists the branches left, each
    with its reason): partial output masks of the backward lowerings, the
    decomposed backward (``fused_kernels(False)``), integer paths of the bit
    ops, the errors torch raises, factories and copies across host and device."""
    F = torch.nn.functional

    def ii(*shape, lo=-9, hi=10, dtype=torch.int64):
        return lambda gen: [torch.randint(lo, hi, shape, generator=gen).to(dtype)]

    def iij(*shape, dtype=torch.int64):
        return lambda gen: [torch.randint(-9, 10, shape, generator=gen).to(dtype),
                            torch.randint(-9, 10, shape, generator=gen).to(dtype)]

    ln = lambda a, w, b: F.layer_norm(a, (4,), w, b)  # noqa: E731
    return [
        entry("backward_masks", [
            # each backward lowering with only some of its inputs needing a gradient
            ("conv2d, weight only", lambda a, w: F.conv2d(a.detach(), w, padding=1),
             lambda gen: [r(gen, 1, 2, 5, 5), r(gen, 3, 2, 3, 3)]),
            ("conv2d, input only", lambda a, w: F.conv2d(a, w.detach(), padding=1),
             lambda gen: [r(gen, 1, 2, 5, 5), r(gen, 3, 2, 3, 3)]),
            ("conv_transpose2d, weight only", lambda a, w: F.conv_transpose2d(
                a.detach(), w, stride=2), lambda gen: [r(gen, 1, 2, 3, 3), r(gen, 2, 3, 3, 3)]),
            ("conv_transpose2d, input only", lambda a, w: F.conv_transpose2d(
                a, w.detach(), stride=2), lambda gen: [r(gen, 1, 2, 3, 3), r(gen, 2, 3, 3, 3)]),
            ("batch_norm, weight and bias only", lambda a, w, b: F.batch_norm(
                a.detach(), None, None, w, b, training=True),
             lambda gen: [r(gen, 4, 3, 2), r(gen, 3), r(gen, 3)]),
            ("group_norm, weight and bias only", lambda a, w, b: F.group_norm(
                a.detach(), 2, w, b), lambda gen: [r(gen, 2, 4, 3), r(gen, 4), r(gen, 4)]),
            ("native_group_norm, mean and rstd only", lambda a: torch.native_group_norm(
                a, None, None, 2, 4, 3, 2, 1e-5)[1:], x(2, 4, 3)),
            ("native_group_norm, out and rstd", lambda a: torch.native_group_norm(
                a, None, None, 2, 4, 3, 2, 1e-5)[::2], x(2, 4, 3)),
            ("native_group_norm, out and mean", lambda a: torch.native_group_norm(
                a, None, None, 2, 4, 3, 2, 1e-5)[:2], x(2, 4, 3)),
            ("native_group_norm, weight only, with mean", lambda a, w: torch.native_group_norm(
                a.detach(), w, None, 2, 4, 3, 2, 1e-5)[:2], lambda gen: [r(gen, 2, 4, 3),
                                                                         r(gen, 4)]),
            ("embedding scale_grad_by_freq", lambda w, i: F.embedding(
                i, w, scale_grad_by_freq=True), lambda gen: [r(gen, 5, 3),
                                                             torch.tensor([[0, 1, 1], [4, 1, 0]])]),
        ]),
        entry("decomposed_backward", [
            # the decomposed gradients, under fused_kernels(False), each output mask
            (f"layer_norm d{name}", lambda a, w, b, _i=i: _grad_of(torch, ln, [a, w, b], _i,
                                                                    fused=False),
             lambda gen: [r(gen, 3, 4), r(gen, 4), r(gen, 4)])
            for name, i in (("x", [0]), ("w", [1]), ("b", [2]), ("x dw db", [0, 1, 2]))
        ] + [
            ("layer_norm no weight, dx", lambda a: _grad_of(
                torch, lambda t: F.layer_norm(t, (4,)), [a], [0], fused=False), x(3, 4)),
            ("gelu", lambda a: _grad_of(torch, F.gelu, [a], [0], fused=False), x(3, 4)),
            ("gelu tanh", lambda a: _grad_of(torch, lambda t: F.gelu(t, approximate="tanh"),
                                             [a], [0], fused=False), x(3, 4)),
        ], grad=False),
        entry("dropout_forms", [
            ("native_dropout train=False", lambda a: torch.native_dropout(a, 0.5, False),
             x(3, 4)),
            ("native_dropout p=0", lambda a: torch.native_dropout(a, 0.0, True), x(3, 4)),
            ("sdpa dropout_p=1 (all dropped)", lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, dropout_p=1.0), xyz(1, 2, 4, 8)),
            # dropout on, nothing dropped (keep probability 1 - 1e-30 is 1.0,
            # scale 1.0): the math path with a boolean mask, which must mask
            # (-inf where False), not add True/False as 1/0 to the scores
            ("sdpa bool mask, dropout_p=1e-30", lambda q, k, v, m: F.scaled_dot_product_attention(
                q, k, v, attn_mask=m, dropout_p=1e-30),
             lambda gen: [r(gen, 1, 2, 4, 8), r(gen, 1, 2, 4, 8), r(gen, 1, 2, 4, 8),
                          mask(gen, 4, 4) | torch.eye(4, dtype=torch.bool)]),
        ], grad=False),
        entry("bits", [
            ("bitwise_and int32", lambda a, b: a & b, iij(3, 4, dtype=torch.int32)),
            ("bitwise_or uint8", lambda a, b: a.abs() | b.abs(), iij(3, 4, dtype=torch.uint8)),
            ("bitwise_xor int8 scalar", lambda a: a ^ 5, ii(3, 4, dtype=torch.int8)),
            ("bitwise_and bool with int", lambda m: m & 3, lambda gen: [mask(gen, 3, 4)]),
            ("bitwise_or bool tensors", lambda m, n: m | n,
             lambda gen: [mask(gen, 3, 4), mask(gen, 3, 4)]),
            ("bitwise_not int64", lambda a: ~a, ii(3, 4)),
            ("bitwise_not int32", lambda a: ~a, ii(3, 4, dtype=torch.int32)),
            ("bitwise_not uint8", lambda a: ~a, ii(3, 4, lo=0, hi=255, dtype=torch.uint8)),
            ("shift int32 left", lambda a: a << 3, ii(3, 4, dtype=torch.int32)),
            ("shift int8 left (wraps)", lambda a: a << 5, ii(3, 4, dtype=torch.int8)),
            ("shift uint8 left (wraps)", lambda a: a << 5, ii(3, 4, lo=0, hi=255,
                                                               dtype=torch.uint8)),
            ("shift uint8 right", lambda a: a >> 2, ii(3, 4, lo=0, hi=255, dtype=torch.uint8)),
            ("fmod int64", lambda a, b: torch.fmod(a, b.abs() + 1), iij(3, 4)),
            ("fmod int32 scalar", lambda a: torch.fmod(a, -4), ii(3, 4, dtype=torch.int32)),
        ], grad=False),
        entry("raises", [
            # the error torch raises on the CPU, and the bridge's (_raised)
            ("bitwise_and float", lambda a: _raised_any(lambda: a & a), x(3, 4)),
            ("bitwise_not float", lambda a: _raised_any(lambda: ~a), x(3, 4)),
            ("shift float", lambda a: _raised_any(lambda: a << 1), x(3, 4)),
            ("topk k too large", lambda a: _raised(lambda: torch.topk(a, 5)), x(3, 4)),
            ("select out of range", lambda a: _raised(lambda: a.select(0, 3)), x(3, 4)),
            ("dim out of range", lambda a: _raised(lambda: a.sum(2)), x(3, 4)),
            ("view of a bad size", lambda a: _raised(lambda: a.view(5, 3)), x(3, 4)),
            ("view of non-contiguous", lambda a: _raised(lambda: a.t().view(12)), x(3, 4)),
            ("item of many", lambda a: _raised(lambda: a.item()), x(3, 4)),
            ("eye of a negative n", lambda a: _raised(lambda: torch.eye(-1, device=a.device)),
             x(3, 4)),
            ("eye of a negative m", lambda a: _raised(lambda: torch.eye(2, -3, device=a.device)),
             x(3, 4)),
            ("float in-place into int", lambda a, b: _raised(lambda: a.add_(b.float() / 2)),
             iij(3, 4)),
            ("pool kernel larger than the input", lambda a: _raised_any(
                lambda: F.max_pool2d(a, 3)), x(1, 1, 2, 2)),
            ("eval batch_norm without running stats", lambda a: _raised_any(
                lambda: F.batch_norm(a, None, None, training=False)), x(4, 3)),
            ("multinomial, more samples than categories without replacement",
             lambda a: _raised(lambda: torch.multinomial(a.abs() + 0.1, 5)), x(2, 3)),
            ("transpose dim out of range", lambda a: _raised(lambda: a.transpose(0, 5)), x(3, 4)),
            ("convolution with 4 spatial dims", lambda a, w: _raised_any(
                lambda: torch.ops.aten.convolution(a, w, None, [1] * 4, [0] * 4, [1] * 4, False,
                                                   [0] * 4, 1)),
             lambda gen: [r(gen, 1, 1, 2, 2, 2, 2), r(gen, 1, 1, 1, 1, 1, 1)]),
        ], grad=False),
        entry("select_more", [
            ("topk int32", lambda a: torch.topk(a, 2), ii(3, 6, dtype=torch.int32)),
            ("topk bool smallest", lambda m: torch.topk(m, 2, largest=False),
             lambda gen: [mask(gen, 3, 6)]),
            ("topk k = n (sort)", lambda a: torch.topk(a, 2), x(3, 2)),
            ("sort of an empty dim", lambda a: torch.sort(a[:, :0]), x(3, 4)),
            ("scatter empty index", lambda a, s: a.scatter(0, torch.zeros(0, 4, dtype=torch.int64,
                                                                          device=a.device), s),
             xy(3, 4)),
            ("scatter src larger than index", lambda a, s: a.scatter(
                1, torch.tensor([[0, 2], [1, 3]], device=a.device), s), xy(3, 4)),
            ("index uint8 mask", lambda a, m: a[m.to(torch.uint8).bool()],
             lambda gen: [r(gen, 3, 4), mask(gen, 3, 4)]),
            ("index on non-adjacent dims", lambda a: a[torch.tensor([0, 2], device=a.device), :,
                                                     torch.tensor([1, 0], device=a.device)],
             x(3, 2, 4)),
            ("index on non-adjacent dims, broadcast", lambda a: a[
                torch.tensor([[2], [0]], device=a.device), 1:,
                torch.tensor([3, 1, 0], device=a.device)], x(3, 2, 4)),
            ("index_put on non-adjacent dims", lambda a, v: torch.ops.aten.index_put(
                a, [torch.tensor([0, 2], device=a.device), None,
                    torch.tensor([1, 3], device=a.device)], v[:2, :2]), xy(3, 2, 4)),
            ("index_put on non-adjacent dims accumulate", lambda a, v: torch.ops.aten.index_put(
                a, [torch.tensor([0, 0], device=a.device), None,
                    torch.tensor([1, 3], device=a.device)], v[0, 0], True), xy(3, 2, 4)),
            ("index_put bool mask on dim 1", lambda a, v: torch.ops.aten.index_put(
                a, [None, torch.tensor([True, False, True, True], device=a.device)], v[:, :3]),
             xy(3, 4)),
            ("index_put bool mask on dim 1, one value", lambda a: torch.ops.aten.index_put(
                a, [None, torch.tensor([False, True, False, True], device=a.device)],
                torch.tensor(2.5, device=a.device)), x(3, 4)),
            ("index_put bool mask, row per position", lambda a, v: a.index_put(
                (torch.tensor([True, False, True], device=a.device),), v[:2]), xy(3, 4)),
            ("index_put with an empty index", lambda a, v: torch.ops.aten.index_put(
                a, [None, torch.tensor([], dtype=torch.int64, device=a.device)], v[:, :0]),
             xy(3, 4)),
            ("index_copy_ into a cache along dim 2, a repeated position", lambda a, v: a.clone()
             .index_copy_(2, torch.tensor([3, 1, 3], device=a.device), v[:, :, :3]), xy(2, 3, 5, 4)),
        ]),
        entry("ops_more", [
            ("div rounding_mode=None", lambda a, b: torch.div(a, b, rounding_mode=None),
             xy(3, 4)),
            ("int tensor floor-divided by a float", lambda a: torch.div(
                a, 2.5, rounding_mode="floor"), ii(3, 4)),
            ("int tensor trunc-divided by a float", lambda a: torch.div(
                a, -1.5, rounding_mode="trunc"), ii(3, 4)),
            ("bool tensor floor-divided by an int tensor", lambda m, b: torch.div(
                m, b, rounding_mode="floor"), lambda gen: [mask(gen, 3, 4),
                                                           torch.randint(1, 4, (3, 4), generator=gen)]),
            ("_safe_softmax dtype=float64", lambda a: torch.ops.aten._safe_softmax(
                a, 1, dtype=torch.float64), x(3, 4)),
            ("vector_norm -inf", lambda a: torch.linalg.vector_norm(a, float("-inf"), dim=1),
             x(3, 4)),
            ("clamp by 0-d bounds of another float dtype", lambda a: a.clamp(
                torch.tensor(-0.5, dtype=torch.float64, device=a.device),
                torch.tensor(0.5, dtype=torch.float64, device=a.device)), x(3, 4)),
            ("max_pool2d ceil_mode, last window dropped", lambda a: F.max_pool2d(
                a, 2, stride=3, padding=1, ceil_mode=True), x(1, 1, 4, 4)),
        ]),
        entry("ops_half_dtype", [
            # forward only: the gradient through .half() is float16 arithmetic, beyond
            # the float32 tolerance of a grad case
            ("vector_norm half dtype=float64", lambda a: torch.linalg.vector_norm(
                a.half(), dtype=torch.float64), x(3, 4)),
            ("sum half dtype=float64", lambda a: torch.sum(a.half(), 1, dtype=torch.float64),
             x(3, 4)),
            ("isnan", lambda a: torch.isnan((a * (a > 0)) / (a * (a > 0))), x(3, 4)),
            ("isnan int", lambda a: torch.isnan((a * 3).int()), x(3, 4)),
        ], grad=False),
        entry("model_ops", [
            # _lower_models.py's forms and refusals that tests/test_torch_model_ops.py leaves
            # (rows / columns past the last offset: zero here, left unwritten by torch's CPU,
            # so only the rows / columns within the offsets are compared)
            ("_grouped_mm, rows past the last offset", lambda a, b: torch._grouped_mm(
                a, b, torch.tensor([2, 4], dtype=torch.int32, device=a.device))[:4],
             lambda gen: [r(gen, 8, 4), r(gen, 2, 4, 4)]),
            ("_grouped_mm 3-D x 2-D, columns past the last offset", lambda a, b: torch._grouped_mm(
                a, b, torch.tensor([2, 4], dtype=torch.int32, device=a.device))[:, :4],
             lambda gen: [r(gen, 2, 4, 4), r(gen, 4, 8)]),
            ("_grouped_mm without offs", lambda a, b: _raised(lambda: torch._grouped_mm(a, b)),
             lambda gen: [r(gen, 8, 4), r(gen, 2, 4, 4)]),
            ("_grouped_mm 3-D x 3-D with offs", lambda b: _raised(lambda: torch._grouped_mm(
                b, b, torch.tensor([4, 8], dtype=torch.int32, device=b.device))), x(2, 4, 4)),
            ("_grouped_mm with bias", lambda a, b: _raised_any(lambda: torch._grouped_mm(
                a, b, torch.tensor([4, 8], dtype=torch.int32, device=a.device),
                bias=torch.zeros(2, 4, device=a.device))),
             lambda gen: [r(gen, 8, 4), r(gen, 2, 4, 4)]),
            ("_grouped_mm, offs of the wrong length", lambda a, b: _raised(
                lambda: torch._grouped_mm(a, b, torch.tensor([4], dtype=torch.int32,
                                                             device=a.device))),
             lambda gen: [r(gen, 8, 4), r(gen, 2, 4, 4)]),
            ("histc bins=0", lambda a: _raised(lambda: torch.histc(a, bins=0)), x(10)),
            ("histc min > max", lambda a: _raised(lambda: torch.histc(a, 4, min=2, max=1)),
             x(10)),
            ("ctc_loss, every target empty", lambda a: F.ctc_loss(
                a.log_softmax(2), torch.zeros(2, 0, dtype=torch.long, device=a.device),
                [5, 5], [0, 0]), x(5, 2, 4)),
            ("ctc_loss float16", lambda a: _raised(lambda: F.ctc_loss(
                a.log_softmax(2).half(), torch.ones(2, 2, dtype=torch.long, device=a.device),
                [5, 5], [2, 2])), x(5, 2, 4)),
        ], grad=False),
        entry("ctc_loss", [
            # lengths as tensors on the CPU beside dk log-probabilities, as torch takes them
            # beside a CUDA tensor (they were refused as host operands); forward and backward
            ("lengths as CPU tensors", lambda a: F.ctc_loss(
                a.log_softmax(2), torch.tensor([[1, 2, 2], [3, 1, 0]], device=a.device),
                torch.tensor([6, 5]), torch.tensor([3, 2])), x(6, 2, 4)),
            ("int32 CPU lengths, CPU targets, reduction=sum", lambda a: F.ctc_loss(
                a.log_softmax(2), torch.tensor([[1, 2, 2], [3, 1, 0]]),
                torch.tensor([6, 5], dtype=torch.int32), torch.tensor([3, 2], dtype=torch.int32),
                reduction="sum"), x(6, 2, 4)),
            ("device lengths, concatenated targets, reduction=none", lambda a: F.ctc_loss(
                a.log_softmax(2), torch.tensor([1, 2, 2, 3, 1], device=a.device),
                torch.tensor([6, 4], device=a.device), torch.tensor([3, 2], device=a.device),
                reduction="none"), x(6, 2, 4)),
            ("unbatched, 0-d CPU lengths", lambda a: F.ctc_loss(
                a.log_softmax(1), torch.tensor([2, 1, 1], device=a.device), torch.tensor(6),
                torch.tensor(3)), x(6, 4)),
            ("an empty target beside another", lambda a: F.ctc_loss(
                a.log_softmax(2), torch.tensor([[1, 2, 2], [0, 0, 0]], device=a.device),
                torch.tensor([6, 4]), torch.tensor([3, 0]), reduction="sum"), x(6, 2, 4)),
            ("blank=3, zero_infinity, an input too short", lambda a: F.ctc_loss(
                a.log_softmax(2), torch.tensor([[1, 2, 2], [0, 1, 0]], device=a.device),
                torch.tensor([6, 2]), torch.tensor([3, 3]), blank=3, reduction="sum",
                zero_infinity=True), x(6, 2, 4)),
        ]),
        entry("foreach", [
            ("_foreach_add Scalar", lambda a, b: torch._foreach_add([a, b], 1.5), xy(3, 4)),
            ("_foreach_mul List", lambda a, b: torch._foreach_mul([a, b], [b, a]), xy(3, 4)),
            ("_foreach_mul_ in place", lambda a, b: _foreach_inplace(torch, [a, b]), xy(3, 4)),
            ("_foreach_maximum_ in place (no maximum_ in ATen)",
             lambda a, b: _foreach_maximum_inplace(torch, [a, b], [b, a]), xy(3, 4)),
            ("_foreach_add_ List, alpha keyword",
             lambda a, b: _foreach_add_alpha_inplace(torch, [a, b], [b, a]), xy(3, 4)),
            # pow.Scalar is pow(Scalar, Tensor): the element's overload is left
            # to torch's dispatcher (pow.Tensor_Scalar)
            ("_foreach_pow Scalar", lambda a, b: torch._foreach_pow([a, b], 3.0), xy(3, 4)),
            # a scalar base and a list of exponents (Adam's bias corrections
            # with capturable=True): the list is not the first argument
            ("_foreach_pow ScalarAndTensor",
             lambda a, b: torch._foreach_pow(0.9, [a, b]), xy(3, 4)),
        ], grad=False),
        entry("factories_copies", [
            ("full, default dtype", lambda a: torch.full((2, 3), 1.5, device=a.device) + a[:2, :3],
             x(3, 4)),
            ("full int", lambda a: torch.full((2, 3), 7, device=a.device), x(3, 4)),
            ("full bool", lambda a: torch.full((2, 3), True, device=a.device), x(3, 4)),
            ("full dtype=", lambda a: torch.full((2, 3), 2, dtype=torch.float16,
                                                 device=a.device), x(3, 4)),
            ("_to_copy without dtype", lambda a: torch.ops.aten._to_copy(a) * 2, x(3, 4)),
            ("copy_ into a CPU tensor", lambda a: torch.zeros(3, 4).copy_(a), x(3, 4)),
            ("functional copy", lambda a, b: torch.ops.aten.copy(a, b), xy(3, 4)),
            ("functional copy from a CPU tensor", lambda a: torch.ops.aten.copy(
                a, torch.ones(3, 4)), x(3, 4)),
            ("functional copy into a CPU tensor", lambda a: torch.ops.aten.copy(
                torch.zeros(3, 4), a), x(3, 4)),
            ("lift_fresh_copy", lambda a: torch.ops.aten.lift_fresh_copy(a) + 1, x(3, 4)),
            ("eye", lambda a: torch.eye(3, device=a.device) + a[:3, :3], x(3, 4)),
            ("eye n, m, dtype=bool", lambda a: torch.eye(2, 5, dtype=torch.bool, device=a.device),
             x(3, 4)),
        ], grad=False),
    ]


# ---- inplace: in-place ops through views ------------------------------------------

def _inplace(torch):
    """Each op applied to four views of a clone of a 4x6 base; the base is the result."""
    views = [
        ("slice [1:, ::2]", lambda b: b[1:, ::2], (3, 3)),
        ("transpose", lambda b: b.t(), (6, 4)),
        ("as_strided", lambda b: b.as_strided((2, 3), (1, 6), 2), (2, 3)),
        ("diagonal", lambda b: b.diagonal(), (4,)),
    ]

    def entry(name, write, operands=0, grad=True, ints=False):
        """``write(view, *operands)`` applies the op in place; operands are
        drawn with the view's shape."""
        def samples(torch, dtype, gen):
            out = []
            for vname, view, shape in views:
                def fn(base, *ops, _view=view, _write=write):
                    b = base.clone()
                    _write(_view(b), *ops)
                    return b
                base = (torch.randint(-5, 6, (4, 6), generator=gen) if ints
                        else torch.randn(4, 6, generator=gen))
                ops = [torch.randn(*shape, generator=gen) for _ in range(operands)]
                out.append((f"{name} through {vname}", fn, [base, *ops]))
            return out
        return Entry(f"inplace.{name}", samples, dtypes=("int64",) if ints else ("float32",),
                     grad=grad)

    return [
        entry("add_", lambda v, o: v.add_(o, alpha=2), 1),
        entry("sub_", lambda v, o: v.sub_(o), 1),
        entry("mul_", lambda v, o: v.mul_(o), 1),
        entry("div_", lambda v, o: v.div_(o.abs() + 1), 1),
        entry("add_scalar_", lambda v: v.add_(1.5)),
        entry("mul_scalar_", lambda v: v.mul_(-3)),
        entry("clamp_", lambda v: v.clamp_(-0.5, 0.5)),
        entry("clamp_min_", lambda v: v.clamp_min_(0.1)),
        entry("copy_", lambda v, o: v.copy_(o), 1),
        entry("copy_broadcast_", lambda v, o: v.copy_(o[..., :1]), 1),
        entry("fill_", lambda v: v.fill_(2.5)),
        entry("zero_", lambda v: v.zero_()),
        entry("masked_fill_", lambda v, o: v.masked_fill_(o > 0, -1.0), 1),
        entry("index_put_", lambda v, o: v.index_put_(
            (torch.tensor([0, 1], device=v.device),), o[:2] * 3), 1),
        entry("addcmul_", lambda v, o: v.addcmul_(o, o, value=0.5), 1),
        entry("lerp_", lambda v, o: v.lerp_(o, 0.25), 1),
        entry("neg_", lambda v: v.neg_()),
        entry("exp_", lambda v: v.exp_()),
        entry("relu_", lambda v: v.relu_()),
        entry("pow_", lambda v: v.pow_(2)),
        entry("int_add_", lambda v: v.add_(3), grad=False, ints=True),
        entry("int_floor_divide_", lambda v: v.floor_divide_(2), grad=False, ints=True),
    ]


# ---- scalar: host scalars and 0-d CPU tensors with dk tensors ---------------------

def _scalar(torch):
    """One case per (op, dk dtype): the dk tensor with each host scalar and each
    0-d CPU tensor (of every bridge dtype), on the left and on the right."""
    ops = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "sub": lambda a, b: a - b,
        "div": lambda a, b: a / b,
        "maximum": torch.maximum,
        "lt": lambda a, b: a < b,
    }

    def value(torch, dtype, gen, shape=(3, 4)):
        dt = getattr(torch, dtype)
        if dt == torch.bool:
            return torch.rand(*shape, generator=gen) > 0.5
        if dt.is_floating_point:
            return (torch.randn(*shape, generator=gen) * 3).to(dt)
        lo = 0 if dt == torch.uint8 else -5
        return torch.randint(lo, 6, shape, generator=gen, dtype=dt)

    def host_scalars(torch):
        out = [("Python bool True", True), ("Python int 3", 3), ("Python float 2.5", 2.5)]
        for d in BRIDGE_DTYPES:
            dt = getattr(torch, d)
            v = True if dt == torch.bool else (2 if not dt.is_floating_point else 1.75)
            out.append((f"0-d CPU {d} tensor", torch.tensor(v, dtype=dt)))
        return out

    def entry(opname, fn):
        def samples(torch, dtype, gen):
            out = []
            for text, s in host_scalars(torch):
                if opname == "maximum" and not isinstance(s, torch.Tensor):
                    continue  # torch.maximum takes tensors only
                out.append((f"{dtype} {opname} {text}", lambda a, _s=s: fn(a, _s),
                            [value(torch, dtype, gen)]))
                out.append((f"{text} {opname} {dtype}", lambda a, _s=s: fn(_s, a),
                            [value(torch, dtype, gen)]))
            return out
        dtypes = tuple(d for d in BRIDGE_DTYPES if not (opname == "sub" and d == "bool"))
        return Entry(f"scalar.{opname}", samples, dtypes=dtypes, grad=False)

    def bound_entry():
        """clamp with one host bound: a bound of a higher category than the
        tensor gives torch's promoted dtype (an integer tensor clamped by a
        float is float)."""
        def samples(torch, dtype, gen):
            out = []
            for text, s in host_scalars(torch):
                for side in ("min", "max"):
                    out.append((f"{dtype}.clamp({side}={text})",
                                lambda a, _s=s, _k=side: torch.clamp(a, **{_k: _s}),
                                [value(torch, dtype, gen)]))
            return out
        return Entry("scalar.clamp", samples, dtypes=BRIDGE_DTYPES, grad=False)

    def put_entry():
        """``x[index] = host value`` (``index_put_``): a Python number or a
        0-d CPU tensor written at device indices, checked on the whole tensor."""
        def samples(torch, dtype, gen):
            def put(a, i, _s):
                b = a.clone()
                b[i] = _s
                return b
            return [(f"{dtype}[index] = {text}", lambda a, i, _s=s: put(a, i, _s),
                     [value(torch, dtype, gen), torch.tensor([0, 2])])
                    for text, s in host_scalars(torch)]
        return Entry("scalar.index_put", samples, dtypes=BRIDGE_DTYPES, grad=False)

    def host_index_entry():
        """CPU index tensors of a dk tensor (torch accepts them beside an
        accelerator tensor): ``x[i]``, ``x[i, j]``, a bool mask, ``x[i] = v``
        and ``index_put`` with accumulate."""
        def samples(torch, dtype, gen):
            i, j = torch.tensor([2, 0, 2]), torch.tensor([1, -1, 3])
            mask = torch.tensor([True, False, True])

            def put(a, v, accumulate=False):
                return a.clone().index_put_((i,), v, accumulate=accumulate)
            return [
                (f"{dtype}[cpu index]", lambda a: a[i], [value(torch, dtype, gen)]),
                (f"{dtype}[cpu index, cpu index]", lambda a: a[i, j], [value(torch, dtype, gen)]),
                (f"{dtype}[cpu bool mask]", lambda a: a[mask], [value(torch, dtype, gen)]),
                (f"{dtype}[cpu index] = values", lambda a, v: put(a, v[:3]),
                 [value(torch, dtype, gen), value(torch, dtype, gen)]),
                (f"{dtype}.index_put(cpu index, accumulate)", lambda a, v: put(a, v[:3], True),
                 [value(torch, dtype, gen), value(torch, dtype, gen)]),
            ]
        return Entry("scalar.host_index", samples, dtypes=("float32", "int64", "bool"), grad=False)

    def foreach_entry():
        """A list of dk tensors with a 0-d CPU tensor (``_foreach_mul.Tensor``,
        ``_foreach_add.Tensor``): no dk tensor among the positional operands
        themselves (what grad clipping and optimizers call)."""
        def samples(torch, dtype, gen):
            out = []
            for text, s in host_scalars(torch):
                if not isinstance(s, torch.Tensor):
                    continue  # (the Scalar overloads: the scalar.* cases above)
                for name, fn in (("_foreach_mul", torch._foreach_mul),
                                 ("_foreach_add", torch._foreach_add)):
                    out.append((f"{name}([{dtype}, {dtype}], {text})",
                                lambda a, b, _f=fn, _s=s: _f([a, b], _s),
                                [value(torch, dtype, gen), value(torch, dtype, gen, (5,))]))
            return out
        return Entry("scalar.foreach", samples, dtypes=("float32", "bfloat16", "int64"),
                     grad=False)

    return [entry(name, fn) for name, fn in ops.items()] + [bound_entry(), put_entry(),
                                                             host_index_entry(), foreach_entry()]



# ---- refuse: what the bridge refuses, and how ------------------------------------------

def _refuse(torch):
    """The refusals docs/torch.md documents (``HostOperandError``, "its lowering
    does not cover this call", argument checks), each with the class, the op
    named in the message and the reason."""
    host = ("HostOperandError", "expected all tensors on the same device")

    def r(gen, *shape):
        return torch.randn(*shape, generator=gen)

    F = torch.nn.functional

    def offs(*ends):
        return torch.tensor(ends, dtype=torch.int32)

    def entry(name, rows):
        def samples(torch, dtype, gen):
            return [(text, fn, make(gen), expect) for text, fn, make, expect in rows]
        return Refusal(f"refuse.{name}", samples)

    return [
        entry("host_operand", [
            ("dk + CPU tensor", lambda a, h: a + h,
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))], (host[0], "aten::add.Tensor", host[1])),
            ("CPU tensor * dk", lambda a, h: h * a,
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))], (host[0], "aten::mul.Tensor", host[1])),
            ("cat of a dk and a CPU tensor", lambda a, h: torch.cat([a, h]),
             lambda g: [r(g, 3, 4), OnHost(r(g, 2, 4))], (host[0], "aten::cat.default", host[1])),
            ("dk @ CPU tensor", lambda a, h: a @ h,
             lambda g: [r(g, 3, 4), OnHost(r(g, 4, 2))], (host[0], "aten::mm.default", host[1])),
            # the dk tensor only in out= (nothing written to it)
            ("CPU tensors into a dk out=", lambda o, h: torch.mul(h, h, out=o),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))], (host[0], "aten::mul.out", host[1])),
        ]),
        entry("host_operand_inplace", [
            # nothing is written: the dk operand is checked unchanged
            ("add_ of a CPU tensor", lambda a, h: a.add_(h),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))], (host[0], "aten::add_.Tensor", host[1])),
            ("mul_ of a CPU tensor through a view", lambda a, h: a[1:, ::2].mul_(h),
             lambda g: [r(g, 3, 4), OnHost(r(g, 2, 2))], (host[0], "aten::mul_.Tensor", host[1])),
            ("addcmul_ of CPU tensors", lambda a, h: a.addcmul_(h, h),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             (host[0], "aten::addcmul_.default", host[1])),
        ]),
        entry("to_other_device", [
            # torch copies a CUDA tensor to "meta"; the bridge moves between dk and the CPU only
            ("x.to('meta')", lambda a: a.to("meta"), lambda g: [r(g, 3, 4)],
             ("UnloweredOpError", "aten::_to_copy.default", "between dk devices and the CPU only")),
            ("x.to('meta', float16)", lambda a: a.to("meta", torch.float16), lambda g: [r(g, 3, 4)],
             ("UnloweredOpError", "aten::_to_copy.default", "between dk devices and the CPU only")),
        ]),
        entry("mul_out", [
            # torch resizes out (with a warning); the bridge does not resize a dk tensor
            ("out of another shape", lambda a, b, o: torch.mul(a, b, out=o),
             lambda g: [r(g, 3, 4), r(g, 3, 4), r(g, 2)],
             ("UnloweredOpError", "aten::mul.out", "does not resize")),
            ("out of the broadcast operand's shape", lambda a, b, o: torch.mul(a, b, out=o),
             lambda g: [r(g, 3, 4), r(g, 1, 4), r(g, 1, 4)],
             ("UnloweredOpError", "aten::mul.out", "does not resize")),
        ]),
        entry("grouped_mm", [
            ("with a bias", lambda a, b, o, c: torch._grouped_mm(a, b, o, bias=c),
             lambda g: [r(g, 8, 4), r(g, 2, 4, 4), offs(4, 8), r(g, 2, 4)],
             ("UnloweredOpError", "aten::_grouped_mm.default", "takes no bias")),
            ("1-D x 3-D", lambda a, b, o: torch._grouped_mm(a, b, o),
             lambda g: [r(g, 4), r(g, 2, 4, 4), offs(4, 8)],
             ("RuntimeError", "_grouped_mm", "takes 2-D or 3-D operands")),
            ("2-D x 1-D", lambda a, b, o: torch._grouped_mm(a, b, o),
             lambda g: [r(g, 8, 4), r(g, 4), offs(4, 8)],
             ("RuntimeError", "_grouped_mm", "takes 2-D or 3-D operands")),
            # torch's CPU kernel runs decreasing offs (its result for them is not specified)
            ("2-D x 3-D, decreasing offs", lambda a, b, o: torch._grouped_mm(a, b, o),
             lambda g: [r(g, 8, 4), r(g, 2, 4, 4), offs(6, 4)],
             ("RuntimeError", "_grouped_mm", "offs must be non-decreasing")),
            ("3-D x 2-D, decreasing offs", lambda a, b, o: torch._grouped_mm(a, b, o),
             lambda g: [r(g, 2, 4, 4), r(g, 4, 8), offs(8, 2)],
             ("RuntimeError", "_grouped_mm", "offs must be non-decreasing")),
            ("2-D x 2-D, decreasing offs", lambda a, b, o: torch._grouped_mm(a, b, o),
             lambda g: [r(g, 4, 8), r(g, 8, 4), offs(5, 3)],
             ("RuntimeError", "_grouped_mm", "offs must be non-decreasing")),
        ]),
        entry("ctc_loss", [
            # an argument check, as torch's ("input_lengths must be integral")
            ("float input_lengths on the CPU", lambda a, t: F.ctc_loss(
                a.log_softmax(2), t, torch.tensor([6.0, 5.0]), torch.tensor([3, 2])),
             lambda g: [r(g, 6, 2, 4), torch.tensor([[1, 2, 2], [3, 1, 0]])],
             ("RuntimeError", "ctc_loss", "input_lengths must be integral")),
            ("bool target_lengths", lambda a, t: F.ctc_loss(
                a.log_softmax(2), t, torch.tensor([6, 5]), torch.tensor([True, True])),
             lambda g: [r(g, 6, 2, 4), torch.tensor([[1, 2, 2], [3, 1, 0]])],
             ("RuntimeError", "ctc_loss", "target_lengths must be integral")),
        ]),
        entry("random_from", [
            # torch draws from the dtype's whole range; the bridge lowers a bounded range only
            ("x.random_(3, None)", lambda a: a.random_(3, None), lambda g: [r(g, 3, 4)],
             ("UnloweredOpError", "aten::random_.from", "to=None")),
        ]),
        entry("fallback_refuses", [
            # fallback('cpu') on, but an in-place op must write device memory
            ("x.random_(3, None) under fallback('cpu')", lambda a: _on_cpu_fallback(
                lambda: a.random_(3, None)), lambda g: [r(g, 3, 4)],
             ("UnloweredOpError", "aten::random_.from",
              "fallback('cpu') is on but refuses it: it writes in place")),
        ]),
        entry("out_resize", [
            # an out= tensor of another shape: torch resizes it (with a warning); a dk
            # tensor's sizes are fixed, and nothing is written
            ("exp(out=) of another shape", lambda a, o: torch.exp(a, out=o),
             lambda g: [r(g, 3, 4), r(g, 2, 2)],
             ("UnloweredOpError", "aten::exp.out", "does not resize a dk tensor")),
            ("max(dim, out=) of another shape", lambda a, o, i: torch.max(a, 1, out=(o, i)),
             lambda g: [r(g, 3, 4), r(g, 4), torch.zeros(4, dtype=torch.int64)],
             ("UnloweredOpError", "aten::max.dim_max", "max= has shape [4], the result [3]")),
        ]),
        entry("out_unlowered", [
            # the out= form of an op the bridge does not lower: nothing to derive it from
            ("cummax(dim, out=)", lambda a, o, i: torch.cummax(a, 1, out=(o, i)),
             lambda g: [r(g, 3, 4), r(g, 3, 4), torch.zeros(3, 4, dtype=torch.int64)],
             ("UnloweredOpError", "aten::cummax.out", "devicekit.torch lowers no such op")),
        ]),
        entry("draw_on_host", [
            # a *_like draw asked for on the CPU: the bridge makes dk tensors only
            ("rand_like(x, device='cpu')", lambda a: torch.rand_like(a, device="cpu"),
             lambda g: [r(g, 3, 4)],
             ("DeviceNotFoundError", "cpu", "is not a DeviceKit torch device")),
        ]),
        entry("host_out", [
            # dk operands, a CPU tensor as out=
            ("exp of dk into a CPU out=", lambda a, h: torch.exp(a, out=h),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))], (host[0], "aten::exp.out", host[1])),
        ]),
        entry("in_backward", [
            # an error inside torch's backward is raised by the next dk op after it, with
            # a note saying where it came from; the failing op's results are NaN
            # placeholders of its shapes (docs/torch.md, "Errors inside a backward")
            ("a CPU operand in a backward", _after_backward(torch, lambda g, h: g + h),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             (host[0], "aten::add.Tensor", (host[1], "raised inside the backward pass"))),
            ("an in-place op of a CPU operand in a backward",
             _after_backward(torch, lambda g, h: g.clone().mul_(h)),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             (host[0], "aten::mul_.Tensor", (host[1], "raised inside the backward pass"))),
            ("an op with several results, one None, in a backward", _after_backward(
                torch, lambda g, h: torch.ops.aten.native_layer_norm_backward(
                    g, g, [4], h[:, :1], h[:, 1:2], None, None, [True, False, False])[0]),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             (host[0], "aten::native_layer_norm_backward.default",
              (host[1], "raised inside the backward pass"))),
            ("batch norm (running statistics written in place) in a backward",
             _after_backward(torch, lambda g, h: torch.ops.aten._native_batch_norm_legit(
                 g, None, None, h[0].clone(), h[1].abs(), True, 0.1, 1e-5)[0]),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             (host[0], "aten::_native_batch_norm_legit.default",
              (host[1], "raised inside the backward pass"))),
            ("a torch.Generator in a backward", _after_backward(
                torch, lambda g, h: g * torch.rand(g.shape, device=g.device,
                                                   generator=torch.Generator())),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             ("UnloweredOpError", "aten::uniform_.default",
              ("a torch.Generator cannot drive a dk device", "raised inside the backward pass"))),
            ("an out= op with no lowering in a backward", _after_backward(
                torch, lambda g, h: g + torch.randperm(4, device=g.device).to(g.dtype)),
             lambda g: [r(g, 3, 4), OnHost(r(g, 3, 4))],
             ("UnloweredOpError", "aten::randperm.generator_out",
              ("has no DeviceKit lowering", "raised inside the backward pass"))),
        ]),
    ]


def _after_backward(torch, bw):
    """``fn(a, h)``: a function whose backward is ``bw(grad, h)``, applied to
    ``a`` and differentiated; then the next op on the gradient (where the
    bridge raises an error from inside the backward). ``h`` is a CPU tensor."""
    class _Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, h):
            ctx.h = h
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return bw(g, ctx.h), None

    def fn(a, h):
        x = a.detach().requires_grad_(True)
        _Op.apply(x, h).sum().backward()
        return x.grad * 1
    return fn


# ---- draws: random ops judged without torch's generator ---------------------------------

def _draws(torch):
    """``random_``'s bounded forms (``random_.from``: ``x.random_(a, b)``, and
    ``random_.to``: ``x.random_(b)``), on a fresh tensor and through a view."""
    def zeros(dtype, *shape):
        return torch.zeros(*shape, dtype=getattr(torch, dtype))

    def samples(torch, dtype, gen):
        return [
            ("x.random_(3, 13)", lambda a: a.random_(3, 13), [zeros(dtype, 40, 25)], (3, 13)),
            ("x.random_(-4, 5) through a transpose", lambda a: a.t().random_(-4, 5),
             [zeros(dtype, 30, 30)], (-4, 5)),
            ("x.random_(7)", lambda a: a.random_(7), [zeros(dtype, 1000)], (0, 7)),
        ]
    def like_samples(torch, dtype, gen):
        # the *_like draws, each into a fresh tensor copied into the operand (the
        # harness judges the operand): continuous draws binned to integers, so every
        # bin must be drawn
        return [
            ("randint_like(x, 3, 13)", lambda a: a.copy_(torch.randint_like(a, 3, 13)),
             [zeros(dtype, 40, 25)], (3, 13)),
            ("randint_like(x, 7) of a transpose", lambda a: a.copy_(
                torch.randint_like(a.t(), 7).t()), [zeros(dtype, 30, 30)], (0, 7)),
        ] + ([] if dtype != "float32" else [
            ("floor(10 rand_like(x))", lambda a: a.copy_((torch.rand_like(a) * 10).floor()),
             [zeros(dtype, 1000)], (0, 10)),
            ("floor(randn_like(x)) clamped to [-3, 3)", lambda a: a.copy_(
                torch.randn_like(a).clamp(-2.5, 2.5).floor()), [zeros(dtype, 1000)], (-3, 3)),
            ("floor(4 rand_like(x, float64))", lambda a: a.copy_(
                (torch.rand_like(a, dtype=torch.float64) * 4).floor()), [zeros(dtype, 500)], (0, 4)),
            ("floor(exponential_()) clamped to [0, 3)", lambda a: a.exponential_().clamp_(
                0, 2.5).floor_(), [zeros(dtype, 1000)], (0, 3)),
            ("floor(log_normal_(0, 0.5)) clamped to [0, 3)", lambda a: a.log_normal_(
                0, 0.5).clamp_(0, 2.5).floor_(), [zeros(dtype, 1000)], (0, 3)),
        ])
    return [Draws("draws.random_", samples), Draws("draws.like", like_samples)]
