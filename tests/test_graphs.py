"""Device graphs: the reference CPU plugin's graphs part (device API 1.5)
called directly through ctypes (the header's capture rules and error codes;
in a child process, ``python test_graphs.py raw``, because a plugin is
initialised once per process and the SDK's tests use it too),
and ``devicekit.graphs`` (capture and replay of DeviceKit ops, bitwise equal
to eager execution, the graph's private pool, host reads named in capture;
random launches of a recorded graph patched per replay, a native graph's
repeated)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from ctypes import c_int32, c_void_p

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _dk_ctypes as dkc  # noqa: E402

EXTENSION_GRAPHS = 2
_Capture = dkc._args(("stream", c_void_p), ("end", c_int32), ("graph", c_void_p))
_Launch = dkc._args(("graph", c_void_p), ("stream", c_void_p))
_Destroy = dkc._args(("graph", c_void_p))


class _GraphsTable(ctypes.Structure):
    _fields_ = [("base", dkc._ExtBase), ("Graph_Capture", c_void_p), ("Graph_Launch", c_void_p),
                ("Graph_Destroy", c_void_p)]


class RawGraphs:
    """The DK_Graphs part of a plugin, called with ctypes."""

    def __init__(self, plugin):
        p = plugin.extension(EXTENSION_GRAPHS)
        assert p is not None, "the cpu plugin lists no graphs extension"
        t = _GraphsTable.from_address(p)
        self.p = plugin
        self.fn = {n: dkc._FN(getattr(t, n)) for n in ("Graph_Capture", "Graph_Launch",
                                                       "Graph_Destroy")}

    def begin(self, stream):
        self.p.check(dkc._call(self.fn["Graph_Capture"], _Capture(stream=stream, end=0)))

    def end(self, stream):
        a = _Capture(stream=stream, end=1)
        self.p.check(dkc._call(self.fn["Graph_Capture"], a))
        assert a.graph
        return a.graph

    def launch(self, graph, stream):
        self.p.check(dkc._call(self.fn["Graph_Launch"], _Launch(graph=graph, stream=stream)))

    def destroy(self, graph):
        self.p.check(dkc._call(self.fn["Graph_Destroy"], _Destroy(graph=graph)))


def _raw_plugin():
    import devicekit_cpu

    p = dkc.Plugin(devicekit_cpu.library_path())
    return p, RawGraphs(p)


def _h2d(p, dst, arr, stream=None):
    p.memcpy(dst, arr.ctypes.data, arr.nbytes, dkc.H2D, stream=stream)


def _d2h(p, src, n):
    out = np.empty(n, np.float32)
    p.memcpy(out.ctypes.data, src, out.nbytes, dkc.D2H)
    return out


# ---- the plugin's graphs part, through ctypes -----------------------------------------


def plugin_records_copies_and_replays_them_on_any_stream(raw):
    p, g = raw
    n = 1 << 16
    a, b, c = (p.alloc(4 * n) for _ in range(3))
    s, other = p.stream_create(), p.stream_create()
    try:
        _h2d(p, a, np.full(n, 1.0, np.float32))
        _h2d(p, b, np.zeros(n, np.float32))
        _h2d(p, c, np.zeros(n, np.float32))
        g.begin(s)
        p.memcpy(b, a, 4 * n, dkc.D2D, stream=s)  # recorded, not run
        p.memcpy(c, b, 4 * n, dkc.D2D, stream=s)
        graph = g.end(s)
        assert (_d2h(p, b, n) == 0).all() and (_d2h(p, c, n) == 0).all(), "capture ran the copy"
        x = np.arange(n, dtype=np.float32)
        _h2d(p, a, x)
        g.launch(graph, s)
        p.stream_sync(s)
        assert np.array_equal(_d2h(p, c, n), x)  # reads a's current contents, in order
        _h2d(p, a, -x)
        g.launch(graph, other)  # another stream of the same device
        p.stream_sync(other)
        assert np.array_equal(_d2h(p, c, n), -x)
        # Destroyed while launches are queued: they still run, then the graph is freed.
        for _ in range(20):
            g.launch(graph, s)
        _h2d(p, a, 2 * x, stream=s)
        g.launch(graph, s)
        g.destroy(graph)
        p.stream_sync(s)
        assert np.array_equal(_d2h(p, c, n), 2 * x)
        with pytest.raises(dkc.DKError) as e:
            g.launch(graph, s)
        assert e.value.code == dkc.INVALID_ARGUMENT and "Graph_Launch" in e.value.message
        g.destroy(None)  # NULL: a no-op
    finally:
        for ptr in (a, b, c):
            p.free(ptr)
        p.stream_destroy(s)
        p.stream_destroy(other)


def plugin_nested_and_unmatched_capture_fail_with_failed_precondition(raw):
    p, g = raw
    n = 256
    a, b = p.alloc(4 * n), p.alloc(4 * n)
    s = p.stream_create()
    try:
        with pytest.raises(dkc.DKError) as e:
            g.end(s)
        assert e.value.code == dkc.FAILED_PRECONDITION and "not capturing" in e.value.message
        g.begin(s)
        with pytest.raises(dkc.DKError) as e:
            g.begin(s)  # does not nest, and the capture goes on
        assert e.value.code == dkc.FAILED_PRECONDITION and "do not nest" in e.value.message
        p.memcpy(b, a, 4 * n, dkc.D2D, stream=s)
        graph = g.end(s)
        _h2d(p, a, np.full(n, 7.0, np.float32))
        g.launch(graph, s)
        p.stream_sync(s)
        assert (_d2h(p, b, n) == 7.0).all()
        g.destroy(graph)
    finally:
        p.free(a)
        p.free(b)
        p.stream_destroy(s)


_EvCreate = dkc._args(("device", c_int32), ("event", c_void_p))
_EvOne = dkc._args(("event", c_void_p))
_EvRecord = dkc._args(("event", c_void_p), ("stream", c_void_p))
_WaitEvent = dkc._args(("stream", c_void_p), ("event", c_void_p))


def plugin_records_events_in_a_capture(raw):
    """Event_Record / Stream_WaitEvent on a capturing stream are recorded:
    nothing happens at capture, and each launch records the event where the
    capture had it (a host waiting on it after the launch waits for the
    replay to get there) and waits where the capture waited."""
    p, g = raw
    n = 1 << 18
    a, b, c = (p.alloc(4 * n) for _ in range(3))
    s, other = p.stream_create(), p.stream_create()
    call = lambda name, args: p.check(dkc._call(p.fn[name], args))  # noqa: E731
    ev_args = _EvCreate(device=0)
    call("Event_Create", ev_args)
    ev = ev_args.event
    try:
        x = np.arange(n, dtype=np.float32)
        _h2d(p, a, x)
        _h2d(p, b, np.zeros(n, np.float32))
        _h2d(p, c, np.zeros(n, np.float32))
        g.begin(s)
        p.memcpy(b, a, 4 * n, dkc.D2D, stream=s)
        call("Event_Record", _EvRecord(event=ev, stream=s))  # recorded, not run
        call("Stream_WaitEvent", _WaitEvent(stream=s, event=ev))  # a wait on it: recorded
        p.memcpy(c, b, 4 * n, dkc.D2D, stream=s)
        graph = g.end(s)
        call("Event_Synchronize", _EvOne(event=ev))  # never recorded outside: returns at once
        assert (_d2h(p, b, n) == 0).all()
        for k in (1.0, 2.0, 3.0):
            _h2d(p, a, k * x)
            g.launch(graph, s)
            # `other` waits for the replayed record, then copies b (already written)
            call("Stream_WaitEvent", _WaitEvent(stream=other, event=ev))
            p.memcpy(a, b, 4 * n, dkc.D2D, stream=other)
            call("Event_Synchronize", _EvOne(event=ev))  # the replay has reached the record
            assert np.array_equal(_d2h(p, b, n), k * x)
            p.stream_sync(other)
            p.stream_sync(s)
            assert np.array_equal(_d2h(p, c, n), k * x)
        g.destroy(graph)
        # Event_Synchronize of an event recorded in an open capture is host work in it
        g.begin(s)
        call("Event_Record", _EvRecord(event=ev, stream=s))
        with pytest.raises(dkc.DKError) as e:
            call("Event_Synchronize", _EvOne(event=ev))
        assert e.value.code == dkc.FAILED_PRECONDITION and "capturing a graph" in e.value.message
        with pytest.raises(dkc.DKError):
            g.end(s)
        call("Event_Record", _EvRecord(event=ev, stream=s))  # eager again
        call("Event_Synchronize", _EvOne(event=ev))
    finally:
        call("Event_Destroy", _EvOne(event=ev))
        for ptr in (a, b, c):
            p.free(ptr)
        p.stream_destroy(s)
        p.stream_destroy(other)


FORBIDDEN = ("stream_sync", "stream_query", "device_sync", "h2d", "d2h")


def plugin_host_work_in_capture_invalidates_it(raw, forbidden):
    p, g = raw
    n = 64
    a, b = p.alloc(4 * n), p.alloc(4 * n)
    host = np.zeros(n, np.float32)
    s = p.stream_create()
    try:
        g.begin(s)
        p.memcpy(b, a, 4 * n, dkc.D2D, stream=s)
        calls = {
            "stream_sync": lambda: p.stream_sync(s),
            "stream_query": lambda: p.check(dkc._call(p.fn["Stream_Query"],
                                                      dkc._args(("stream", c_void_p),
                                                                ("idle", c_int32))(stream=s))),
            "device_sync": lambda: p.check(dkc._call(p.fn["Device_Synchronize"],
                                                     dkc._args(("device", c_int32))(device=0))),
            "h2d": lambda: p.memcpy(a, host.ctypes.data, host.nbytes, dkc.H2D, stream=s),
            "d2h": lambda: p.memcpy(host.ctypes.data, a, host.nbytes, dkc.D2H, stream=s),
        }
        with pytest.raises(dkc.DKError) as e:
            calls[forbidden]()
        assert e.value.code == dkc.FAILED_PRECONDITION and "capturing a graph" in e.value.message
        with pytest.raises(dkc.DKError) as e:
            g.end(s)  # the capture is invalid: the error again, and no graph
        assert e.value.code == dkc.FAILED_PRECONDITION
        p.stream_sync(s)  # the stream captures no more and works as before
    finally:
        p.free(a)
        p.free(b)
        p.stream_destroy(s)


def _raw_main():
    raw = _raw_plugin()
    plugin_records_copies_and_replays_them_on_any_stream(raw)
    print("ok records_copies_and_replays")
    plugin_nested_and_unmatched_capture_fail_with_failed_precondition(raw)
    print("ok nested_and_unmatched")
    plugin_records_events_in_a_capture(raw)
    print("ok records_events")
    for forbidden in FORBIDDEN:
        plugin_host_work_in_capture_invalidates_it(raw, forbidden)
        print("ok forbidden", forbidden)


def test_plugin_graphs_part_through_ctypes():
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "raw"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok ") == 3 + len(FORBIDDEN), r.stdout


# ---- devicekit.graphs ----------------------------------------------------------------


def _bits(t):
    return t.numpy().view(np.uint32)


def _families():
    from devicekit import ops
    from devicekit.nn import functional as F

    return {
        "elementwise": lambda x, w: ops.tanh(x * 2.0 + 1.0) - ops.exp(x) * 0.5,
        "reduction": lambda x, w: ops.sum(x * x, 1),
        "matmul": lambda x, w: ops.matmul(x, w),
        "softmax": lambda x, w: F.softmax(ops.matmul(x, w), -1),
    }


@pytest.mark.parametrize("family", ["elementwise", "reduction", "matmul", "softmax"])
def test_capture_replay_equals_eager_bitwise(cpu, family):
    import devicekit
    from devicekit import bridge

    f = _families()[family]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((48, 80), dtype=np.float32) for _ in range(3)]
    w = devicekit.tensor(rng.standard_normal((80, 40), dtype=np.float32), device=cpu)
    x = devicekit.tensor(xs[0], device=cpu)  # the static input
    f(x, w)  # warm-up
    g = devicekit.graphs.Graph()
    with devicekit.graphs.capture(g, cpu):
        y = f(x, w)
    for xv in xs[1:] + xs[:1]:  # replay with changed inputs, written in place
        bridge.copy_into(x, devicekit.tensor(xv, device=cpu))
        g.replay()
        eager = f(devicekit.tensor(xv, device=cpu), w)
        assert np.array_equal(_bits(y), _bits(eager)), family
    g.reset()


def test_graph_pool_keeps_temporaries_from_other_tensors(cpu):
    import devicekit
    from devicekit import bridge, ops

    x = devicekit.tensor(np.ones((256, 256), np.float32), device=cpu)
    f = lambda x: ops.sum(ops.exp(x * 0.5) + x, 1)  # noqa: E731  temporaries die inside
    f(x)
    g = devicekit.graphs.Graph()
    with devicekit.graphs.capture(g, cpu):
        y = f(x)
    # Eager tensors made now must not get the capture's (released) temporaries'
    # blocks: the replay writes those again.
    others = [devicekit.full((256, 256), 3.0, device=cpu) for _ in range(8)]
    bridge.copy_into(x, devicekit.tensor(np.full((256, 256), 2.0, np.float32), device=cpu))
    g.replay()
    for o in others:
        assert (o.numpy() == 3.0).all()
    assert np.array_equal(_bits(y), _bits(f(x)))
    devicekit.empty_cache(cpu)  # the graph's released temporaries stay in its pool
    assert 0 < cpu.memory_stats()["cached_bytes"] < 1 << 40
    g.reset()  # the pool goes back: its blocks serve eager tensors again
    z = devicekit.full((256, 256), 5.0, device=cpu)
    assert (z.numpy() == 5.0).all()
    del y, z, others
    devicekit.empty_cache(cpu)
    assert cpu.memory_stats()["cached_bytes"] == 0


def test_replay_on_another_stream_is_ordered_with_the_default_stream(cpu):
    import devicekit
    from devicekit import bridge, ops

    x = devicekit.tensor(np.zeros(4096, np.float32), device=cpu)
    f = lambda x: ops.exp(x) + x  # noqa: E731
    f(x)
    g = devicekit.graphs.Graph()
    with devicekit.graphs.capture(g, cpu):
        y = f(x)
    side = cpu.stream()
    for v in (1.0, 2.0, 3.0):
        bridge.copy_into(x, devicekit.full((4096,), v, device=cpu))  # default stream
        g.replay(side)  # after the copy, and before the read below
        assert np.array_equal(_bits(y), _bits(f(x)))
    g.reset()


@pytest.mark.parametrize("call", ["item", "numpy", "tolist", "bool"])
def test_host_read_in_capture_names_the_call(cpu, call):
    import devicekit
    from devicekit import ops

    x = devicekit.tensor(np.ones(4, np.float32), device=cpu)
    g = devicekit.graphs.Graph()
    read = {"item": lambda t: ops.sum(t, 0).item(), "numpy": lambda t: t.numpy(),
            "tolist": lambda t: t.tolist(), "bool": lambda t: bool(ops.sum(t, 0) > 0)}[call]
    name = {"item": "Tensor.item()", "numpy": "Tensor.numpy()", "tolist": "Tensor.tolist()",
            "bool": "bool(Tensor)"}[call]
    with pytest.raises(devicekit.InvalidArgumentError) as e:
        with devicekit.graphs.capture(g, cpu):
            read(x * 2.0)
    assert f"devicekit.graphs.capture: {name} needs the host" in str(e.value)
    assert not g.captured  # the capture was discarded; the device works eagerly again
    assert (x * 2.0).numpy().tolist() == [2.0] * 4


def test_host_copy_and_sync_in_capture_are_refused(cpu):
    import devicekit

    g = devicekit.graphs.Graph()
    with pytest.raises(devicekit.InvalidArgumentError, match="copy from host memory"):
        with devicekit.graphs.capture(g, cpu):
            devicekit.tensor(np.ones(3, np.float32), device=cpu)
    with pytest.raises(devicekit.InvalidArgumentError, match="Device_Synchronize"):
        with devicekit.graphs.capture(g, cpu):
            cpu.synchronize()
    assert devicekit.tensor([1.0], device=cpu).numpy().tolist() == [1.0]


def test_invalid_captures_and_replays_are_rejected(cpu):
    import devicekit

    g, h = devicekit.graphs.Graph(), devicekit.graphs.Graph()
    with pytest.raises(devicekit.InvalidArgumentError, match="holds no capture"):
        g.replay()
    x = devicekit.ones(8, device=cpu)
    x * 2.0
    with devicekit.graphs.capture(g, cpu):
        y = x * 2.0
        with pytest.raises(devicekit.InvalidArgumentError, match="captures do not nest"):
            h.capture_begin(cpu)
    with pytest.raises(devicekit.InvalidArgumentError, match="already holds a capture"):
        g.capture_begin(cpu)
    g.replay()
    assert y.numpy().tolist() == [2.0] * 8
    g.reset()
    with pytest.raises(devicekit.InvalidArgumentError, match="holds no capture"):
        g.replay()
    assert devicekit.graphs.is_available(cpu)


@pytest.mark.parametrize("mode", ["recorded", "native"])
def test_a_replay_inside_another_capture_is_refused_and_runs_nothing(cpu, mode):
    import devicekit

    from devicekit import bridge

    x = devicekit.ones(8, device=cpu)
    x + 1.0  # warm-up: the constant
    inner, outer = devicekit.graphs.Graph(mode), devicekit.graphs.Graph()
    with devicekit.graphs.capture(inner, cpu):
        bridge.copy_into(x, x + 1.0)  # in place: a replay that ran would show in x
    with devicekit.graphs.capture(outer, cpu):
        with pytest.raises(devicekit.InvalidArgumentError,
                           match="is capturing a graph; a replay is not recorded"):
            inner.replay()
    assert x.numpy().tolist() == [1.0] * 8  # neither the capture nor the refused replay ran
    inner.replay()
    assert x.numpy().tolist() == [2.0] * 8



def test_a_plugin_without_the_part_says_not_implemented(tmp_path):
    import devicekit
    from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin

    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: tests/plugins/ext_chain.c cannot be built")
    lib = compile_test_plugin(compiler, REPO_ROOT / "tests" / "plugins" / "ext_chain.c",
                              DEVICE_API_INCLUDE, tmp_path / "ext_graphs_1_4.so",
                              flags=("-DEXT_VARIANT=6", '-DBP_PLUGIN_NAME="ext_graphs_1_4"'))
    dev = devicekit.load_plugin(lib).devices[0]  # a 1.4 plugin: no graphs part
    assert not devicekit.graphs.is_available(dev)
    g = devicekit.graphs.Graph(mode="native")
    with pytest.raises(devicekit.NotImplementedByPlugin) as e:
        with devicekit.graphs.capture(g, dev):
            pass
    assert "not implemented: the plugin has no graphs part" in str(e.value)
    assert "ext_graphs_1_4" in str(e.value)
    assert "mode='recorded'" in str(e.value)
    # the default mode records in the SDK instead
    g = devicekit.graphs.Graph()
    with devicekit.graphs.capture(g, dev):
        pass
    assert g.captured and g.mode == "recorded" and g.recorded_calls == 0
    g.replay()
    g.reset()


# ---- DeviceKit's own recording (mode "recorded") ------------------------------------


def test_recorded_capture_issues_nothing_until_replay(cpu):
    import devicekit
    from devicekit import bridge, ops

    x = devicekit.tensor(np.arange(6, dtype=np.float32), device=cpu)
    out = devicekit.tensor(np.full(6, -1.0, np.float32), device=cpu)  # static output
    bridge.copy_into(out, ops.exp(x) * 2.0)  # warm-up
    bridge.copy_into(out, devicekit.full((6,), -1.0, device=cpu))
    g = devicekit.graphs.Graph(mode="recorded")
    with devicekit.graphs.capture(g, cpu):
        bridge.copy_into(out, ops.exp(x) * 2.0)
    assert g.mode == "recorded" and g.recorded_calls >= 3  # exp, mul, the copy
    assert out.numpy().tolist() == [-1.0] * 6  # nothing ran during the capture
    g.replay()
    assert np.array_equal(out.numpy(), (ops.exp(x) * 2.0).numpy())
    g.reset()
    with pytest.raises(devicekit.InvalidArgumentError, match="mode is 'other'"):
        devicekit.graphs.Graph(mode="other")


def test_recorded_random_ops_are_patched_per_replay(cpu):
    """random_bits/random_uniform in a recorded graph: replay(seed, offset_shift)
    draws, bitwise, what eager calls with the shifted counters draw (the
    Philox oracle); randn (two ops on the uniforms) follows; no shift repeats
    the captured numbers."""
    import devicekit
    from devicekit import ops
    from devicekit.testing import philox

    g = devicekit.graphs.Graph(mode="recorded")
    with devicekit.graphs.capture(g, cpu):
        bits = ops.random_bits([3, 5], seed=11, offset=4, device=cpu)
        u = ops.rand([7], seed=11, offset=8, device=cpu)
        z = ops.randn([6], seed=11, offset=10, device=cpu)
    assert g.random_calls == 3 and g.mode == "recorded"
    g.replay()
    assert np.array_equal(bits.numpy(), philox.random_bits([3, 5], 11, 4))
    first_u = u.numpy().copy()
    assert np.array_equal(first_u, philox.random_uniform([7], 11, 8))
    for seed, shift in ((11, 9), (5, 0), (2**64 - 1, 2**64 - 3)):  # the last wraps 4 -> 1
        g.replay(seed=seed, offset_shift=shift)
        assert np.array_equal(bits.numpy(), philox.random_bits([3, 5], seed, (4 + shift) % 2**64))
        assert np.array_equal(u.numpy(), philox.random_uniform([7], seed, (8 + shift) % 2**64))
        eager_z = ops.randn([6], seed, (10 + shift) % 2**64, device=cpu)
        assert np.array_equal(z.numpy(), eager_z.numpy())
    g.replay(offset_shift=100)  # the captured seed
    assert np.array_equal(u.numpy(), philox.random_uniform([7], 11, 108))
    assert not np.array_equal(u.numpy(), first_u)
    with pytest.raises(devicekit.InvalidArgumentError, match="offset_shift must be an int"):
        g.replay(offset_shift=-1)
    with pytest.raises(devicekit.InvalidArgumentError, match="seed must be an int"):
        g.replay(seed=2**64)


def test_a_native_graph_repeats_random_numbers_and_cannot_patch_them(cpu):
    import devicekit
    from devicekit import ops
    from devicekit.testing import philox

    g = devicekit.graphs.Graph(mode="native")  # the cpu plugin has the graphs part
    with devicekit.graphs.capture(g, cpu):
        u = ops.rand([9], seed=3, offset=2, device=cpu)
    assert g.random_calls == 0  # nothing to patch
    for _ in range(2):
        g.replay()
        assert np.array_equal(u.numpy(), philox.random_uniform([9], 3, 2))
    for kw in ({"seed": 4}, {"offset_shift": 1}):
        with pytest.raises(devicekit.InvalidArgumentError, match="this one is native"):
            g.replay(**kw)


def test_events_in_a_recorded_capture_are_recorded_not_issued(cpu):
    import devicekit

    d = cpu
    dflt, ev, done = d.default_stream(), d.event(), d.event()
    src, dst = d.alloc(64), d.alloc(64)
    d.copy_h2d(src, np.arange(16, dtype=np.float32))
    d.copy_h2d(dst, np.zeros(16, np.float32))
    g = devicekit.graphs.Graph(mode="recorded")
    with devicekit.graphs.capture(g, cpu):
        dflt.wait_event(ev)
        d.copy_d2d(dst, src, 64, stream=dflt)
        done.record(dflt)
        with pytest.raises(devicekit.InvalidArgumentError, match="Event_Synchronize"):
            done.synchronize()  # recorded in the open capture: needs the host
    assert g.recorded_calls == 1  # the copy; the event calls are not counted
    out = np.empty(16, np.float32)
    d.copy_d2h(out, dst)
    assert (out == 0).all()  # nothing ran during the capture
    g.replay()
    done.synchronize()  # recorded by the replay
    d.copy_d2h(out, dst)
    assert np.array_equal(out, np.arange(16, dtype=np.float32))
    g.reset()


def test_a_collective_in_a_recorded_capture_is_refused(cpu):
    import devicekit
    from devicekit import distributed

    if "collectives" not in cpu.plugin.parts:
        pytest.skip("the CPU plugin reports no collectives part")
    t = devicekit.ones(4, device=cpu)
    with distributed.Communicator(distributed.unique_id(cpu), 1, 0, cpu, timeout=2.0) as comm:
        g = devicekit.graphs.Graph(mode="recorded")
        with pytest.raises(devicekit.NotImplementedByPlugin, match="does not record collectives"):
            with devicekit.graphs.capture(g, cpu):
                comm.all_reduce(t * 2.0).wait()
        assert not g.captured
        comm.all_reduce(t).wait()  # eager again
    assert t.numpy().tolist() == [1.0] * 4


def test_native_graphs_hold_no_sdk_recording(cpu):
    import devicekit

    x = devicekit.ones(8, device=cpu)
    x * 2.0
    g = devicekit.graphs.Graph()  # auto: the CPU plugin has the part
    with devicekit.graphs.capture(g, cpu):
        y = x * 2.0
    assert g.mode == "native" and g.recorded_calls == 0 and not g.auto_recorded
    g.replay()
    assert y.numpy().tolist() == [2.0] * 8
    g.reset()


def test_an_auto_capture_with_random_ops_becomes_recorded(cpu):
    """mode "auto" on the CPU plugin (which has the graphs part, so auto is
    native without random ops: the test above): a capture holding a random
    launch ends as DeviceKit's recording of the same calls, which
    replay(seed, offset_shift) patches, bitwise as eager calls with the
    shifted counters (the Philox oracle)."""
    import devicekit
    from devicekit import ops
    from devicekit.testing import philox

    x = devicekit.tensor(np.arange(7, dtype=np.float32), device=cpu)
    ops.rand([7], seed=11, offset=8, device=cpu) * 2.0 + x  # warm-up (constant cache)
    g = devicekit.graphs.Graph()  # auto
    with devicekit.graphs.capture(g, cpu):
        assert g.mode == "auto"  # undecided while the capture is open
        u = ops.rand([7], seed=11, offset=8, device=cpu)
        y = u * 2.0 + x
    assert g.mode == "recorded" and g.auto_recorded, (g.mode, g.auto_recorded)
    assert g.random_calls == 1 and g.recorded_calls == g.calls >= 3, (g.random_calls, g.calls)
    g.replay()
    assert np.array_equal(u.numpy(), philox.random_uniform([7], 11, 8))
    first = y.numpy().copy()
    for seed, shift in ((11, 9), (5, 0), (2**64 - 1, 2**64 - 3)):
        g.replay(seed=seed, offset_shift=shift)
        assert np.array_equal(u.numpy(), philox.random_uniform([7], seed, (8 + shift) % 2**64))
        eager = ops.rand([7], seed=seed, offset=(8 + shift) % 2**64, device=cpu) * 2.0 + x
        assert np.array_equal(y.numpy(), eager.numpy())
    assert not np.array_equal(y.numpy(), first)
    g.reset()
    assert not g.auto_recorded


@pytest.mark.parametrize("mode", ["native", "recorded"])
def test_a_replay_is_one_trace_slice_with_its_calls(cpu, mode):
    import devicekit
    from devicekit import ops

    x = devicekit.ones(64, device=cpu)
    f = lambda x: ops.exp(x * 2.0) + x  # noqa: E731  mul, exp, add
    f(x)
    g = devicekit.graphs.Graph(mode=mode)
    with devicekit.graphs.capture(g, cpu):
        y = f(x)
    assert g.calls == 3, g.calls
    with devicekit.trace.record() as r:
        g.replay()
        g.replay(cpu.stream())
    host = [e for e in r.trace["traceEvents"] if e.get("cat") == "graph" and e["pid"] == 1]
    names = {e["name"] for e in r.trace["traceEvents"] if e.get("ph") == "X"}
    assert len(host) == 2, host
    assert all(e["name"] == f"graph_replay({mode})" and e["args"]["calls"] == 3 for e in host)
    assert not names & {"exp", "mul", "add"}  # the replayed kernels are inside the slice
    assert np.array_equal(_bits(y), _bits(f(x)))
    g.reset()


def test_a_capture_traced_holds_no_trace_events(cpu):
    """Tracing a native capture records no timing events into the graph (the
    plugin records a capturing stream's events; the trace destroys its own)."""
    import devicekit
    from devicekit import ops

    x = devicekit.ones(64, device=cpu)
    f = lambda x: ops.exp(x * 2.0)  # noqa: E731
    f(x)
    g = devicekit.graphs.Graph(mode="native")
    with devicekit.trace.record():
        with devicekit.graphs.capture(g, cpu):
            y = f(x)
    g.replay()  # an event the trace destroyed would fail the launch
    assert np.array_equal(_bits(y), _bits(f(x)))
    g.reset()


def _graphs_section(dev):
    from devicekit.conformance import registry
    from devicekit.conformance.case import Target, run_case

    target = Target.of(dev, level="core")
    cases, unavailable = registry.build(target, {"graphs"})
    assert not unavailable, unavailable
    return target, cases, run_case


def test_the_graphs_section_passes_on_cpu(cpu):
    target, cases, run_case = _graphs_section(cpu)
    ids = {c.id for c in cases}
    for mode in ("native", "recorded"):
        for fam in ("elementwise", "reduction", "matmul", "softmax_norm", "gather_scatter",
                    "random", "cast"):
            assert f"graphs/{mode}/bitwise/{fam}" in ids
        for check in ("invalid", "destroyed_while_queued", "other_stream", "pool_growth",
                      "events_two_streams", "event_synchronize"):
            assert f"graphs/{mode}/{check}" in ids
    assert "graphs/native_vs_recorded/random" in ids
    # the default mode: a random launch makes it the recording, else native
    assert {"graphs/auto/random_patched", "graphs/auto/no_random"} <= ids
    results = {c.id: run_case(c, target) for c in cases}
    bad = {i: r["message"] for i, r in results.items() if r["outcome"] != "pass"}
    assert not bad, bad


def test_the_graphs_section_on_cuda_sim():
    import devicekit

    try:
        dev = devicekit.device("cuda_sim:0")
    except Exception as e:  # noqa: BLE001  the emulated CUDA plugin is an optional build
        pytest.skip(f"no cuda_sim plugin installed ({type(e).__name__})")
    target, cases, run_case = _graphs_section(dev)
    results = {c.id: run_case(c, target) for c in cases}
    native = "graphs" in dev.plugin.parts  # the emulated build has the part natively
    ran = {i: r for i, r in results.items() if native or not i.startswith("graphs/native")}
    bad = {i: r["message"] for i, r in ran.items() if r["outcome"] != "pass"}
    assert not bad, bad
    if not native:  # an older build: the native cases say why they did not run
        assert all(r["outcome"] == "not-implemented"
                   for i, r in results.items() if i.startswith("graphs/native")), results


if __name__ == "__main__" and sys.argv[1:] == ["raw"]:
    _raw_main()
