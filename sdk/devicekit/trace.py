"""A timeline of what DeviceKit does, as Chrome-trace / Perfetto JSON.

::

    import devicekit as dk
    with dk.trace.record("run.json"):       # or dk.trace.start() ... dk.trace.stop("run.json")
        y = (x @ w).relu()
    # open run.json in https://ui.perfetto.dev (or chrome://tracing)

``devicekit trace --out run.json script.py args`` does the same for a whole
script and prints :func:`summary`. What is recorded (see docs/trace.md):

- every kernel launch, fused-kernel launch, copy (h2d/d2h/d2d) and
  synchronize, as a host span on the calling thread's track, named by the
  base op or fused kernel, with ``cause``: the ATen op (through
  ``devicekit.torch``) or the SDK composite that made it;
- the same launches and copies on one track per device stream: device time
  from timing events where the device declares them
  (``DK_DEVICE_CAP_TIMING_EVENTS``), else the host enqueue span (the event's
  ``args.time`` says which);
- every graph replay (``devicekit.graphs``) as one span, host and stream,
  named ``graph_replay(native)`` or ``graph_replay(recorded)``, with
  ``args.calls``: the calls the replay issued (its kernels are not traced one
  by one);
- every allocation and free of the SDK's caching allocator, and a "memory in
  use" counter per device;
- SDK composites with the fused-kernel decision (the kernel that ran, or why
  the decomposition ran), ATen ops, and ``devicekit.distributed`` collectives
  (host spans: the collective's enqueue, not its device time).

Off (the default) costs one test of a flag per launch in the SDK core; the
Python-side hooks are swapped in by :func:`start` and out by :func:`stop`.
"""

import contextlib
import json
import os

from . import _core, _fused, _tracing
from ._util.text import table
from .errors import InvalidArgumentError

_untraced_dispatch = _fused.dispatch  # the composite dispatch, put back by stop()
_HOST_PID = 1
_DEVICE_KINDS = ("launch", "fused", "copy", "graph")


def _decisions(op):
    with _fused._stats_lock:
        e = _fused._stats.get(op)
        return (dict(e["fused"]), dict(e["why_decomposed"])) if e else ({}, {})


def _decision(op, before):
    fused, why = _decisions(op)
    for kernel, n in fused.items():
        if n > before[0].get(kernel, 0):
            return {"fused_kernel": kernel}
    for reason, n in why.items():
        if n > before[1].get(reason, 0):
            return {"decomposed": reason}
    return {}


def _traced_dispatch(op, inputs, attrs, decompose):
    """``_fused.dispatch`` while a trace records: a span per composite call with
    its decision, and the composite as the cause of the launches it makes."""
    before = _decisions(op)
    t0 = _tracing.now_ns()
    _core._trace_push(op)
    try:
        return _untraced_dispatch(op, inputs, attrs, decompose)
    finally:
        _core._trace_pop()
        _tracing.add("composite", op, t0, _decision(op, before))


def is_recording():
    return _tracing.on


def start():
    """Start recording (one trace at a time per process)."""
    if _tracing.on:
        raise InvalidArgumentError("devicekit.trace.start(): a trace is already recording; "
                                   "stop it first (devicekit.trace.stop())")
    _tracing.spans.clear()
    _fused.dispatch = _traced_dispatch
    for install, _ in _tracing.hooks:
        install()
    _tracing.on = True
    _core._trace_start()


def stop(path=None):
    """Stop recording; returns the trace (a dict in Chrome-trace JSON form) and
    writes it to ``path`` when given. Waits for the traced devices (for their
    device times)."""
    if not _tracing.on:
        raise InvalidArgumentError("devicekit.trace.stop(): no trace is recording "
                                   "(call devicekit.trace.start() first)")
    records = _core._trace_stop()
    _tracing.on = False
    _fused.dispatch = _untraced_dispatch
    for _, uninstall in _tracing.hooks:
        uninstall()
    spans = list(_tracing.spans)
    _tracing.spans.clear()
    doc = to_chrome(records, spans)
    if path is not None:
        with open(path, "w") as f:
            json.dump(doc, f)
    return doc


class Recording:
    """What :func:`record` yields; ``trace`` is the dict once the block ends."""
    trace = None


@contextlib.contextmanager
def record(path=None):
    """``with devicekit.trace.record("out.json") as r:`` records the block;
    ``r.trace`` is the trace afterwards (also written to ``path`` if given)."""
    start()
    r = Recording()
    try:
        yield r
    finally:
        r.trace = stop(path)


# ---- Chrome-trace JSON --------------------------------------------------------

def _us(ns, base):
    return (ns - base) / 1000.0


def to_chrome(records, spans):
    """The Chrome-trace JSON object (``traceEvents``) of the core's records and
    the Python-side spans: "X" spans, "i" instants (allocations), "C"
    counters (memory in use), "M" process and thread names."""
    starts = [r["t0"] for r in records] + [s[3] for s in spans]
    base = min(starts) if starts else 0
    events, threads = [], set()
    device_pid = {}

    def pid_of(device):
        if device not in device_pid:
            device_pid[device] = _HOST_PID + 1 + len(device_pid)
        return device_pid[device]

    def cause(scope):
        return scope.rsplit(" > ", 1)[-1] if scope else ""

    # The core places a stream's first timed launch at its host enqueue time and
    # every later one by the elapsed device time from it. When the stream began
    # that first launch later (its queue was behind, its worker not yet running),
    # later launches would start on the stream before the host enqueued them,
    # which cannot be: shift each stream by the least amount that rules it out.
    lag = {}
    for r in records:
        if "dev_t0" in r:
            key = (r["device"], r["stream"])
            lag[key] = max(lag.get(key, 0.0), r["t0"] - r["dev_t0"])

    for r in records:
        kind, tid = r["kind"], r["tid"]
        threads.add(tid)
        dpid = pid_of(r["device"])
        args = {"device": r["device"], "cause": cause(r["scope"]), "scope": r["scope"]}
        if kind in ("alloc", "free"):
            args.update(bytes=abs(r["bytes"]), in_use=r["in_use"])
            events.append({"name": kind, "cat": "memory", "ph": "i", "s": "t", "pid": _HOST_PID,
                           "tid": tid, "ts": _us(r["t0"], base), "args": args})
            events.append({"name": "memory in use", "ph": "C", "pid": dpid, "tid": 0,
                           "ts": _us(r["t0"], base), "args": {"bytes": r["in_use"]}})
            continue
        if kind == "copy":
            args["bytes"] = r["bytes"]
        if kind == "graph":  # one graph replay: the calls it issued
            args["calls"] = r["calls"]
        if "stream" in r:
            args["stream"] = r["stream"]
        ts, dur = _us(r["t0"], base), (r["t1"] - r["t0"]) / 1000.0
        events.append({"name": r["name"], "cat": kind, "ph": "X", "pid": _HOST_PID, "tid": tid,
                       "ts": ts, "dur": dur, "args": args})
        if "stream" in r and kind in _DEVICE_KINDS:
            dargs = dict(args)
            if "dev_t0" in r:
                shift = lag[(r["device"], r["stream"])]
                dts = _us(r["dev_t0"] + shift, base)
                ddur = max(0.0, (r["dev_t1"] - r["dev_t0"]) / 1000.0)
                dargs["time"] = "device (timing events)"
            else:
                dts, ddur = ts, dur
                dargs["time"] = "host enqueue span (no timing events on this device)"
            events.append({"name": r["name"], "cat": kind, "ph": "X", "pid": dpid,
                           "tid": 1 + r["stream"], "ts": dts, "dur": ddur, "args": dargs})
    for category, name, tid, t0, t1, args in spans:
        threads.add(tid)
        events.append({"name": name, "cat": category, "ph": "X", "pid": _HOST_PID, "tid": tid,
                       "ts": _us(t0, base), "dur": (t1 - t0) / 1000.0, "args": dict(args)})
    # Per track in time order, an enclosing span before the spans it contains.
    events.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0.0)))
    meta = [{"name": "process_name", "ph": "M", "pid": _HOST_PID, "tid": 0,
             "args": {"name": f"host (process {os.getpid()})"}},
            {"name": "process_sort_index", "ph": "M", "pid": _HOST_PID, "tid": 0,
             "args": {"sort_index": 0}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": _HOST_PID, "tid": tid,
              "args": {"name": f"host thread {tid}"}} for tid in sorted(threads)]
    streams = {(e["pid"], e["tid"]) for e in events if e["pid"] != _HOST_PID and e["ph"] == "X"}
    for device, pid in device_pid.items():
        meta += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                  "args": {"name": f"device {device}"}},
                 {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                  "args": {"sort_index": pid}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                  "args": {"name": f"stream {tid - 1}"}}
                 for p, tid in sorted(streams) if p == pid]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"producer": "devicekit.trace", "time_unit": "microseconds"}}


# ---- summary ------------------------------------------------------------------

def load(path):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise InvalidArgumentError(f"{path}: not a Chrome-trace JSON object (no 'traceEvents')")
    return doc


def summary(doc):
    """Per op from a trace (a dict or a path): ``ops``: {name: {count,
    host_us, device_us, device_timed}} for launches, fused launches and copies
    (device_us from the stream tracks); ``causes``: {"aten.x" / composite /
    collective: {count, host_us}} (keys "aten.add.Tensor", "composite softmax",
    "collective all_reduce"); ``syncs``, ``allocs`` and ``frees``: counts."""
    if not isinstance(doc, dict):
        doc = load(doc)
    ops, causes = {}, {}
    syncs = allocs = frees = 0
    for e in doc["traceEvents"]:
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "i" and cat == "memory":
            allocs += e["name"] == "alloc"
            frees += e["name"] == "free"
        if ph != "X":
            continue
        if cat in _DEVICE_KINDS:
            o = ops.setdefault(e["name"], {"kind": cat, "count": 0, "host_us": 0.0,
                                           "device_us": 0.0, "device_timed": True})
            if e["pid"] == _HOST_PID:
                o["count"] += 1
                o["host_us"] += e["dur"]
            else:
                o["device_us"] += e["dur"]
                o["device_timed"] &= e["args"].get("time", "").startswith("device")
        elif cat == "sync":
            syncs += 1
        else:
            key = e["name"] if cat == "aten" else f"{cat} {e['name']}"  # aten.* says it already
            c = causes.setdefault(key, {"count": 0, "host_us": 0.0})
            c["count"] += 1
            c["host_us"] += e["dur"]
    return {"ops": ops, "causes": causes, "syncs": syncs, "allocs": allocs, "frees": frees}


def format_summary(doc, top=20):
    """:func:`summary` as text: top ops by device time, top causes by host time."""
    s = summary(doc)
    ops = sorted(s["ops"].items(), key=lambda kv: -kv[1]["device_us"])[:top]
    rows = [(name, o["kind"], o["count"], f"{o['device_us']:.1f}",
             f"{o['device_us'] / max(o['count'], 1):.2f}", f"{o['host_us']:.1f}",
             "events" if o["device_timed"] else "enqueue") for name, o in ops]
    out = [f"Top {len(rows)} ops by device time (us)",
           table(rows, ["op", "kind", "count", "device us", "per call", "host us", "device time"])]
    causes = sorted(s["causes"].items(), key=lambda kv: -kv[1]["host_us"])[:top]
    rows = [(name, c["count"], f"{c['host_us']:.1f}", f"{c['host_us'] / c['count']:.2f}")
            for name, c in causes]
    if rows:
        out += ["", f"Top {len(rows)} callers by host time (us; spans include their launches)",
                table(rows, ["caller", "count", "host us", "per call"])]
    out += ["", f"synchronizes: {s['syncs']}   allocations: {s['allocs']}   "
                f"frees: {s['frees']}"]
    return "\n".join(out)


__all__ = ["Recording", "format_summary", "is_recording", "load", "record", "start", "stop",
           "summary", "to_chrome"]
