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
from ._device import DKTensor, dk_device, from_host, to_host, wrap
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

    def _row(self, func):
        name = str(func)
        stack = self._stack()
        via = stack[-1] if stack else None
        with _lock:
            row = self.rows.setdefault(name, {"op": name, "calls": 0, "how": {}, "detail": set(),
                                              "via": set()})
            row["calls"] += 1
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

    def missing(self, func, err, args, kwargs):
        row = self._row(func)
        gap = getattr(err, "missing_base_ops", ())
        self._how(row, "missing", f"the plugin lacks base op {', '.join(gap)}" if gap else str(err))
        return _continue_on_cpu(func, args, kwargs)


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
        if isinstance(x, torch.device) and x.type == "dk":
            return torch.device("cpu")
        return x

    host_args, host_kwargs = down(args), down(kwargs)
    dev = next((v._dk.device for v in hosts.values()), None)
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

    def format(self):
        lines = [f"{'ATen op':58} {'calls':>6}  how"]
        for r in self.rows:
            how = ", ".join(f"{h} ({n})" if len(r["how"]) > 1 else h for h, n in r["how"].items())
            lines.append(f"{r['op']:58} {r['calls']:>6}  {how}")
            for d in sorted(r["detail"]):
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
        return {"ops": [{**r, "detail": sorted(r["detail"]), "via": sorted(r["via"])}
                        for r in self.rows],
                "missing": self.missing(), "fallback": self.fallback,
                "error": None if self.error is None else str(self.error)}


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
