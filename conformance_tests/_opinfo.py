"""PyTorch's OpInfo samples on a DeviceKit device through ``devicekit.torch``
(the machinery of section "torch", ``torch_opinfo.py``).

OpInfo (``torch.testing._internal.common_methods_invocations.op_db``) is
torch's own test corpus: per operator, sample inputs, the dtypes it supports,
whether it is differentiable. It is *internal* to torch
(``torch.testing._internal``) and changes between releases without notice, so
everything this module reads of it is in :func:`load` and :func:`samples`,
each guarded: a missing attribute or an import error becomes the section's
skip reason (``unavailable()``), never a crash and never a pass; a sample
generator that raises is reported as an error of its case, with the reason.

What is read: ``op_db``; of an ``OpInfo``: ``name``, ``variant_test_name``,
``aten_name``, ``supported_dtypes("cpu")``, ``supports_autograd``,
``sample_inputs(device, dtype, requires_grad=)`` and calling it (``op(...)``);
of a ``SampleInput``: ``input``, ``args``, ``kwargs``, ``transform(f)`` and
``noncontiguous()``.

One sample is run twice: on the CPU (the reference) and with every tensor
moved to the ``dk`` device, and the results compared with torch's default
tolerances for the dtype (``torch.testing.assert_close``; integers and bool
exactly). While the ``dk`` run goes, a ``devicekit.torch`` coverage recorder
notes every ATen op it reaches and how it ran, so results are counted per
lowered ATen op; a sample that reaches an op with no lowering (or whose
lowering needs a base op the plugin lacks) is *not implemented*, whatever its
values. For a wrong sample, the ``dk`` run is replayed once with every lowered
ATen call checked against the same ATen op on the CPU with the same inputs,
which names the first call that differs.
"""

import os

#: Samples per (OpInfo, dtype, kind) case: the first ones torch's generator
#: makes (small shapes; they include 0-d, empty and broadcast cases for most
#: ops). ``DEVICEKIT_TORCH_SAMPLES=N`` takes N instead (0: all).
SAMPLE_CAP = 8

# An OpInfo is in scope when it names an ATen op the bridge lowers: its
# aten_name, its name, the last part of its name (nn.functional.relu -> relu),
# or the ATen op its torch function reaches first when that one differs:
ALIASES = {
    "softmax": "_softmax", "log_softmax": "_log_softmax",
    "nn.functional.layer_norm": "native_layer_norm", "nn.functional.conv2d": "convolution",
    "nn.functional.embedding": "embedding", "nn.functional.nll_loss": "nll_loss_forward",
    "nn.functional.scaled_dot_product_attention":
        "_scaled_dot_product_fused_attention_overrideable",
    "nn.functional.linear": "addmm", "matmul": "mm",
}
# Lowering kinds in scope. Factories have no tensor input to move (and
# empty* no defined values), random ops draw DeviceKit's Philox stream, by
# design not torch's CPU generator; the ops and rng sections cover both.
SCOPE_KINDS = {"kernel", "composite", "view", "transfer"}

# torch.testing.assert_close's defaults per dtype (the project's default table);
# gradients of float32 chain several roundings: GRAD_TOL (documented in docs/torch.md).
TOL = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
       "float64": (1e-7, 1e-7)}
GRAD_TOL = {"float32": (1e-5, 1e-5)}
HALF = ("float16", "bfloat16")

# How the coverage recorder says a lowered op ran (the rest: "decomposition",
# "fallback", "missing").
LOWERED_HOW = {"view", "no kernel", "plugin kernel", "fused kernel", "SDK decomposition"}


class Unavailable(Exception):
    """torch or its OpInfo cannot be used here: the skip reason. ``broken``:
    torch is there but devicekit.torch fails to import (an error, not a skip)."""

    def __init__(self, reason, broken=False):
        super().__init__(reason)
        self.broken = broken


def load():
    """(torch, devicekit.torch, op_db), or raises Unavailable with the reason."""
    try:
        import torch
    except ImportError as e:
        raise Unavailable(f"torch is not installed ({e}); pip install 'devicekit[torch]'") from None
    try:
        import devicekit.torch as dkt
    except Exception as e:  # noqa: BLE001 - any failure is the reason
        raise Unavailable(f"devicekit.torch cannot be imported with torch {torch.__version__}: "
                          f"{type(e).__name__}: {e}", broken=True) from None
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except Exception as e:  # noqa: BLE001 - OpInfo is internal; it may move or need test deps
        raise Unavailable(
            f"torch {torch.__version__}'s OpInfo corpus (torch.testing._internal."
            f"common_methods_invocations.op_db, internal to torch) cannot be imported: "
            f"{type(e).__name__}: {e}" + (" (pip install expecttest, or 'devicekit[torch]')"
                                          if "expecttest" in str(e) else "")) from None
    need = ("name", "variant_test_name", "aten_name", "supported_dtypes", "supports_autograd",
            "sample_inputs")
    if not op_db or any(not hasattr(op_db[0], a) for a in need):
        raise Unavailable(f"torch {torch.__version__}'s OpInfo lacks one of {', '.join(need)} "
                          f"(OpInfo is internal to torch and changed)")
    return torch, dkt, op_db


def sample_cap():
    v = os.environ.get("DEVICEKIT_TORCH_SAMPLES")
    return SAMPLE_CAP if not v else (int(v) or None)


def full_name(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def lowered_packets(dkt):
    """{ATen op name without overload: {kinds}} of the bridge's table."""
    out = {}
    for name, kind in dkt.lowered_ops().items():
        out.setdefault(name.split(".")[1], set()).add(kind)
    return out


def scope(op, packets):
    """The lowered ATen op name that puts ``op`` in scope, or None."""
    for n in (ALIASES.get(op.name), op.aten_name, op.name, op.name.split(".")[-1]):
        if n and packets.get(n, set()) & SCOPE_KINDS:
            return n
    return None


def dtypes_of(op, torch):
    """[(dtype name, level)]: float32 (level core) when the OpInfo supports it,
    else bool or int64 (exact); float16/bfloat16 at level full where declared."""
    have = {str(d).split(".")[1] for d in op.supported_dtypes("cpu")}
    out = []
    if "float32" in have:
        out.append(("float32", "core"))
        out += [(d, "full") for d in HALF if d in have]
    elif "bool" in have:
        out.append(("bool", "core"))
    elif "int64" in have:
        out.append(("int64", "core"))
    return out


def samples(op, dtype, kind, torch):
    """[(index, SampleInput)] of the case: the first sample_cap() samples (made
    on the CPU), made non-contiguous for kind "noncontig", with
    requires_grad for kind "grad"."""
    cap = sample_cap()
    dt = getattr(torch, dtype)
    gen = op.sample_inputs("cpu", dt, requires_grad=(kind == "grad"))
    out = []
    for i, s in enumerate(gen):
        if cap is not None and i >= cap:
            break
        if kind == "noncontig":
            try:
                s = s.noncontiguous()
            except Exception as e:  # noqa: BLE001 - e.g. sparse inputs have no strides
                s = NotMade(f"torch cannot make it non-contiguous: {type(e).__name__}: {e}")
        out.append((i, s))
    return out


class NotMade:
    """A sample torch could not make (the reason): skipped, with the reason."""

    def __init__(self, reason):
        self.reason = reason


# ---- describing a sample ---------------------------------------------------------------

def describe(x, torch, depth=0):
    """A short text of a sample's part: tensors by shape, dtype and layout."""
    if isinstance(x, torch.Tensor):
        layout = "" if x.is_contiguous() else f", strides {tuple(x.stride())}"
        grad = ", requires_grad" if x.requires_grad else ""
        return f"Tensor{list(x.shape)} {str(x.dtype).split('.')[1]}{layout}{grad}"
    if isinstance(x, (list, tuple)) and depth < 2:
        inner = ", ".join(describe(v, torch, depth + 1) for v in x[:6])
        more = ", ..." if len(x) > 6 else ""
        return ("[" + inner + more + "]") if isinstance(x, list) else ("(" + inner + more + ",)")
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={describe(v, torch, depth + 1)}" for k, v in x.items()) + "}"
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_sample(s, torch):
    parts = [f"input {describe(s.input, torch)}"]
    if s.args:
        parts.append(f"args {describe(tuple(s.args), torch)}")
    if s.kwargs:
        parts.append(f"kwargs {describe(dict(s.kwargs), torch)}")
    return "; ".join(parts)


# ---- running one sample -------------------------------------------------------------------

def _flat(x, torch):
    from torch.utils._pytree import tree_flatten
    return tree_flatten(x)[0]


def to_device(s, dev, torch):
    """The sample with every tensor on ``dev`` *in the same layout*: its whole
    storage is copied and the same view (sizes, strides, offset) made of it,
    so a non-contiguous sample reaches the device as a strided view (``.to()``
    would make it dense) and ``as_strided`` sees the same storage."""
    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        grad, t = t.requires_grad, t.detach()
        if t.layout != torch.strided:
            r = t.to(dev)
        else:
            n = t.untyped_storage().nbytes() // t.element_size()
            flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (n,), (1,))
            r = flat.to(dev).as_strided(t.shape, t.stride(), t.storage_offset()).detach()
        return r.requires_grad_(True) if grad else r
    return s.transform(move)


def _grad_inputs(s, torch):
    return [t for t in _flat((s.input, s.args, s.kwargs), torch)
            if isinstance(t, torch.Tensor) and t.requires_grad]


def call(op, s, kind, seed, torch):
    """The sample's results: the op's outputs, or for kind "grad" the
    gradients of sum(out * w) (w seeded by the case) w.r.t. every input that
    requires grad (None: no differentiable output)."""
    out = op(s.input, *s.args, **s.kwargs)
    if kind != "grad":
        return out
    outs = [o for o in _flat(out, torch) if isinstance(o, torch.Tensor) and o.requires_grad]
    ins = _grad_inputs(s, torch)
    if not outs or not ins:
        return None
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
    return torch.autograd.grad(outs, ins, ws, allow_unused=True)


def in_float64(op, s, kind, seed, torch):
    """The sample's results computed in float64 on the CPU (the truth that
    decides what the plain tolerance refuses, see :func:`compare`)."""
    def up(t):
        if isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float16,
                                                       torch.bfloat16):
            return t.detach().double().requires_grad_(t.requires_grad)
        return t
    return to_cpu(call(op, s.transform(up), kind, seed, torch), torch)


def to_cpu(x, torch):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v, torch) for v in x)
    return x


# Results whose dtype torch itself makes device-dependent: compared by value in
# the CPU's dtype. native_layer_norm's mean and rstd stay float32 for 16-bit
# inputs on every device but the CPU (torch._refs.native_layer_norm).
DEVICE_DTYPE_RESULTS = {"native_layer_norm": {1, 2}}


# Ops whose index result torch leaves open among equal values (a non-stable
# sort, topk): name -> (position of dim among the sample's args, its default).
TIE_ORDER_OPEN = {"sort": (0, -1), "argsort": (0, -1), "topk": (1, -1)}


def ties_ok(name, actual, expected, s, torch):
    """True when an index result that differs from torch's is another valid
    answer: the indices, unique along dim, pick from the input exactly the
    values torch's indices pick (so only the order of equal values differs)."""
    if name not in TIE_ORDER_OPEN or not isinstance(s.input, torch.Tensor) or s.input.dim() == 0:
        return False
    pos, dim = TIE_ORDER_OPEN[name]
    dim = s.kwargs.get("dim", s.args[pos] if len(s.args) > pos else dim)
    a_idx = actual if name == "argsort" else actual[1]
    e_idx = expected if name == "argsort" else expected[1]
    if not (isinstance(a_idx, torch.Tensor) and a_idx.shape == e_idx.shape
            and a_idx.dtype == e_idx.dtype):
        return False
    x = s.input.detach().cpu()
    if ((a_idx < 0) | (a_idx >= x.shape[dim])).any():
        return False
    sorted_idx = a_idx.sort(dim).values
    if a_idx.shape[dim] > 1 and (sorted_idx.diff(dim=dim) == 0).any():
        return False  # an element picked twice
    return torch.equal(x.gather(dim, a_idx).nan_to_num(0.5), x.gather(dim, e_idx).nan_to_num(0.5)) \
        and bool((x.gather(dim, a_idx).isnan() == x.gather(dim, e_idx).isnan()).all())


def compare(actual, expected, dtype, kind, torch, name="", truth=None):
    """None when close, else (text, max abs err, max rel err). Where the
    plain tolerance refuses a floating result, ``truth()`` (the same sample
    computed in float64 on the CPU) decides: the device's error against it
    must stay within the tolerance plus twice torch's own CPU error against
    it. So an op torch computes exactly (add) keeps the plain bound, and one
    torch itself computes loosely (a 16-bit op with intermediate roundings, a
    layer-norm gradient that cancels) is judged by what a correct computation
    in that dtype achieves, not by agreement with torch's rounding errors."""
    rtol, atol = (GRAD_TOL if kind == "grad" else TOL).get(dtype, TOL.get(dtype, (0, 0)))
    a_flat, e_flat = _flat(actual, torch), _flat(expected, torch)
    t_flat = None
    if len(a_flat) != len(e_flat):
        return f"{len(a_flat)} results, torch on the CPU gives {len(e_flat)}", None, None
    for i, (a, e) in enumerate(zip(a_flat, e_flat)):
        where = f"result {i}: " if len(e_flat) > 1 else ""
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            return f"{where}{type(a).__name__} where torch gives {type(e).__name__}", None, None
        if not isinstance(e, torch.Tensor):
            if a != e and not (a != a and e != e):
                return f"{where}{a!r} where torch gives {e!r}", None, None
            continue
        if a.dtype != e.dtype and i in DEVICE_DTYPE_RESULTS.get(name, ()):
            a = a.to(e.dtype)
        if a.shape != e.shape or a.dtype != e.dtype:
            return (f"{where}shape {list(a.shape)} {a.dtype} where torch gives "
                    f"{list(e.shape)} {e.dtype}"), None, None
        exact = not e.dtype.is_floating_point and not e.dtype.is_complex
        try:
            torch.testing.assert_close(a, e, rtol=0 if exact else rtol, atol=0 if exact else atol,
                                       equal_nan=True)
        except AssertionError:
            if truth is not None:
                if t_flat is None:
                    try:
                        t_flat = _flat(truth(), torch)
                    except Exception:  # noqa: BLE001 - no float64 form: the plain verdict stands
                        t_flat = []
                t = t_flat[i] if i < len(t_flat) else None
                if isinstance(t, torch.Tensor) and t.shape == e.shape:
                    t = t.double()
                    dev_err = (a.double() - t).abs().nan_to_num(0)
                    cpu_err = (e.double() - t).abs().nan_to_num(0)
                    lim = atol + rtol * t.abs() + 2 * (cpu_err.max() if cpu_err.numel() else 0)
                    if not bool((dev_err > lim).any()) and \
                            bool(((a.isnan() == e.isnan()) | t.isnan()).all()):
                        continue
            af, ef = a.double(), e.double()
            both_nan = af.isnan() & ef.isnan()
            diff = (af - ef).abs().masked_fill(both_nan, 0)
            diff = diff.masked_fill(af.isnan() ^ ef.isnan(), float("inf"))
            rel = diff / ef.abs().clamp_min(1e-300)
            worst = int(diff.flatten().argmax()) if diff.numel() else 0
            idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(worst), tuple(e.shape))) \
                if e.dim() else ()
            abs_err, rel_err = float(diff.max()), float(rel.max())
            return (f"{where}max abs error {abs_err:.4g}, max rel error {rel_err:.4g} "
                    f"(rtol {rtol:g}, atol {atol:g}); worst index {idx}: actual "
                    f"{a.flatten()[worst].item()!r}, expected {e.flatten()[worst].item()!r}",
                    abs_err, rel_err)
    return None


# ---- which ATen ops a dk run reached ---------------------------------------------------------

def recorder(dkt):
    """A coverage recorder that raises at a missing op (coverage's own runs the
    op on the CPU and goes on, which here would make a gap look like a pass)."""

    class Strict(dkt.Recorder):
        def missing(self, func, err, args, kwargs, run=None):
            # every base op the call needs that the plugin lacks (its lowering
            # run on the reference plugin), in the row's "needs"; then the gap
            # is raised: a sample that cannot run is not implemented
            _, lacks = self.needs_of(func, err, args, kwargs, run)
            super()._how(self._row(func), "missing",
                         f"the plugin lacks base op{'s' if len(lacks) > 1 else ''} "
                         f"{', '.join(sorted(lacks))}" if lacks
                         else str(err).split(":")[0])
            raise err

    return Strict()


def recording(rec):
    """``with recording(rec):`` every ATen op on dk tensors is reported to ``rec``."""
    import devicekit.torch as dkt
    return dkt.recording(rec)


def reached(rec):
    """({lowered ATen op: how}, {unlowered or plugin-gap op: detail}) of a run."""
    lowered, gaps = {}, {}
    for name, row in sorted(rec.rows.items()):
        hows = set(row["how"])
        if "missing" in hows:
            gaps[name] = "; ".join(sorted(row["detail"])) or "missing"
        if hows & LOWERED_HOW:
            lowered[name] = ", ".join(sorted(hows & LOWERED_HOW))
    return lowered, gaps


# ---- naming the first lowered ATen call that differs ---------------------------------------

class Checker:
    """Replays a dk run with every lowered (kernel or composite) ATen call also
    run on the CPU on copies of the same inputs; ``first`` is the first call whose
    result differs beyond the dtype's tolerance x 10 (text), or None."""

    KINDS = {"kernel", "composite"}

    def __init__(self, torch):
        self.torch, self.first, self.checked = torch, None, 0

    def before(self, func, kind, args, kwargs):
        if self.first is not None or kind not in self.KINDS:
            return None
        from torch.utils._pytree import tree_map
        torch = self.torch

        def host(x):
            return x.detach().cpu() if isinstance(x, torch.Tensor) else \
                (torch.device("cpu") if isinstance(x, torch.device) else x)
        try:
            return func, tree_map(host, args), tree_map(host, kwargs)
        except Exception:  # noqa: BLE001 - no check for this call, the run goes on
            return None

    def after(self, snap, out):
        if snap is None or self.first is not None:
            return
        func, args, kwargs = snap
        torch = self.torch
        try:
            expected = func(*args, **kwargs)
            actual = to_cpu(out, torch)
        except Exception:  # noqa: BLE001
            return
        self.checked += 1
        exp = [e for e in _flat(expected, torch) if isinstance(e, torch.Tensor)]
        act = [a for a in _flat(actual, torch) if isinstance(a, torch.Tensor)]
        for a, e in zip(act, exp):
            if a.shape != e.shape:
                self.first = (f"{func}: shape {list(a.shape)} where torch gives {list(e.shape)} "
                              f"(inputs {describe(args, torch)})")
                return
            if not e.dtype.is_floating_point:
                bad = not torch.equal(a.to(e.dtype), e)
                err = ""
            else:
                rtol, atol = TOL.get(str(e.dtype).split(".")[1], (1e-5, 1e-5))
                d = (a.double() - e.double()).abs()
                d = d.masked_fill(a.isnan() & e.isnan(), 0).masked_fill(a.isnan() ^ e.isnan(),
                                                                        float("inf"))
                lim = 10 * (atol + rtol * e.double().abs())
                bad = bool((d > lim).any()) if d.numel() else False
                err = f": max abs error {float(d.max()):.4g}" if d.numel() else ""
            if bad:
                self.first = f"{func}{err} (inputs {describe(args, torch)}; kwargs {describe(kwargs, torch)})"
                return


def localize(op, s, kind, seed, dev, torch, dkt):
    """The first lowered ATen call of the sample's dk run that differs from
    the same ATen call on the CPU, as text (or why none was found)."""
    rec = recorder(dkt)
    rec.checker = Checker(torch)
    try:
        with recording(rec):
            out = call(op, to_device(s, dev, torch), kind, seed, torch)
        to_cpu(out, torch)
    except Exception as e:  # noqa: BLE001 - the replay only looks for the call
        return f"(the replay raised {type(e).__name__}: {str(e)[:200]})"
    if rec.checker.first:
        return f"first lowered ATen call that differs from torch on the CPU: {rec.checker.first}"
    return (f"each of its {rec.checker.checked} lowered kernel/composite calls matches torch on "
            f"the CPU within 10x tolerance (the difference builds up across calls, or lies in a "
            f"view or copy)")
