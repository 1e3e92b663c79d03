"""Section "runtime": the device runtime contract, through the SDK's raw
buffers, streams and events (plugin-agnostic: sizes come from the device's
own properties).

Allocation edge cases (size 0 gives NULL and moves no statistic; every
pointer aligned to the declared alignment, a power of two >= 16), a request larger than the device (a clean
OutOfMemoryError, nothing lost), copies of every dtype at unaligned offsets
and sizes (and nothing written outside), async copies on several streams
ordered only by events, monotonic event timing, several host threads at once,
a leak check (the plugin's bytes in use back to the baseline), and which of
two asynchronous kernel errors a synchronize reports (the first; across two
streams, the earliest-created stream's, the other keeping its own).
"""

import functools
import gc
import threading

import numpy as np

import devicekit as dk
from devicekit import ops
from devicekit.conformance.case import Case, Section, Skip
from devicekit.testing import oracle as O
from devicekit.testing.inputs import rand

SECTION = Section("runtime", "Device runtime contract", order=10,
                  # the fixed cases below plus one copy case per stored dtype
                  min_cases=lambda target: len(FIXED) + len(target.dtypes))


def _host_bytes(ctx, n):
    return ctx.rng().integers(0, 256, n, dtype=np.uint8)


def _read(dev, buf, nbytes=None, offset=0):
    out = np.empty(buf.nbytes - offset if nbytes is None else nbytes, np.uint8)
    dev.copy_d2h(out, buf, src_offset=offset)
    return out


def _settle(dev):
    gc.collect()
    dev.synchronize()
    dev.empty_cache()
    dev.synchronize()


def alloc_zero(ctx):
    dev = ctx.device
    _settle(dev)
    before = dev.memory_stats()
    buf = dev.alloc(0)
    assert buf.nbytes == 0
    assert buf.ptr == 0, f"Memory_Allocate(size=0) returned ptr {buf.ptr:#x}; the header says NULL"
    after = dev.memory_stats()
    assert (after["bytes_in_use"], after["num_allocs"]) == \
        (before["bytes_in_use"], before["num_allocs"]), \
        f"a zero-byte allocation changed the statistics: {before} -> {after}"
    dev.copy_h2d(buf, np.empty(0, np.uint8))
    assert _read(dev, buf).size == 0
    buf.free()


def alloc_odd_sizes(ctx):
    dev = ctx.device
    align = dev.properties["alignment"]
    assert align >= 16 and align & (align - 1) == 0, \
        f"alignment {align}: the header says a power of two >= 16"
    for n in (1, 3, 7, 63, 65, 1001, 4097, (1 << 20) + 3):
        buf = dev.alloc(n)
        assert buf.nbytes == n and buf.ptr % align == 0, \
            f"alloc({n}): ptr {buf.ptr:#x} is not aligned to the declared {align} bytes"
        host = _host_bytes(ctx, n)
        dev.copy_h2d(buf, host)
        assert np.array_equal(_read(dev, buf), host), f"alloc({n}): round trip differs"
        buf.free()


def alloc_too_large(ctx):
    """More than the device has: OutOfMemoryError with the plugin's message,
    and data already on the device and the allocator both survive."""
    dev = ctx.device
    _settle(dev)
    keep = dev.alloc(4099)
    host = _host_bytes(ctx, 4099)
    dev.copy_h2d(keep, host)
    before = dev.memory_stats()
    try:
        dev.alloc(int(dev.properties["total_memory"]) * 2 + 4096)
    except dk.OutOfMemoryError as e:
        assert str(e).strip(), "OutOfMemoryError without a message"
    else:
        raise AssertionError("allocating twice the device's total_memory did not raise "
                             "OutOfMemoryError")
    after = dev.memory_stats()
    for key in ("bytes_in_use", "num_allocs", "peak_bytes_in_use"):  # "changes no statistic"
        assert after[key] == before[key], f"failed alloc changed {key}: {before[key]} -> {after[key]}"
    assert np.array_equal(_read(dev, keep), host), "data on the device changed after an OOM"
    again = dev.alloc(1 << 16)  # the allocator still works
    dev.copy_h2d(again, np.ones(1 << 16, np.uint8))
    assert _read(dev, again).min() == 1
    again.free()
    keep.free()


def copy_unaligned(ctx, dtype):
    """h2d, d2d, d2h of ``dtype`` data at offsets/sizes that are multiples of
    the itemsize but not of the alignment; guard bytes must stay untouched."""
    dev = ctx.device
    item = O.np_dtype(dtype).itemsize
    n_elems = 333
    data = rand(dtype, (n_elems,), ctx.rng()).view(np.uint8)
    total = (n_elems + 20) * item
    src, dst = dev.alloc(total), dev.alloc(total)
    guard = np.full(total, 0xAB, np.uint8)
    dev.copy_h2d(src, guard)
    dev.copy_h2d(dst, guard)
    so, do = 3 * item, 7 * item
    dev.copy_h2d(src, data, dst_offset=so)
    dev.copy_d2d(dst, src, data.nbytes, dst_offset=do, src_offset=so)
    want = guard.copy()
    want[do:do + data.nbytes] = data
    got = _read(dev, dst)
    bad = np.flatnonzero(got != want)
    assert not bad.size, (f"{dtype}: {bad.size} bytes differ after h2d/d2d at offsets "
                          f"{so}/{do}; first at byte {bad[0]}")
    part = _read(dev, dst, nbytes=5 * item, offset=do + item)  # d2h at an offset
    assert np.array_equal(part, data[item:6 * item]), f"{dtype}: d2h at an offset differs"
    src.free()
    dst.free()


def streams_ordered_by_events(ctx):
    """A chain of copies on a producer stream, an event, a consumer stream that
    waits for it and reads the result. A stream that ignores waits reads stale
    data (the producer's work is long: several hops of 16 MiB)."""
    dev = ctx.device
    n, hops = 16 << 20, 6
    producer, consumer = dev.stream(), dev.stream()
    bufs = [dev.alloc(n) for _ in range(hops + 1)]
    out_buf = dev.alloc(n)
    for round_ in range(3):
        host, out, done = event_ordered_round(ctx, round_, producer, consumer, bufs, out_buf, n)
        assert consumer.query() and done.query()
        assert np.array_equal(out, host), \
            f"round {round_}: the consumer stream read stale data (its wait_event was not honoured)"
    producer.synchronize()
    for b in bufs + [out_buf]:
        b.free()


def event_timing(ctx):
    dev = ctx.device
    stream = dev.stream()
    buf = dev.alloc(4 << 20)
    events = [dev.event() for _ in range(4)]
    for e in events:
        e.record(stream)
        dev.copy_h2d(buf, np.ones(4 << 20, np.uint8), stream=stream)
    events[-1].synchronize()
    times = [events[0].elapsed_ms(e) for e in events[1:]]
    assert all(np.isfinite(t) and t >= 0 for t in times), f"elapsed times {times}"
    assert times == sorted(times), f"event times are not monotonic along one stream: {times}"
    assert dev.event().query(), "an event never recorded must count as reached"
    stream.synchronize()  # the last copy is still queued: never free under it
    buf.free()


def _has_kernel(dev, op, dtype="float32"):
    """Whether the plugin implements ``op`` for ``dtype``: the runtime section
    uses kernels only as optional extra load, so that a plugin whose kernel
    table is still empty (a fresh ``devicekit new`` project) passes it."""
    return any(k["op"] == op and k["implemented"] and dtype in k["dtypes"]
               for k in dev.plugin.kernels())


def host_threads(ctx):
    """Four host threads issuing copies (and ``add`` kernels where the plugin
    has them) at once, each on its own stream; each checks its own results."""
    dev = ctx.device
    with_add = _has_kernel(dev, "add")
    errors = []

    def worker(k):
        try:
            rng = np.random.default_rng(ctx.seed + k)
            stream = dev.stream()
            for i in range(10):
                a = rng.standard_normal((33, 17)).astype(np.float32)
                ta = dk.tensor(a, device=dev)
                got = (ta + ta).numpy() if with_add else ta.numpy()
                O.assert_close(got, a * np.float32(2 if with_add else 1), "float32",
                               op="add" if with_add else "copy", case=f"thread {k} iter {i}")
                raw = rng.integers(0, 256, 4097, dtype=np.uint8)
                buf, mid = dev.alloc(4097), dev.alloc(4097)
                dev.copy_h2d(buf, raw, stream=stream)
                dev.copy_d2d(mid, buf, 4097, stream=stream)
                out = np.empty(4097, np.uint8)
                dev.copy_d2h(out, mid, stream=stream)
                stream.synchronize()
                assert np.array_equal(out, raw), f"thread {k} iter {i}: copy differs"
                buf.free()
                mid.free()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def leak_check(ctx):
    """A mixed workload, then everything freed: the plugin's own bytes in use
    and live allocation count must be back at the baseline."""
    dev = ctx.device
    _settle(dev)
    base = dev.memory_stats()
    rng = ctx.rng()
    for i in range(20):
        buf = dev.alloc(1000 + 37 * i)
        dev.copy_h2d(buf, np.zeros(1000 + 37 * i, np.uint8))
        buf.free()
    x = dk.tensor(rng.standard_normal((64, 33)).astype(np.float32), device=dev)
    for _ in range(5):
        y = x.T.contiguous() if _has_kernel(dev, "copy") else dk.tensor(x.numpy().T, device=dev)
        z = y + y if _has_kernel(dev, "add") else y
        z.numpy()
    del x, y, z
    _settle(dev)
    end = dev.memory_stats()
    leaked = {k: (base[k], end[k]) for k in ("bytes_in_use", "num_allocs") if end[k] != base[k]}
    assert not leaked, f"device memory not returned after everything was freed: {leaked}"


FIRST, SECOND = 1000003, 2000029  # out-of-range index values the two failing kernels hold


def _which(message):
    """Which of the two failing launches a message is about: "first",
    "second", or None when it names neither (its op or its index value)."""
    first = "gather" in message or str(FIRST) in message
    second = "scatter_add" in message or str(SECOND) in message
    return None if first == second else "first" if first else "second"


def event_ordered_round(ctx, round_, producer, consumer, bufs, out_buf, n, keep_event=True):
    """One round of the chain: ``n`` bytes of fresh data copied to ``bufs[0]``
    and along every buffer on ``producer``, an event recorded there, the
    consumer made to wait for it, then copy the last buffer to ``out_buf`` and
    read it back. Returns (the data, what the consumer read, the event; None
    with ``keep_event=False``: its last reference is dropped right after the
    wait, so Event_Destroy comes before its point is reached)."""
    dev = ctx.device
    hops = len(bufs) - 1
    host = np.full(n, round_ + 1, np.uint8)
    host[::4096] = ctx.rng().integers(0, 256, host[::4096].size, dtype=np.uint8)
    dev.copy_h2d(out_buf, np.zeros(n, np.uint8))
    dev.copy_h2d(bufs[0], host, stream=producer)
    for i in range(hops):
        dev.copy_d2d(bufs[i + 1], bufs[i], n, stream=producer)
    done = dev.event()
    done.record(producer)
    consumer.wait_event(done)
    if not keep_event:
        done = None
    dev.copy_d2d(out_buf, bufs[hops], n, stream=consumer)
    out = np.empty(n, np.uint8)
    dev.copy_d2h(out, out_buf, stream=consumer)
    consumer.synchronize()
    return host, out, done


def _failing_index_inputs(dev):
    """A float32 (4, 5) target, two index rows whose last entries (FIRST,
    SECOND) are out of range for its dimension 0, and a (1, 5) source: a
    gather with the first and a scatter_add with the second each fail on the
    device. Skips where the plugin has no such kernels to fail."""
    if not (_has_kernel(dev, "gather") and _has_kernel(dev, "scatter_add")):
        raise Skip("the plugin has no float32 gather and scatter_add kernels to fail")
    x = dk.tensor(np.zeros((4, 5), np.float32), device=dev)
    bad = [dk.tensor(np.array([[0, 1, 2, 3, v]], np.int64), device=dev) for v in (FIRST, SECOND)]
    src = dk.tensor(np.ones((1, 5), np.float32), device=dev)
    return x, bad, src


def first_async_error(ctx, via):
    """A gather then a scatter_add, each with an index out of range, enqueued
    back to back on one stream with nothing in between: the next synchronize
    (``via``: "stream", the read of the second result; "device",
    Device_Synchronize) reports the first one's error, as the header says
    ("returns (and clears) the first asynchronous error raised by that
    work"), and only once. A plugin may also refuse a launch at once."""
    dev = ctx.device
    x, bad, src = _failing_index_inputs(dev)
    dev.synchronize()  # everything above is on the device before the failing launches
    reported = []
    out = None
    for launch in (lambda: ops.gather(x, 0, bad[0]), lambda: ops.scatter_add(x, 0, bad[1], src)):
        try:
            out = launch()
        except dk.DeviceKitError as e:  # refused at launch: that is reported first too
            reported.append(("launch", str(e)))
    try:
        if via == "stream" and out is not None:
            out.numpy()
        dev.synchronize()
    except dk.DeviceKitError as e:
        reported.append((via + " synchronize", str(e)))
    assert reported, (f"a gather with index {FIRST} and a scatter_add with index {SECOND} into a "
                      f"dimension of size 4 reported no error, at launch or at the synchronize")
    when, message = reported[0]
    which = _which(message)
    if which is None:
        raise Skip(f"the first error reported ({when}) names neither op nor index value, so "
                   f"which launch it is about cannot be told: {message[:200]}")
    assert which == "first", (
        f"two failing kernels on one stream (gather, index {FIRST}; then scatter_add, index "
        f"{SECOND}): the {when} reported the second one's error, the header says the first: "
        f"{message[:300]}")
    try:
        dev.synchronize()
    except dk.DeviceKitError as e:
        raise AssertionError(f"an asynchronous error was reported again (or the second one "
                             f"after the first) by the next synchronize: {e}") from None


def first_async_error_two_streams(ctx):
    """The same two failing kernels, each captured in a graph and replayed on
    a stream of its own: the scatter_add's on B first, then the gather's on A,
    A created before B. Device_Synchronize reports A's error (the
    earliest-created stream that has one, whatever happened first), B keeps
    its own for B's synchronize, and each is reported once."""
    dev = ctx.device
    x, bad, src = _failing_index_inputs(dev)
    dev.synchronize()
    g_a, g_b = dk.graphs.Graph(), dk.graphs.Graph()
    with dk.graphs.capture(g_a, dev):
        ops.gather(x, 0, bad[0])
    with dk.graphs.capture(g_b, dev):
        ops.scatter_add(x, 0, bad[1], src)
    stream_a, stream_b = dev.stream(), dev.stream()
    g_b.replay(stream_b)
    g_a.replay(stream_a)
    seen = []
    for who, sync in (("Device_Synchronize", dev.synchronize), ("B's synchronize", stream_b.synchronize),
                      ("A's synchronize", stream_a.synchronize),
                      ("a second Device_Synchronize", dev.synchronize)):
        try:
            sync()
            seen.append((who, None))
        except dk.DeviceKitError as e:
            seen.append((who, _which(str(e)) or f"neither: {str(e)[:200]}"))
    want = [("Device_Synchronize", "first"), ("B's synchronize", "second"),
            ("A's synchronize", None), ("a second Device_Synchronize", None)]
    assert seen == want, (
        f"gather (index {FIRST}) replayed on stream A and scatter_add (index {SECOND}) on "
        f"stream B (B's first; A created before B) reported {seen}; expected {want} "
        f"(first: the gather's error, second: the scatter_add's, None: clean): the header says "
        f"Device_Synchronize returns the earliest-created stream's error and the other streams "
        f"keep theirs for their own synchronize")
    g_a.reset()
    g_b.reset()


FIXED = {"alloc_zero": alloc_zero, "alloc_odd_sizes": alloc_odd_sizes,
         "alloc_too_large": alloc_too_large, "streams_ordered_by_events": streams_ordered_by_events,
         "event_timing_monotonic": event_timing, "host_threads": host_threads,
         "leak_check": leak_check,
         "first_async_error/stream": functools.partial(first_async_error, via="stream"),
         "first_async_error/device": functools.partial(first_async_error, via="device"),
         "first_async_error/two_streams": first_async_error_two_streams}


def cases(target):
    out = [Case(id=f"runtime/{name}", section="runtime", fn=fn) for name, fn in FIXED.items()]
    out += [Case(id=f"runtime/copy_unaligned/{dt}", section="runtime", dtype=dt,
                 fn=functools.partial(copy_unaligned, dtype=dt)) for dt in target.dtypes]
    return out
