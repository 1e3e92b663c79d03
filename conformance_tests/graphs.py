"""Section "graphs": capture and replay of device work (``devicekit.graphs``),
through the plugin's optional graphs part (device API 1.5, mode "native") and
through DeviceKit's own recording (mode "recorded", which every plugin gets).

- ``graphs/<mode>/bitwise/<family>``: a captured function replayed on three
  new inputs (written in place into the static input) equals eager runs bit
  for bit, for every kernel family: elementwise, reduction, matmul,
  softmax/norm, gather/scatter, random with a fixed seed, cast.
- ``graphs/<mode>/invalid``: nested captures, a second capture into a held
  graph, a replay of an empty graph and host work in a capture are rejected
  with the documented errors, and the device works eagerly afterwards.
- ``graphs/<mode>/destroyed_while_queued``: a graph reset right after several
  replays were issued (no synchronize): the queued work still runs right.
- ``graphs/<mode>/other_stream``: replays on a second stream of the device
  are ordered with the default stream's work before and after them.
- ``graphs/<mode>/pool_growth``: a lot allocated (and the cache emptied)
  between the capture and the replays: replays still equal eager runs and
  the tensors allocated meanwhile are never overwritten.
- ``graphs/<mode>/events_two_streams``: an Event_Record and a
  Stream_WaitEvent captured on the device's stream order each replay against
  work on a second stream, both ways (the replay waits for the second
  stream's write of its input; the second stream waits for the replay's
  output before copying it).
- ``graphs/<mode>/event_synchronize``: Event_Synchronize of an event
  recorded in the open capture is refused (natively: the plugin's
  DK_ERROR_FAILED_PRECONDITION, and the capture is invalidated, so its end
  fails too), and the device works eagerly afterwards.
- ``graphs/native_vs_recorded/<family>``: the plugin's native graph and the
  SDK's recording of the same code give the same bits.
- ``graphs/recorded/random_patched``: ``random_bits`` and ``random_uniform``
  captured in DeviceKit's recording, replayed with other seeds and offset
  shifts (``replay(seed=, offset_shift=)``, patched in C++), equal eager calls
  with the patched seed and offsets bit for bit (the Philox stream is
  bit-identical on every conformant backend).
- ``graphs/auto/random_patched``: the same in the default mode "auto": a
  capture holding random launches ends as DeviceKit's recording (on a plugin
  with the graphs part, the shadow recorded beside the native capture:
  ``auto_recorded``), whose replays patch seed and offsets the same way.
  ``graphs/auto/no_random``: without a random launch "auto" keeps the
  plugin's native graph (a plugin without the part: the recording), and its
  replays equal eager runs bit for bit.
- ``graphs/plugin/<rule>``: the header's capture rules called on the
  plugin's own DK_Graphs (ctypes, under the SDK, which refuses these calls
  itself before a plugin sees them): ``not_nested`` (a begin capture on a
  capturing stream returns DK_ERROR_FAILED_PRECONDITION and the capture goes
  on: its end gives a graph that replays what was recorded), and
  ``host_work/<call>`` for Stream_Synchronize, Stream_Query,
  Device_Synchronize, a host-to-device and a device-to-host Memcpy on the
  stream and Event_Synchronize of an event recorded in the capture: each
  returns DK_ERROR_FAILED_PRECONDITION and invalidates the capture (its end
  returns that error and no graph), and the stream works eagerly afterwards.

A plugin without the graphs part gets its native cases reported as not
implemented (optional: it does not fail the run); the recorded ones run on
every plugin.
"""

import functools

import numpy as np

import devicekit as dk
from devicekit import bridge, ops
from devicekit.conformance.case import Case, Section
from devicekit.nn import functional as F

from . import _api

MODES = ("native", "recorded")
FAMILIES = ("elementwise", "reduction", "matmul", "softmax_norm", "gather_scatter", "random",
            "cast")
SHAPE = (48, 80)
NO_PART = "not implemented: the plugin has no graphs part"


def _has_part(target):
    return "graphs" in target.device.plugin.parts


def _family(name):
    """fn(x, w, idx) -> a tuple of tensors, with x [48, 80] float32,
    w [80, 40] float32 and idx [48, 10] int64 in [0, 80)."""
    return {
        "elementwise": lambda x, w, i: (ops.tanh(x * 2.0 + 1.0) - ops.exp(x) * 0.5,
                                        ops.maximum(x, ops.neg(x)) / (ops.abs(x) + 1.0)),
        "reduction": lambda x, w, i: (ops.sum(x * x, 1), ops.amax(x, 0), ops.cumsum(x, 1)),
        "matmul": lambda x, w, i: (ops.matmul(x, w),),
        "softmax_norm": lambda x, w, i: (F.softmax(ops.matmul(x, w), -1),
                                         F.layer_norm(x), F.rms_norm(x)),
        "gather_scatter": lambda x, w, i: (ops.gather(x, 1, i),
                                           ops.scatter_add(x, 1, i, ops.gather(x, 1, i) * 2.0)),
        "random": lambda x, w, i: (ops.rand(SHAPE, 1234, 5, device=x.device) + x,
                                   ops.randn((7, 9), 99, 0, device=x.device)),
        "cast": lambda x, w, i: (ops.cast(x * 100.0, dk.int32), ops.cast(x, dk.float16),
                                 ops.cast(ops.cast(x * 7.0, dk.int64), dk.float32)),
    }[name]


def _inputs(device, seed):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(4)]
    w = dk.tensor(rng.standard_normal((80, 40), dtype=np.float32), device=device)
    idx = dk.tensor(rng.integers(0, SHAPE[1], (48, 10), dtype=np.int64), device=device)
    return xs, w, idx


def _bits(t):
    a = t.numpy()
    return a.view(np.dtype(f"u{a.itemsize}")) if a.dtype.kind == "f" else a


def _same_bits(got, want, what):
    assert len(got) == len(want), what
    for k, (g, e) in enumerate(zip(got, want)):
        gb, eb = _bits(g), _bits(e)
        assert gb.shape == eb.shape and np.array_equal(gb, eb), (
            f"{what}: output {k} differs from the eager run "
            f"({int((gb != eb).sum()) if gb.shape == eb.shape else 'shape'} elements)")


def _captured(device, mode, fn, x, *rest):
    fn(x, *rest)  # warm-up (the constant cache)
    g = dk.graphs.Graph(mode=mode)
    with dk.graphs.capture(g, device):
        ys = fn(x, *rest)
    assert g.mode == mode, (g.mode, mode)
    return g, ys


def check_bitwise(ctx, mode, family):
    fn = _family(family)
    xs, w, idx = _inputs(ctx.device, ctx.seed)
    x = dk.tensor(xs[0], device=ctx.device)  # the static input
    g, ys = _captured(ctx.device, mode, fn, x, w, idx)
    try:
        for n, xv in enumerate(xs[1:]):
            bridge.copy_into(x, dk.tensor(xv, device=ctx.device))
            g.replay()
            _same_bits(ys, fn(dk.tensor(xv, device=ctx.device), w, idx),
                       f"{mode} {family}, replay {n}")
    finally:
        g.reset()


def check_native_vs_recorded(ctx, family):
    fn = _family(family)
    xs, w, idx = _inputs(ctx.device, ctx.seed)
    x = dk.tensor(xs[0], device=ctx.device)
    gn, yn = _captured(ctx.device, "native", fn, x, w, idx)
    gr, yr = _captured(ctx.device, "recorded", fn, x, w, idx)
    try:
        for n, xv in enumerate(xs[1:]):
            bridge.copy_into(x, dk.tensor(xv, device=ctx.device))
            gn.replay()
            gr.replay()
            _same_bits(yr, yn, f"recorded against native, {family}, replay {n}")
    finally:
        gn.reset()
        gr.reset()


def _raises(exc, text, call):
    try:
        call()
    except exc as e:
        assert text in str(e), f"expected {exc.__name__} with {text!r}, got: {e}"
        return
    raise AssertionError(f"expected {exc.__name__} with {text!r}; nothing was raised")


def check_invalid(ctx, mode):
    d = ctx.device
    g, h = dk.graphs.Graph(mode=mode), dk.graphs.Graph(mode=mode)
    _raises(dk.InvalidArgumentError, "holds no capture", g.replay)
    x = dk.ones(8, device=d)
    x * 2.0
    with dk.graphs.capture(g, d):
        y = x * 2.0
        _raises(dk.InvalidArgumentError, "captures do not nest", lambda: h.capture_begin(d))
    _raises(dk.InvalidArgumentError, "already holds a capture", lambda: g.capture_begin(d))
    g.replay()
    assert y.numpy().tolist() == [2.0] * 8
    g.reset()
    _raises(dk.InvalidArgumentError, "holds no capture", g.replay)

    def host_read():
        with dk.graphs.capture(h, d):
            ops.sum(x * 3.0, 0).item()

    _raises(dk.InvalidArgumentError, "devicekit.graphs.capture: Tensor.item() needs the host",
            host_read)
    assert not h.captured

    def host_copy():
        with dk.graphs.capture(h, d):
            dk.tensor(np.ones(3, np.float32), device=d)

    _raises(dk.InvalidArgumentError, "copy from host memory", host_copy)
    assert (x * 3.0).numpy().tolist() == [3.0] * 8  # eager again


def check_destroyed_while_queued(ctx, mode):
    d = ctx.device
    n = 1 << 20  # a few ms per replay: the last ones are still queued at the reset
    x = dk.tensor(np.linspace(-1, 1, n, dtype=np.float32), device=d)
    fn = lambda x: ops.tanh(ops.exp(x) * x + 1.0) * 3.0  # noqa: E731
    g, y = _captured(d, mode, fn, x)
    for k in range(4):
        bridge.copy_into(x, dk.full((n,), 0.25 * k, device=d))
        g.replay()
    g.reset()  # launches still queued: they run, the graph goes after them
    others = [dk.full((n,), 7.0, device=d) for _ in range(4)]
    assert np.array_equal(_bits(y), _bits(fn(x)))
    for o in others:
        assert (o.numpy() == 7.0).all()


def check_other_stream(ctx, mode):
    d = ctx.device
    x = dk.tensor(np.zeros(4096, np.float32), device=d)
    fn = lambda x: ops.exp(x) + x  # noqa: E731
    g, y = _captured(d, mode, fn, x)
    side = d.stream()
    try:
        for v in (1.0, 2.0, 3.0):
            bridge.copy_into(x, dk.full((4096,), v, device=d))  # default stream
            g.replay(side)  # after the copy, before the read below
            assert np.array_equal(_bits(y), _bits(fn(x))), v
    finally:
        g.reset()


def check_pool_growth(ctx, mode):
    d = ctx.device
    xs, w, idx = _inputs(d, ctx.seed)
    x = dk.tensor(xs[0], device=d)
    fn = _family("softmax_norm")
    g, ys = _captured(d, mode, fn, x, w, idx)
    try:
        for n, xv in enumerate(xs[1:]):
            big = [dk.full((1 << 18,), float(k), device=d) for k in range(24)]  # 24 MiB
            dk.empty_cache(d)
            bridge.copy_into(x, dk.tensor(xv, device=d))
            g.replay()
            _same_bits(ys, fn(dk.tensor(xv, device=d), w, idx), f"{mode} replay {n}")
            for k, b in enumerate(big):
                assert (b.numpy() == float(k)).all(), "a replay wrote a tensor made after it"
            del big
    finally:
        g.reset()


_SLOW_BYTES = 32 << 20  # a copy of a few ms: unordered work would overtake it


def _fill(d, buf, value):
    d.copy_h2d(buf, np.full(buf.nbytes // 4, value, np.float32))


def _read(d, buf):
    out = np.empty(buf.nbytes // 4, np.float32)
    d.copy_d2h(out, buf)
    return out


def check_events_two_streams(ctx, mode):
    d = ctx.device
    dflt, side = d.default_stream(), d.stream()
    n = 1 << 16
    a, b, c = d.alloc(4 * n), d.alloc(4 * n), d.alloc(4 * n)  # input, graph output, side's copy
    slow_src, slow_dst = d.alloc(_SLOW_BYTES), d.alloc(_SLOW_BYTES)
    srcs = [d.alloc(4 * n) for _ in range(3)]
    for buf, v in zip([a, b, c] + srcs, [-1.0, -2.0, -3.0, 1.0, 2.0, 3.0]):
        _fill(d, buf, v)
    e_in, e_out = d.event(), d.event()
    g = dk.graphs.Graph(mode=mode)
    with dk.graphs.capture(g, d):
        dflt.wait_event(e_in)  # the side stream's write of `a`
        d.copy_d2d(slow_dst, slow_src, _SLOW_BYTES, stream=dflt)
        d.copy_d2d(b, a, 4 * n, stream=dflt)
        e_out.record(dflt)  # `b` written
    assert g.mode == mode, (g.mode, mode)
    try:
        for k, src in enumerate(srcs):
            d.copy_d2d(slow_dst, slow_src, _SLOW_BYTES, stream=side)
            d.copy_d2d(a, src, 4 * n, stream=side)
            e_in.record(side)
            g.replay()
            side.wait_event(e_out)
            d.copy_d2d(c, b, 4 * n, stream=side)
            side.synchronize()
            got = _read(d, c)
            assert (got == float(k + 1)).all(), (
                f"{mode} replay {k}: the second stream copied {got[0]} (expected {k + 1.0}): "
                "an event recorded or waited on in the capture did not order the replay")
    finally:
        g.reset()
        dk.synchronize(d)  # the raw buffers go back to the plugin unordered: work first


def check_event_synchronize(ctx, mode):
    d = ctx.device
    dflt, ev = d.default_stream(), d.event()
    x = dk.ones(8, device=d)
    x * 2.0
    g = dk.graphs.Graph(mode=mode)
    got = None
    try:
        with dk.graphs.capture(g, d):
            x * 2.0
            ev.record(dflt)
            try:
                ev.synchronize()
            except dk.DeviceKitError as e:
                got = e
            assert got is not None, "Event_Synchronize of an event recorded in the capture passed"
            assert "Event_Synchronize" in str(got), str(got)
            if mode == "native":  # the header's code, from the plugin
                assert "FAILED_PRECONDITION" in str(got) or "capturing" in str(got), str(got)
    except dk.DeviceKitError as e:
        # Natively the forbidden call invalidated the capture: its end fails.
        assert mode == "native" and e is not got, f"{mode}: {e}"
        assert not g.captured
    else:
        assert mode == "recorded", ("native: the capture ended although an Event_Synchronize "
                                    "in it was refused (the header invalidates it)")
    finally:
        g.reset()
    assert (x * 3.0).numpy().tolist() == [3.0] * 8  # eager again
    ev.record(dflt)
    ev.synchronize()


# ---- the plugin's own capture rules (raw calls) ----------------------------------------

HOST_WORK = ("stream_synchronize", "stream_query", "device_synchronize", "memcpy_h2d",
             "memcpy_d2h", "event_synchronize")
PLUGIN_RULES = ("not_nested",) + tuple(f"host_work/{w}" for w in HOST_WORK)
FAILED = _api.FAILED_PRECONDITION


class _Raw:
    """A stream, two device buffers of N float32 and the plugin's graph
    functions, all made with raw calls on the device under test."""

    N = 4096

    def __init__(self, dev):
        self.dev, self.api = dev, _api.of(dev)
        self.fn = self.api.graphs()
        assert self.fn is not None, "the plugin lists a graphs part but DK_GetApi's chain has none"
        self.stream = self.api.stream(dev.index)
        self.a = self.api.alloc(dev.index, 4 * self.N)
        self.b = self.api.alloc(dev.index, 4 * self.N)

    def capture(self, end):
        a = _api.GraphCapture(stream=self.stream, end=end)
        return self.api.call("Graph_Capture", a, self.fn["Graph_Capture"]), a.graph

    def memcpy(self, dst, src, nbytes, kind, stream):
        return self.api.call("Memcpy", _api.Memcpy(device=self.dev.index, kind=kind, dst=dst,
                                                    src=src, size=nbytes, stream=stream))

    def put(self, ptr, arr):
        got = self.memcpy(ptr, arr.ctypes.data, arr.nbytes, _api.H2D, None)
        assert got[0] == 0, f"Memcpy host-to-device: {_api.describe(got)}"

    def get(self, ptr):
        out = np.empty(self.N, np.float32)
        got = self.memcpy(out.ctypes.data, ptr, out.nbytes, _api.D2H, None)
        assert got[0] == 0, f"Memcpy device-to-host: {_api.describe(got)}"
        return out

    def d2d(self):
        """b <- a on the stream (recorded while capturing)."""
        got = self.memcpy(self.b, self.a, 4 * self.N, _api.D2D, self.stream)
        assert got[0] == 0, f"Memcpy device-to-device on a capturing stream: {_api.describe(got)}"

    def sync(self):
        return self.api.call("Stream_Synchronize", _api.Stream(stream=self.stream))

    def close(self):
        self.sync()
        for p in (self.a, self.b):
            self.api.free(self.dev.index, p)
        self.api.stream_destroy(self.stream)


def _expect_failed(what, outcome):
    assert outcome[0] == FAILED, (f"{what} returned {_api.describe(outcome)}; the header says "
                                  f"DK_ERROR_FAILED_PRECONDITION")


def _replays_copy(r, graph, what):
    x = np.arange(r.N, dtype=np.float32) + 0.5
    r.put(r.a, x)
    r.put(r.b, np.zeros(r.N, np.float32))
    got = r.api.call("Graph_Launch", _api.GraphLaunch(graph=graph, stream=r.stream),
                     r.fn["Graph_Launch"])
    assert got[0] == 0, f"{what}: Graph_Launch: {_api.describe(got)}"
    assert r.sync()[0] == 0
    assert np.array_equal(r.get(r.b), x), f"{what}: the replay did not copy a to b"
    got = r.api.call("Graph_Destroy", _api.GraphDestroy(graph=graph), r.fn["Graph_Destroy"])
    assert got[0] == 0, f"Graph_Destroy: {_api.describe(got)}"


def check_plugin_rule(ctx, rule):
    r = _Raw(ctx.device)
    try:
        assert r.capture(0)[0][0] == 0, "begin capture failed"
        r.d2d()
        if rule == "not_nested":
            outcome, _ = r.capture(0)
            _expect_failed("a second Graph_Capture(begin) on a capturing stream", outcome)
            outcome, graph = r.capture(1)
            assert outcome[0] == 0 and graph, (
                f"the header says a refused nested begin leaves the capture going on; its end "
                f"returned {_api.describe(outcome)}")
            _replays_copy(r, graph, "a capture that survived a nested begin")
            return
        work = rule.split("/", 1)[1]
        host = np.zeros(r.N, np.float32)
        ev = None
        if work == "stream_synchronize":
            outcome = r.sync()
        elif work == "stream_query":
            outcome = r.api.call("Stream_Query", _api.StreamQuery(stream=r.stream))
        elif work == "device_synchronize":
            outcome = r.api.call("Device_Synchronize", _api.Device(device=r.dev.index))
        elif work == "memcpy_h2d":
            outcome = r.memcpy(r.a, host.ctypes.data, host.nbytes, _api.H2D, r.stream)
        elif work == "memcpy_d2h":
            outcome = r.memcpy(host.ctypes.data, r.a, host.nbytes, _api.D2H, r.stream)
        else:
            ev = r.api.ok("Event_Create", _api.EventCreate(device=r.dev.index)).event
            rec = r.api.call("Event_Record", _api.EventRecord(event=ev, stream=r.stream))
            assert rec[0] == 0, f"Event_Record on a capturing stream: {_api.describe(rec)}"
            outcome = r.api.call("Event_Synchronize", _api.Event(event=ev))
        _expect_failed(f"{work} on a capturing stream (host work in a capture)", outcome)
        outcome, graph = r.capture(1)
        _expect_failed(f"the end capture after a refused {work} (the header says host work "
                       f"invalidates the capture)", outcome)
        assert not graph, f"the end capture after a refused {work} returned a graph"
        assert r.sync()[0] == 0, "the stream does not work after an invalidated capture"
        r.put(r.a, np.full(r.N, 3.0, np.float32))
        r.d2d()  # eager again: runs now
        assert r.sync()[0] == 0
        assert (r.get(r.b) == 3.0).all(), "after an invalidated capture a copy did not run"
        if ev is not None:
            assert r.api.call("Event_Destroy", _api.Event(event=ev))[0] == 0
    finally:
        r.close()


CHECKS = {"invalid": check_invalid, "destroyed_while_queued": check_destroyed_while_queued,
          "other_stream": check_other_stream, "pool_growth": check_pool_growth,
          "events_two_streams": check_events_two_streams,
          "event_synchronize": check_event_synchronize}


# ---- random launches patched per replay (recorded mode only) -------------------------


def check_random_patched(ctx, mode="recorded"):
    d = ctx.device

    def draws(seed, shift):
        u = ops.rand((130,), seed, (40 + shift) % 2**64, device=d)
        return (ops.random_bits((5, 33), seed, (3 + shift) % 2**64, device=d), u,
                ops.rand((4, 6), seed, (90 + shift) % 2**64, dtype=dk.float64, device=d),
                ops.add(ops.mul(u, u), u))  # plain kernels between and after the draws

    fn = lambda: draws(77, 0)  # noqa: E731
    eager = draws
    g = dk.graphs.Graph(mode=mode)
    with dk.graphs.capture(g, d):
        ys = fn()
    try:
        # "auto" ends as the recording when the capture holds a random launch:
        # on a plugin with the graphs part, its shadow of the native capture
        assert g.mode == "recorded", g.mode
        assert g.auto_recorded == (mode == "auto" and dk.graphs.is_available(d)), (
            g.auto_recorded, mode)
        assert g.random_calls == 3, g.random_calls
        g.replay()
        _same_bits(ys, eager(77, 0), "random, replay as captured")
        # the last shift wraps the offsets past 2**64
        for seed, shift in ((77, 1), (77, 38), (12345, 0), (2**64 - 1, 2**64 - 20)):
            g.replay(seed=seed, offset_shift=shift)
            _same_bits(ys, eager(seed, shift), f"random, replay seed={seed} shift={shift}")
        g.replay(offset_shift=1000)  # the captured seed
        _same_bits(ys, eager(77, 1000), "random, replay shift=1000")
    finally:
        g.reset()


def check_auto_without_random(ctx):
    """mode "auto" without a random launch: the plugin's graph when it has the
    part (the shadow recording dropped), else DeviceKit's recording."""
    fn = _family("elementwise")
    xs, w, idx = _inputs(ctx.device, ctx.seed)
    x = dk.tensor(xs[0], device=ctx.device)
    fn(x, w, idx)
    g = dk.graphs.Graph()
    with dk.graphs.capture(g, ctx.device):
        ys = fn(x, w, idx)
    try:
        native = dk.graphs.is_available(ctx.device)
        assert g.mode == ("native" if native else "recorded") and not g.auto_recorded, (
            g.mode, g.auto_recorded)
        assert g.recorded_calls == (0 if native else g.calls), (g.recorded_calls, g.calls)
        for n, xv in enumerate(xs[1:]):
            bridge.copy_into(x, dk.tensor(xv, device=ctx.device))
            g.replay()
            _same_bits(ys, fn(dk.tensor(xv, device=ctx.device), w, idx), f"auto, replay {n}")
    finally:
        g.reset()


RANDOM_PATCHED = {"graphs/recorded/random_patched": check_random_patched,
                  "graphs/auto/random_patched": functools.partial(check_random_patched,
                                                                  mode="auto"),
                  "graphs/auto/no_random": check_auto_without_random}


def _ids(target):
    ids = []
    for mode in MODES:
        ids += [f"graphs/{mode}/bitwise/{f}" for f in FAMILIES]
        ids += [f"graphs/{mode}/{c}" for c in CHECKS]
    ids += [f"graphs/native_vs_recorded/{f}" for f in FAMILIES]
    ids += [f"graphs/plugin/{r}" for r in PLUGIN_RULES]
    ids += list(RANDOM_PATCHED)
    return ids


SECTION = Section("graphs", "Device graphs: capture and replay (native part, device API 1.5+, "
                  "and DeviceKit's recording)", order=75,
                  min_cases=lambda target: len(_ids(target)) if _has_part(target) else None)


def cases(target):
    native = _has_part(target)
    out = []
    for case_id in _ids(target):
        parts = case_id.split("/")
        if case_id in RANDOM_PATCHED:
            fn = RANDOM_PATCHED[case_id]
        elif parts[1] == "native_vs_recorded":
            fn = functools.partial(check_native_vs_recorded, family=parts[2])
        elif parts[1] == "plugin":
            fn = functools.partial(check_plugin_rule, rule="/".join(parts[2:]))
        elif parts[2] == "bitwise":
            fn = functools.partial(check_bitwise, mode=parts[1], family=parts[3])
        else:
            fn = functools.partial(CHECKS[parts[2]], mode=parts[1])
        needs_part = parts[1] in ("native", "native_vs_recorded", "plugin")
        if needs_part and not native:
            out.append(Case(id=case_id, section="graphs", fn=fn, required=False,
                            not_implemented=NO_PART + " (DeviceKit's recorded graphs still run)"))
        else:
            out.append(Case(id=case_id, section="graphs", fn=fn))
    return out
