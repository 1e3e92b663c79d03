"""Section "torch": PyTorch's own test corpus (OpInfo) through ``devicekit.torch``.

For every OpInfo of ``op_db`` that names an ATen op the bridge lowers
(``_opinfo.scope``), cases ``torch/<opinfo>[.<variant>]/<dtype>/<kind>``:

- ``samples``: the OpInfo's first ``SAMPLE_CAP`` sample inputs, on the dk
  device vs torch on the CPU;
- ``noncontig``: the same samples made non-contiguous (``noncontiguous()``);
- ``grad`` (float32, ``supports_autograd``): gradients of sum(out * w) for a
  seeded w, backward on the device vs on the CPU.

dtype: float32 (level core) where the OpInfo supports it, else bool or
int64; float16 and bfloat16 samples at level full where the OpInfo declares
them (what the plugin lacks for them is not-implemented). Every case is
*optional* (``required=False``): a sample the bridge cannot lower (no
lowering, a call its lowering does not cover, a base op the plugin lacks) is
not-implemented, listed with the op, and never fails the run; a wrong value,
shape or dtype (fail) or an unexpected exception (error) does. A case's
``details`` count its samples per outcome and per ATen op reached
(``aten``), and the ops it needed that have no lowering (``unlowered``); the
report adds them up per ATen op (``report.json`` ``torch``).

Beside them, hand-written cases for what OpInfo's samples do not reach
(``_torch_reach``: non-default arguments, in-place ops through views, host
scalars and 0-d CPU tensors with every bridge dtype), ids
``torch/<family>.<op>/<dtype>/<kind>`` (family ``args``, ``inplace`` or
``scalar``; kind ``samples`` or ``grad``), judged the same way; and the
bridge's refusals, ids ``torch/refuse.<what>/<dtype>/raises``: the call on
the device must raise the documented error class naming the op and the
reason, and leave its operands unchanged (``_run_refusal``).

Without torch (or with a torch whose OpInfo cannot be imported) the section
is one skipped case, ``torch/unavailable``, whose message is the reason.
"""

import functools
import os
import warnings

from devicekit.conformance.case import Case, Section, Skip, id_may_contain
from devicekit.errors import NotImplementedByPlugin

from . import _opinfo, _torch_reach

KINDS = ("samples", "noncontig", "grad")


@functools.lru_cache(maxsize=None)
def _corpus():
    """(torch, dkt, {name: OpInfo in scope}, op_db size), or the Unavailable reason (a str)."""
    try:
        torch, dkt, op_db = _opinfo.load()
    except _opinfo.Unavailable as e:
        return ("broken: " if e.broken else "") + str(e)
    packets = _opinfo.lowered_packets(dkt)
    in_scope = {}
    for op in op_db:
        if _opinfo.scope(op, packets):
            in_scope.setdefault(_opinfo.full_name(op), op)
    return torch, dkt, in_scope, len(op_db), _torch_reach.families(torch)


def _floor(target):
    c = _corpus()
    return None if isinstance(c, str) else len(c[2])  # one samples case per OpInfo in scope


#: Every case id of the section, by its segments (``case.id_may_contain``):
#: ``torch/<opinfo>[.<variant>]/<dtype>/<kind>`` (the dtypes ``_opinfo.dtypes_of``
#: gives), ``torch/<family>.<op>/<dtype>/<kind>`` (``_torch_reach``: every
#: dtype the bridge has), or ``torch/unavailable``. ``cases`` holds the ids to it.
ID_SHAPES = (("torch", None, _torch_reach.BRIDGE_DTYPES, KINDS + ("raises", "draws")),
             ("torch", "unavailable"))


def _may_select(patterns, exact, ops):
    """Whether a filtered run can select a case of this section, decided
    without torch: a run filtered to other sections never imports torch or
    builds the OpInfo corpus (a worker start costs 13 s with them, 1 s without)."""
    return (any(p.startswith(("opinfo:", "reach:")) for p in ops)
            or any(i.startswith("torch/") for i in exact)
            or any(id_may_contain(shape, p) for p in patterns for shape in ID_SHAPES))


SECTION = Section("torch", "PyTorch OpInfo samples through devicekit.torch", order=90,
                  min_cases=_floor, may_select=_may_select)


def status(target):
    """The section's facts for the status line and the report."""
    c = _corpus()
    if isinstance(c, str):
        return {"line": f"torch section skipped: {c}", "available": False, "reason": c}
    torch, _, in_scope, total, _ = c
    cap = _opinfo.sample_cap()
    return {"line": f"torch {torch.__version__}: {len(in_scope)} of {total} OpInfos name a lowered "
                    f"ATen op ({total - len(in_scope)} not attempted); at most "
                    f"{cap or 'all'} samples per case",
            "available": True, "torch_version": torch.__version__, "op_db_entries": total,
            "opinfos_in_scope": len(in_scope), "not_attempted": total - len(in_scope),
            "sample_cap": cap}


def cases(target):
    c = _corpus()
    if isinstance(c, str):
        return [Case(id="torch/unavailable", fn=_skip(c), section="torch", required=False)]

    torch, _, in_scope, _, reach = c
    out = []
    for name, op in in_scope.items():
        if "/" in name:  # the id's shape (ID_SHAPES), which filtered runs rely on
            raise RuntimeError(f"OpInfo name {name!r} has a '/': case ids would be ambiguous")
        for dtype, level in _opinfo.dtypes_of(op, torch):
            kinds = KINDS if dtype == "float32" and op.supports_autograd else KINDS[:2]
            for kind in kinds:
                out.append(Case(id=f"torch/{name}/{dtype}/{kind}", section="torch",
                                op=f"opinfo:{name}", dtype=dtype, required=False, level=level,
                                fn=functools.partial(_run, name, dtype, kind)))
    for name, entry in reach.items():
        for dtype in entry.dtypes:
            if isinstance(entry, _torch_reach.Draws):
                out.append(Case(id=f"torch/{name}/{dtype}/draws", section="torch",
                                op=f"reach:{name}", dtype=dtype, required=False, level="core",
                                fn=functools.partial(_run_draws, name, dtype)))
                continue
            if isinstance(entry, _torch_reach.Refusal):
                out.append(Case(id=f"torch/{name}/{dtype}/raises", section="torch",
                                op=f"reach:{name}", dtype=dtype, required=False, level="core",
                                fn=functools.partial(_run_refusal, name, dtype)))
                continue
            kinds = ("samples", "grad") if entry.grad and dtype == "float32" else ("samples",)
            for kind in kinds:
                out.append(Case(id=f"torch/{name}/{dtype}/{kind}", section="torch",
                                op=f"reach:{name}", dtype=dtype, required=False, level="core",
                                fn=functools.partial(_run_reach, name, dtype, kind)))
    return out


def _skip(reason):
    def fn(ctx):
        if reason.startswith("broken: "):  # torch is there, devicekit.torch is not: an error
            raise RuntimeError(reason[len("broken: "):])
        raise Skip(reason)
    return fn


#: Set (to "1") by ``benchmarks/coverage_run.py --bridge``: each case runs its
#: backward passes on its own thread. torch's autograd engine otherwise runs a
#: dk backward on a device thread of its own, made in C++, which coverage.py
#: does not trace on Python < 3.12, so every backward lowering would read as
#: unreached. Not set in a conformance run: there the backward runs as in a
#: user's process.
BACKWARD_IN_CALLER = "DEVICEKIT_COVERAGE_BACKWARD_IN_CALLER"


def _backward_thread(torch):
    if os.environ.get(BACKWARD_IN_CALLER) == "1":
        torch.autograd.set_multithreading_enabled(False)  # (thread-local: this case's thread)


def _device_of(dkt, ctx):
    try:
        return dkt.prefer(ctx.device.name)  # dk:0: torch's autograd serves dk:0 only
    except Exception as e:  # noqa: BLE001 - e.g. a --plugin build devicekit.torch does not list
        raise Skip(f"devicekit.torch has no torch device for {ctx.device.name}: {e}") from None


def _run(name, dtype, kind, ctx):
    torch, dkt, in_scope, _, _ = _corpus()
    _backward_thread(torch)
    op = in_scope[name]
    dev = _device_of(dkt, ctx)
    torch.manual_seed(ctx.seed)  # OpInfo draws its sample values from torch's global generator
    try:
        made = _opinfo.samples(op, dtype, kind, torch)
    except Exception as e:  # noqa: BLE001 - torch's own generator: not the device's fault
        raise Skip(f"OpInfo {name}'s sample_inputs({dtype}) raised in torch "
                   f"{torch.__version__}: {type(e).__name__}: {e}") from None
    run = _Samples(op, dtype, kind, ctx.seed, dev, torch, dkt)
    for i, s in made:
        run.sample(f"sample {i}", s)
    ctx.details.update(torch={"opinfo": name, "kind": kind, "samples": len(made),
                              "outcomes": run.counts, "aten": run.aten,
                              "unlowered": run.unlowered})
    _verdict(run, f"OpInfo {name} ({dtype}, {kind}; torch {torch.__version__})", len(made))


class _Samples:
    """One case's samples, each run on the device and compared with torch on
    the CPU; counted per outcome and per ATen op reached."""

    def __init__(self, op, dtype, kind, seed, dev, torch, dkt):
        self.op, self.dtype, self.kind, self.seed = op, dtype, kind, seed
        self.dev, self.torch, self.dkt = dev, torch, dkt
        self.counts = {"pass": 0, "fail": 0, "error": 0, "not-implemented": 0, "skipped": 0}
        self.aten, self.unlowered, self.problems, self.gaps, self.skips = {}, {}, [], [], []
        self.needs = set()  # base ops the plugin lacks for the samples it cannot run

    def skip(self, text, why):
        self.counts["skipped"] += 1
        self.skips.append(f"{text}: {why}")

    def sample(self, text, s):
        op, kind, torch = self.op, self.kind, self.torch
        if isinstance(s, _opinfo.NotMade):
            return self.skip(text, s.reason)
        try:
            desc = _opinfo.describe_sample(s, torch)
            expected = _opinfo.to_cpu(_opinfo.call(op, s, kind, self.seed, torch), torch)
        except Exception as e:  # noqa: BLE001 - torch on the CPU refuses it: not a sample
            return self.skip(text, f"torch on the CPU raises {type(e).__name__}")
        if kind == "grad" and expected is None:
            return self.skip(text, "no differentiable output")
        outcome, why, rec = self.on_device(s, expected)
        lowered, missing = _opinfo.reached(rec)
        drew = sorted(set(lowered) & _random_ops(self.dkt))
        if drew and outcome in ("pass", "fail"):
            # DeviceKit draws its own Philox stream, by design not torch's CPU
            # generator: values cannot match (the rng section checks the stream)
            return self.skip(text, f"draws random numbers ({', '.join(drew)})")
        self.count(outcome, lowered, missing)
        if outcome == "not-implemented":
            self.gaps.append(f"{text} ({desc}): {why[0]}")
            for row in rec.rows.values():
                self.needs |= row.get("needs", set())
        elif outcome in ("fail", "error"):
            where = _opinfo.localize(op, s, kind, self.seed, self.dev, torch, self.dkt) \
                if outcome == "fail" else ""
            self.problems.append((outcome, f"{text} ({desc}): {why[0]}\n"
                                           f"    ATen ops reached: {_ops_line(lowered)}"
                                           + (f"\n    {where}" if where else ""), why))

    def on_device(self, s, expected):
        """(outcome, why, the recorder of the ATen ops reached) of sample ``s`` on the device."""
        op, kind, seed, torch = self.op, self.kind, self.seed, self.torch
        self.dkt.clear_pending_errors()
        rec = _opinfo.recorder(self.dkt)
        try:
            on_dev = _opinfo.to_device(s, self.dev, torch)
            with _opinfo.recording(rec):
                out = _opinfo.call(op, on_dev, kind, seed, torch)
            actual = _opinfo.to_cpu(out, torch)  # (a backward's pending error is raised here)
            bad = _opinfo.compare(actual, expected, self.dtype, kind, torch, op.name,
                                  lambda: _opinfo.in_float64(op, s, kind, seed, torch))
            if bad is not None and kind != "grad" and _opinfo.ties_ok(op.name, actual, expected, s,
                                                                      torch):
                bad = None  # equal values in another order, which torch leaves open
        except NotImplementedError as e:
            return "not-implemented", (str(e).splitlines()[0][:300], None, None), rec
        except Exception as e:  # noqa: BLE001
            return "error", (f"{type(e).__name__}: {str(e).splitlines()[0][:300]}", None, None), rec
        return ("pass", None, rec) if bad is None else ("fail", bad, rec)

    def count(self, outcome, lowered, missing):
        self.counts[outcome] += 1
        for a in lowered:
            cell = self.aten.setdefault(a, {})
            cell[outcome] = cell.get(outcome, 0) + 1
        for a in missing:
            if a not in lowered:
                self.unlowered[a] = self.unlowered.get(a, 0) + 1


def _run_reach(name, dtype, kind, ctx):
    torch, dkt, _, _, reach = _corpus()
    _backward_thread(torch)
    entry = reach[name]
    dev = _device_of(dkt, ctx)
    gen = torch.Generator().manual_seed(ctx.seed)
    made = entry.samples(torch, dtype, gen)
    run = _Reach(entry, dtype, kind, ctx.seed, dev, torch, dkt)
    for text, fn, inputs in made:
        run.sample(text, fn, inputs)
    ctx.details.update(torch={"reach": name, "kind": kind, "samples": len(made),
                              "outcomes": run.counts, "aten": run.aten,
                              "unlowered": run.unlowered})
    _verdict(run, f"{name} ({dtype}, {kind}; torch {torch.__version__})", len(made))


class _Reach(_Samples):
    """A hand-written case's samples (``_torch_reach``): ``fn(*inputs)`` with
    the inputs on the device vs on the CPU, compared like OpInfo samples
    (values, shape and dtype)."""

    def sample(self, text, fn, inputs):
        torch = self.torch
        truth = None
        if self.dtype == "float32":
            def truth():
                return _opinfo.to_cpu(self.call(fn, [_up(t, torch) for t in inputs]), torch)
        try:
            expected = _opinfo.to_cpu(self.call(fn, inputs), torch)
        except Exception as e:  # noqa: BLE001 - torch on the CPU refuses it: not a sample
            return self.skip(text, f"torch on the CPU raises {type(e).__name__}")
        if self.kind == "grad" and expected is None:
            return self.skip(text, "no differentiable output")
        self.dkt.clear_pending_errors()
        rec = _opinfo.recorder(self.dkt)
        try:
            on_dev = [self.move(t) for t in inputs]
            with _opinfo.recording(rec):
                out = self.call(fn, on_dev)
            actual = _opinfo.to_cpu(out, torch)
            bad = _opinfo.compare(actual, expected, self.dtype, self.kind, torch, "", truth)
            outcome, why = ("pass", None) if bad is None else ("fail", bad)
        except NotImplementedError as e:
            outcome, why = "not-implemented", (str(e).splitlines()[0][:300], None, None)
        except Exception as e:  # noqa: BLE001
            outcome, why = "error", (f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                                     None, None)
        lowered, missing = _opinfo.reached(rec)
        self.count(outcome, lowered, missing)
        if outcome == "not-implemented":
            self.gaps.append(f"{text}: {why[0]}")
            for row in rec.rows.values():
                self.needs |= row.get("needs", set())
        elif outcome in ("fail", "error"):
            self.problems.append((outcome, f"{text}: {why[0]}\n"
                                           f"    ATen ops reached: {_ops_line(lowered)}", why))

    def move(self, t):
        torch = self.torch
        return t.to(self.dev) if isinstance(t, torch.Tensor) else t

    def call(self, fn, inputs):
        """fn's results, or for kind "grad" the gradients of sum(out * w) (w
        seeded by the case) w.r.t. the floating inputs (None: nothing to differentiate)."""
        torch = self.torch
        if self.kind != "grad":
            return fn(*inputs)
        ins = [t.detach().requires_grad_(True) if isinstance(t, torch.Tensor)
               and t.dtype.is_floating_point else t for t in inputs]
        out = fn(*ins)
        outs = [o for o in _opinfo._flat(out, torch)
                if isinstance(o, torch.Tensor) and o.requires_grad]
        wrt = [t for t in ins if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs or not wrt:
            return None
        g = torch.Generator().manual_seed(self.seed)
        ws = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
        grads = torch.autograd.grad(outs, wrt, ws, allow_unused=True)
        return tuple(torch.zeros_like(w) if d is None else d for d, w in zip(grads, wrt))


def _run_refusal(name, dtype, ctx):
    """A ``refuse.*`` case: each sample's call on the device must raise the
    documented class with the op and the reason in its message, and write
    nothing to its operands. Run without a coverage recorder (which would
    continue a refused call on the CPU): as a user's call runs. torch's own
    outcome on the CPU is recorded, not judged (it computes many of them)."""
    import devicekit.torch as dkt_public
    from devicekit.errors import DeviceNotFoundError, UnloweredOpError

    torch, dkt, _, _, reach = _corpus()
    _backward_thread(torch)  # (a refusal inside a backward: refuse.in_backward)
    classes = {"HostOperandError": dkt_public.HostOperandError,
               "UnloweredOpError": UnloweredOpError, "RuntimeError": RuntimeError,
               "DeviceNotFoundError": DeviceNotFoundError}
    dev = _device_of(dkt, ctx)
    gen = torch.Generator().manual_seed(ctx.seed)
    made = reach[name].samples(torch, dtype, gen)
    problems, rows = [], []
    for text, fn, inputs, (cls_name, op, reason) in made:
        plain = [i.t if isinstance(i, _torch_reach.OnHost) else i for i in inputs]
        try:
            with warnings.catch_warnings():  # (torch's "out was resized" warning)
                warnings.simplefilter("ignore")
                fn(*[t.clone() for t in plain])
            on_cpu = "computes"
        except Exception as e:  # noqa: BLE001 - recorded, not judged
            on_cpu = f"raises {type(e).__name__}"
        ops = [i.t.clone() if isinstance(i, _torch_reach.OnHost) else i.to(dev) for i in inputs]
        before = [o.cpu().clone() for o in ops]
        dkt.clear_pending_errors()
        try:
            fn(*ops)
            got, why = None, "no error: the call ran on the device"
        except Exception as e:  # noqa: BLE001 - judged below
            # (its notes too: where an error raised inside a backward came from)
            got, msg, why = e, "\n".join([str(e), *getattr(e, "__notes__", ())]), None
            want = classes[cls_name]
            reasons = reason if isinstance(reason, tuple) else (reason,)
            if not isinstance(e, want) or (cls_name == "RuntimeError" and isinstance(
                    e, (NotImplementedError, dkt_public.HostOperandError))):
                why = f"raised {type(e).__name__}, not {cls_name}: {msg.splitlines()[0][:300]}"
            elif op not in msg or not all(t in msg for t in reasons):
                why = (f"the message does not name {op!r} and {' and '.join(map(repr, reasons))}:"
                       f" {msg[:400]}")
        if why is None:
            changed = [k for k, (o, b) in enumerate(zip(ops, before))
                       if not torch.equal(o.cpu(), b)]
            if changed:
                why = f"refused, but operands {changed} were written"
        rows.append({"sample": text, "torch_cpu": on_cpu,
                     "raised": type(got).__name__ if got is not None else None,
                     "ok": why is None})
        if why is not None:
            problems.append(f"{text}: {why}")
    ctx.details.update(torch={"reach": name, "kind": "raises", "samples": len(made),
                              "refusals": rows})
    if problems:
        raise AssertionError(f"{name} ({dtype}; torch {torch.__version__}): {len(problems)} of "
                             f"{len(made)} refusals wrong; " + "\n".join(problems[:6]))
    if not made:
        raise Skip(f"{name} ({dtype}): no sample")


def _run_draws(name, dtype, ctx):
    """A ``draws.*`` case (``_torch_reach.Draws``): each sample's random op on
    the device, judged without torch's generator: dtype, shape, integers in
    [lo, hi) with each drawn, bitwise the same from the same
    ``torch.manual_seed``, different from another seed."""
    torch, dkt, _, _, reach = _corpus()
    dev = _device_of(dkt, ctx)
    gen = torch.Generator().manual_seed(ctx.seed)
    made = reach[name].samples(torch, dtype, gen)
    seed = ctx.seed % 2**31
    problems, rows = [], []

    def draw(fn, inputs, s):
        torch.manual_seed(s)
        ins = [t.to(dev) for t in inputs]
        fn(*ins)
        return ins[0].cpu()

    for text, fn, inputs, (lo, hi) in made:
        # (the CPU's and the device's generators as the case found them)
        with torch.random.fork_rng(devices=[dev], device_type=dev.type):
            a, b, c = (draw(fn, inputs, seed), draw(fn, inputs, seed), draw(fn, inputs, seed + 1))
        want = inputs[0]
        why = None
        if a.dtype != want.dtype or a.shape != want.shape:
            why = f"{a.dtype} {list(a.shape)} where the operand is {want.dtype} {list(want.shape)}"
        elif not bool(((a >= lo) & (a < hi) & (a == a.round())).all()):
            why = f"values outside the integers of [{lo}, {hi}): {sorted(set(a.flatten().tolist()))[:8]}"
        elif set(a.flatten().tolist()) != set(range(lo, hi)):
            why = f"of [{lo}, {hi}) drew only {sorted(set(a.flatten().tolist()))}"
        elif not torch.equal(a, b):
            why = "another result from the same torch.manual_seed"
        elif torch.equal(a, c):
            why = "the same result from another seed"
        rows.append({"sample": text, "ok": why is None})
        if why is not None:
            problems.append(f"{text}: {why}")
    ctx.details.update(torch={"reach": name, "kind": "draws", "samples": len(made),
                              "draws": rows, "seed": seed})
    if problems:
        raise AssertionError(f"{name} ({dtype}; torch {torch.__version__}): {len(problems)} of "
                             f"{len(made)} samples wrong; " + "\n".join(problems[:6]))
    if not made:
        raise Skip(f"{name} ({dtype}): no sample")


def _up(t, torch):
    """float32 inputs in float64 (the truth :func:`_opinfo.compare` may consult)."""
    return t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t


def _verdict(run, head, n_made):
    """Raises the case's outcome: fail (a wrong sample), error (one raised),
    not-implemented (one the device cannot run), skipped (none ran); else passes."""
    counts, problems, gaps = run.counts, run.problems, run.gaps
    if problems:
        fails = [p for p in problems if p[0] == "fail"]
        worst = max((p[2] for p in fails if p[2][1] is not None), default=None,
                    key=lambda w: w[1])
        nums = (f"max abs error {worst[1]:.4g}, max rel error {worst[2]:.4g}\n"
                if worst else "")
        first = problems[0][1].splitlines()[0]
        lines = [f"{head}: {counts['fail']} wrong and {counts['error']} raising of "
                 f"{n_made} samples; first: {first}", nums.rstrip("\n")]
        lines += [p[1] for p in problems[:4]]
        if len(problems) > 4:
            lines.append(f"... and {len(problems) - 4} more")
        if gaps:
            lines.append(f"(and {len(gaps)} samples not implemented: {gaps[0]})")
        msg = "\n".join(lines)
        if fails:
            raise AssertionError(msg)
        raise RuntimeError(msg)
    if gaps:
        needs = f"needs base ops {', '.join(sorted(run.needs))}: " if run.needs else ""
        raise NotImplementedByPlugin(
            f"{head}: {needs}{len(gaps)} of {n_made} samples cannot run on the device "
            f"({counts['pass']} passed): {gaps[0]}" + (f"; and {len(gaps) - 1} more"
                                                         if len(gaps) > 1 else ""))
    if not counts["pass"]:
        raise Skip(f"{head}: no sample to run ({'; '.join(run.skips[:3]) or 'the generator made none'})")


@functools.lru_cache(maxsize=None)
def _random_ops(dkt):
    return frozenset(op for op, kind in dkt.lowered_ops().items() if kind == "random")


def _ops_line(lowered):
    return ", ".join(f"{a} ({how})" for a, how in lowered.items()) or "none lowered"
