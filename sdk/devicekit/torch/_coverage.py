"""Coverage: run a model once on a dk device and say, for every ATen op it
reached, how DeviceKit ran it.

``how`` is one of: ``view`` (metadata only, no kernel), ``no kernel`` (a
question torch asks the device, such as which attention to use), ``plugin
kernel`` (the plugin's base ops), ``fused kernel`` (a plugin fused kernel, named),
``SDK decomposition`` (a DeviceKit composite ran as base ops: no fused kernel
accepted; the reason is given), ``decomposition`` (``torch._decomp`` or
torch's own composite: its ops are listed too, reached ``via`` it),
``fallback`` (run on the CPU under ``fallback("cpu")``) and ``missing`` (no
lowering, or the plugin lacks a base op the lowering needs: the op that
would raise ``UnloweredOpError`` outside coverage).

So that one run lists every gap, a missing op does not stop a coverage run:
it runs on the CPU (its results copied back, its in-place writes written
back) and the run goes on. Values after a missing op are therefore not a
DeviceKit result; coverage says what runs, not what it computes.
"""

import threading

import torch

from .. import bridge, composite_stats
from . import _fallback
from ._device import DKTensor, dk_device, from_host, to_host, torch_device_of, wrap
from ._device import device as _by_name

_active = None
_lock = threading.Lock()


def active():
    return _active


class Recorder:
    def __init__(self):
        self.rows = {}  # op name -> row dict
        self.local = threading.local()
        # An object with before(func, kind, args, kwargs) -> token and
        # after(token, out), told about every lowered call (the conformance
        # section "torch" uses one to name the first call that differs from
        # torch on the CPU); None: no such checks.
        self.checker = None

    def _stack(self):
        s = getattr(self.local, "stack", None)
        if s is None:
            s = self.local.stack = []
        return s

    def enter(self, func):
        self._stack().append(str(func))  # ops reached inside are listed "via" it

    def leave(self):
        self._stack().pop()

    def _row(self, func, count=True):
        name = str(func)
        stack = self._stack()
        via = stack[-1] if stack else None
        with _lock:
            row = self.rows.setdefault(name, {"op": name, "calls": 0, "how": {}, "detail": set(),
                                              "via": set(), "needs": set(), "uses": set()})
            row["calls"] += count
            if via is not None:
                row["via"].add(via)
        return row

    def _how(self, row, how, detail=None):
        with _lock:
            row["how"][how] = row["how"].get(how, 0) + 1
            if detail:
                row["detail"].add(detail)

    def lowered(self, func, kind, before):
        row = self._row(func)
        if kind == "view":
            return self._how(row, "view")
        if kind == "meta":
            return self._how(row, "no kernel")
        if before is not None:
            after = composite_stats()
            fused, why = set(), set()
            for op, entry in after.items():
                old = before.get(op, {"fused": {}, "why_decomposed": {}})
                fused |= {f"{op}: {k}" for k, n in entry["fused"].items()
                          if n > old["fused"].get(k, 0)}
                why |= {f"{op}: {w}" for w, n in entry["why_decomposed"].items()
                        if n > old["why_decomposed"].get(w, 0)}
            if fused:
                return self._how(row, "fused kernel", "; ".join(sorted(fused)))
            if why:
                return self._how(row, "SDK decomposition", "; ".join(sorted(why)))
        self._how(row, "plugin kernel")

    def note(self, func, how):
        self._how(self._row(func), how)

    def missing(self, func, err, args, kwargs, run=None):
        """Records ``func`` as missing and returns its result from a reference
        path, so the run goes on: ``run(args, kwargs)`` (its lowering) on the
        reference plugin's device, or else torch's CPU kernel."""
        out, lacks = self.needs_of(func, err, args, kwargs, run)
        self._how(self._row(func), "missing", None if lacks else str(err))
        if out is not _NOT_RUN:
            return out
        return _continue_on_cpu(func, args, kwargs)

    def needs_of(self, func, err, args, kwargs, run=None):
        """``(out, lacks)``: the base ops missing ``func`` needs that the plugin
        lacks, added to its row's ``needs`` (those ``run``, its lowering, launches
        on the reference plugin, which also gives ``out``, its result there, else
        ``_NOT_RUN``; without ``run``: the one base op ``err`` names)."""
        row = self._row(func, count=False)
        gap = set(getattr(err, "missing_base_ops", ()))
        out, needs = _NOT_RUN, None
        if run is not None:
            out, needs = _on_reference(func, run, args, kwargs)
        lacks = gap if needs is None else (needs - _implemented(args, kwargs)) | gap
        with _lock:
            row["needs"] |= lacks
            row["uses"] |= needs or set()
        return out, lacks


_NOT_RUN = object()


def _reference():
    """The DeviceKit device with every base op (the reference plugin's cpu:0),
    or None when it is not installed."""
    import devicekit
    return next((d for d in devicekit.devices() if d.name == "cpu:0"), None)


def _implemented(args, kwargs):
    dev = _target(args, kwargs)
    if dev is None:
        return set()
    return {k["op"] for k in dev.plugin.kernels() if k["implemented"]}


def _target(args, kwargs):
    """The DeviceKit device a call runs on: its first dk tensor's, or its dk
    ``device=`` (a factory)."""
    found = []

    def look(x):
        if found:
            return
        if isinstance(x, DKTensor):
            found.append(x._dk.device)
        elif isinstance(x, torch.device) and x.type == "dk":
            found.append(dk_device(x))
        elif isinstance(x, (list, tuple)):
            for v in x:
                look(v)
        elif isinstance(x, dict):
            for v in x.values():
                look(v)
    look(args)
    look(kwargs)
    return found[0] if found else None


def _on_reference(func, run, args, kwargs):
    """``run`` (the op's lowering) on the reference device, its operands copied
    there and its results (and in-place writes) back: ``(out, base ops it
    launched)``, or ``(_NOT_RUN, None)`` when that cannot be done (no
    reference plugin, the target is the reference, the lowering fails there)."""
    import devicekit
    global _active
    ref, dev = _reference(), _target(args, kwargs)
    if ref is None or dev is None or dev.name == ref.name and dev.plugin.name == ref.plugin.name:
        return _NOT_RUN, None
    ref_torch = torch_device_of(ref)
    moved = {}  # id(reference tensor) -> the dk tensor it is a copy of

    def down(x):
        if isinstance(x, DKTensor):
            r = wrap(bridge.to_device(x._dk, ref))
            moved[id(r)] = x
            return r
        if isinstance(x, torch.device) and x.type == "dk":
            return ref_torch
        if isinstance(x, (list, tuple)):
            return type(x)(down(v) for v in x)
        if isinstance(x, dict):
            return {k: down(v) for k, v in x.items()}
        return x

    saved = _active
    try:
        ref_args, ref_kwargs = down(args), down(kwargs)
        before = devicekit.dispatch_stats()
        _active = None  # the reference run is not part of the model's coverage
        try:
            with devicekit.fused_kernels(False):  # the base ops, as a plugin without fused kernels
                out = run(ref_args, ref_kwargs)
        finally:
            _active = saved
        after = devicekit.dispatch_stats()
    except Exception:  # noqa: BLE001 - the torch CPU path continues instead
        return _NOT_RUN, None
    needs = {op for op, s in after.items() if s["kernel"] > before.get(op, {}).get("kernel", 0)}

    written = {}
    for a, r in zip(func._schema.arguments, ref_args):
        if a.alias_info is not None and a.alias_info.is_write and id(r) in moved:
            bridge.copy_into(moved[id(r)]._dk, bridge.to_device(r._dk, dev))
            written[id(r)] = moved[id(r)]

    def up(x):
        if isinstance(x, DKTensor):
            if id(x) in moved:  # an in-place op returns its operand
                return moved[id(x)]
            return wrap(bridge.to_device(x._dk, dev))
        if isinstance(x, (list, tuple)):
            return type(x)(up(v) for v in x)
        return x
    return up(out), needs


def _continue_on_cpu(func, args, kwargs):
    """Run ``func`` on the CPU so a coverage run can go on past a gap; in-place
    writes are written back into the dk tensors they target."""
    hosts = {}

    def down(x):
        if isinstance(x, DKTensor):
            h = to_host(x._dk)
            hosts[id(h)] = x
            return h
        if isinstance(x, (list, tuple)):
            return type(x)(down(v) for v in x)
        if isinstance(x, dict):  # kwargs: a factory's device= must become the CPU's
            return {k: down(v) for k, v in x.items()}
        if isinstance(x, torch.device) and x.type == "dk":
            return torch.device("cpu")
        return x

    dev = _target(args, kwargs)  # a factory has no dk operand: its device= says
    host_args, host_kwargs = down(args), down(kwargs)
    out = func(*host_args, **host_kwargs)

    def up(x):
        if isinstance(x, torch.Tensor):
            if id(x) in hosts:  # an in-place op returns its (written) input
                target = hosts[id(x)]
                bridge.copy_into(target._dk, from_host(x, dev))
                return target
            return wrap(from_host(x, dev))
        if isinstance(x, (list, tuple)):
            return type(x)(up(v) for v in x)
        return x

    for a, h in zip(func._schema.arguments, host_args):
        if a.alias_info is not None and a.alias_info.is_write and id(h) in hosts:
            bridge.copy_into(hosts[id(h)]._dk, from_host(h, dev))
    return up(out)


class recording:
    """``with recording(rec):`` every ATen op on dk tensors is reported to the
    ``Recorder`` ``rec`` (a harness's own subclass, say one that raises at a
    missing op instead of running it on the CPU, as ``coverage`` does). One
    recording at a time: a second is a RuntimeError."""

    def __init__(self, rec):
        self.rec = rec

    def __enter__(self):
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError("a devicekit.torch coverage run is already in progress")
            _active = self.rec
        return self.rec

    def __exit__(self, *exc):
        global _active
        _active = None


class Coverage:
    """What ``coverage`` returns: ``rows`` (one dict per ATen op: ``op``,
    ``calls``, ``how`` {how: calls}, ``detail``, ``via``), ``error`` (what
    stopped the run, or None) and ``fallback`` (fallback_stats of the run)."""

    def __init__(self, rows, error, fallback):
        self.rows, self.error, self.fallback = rows, error, fallback

    def missing(self):
        return [r["op"] for r in self.rows if "missing" in r["how"]]

    def needs(self):
        """``{ATen op: [base ops the plugin lacks for it]}`` for every missing
        op whose lowering names them (an op with no lowering names none)."""
        return {r["op"]: sorted(r["needs"]) for r in self.rows if r["needs"]}


    def format(self):
        lines = [f"{'ATen op':58} {'calls':>6}  how"]
        for r in self.rows:
            how = ", ".join(f"{h} ({n})" if len(r["how"]) > 1 else h for h, n in r["how"].items())
            lines.append(f"{r['op']:58} {r['calls']:>6}  {how}")
            for d in _details(r):
                lines.append(f"{'':66}{d}")
            if r["via"]:
                lines.append(f"{'':66}via {', '.join(sorted(r['via']))}")
        kinds = {}
        for r in self.rows:
            for h in r["how"]:
                kinds[h] = kinds.get(h, 0) + 1
        lines.append("")
        lines.append(f"{len(self.rows)} ATen ops: " + ", ".join(f"{n} {h}" for h, n in
                                                                sorted(kinds.items())))
        for op, s in sorted(self.fallback.items()):
            lines.append(f"fallback {op}: {s['calls']} calls, {s['bytes_to_host']} B to host, "
                         f"{s['bytes_to_device']} B to device")
        if self.error is not None:
            lines.append(f"the run stopped: {self.error}")
        return "\n".join(lines)

    def to_json(self):
        return {"ops": [{**r, "detail": _details(r), "via": sorted(r["via"]),
                         "needs": sorted(r["needs"]), "uses": sorted(r["uses"])}
                        for r in self.rows],
                "needs": self.needs(),
                "missing": self.missing(), "fallback": self.fallback,
                "error": None if self.error is None else str(self.error)}


def _details(row):
    """A row's details, the base ops it lacks first (one line for all its calls)."""
    needs = sorted(row["needs"])
    head = ([f"the plugin lacks base op{'s' if len(needs) > 1 else ''} {', '.join(needs)}"]
            if needs else [])
    return head + sorted(row["detail"])


def coverage(fn, device="dk:0"):
    """Run ``fn(torch_device)`` once (``device``: a ``dk`` torch device, or a
    DeviceKit device name such as ``"cpu:0"``), recording every ATen op it reaches on
    dk tensors; returns a ``Coverage``. An exception other than a missing op
    stops the run and is kept in ``Coverage.error``."""
    global _active
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str) and device.split(":")[0] == "dk":
        dev = torch.device(device)
    else:
        dev = _by_name(device)  # a DeviceKit name: "cpu:0"
    dk_device(dev)  # a device that does not exist is an error before anything runs
    rec = Recorder()
    stats_before = _fallback.fallback_stats()
    error = None
    with _lock:
        if _active is not None:
            raise RuntimeError("a coverage run is already in progress")
        _active = rec
    try:
        fn(dev)
    except Exception as e:  # noqa: BLE001 - reported in the coverage, as the run's end
        error = e
    finally:
        _active = None
    after = _fallback.fallback_stats()
    used = {op: {k: v - stats_before.get(op, {}).get(k, 0) for k, v in s.items()}
            for op, s in after.items() if s["calls"] > stats_before.get(op, {}).get("calls", 0)}
    rows = sorted(rec.rows.values(), key=lambda r: r["op"])
    return Coverage(rows, error, used)


def plan(coverages):
    """The base ops to write next: ``coverages`` is ``{model: Coverage}``;
    returns one dict per base op a missing ATen op needs, ``op``, ``aten_ops``
    (the ATen ops that need it), ``unlocks`` (those it alone stands between the
    plugin and: every other base op they need is there) and ``models`` (the
    models that need it), ranked by ATen ops unlocked, then ATen ops needing it,
    then models."""
    table = {}
    for model, cov in coverages.items():
        for aten_op, lacks in cov.needs().items():
            for op in lacks:
                e = table.setdefault(op, {"op": op, "aten_ops": set(), "unlocks": set(),
                                          "models": set()})
                e["aten_ops"].add(aten_op)
                e["models"].add(model)
                if len(lacks) == 1:
                    e["unlocks"].add(aten_op)
    ranked = sorted(table.values(), key=lambda e: (-len(e["unlocks"]), -len(e["aten_ops"]),
                                                   -len(e["models"]), e["op"]))
    return [{k: sorted(v) if isinstance(v, set) else v for k, v in e.items()} for e in ranked]


def format_plan(ranked):
    lines = [f"{'base op':16} {'unlocks':>7} {'needed by':>9} {'models':>6}  ATen ops it alone unlocks"]
    for e in ranked:
        lines.append(f"{e['op']:16} {len(e['unlocks']):>7} {len(e['aten_ops']):>9} "
                     f"{len(e['models']):>6}  {', '.join(e['unlocks'])}")
    if ranked:
        lines.append("base ops that would unlock the most ATen ops: " + ", ".join(
            f"{e['op']} ({len(e['unlocks'])})" for e in ranked[:8]))
    return "\n".join(lines)
