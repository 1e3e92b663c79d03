"""Section "runtime", part 2: the contract where a plugin can lie cheaply.

- ``memory_stats_exact``: the header calls the statistics exact, so
  bytes_in_use moves by exactly the bytes requested (not a rounded block
  size), num_allocs by one per live allocation, and the peak covers both.
- ``event_query_while_pending``: an event recorded behind a long copy is
  queried at once; whenever it claims "reached", the copy's data must already
  be visible to a synchronous read. A plugin that answers "reached" early is
  caught reading half-copied memory.
- ``kernel_error_on_its_own_stream``: a kernel that fails while it runs (an
  index out of range) reports the error from the synchronize of the stream it
  ran on, not later from some device-wide synchronize, and only once.
- ``memory_stats_peak``: peak_bytes_in_use is the maximum of bytes_in_use
  since Initialize: an allocation above the old peak raises it to exactly the
  new bytes in use, and freeing never lowers it.
- ``event_elapsed_milliseconds``: Event_ElapsedTime is in milliseconds (two
  events on an idle stream recorded around a host sleep of known length),
  negative when the end was reached first, and recording an event again moves
  it to the new point.
- ``wait_event_edges``: Stream_WaitEvent on an event never recorded is a
  no-op (the stream runs on), and an event destroyed after a stream began
  waiting on it, before its point was reached, still holds that stream back.
- ``stream_destroy``: Stream_Destroy waits for the stream's pending work (a
  long copy chain's last bytes are there when it returns) and returns the
  stream's pending asynchronous error (a replayed graph's failing gather),
  which the SDK prints on stderr from the stream's destructor; the error is
  then gone (the next Device_Synchronize is clean).
- ``event_elapsed_not_reached``: Event_ElapsedTime of an event recorded but
  not yet reached returns DK_ERROR_FAILED_PRECONDITION, never a time.
- ``free_null``: Memory_Free of NULL, called on the plugin itself (the SDK
  never frees NULL), succeeds and changes no memory statistic.
- ``properties_bad_ordinal``: Device_GetProperties of an ordinal outside
  0 .. count-1 (count, count+1, -1 and the int32 extremes), called on the
  plugin itself (the SDK refuses them first), returns DK_ERROR_OUT_OF_RANGE;
  the device's own ordinal gives the properties the SDK reports.
- ``load_facts``: what the SDK checked when it loaded the plugin, asked of
  the plugin's own functions again: Plugin_GetInfo's strings are never NULL
  and the name is the non-empty [a-z][a-z0-9_]* the device is addressed by;
  Device_Count is within 0 .. 4096 and fixed after Initialize (the SDK's
  device list); every device's properties have a name and an alignment that
  is a power of two >= 16.
- ``wait_event_other_device``: Stream_WaitEvent on an event recorded on
  another device of the same plugin holds the waiting stream back until that
  point is reached (an event recorded on the waiting stream after the wait is
  reached only after the other device's long copy chain, whose last bytes are
  then there). Needs a second device: skipped, saying so, on a one-device
  plugin (the CPU reference plugin has two with DEVICEKIT_CPU_DEVICES=2).

(The worker also checks, after every case of every section, that the device
synchronizes cleanly and that the plugin's bytes in use equal what the SDK
holds: a late error or a leak is blamed on the case that caused it.)
"""

import gc
import os
import tempfile
import time

import numpy as np

import devicekit as dk
from devicekit import ops
from devicekit.conformance.case import Case, Section, Skip

from . import _api, _raw
from .runtime import event_ordered_round

SECTION = Section("runtime", "Device runtime contract", order=11,
                  min_cases=lambda target: len(FIXED))


def _settle(dev):
    gc.collect()
    dev.synchronize()
    dev.empty_cache()
    dev.synchronize()


def memory_stats_exact(ctx):
    dev = ctx.device
    _settle(dev)
    base = dev.memory_stats()
    sizes = [1, 1000, 4097, (1 << 20) + 3]
    bufs, total = [], 0
    for n in sizes:
        bufs.append(dev.alloc(n))
        total += n
        st = dev.memory_stats()
        got = (st["bytes_in_use"] - base["bytes_in_use"], st["num_allocs"] - base["num_allocs"])
        assert got == (total, len(bufs)), (
            f"after allocating {sizes[:len(bufs)]} bytes: bytes_in_use grew by {got[0]} and "
            f"num_allocs by {got[1]}; the header says exact: expected {total} and {len(bufs)}")
        assert st["peak_bytes_in_use"] >= st["bytes_in_use"], f"peak below current: {st}"
    for b in bufs:
        b.free()
    end = dev.memory_stats()
    assert (end["bytes_in_use"], end["num_allocs"]) == (base["bytes_in_use"], base["num_allocs"]), \
        f"after freeing everything: {end}; expected the baseline {base}"


def event_query_while_pending(ctx):
    dev = ctx.device
    n = 32 << 20
    stream = dev.stream()
    src, dst = dev.alloc(n), dev.alloc(n)
    try:
        pattern = np.full(n, 7, np.uint8)
        pattern[-4096:] = ctx.rng().integers(1, 256, 4096, dtype=np.uint8)
        dev.copy_h2d(src, pattern)
        tail = np.empty(4096, np.uint8)
        for round_ in range(3):
            dev.copy_h2d(dst, np.zeros(n, np.uint8))
            for _ in range(4):  # a long chain: the event is recorded behind all of it
                dev.copy_d2d(dst, src, n, stream=stream)
            event = dev.event()
            event.record(stream)
            if event.query():  # claims the copies are done: their bytes must be there
                dev.copy_d2h(tail, dst, src_offset=n - 4096)
                assert np.array_equal(tail, pattern[-4096:]), (
                    f"round {round_}: Event_Query said reached while the copy it follows had "
                    f"not finished (the last bytes of the destination are stale)")
            if stream.query():  # claims idle: the same holds for Stream_Query
                dev.copy_d2h(tail, dst, src_offset=n - 4096)
                assert np.array_equal(tail, pattern[-4096:]), (
                    f"round {round_}: Stream_Query said idle while its copy had not finished")
            event.synchronize()
            assert event.query(), "Event_Query is false after Event_Synchronize returned"
            dev.copy_d2h(tail, dst, src_offset=n - 4096)
            assert np.array_equal(tail, pattern[-4096:]), \
                f"round {round_}: data missing after Event_Synchronize"
        # Device_Synchronize waits for every stream, not only the SDK's own.
        dev.copy_h2d(dst, np.zeros(n, np.uint8))
        for _ in range(4):
            dev.copy_d2d(dst, src, n, stream=stream)
        dev.synchronize()
        dev.copy_d2h(tail, dst, src_offset=n - 4096)
        assert np.array_equal(tail, pattern[-4096:]), \
            "Device_Synchronize returned before a copy on another stream finished"
        stream.synchronize()
    finally:
        dev.synchronize()
        src.free()
        dst.free()


def kernel_error_on_its_own_stream(ctx):
    if not _raw.available():
        raise Skip("this DeviceKit's core has no raw_kernel_call")
    dev = ctx.device
    if "float32" not in ctx.target.declared.get("gather", ()):
        raise Skip("the plugin has no float32 gather kernel to fail")
    x = _raw.operand(dev, np.zeros((4, 5), np.float32), "float32")
    index = np.zeros((2, 5), np.int64)
    index[1, 4] = 4  # == the size of dim 0: out of range (off by one)
    idx = _raw.operand(dev, index, "int64")
    out = _raw.output(dev, (2, 5), "float32")
    attrs = _raw.attrs("DK_AxisAttrs", axis=0)
    try:
        lc, lmsg, sc, smsg = _raw.call(dev, "gather", [x.view(), idx.view()], [out.view()], attrs)
        if lc == 0:
            assert sc != 0, ("gather with index 4 into a dimension of size 4 reported no error "
                             "from its stream's synchronize (an index equal to the size must be "
                             "rejected)")
        dev.synchronize()  # reported once: the device-wide synchronize is clean afterwards
    finally:
        for o in (x, idx, out):
            o.free()


PEAK_GAP = 64 << 20  # past this, memory_stats_peak does not allocate up to the old peak


def memory_stats_peak(ctx):
    """The peak is exact: allocating past it sets it to the bytes in use then
    (nothing else allocates meanwhile), and a free leaves it where it was.
    When an earlier case of this process left the peak far above what is in
    use (more than PEAK_GAP), a small allocation must leave it unchanged."""
    dev = ctx.device
    _settle(dev)
    base = dev.memory_stats()
    gap = int(base["peak_bytes_in_use"]) - int(base["bytes_in_use"])
    n = (max(gap, 0) if gap <= PEAK_GAP else 0) + (1 << 20) + 13
    buf = dev.alloc(n)
    try:
        during = dev.memory_stats()
        used = base["bytes_in_use"] + n
        want = max(used, base["peak_bytes_in_use"])
        assert during["bytes_in_use"] == used and during["peak_bytes_in_use"] == want, (
            f"allocating {n} bytes over {base['bytes_in_use']} in use (peak "
            f"{base['peak_bytes_in_use']}): bytes_in_use {during['bytes_in_use']}, peak "
            f"{during['peak_bytes_in_use']}; the header says the peak is the maximum of "
            f"bytes_in_use since Initialize: expected {used} and {want}")
    finally:
        buf.free()
    after = dev.memory_stats()
    assert after["peak_bytes_in_use"] == want, (
        f"freeing {n} bytes moved peak_bytes_in_use from {want} to "
        f"{after['peak_bytes_in_use']}; a maximum since Initialize never goes down")
    assert after["bytes_in_use"] == base["bytes_in_use"], f"after the free: {after}"


SLEEP_S = 0.05  # host time between the two records: long enough to dwarf clock noise


def _elapsed_around_sleep(dev, stream, start, end):
    """Records ``end`` on the idle ``stream`` after a host sleep that begins
    once ``start``'s point was reached; returns (elapsed ms, host ms spent from
    before the sleep to after ``end`` was reached)."""
    t0 = time.perf_counter()
    time.sleep(SLEEP_S)
    end.record(stream)
    end.synchronize()
    host_ms = (time.perf_counter() - t0) * 1e3
    return start.elapsed_ms(end), host_ms


def event_elapsed_milliseconds(ctx):
    dev = ctx.device
    stream = dev.stream()
    start, end = dev.event(), dev.event()
    t_before = time.perf_counter()
    start.record(stream)
    start.synchronize()
    ms, _ = _elapsed_around_sleep(dev, stream, start, end)
    wall_ms = (time.perf_counter() - t_before) * 1e3
    low = SLEEP_S * 1e3 * 0.9
    assert low <= ms <= wall_ms * 1.1 + 1, (
        f"two events recorded on an idle stream around a host sleep of {SLEEP_S * 1e3:.0f} ms "
        f"(all of it took {wall_ms:.1f} ms on the host) are {ms!r} apart; Event_ElapsedTime is "
        f"in milliseconds: expected between {low:.0f} and {wall_ms * 1.1 + 1:.1f}")
    back = end.elapsed_ms(start)
    assert back < 0 and abs(back + ms) <= 1e-3 * max(1.0, ms), (
        f"elapsed(start, end) = {ms}, elapsed(end, start) = {back}: the header says the time "
        f"is negative when 'end' was reached first")
    again, host_ms = _elapsed_around_sleep(dev, stream, start, end)  # record `end` again
    assert again - ms >= SLEEP_S * 1e3 * 0.9, (
        f"recording 'end' again {host_ms:.1f} ms later moved its elapsed time from {ms} to "
        f"{again} ms; recording again must move the event to the new point")
    stream.synchronize()


def wait_event_edges(ctx):
    dev = ctx.device
    n, hops = 16 << 20, 6
    producer, consumer = dev.stream(), dev.stream()
    bufs = [dev.alloc(n) for _ in range(hops + 1)]
    out_buf = dev.alloc(n)
    try:
        consumer.wait_event(dev.event())  # never recorded: a no-op, never a hang
        dev.copy_h2d(out_buf, np.full(n, 9, np.uint8), stream=consumer)
        consumer.synchronize()
        for round_ in range(3):
            # the event's last reference goes right after the wait: Event_Destroy
            # comes before its point is reached
            host, out, _ = event_ordered_round(ctx, round_, producer, consumer, bufs, out_buf, n,
                                               keep_event=False)
            assert np.array_equal(out, host), (
                f"round {round_}: a stream waiting on an event destroyed before its point was "
                f"reached read stale data; the header says it still waits for the recorded point")
    finally:
        dev.synchronize()
        for b in bufs + [out_buf]:
            b.free()


def _stderr_of(fn):
    """What ``fn`` writes to file descriptor 2 (the SDK's destructors report
    there: they cannot raise)."""
    with tempfile.TemporaryFile() as f:
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")


def stream_destroy(ctx):
    dev = ctx.device
    n, hops = 16 << 20, 6
    bufs = [dev.alloc(n) for _ in range(hops + 1)]
    try:
        host = np.full(n, 5, np.uint8)
        host[-4096:] = ctx.rng().integers(1, 256, 4096, dtype=np.uint8)
        dev.copy_h2d(bufs[-1], np.zeros(n, np.uint8))
        stream = dev.stream()
        dev.copy_h2d(bufs[0], host, stream=stream)
        for i in range(hops):
            dev.copy_d2d(bufs[i + 1], bufs[i], n, stream=stream)
        del stream  # its last reference: Stream_Destroy while the chain is queued
        tail = np.empty(4096, np.uint8)
        dev.copy_d2h(tail, bufs[-1], src_offset=n - 4096)  # synchronous, on no stream
        assert np.array_equal(tail, host[-4096:]), (
            "Stream_Destroy returned before the stream's queued copies finished; the header "
            "says it waits for the stream's pending work")
    finally:
        dev.synchronize()
        for b in bufs:
            b.free()
    if not ctx.target.declared.get("gather"):
        raise Skip("the plugin has no gather kernel to fail before a Stream_Destroy")
    x = dk.tensor(np.zeros((4, 5), np.float32), device=dev)
    bad = dk.tensor(np.array([[0, 1, 2, 3, 1000003]], np.int64), device=dev)
    dev.synchronize()
    graph = dk.graphs.Graph()
    with dk.graphs.capture(graph, dev):
        ops.gather(x, 0, bad)
    stream = dev.stream()
    graph.replay(stream)
    holder = [stream]
    del stream
    err = _stderr_of(holder.clear)  # the last reference: Stream_Destroy
    assert "Stream_Destroy" in err and ("1000003" in err or "gather" in err), (
        f"a stream destroyed with a failing gather queued on it reported {err.strip()!r} through "
        f"the SDK; the header says Stream_Destroy returns the stream's pending asynchronous error")
    try:
        dev.synchronize()
    except dk.DeviceKitError as e:
        raise AssertionError(f"the destroyed stream's error surfaced again at Device_Synchronize: "
                             f"{e}") from None
    graph.reset()


def event_elapsed_not_reached(ctx):
    """An event behind a long chain of copies: while it is pending,
    Event_ElapsedTime must fail with FAILED_PRECONDITION (a plugin that
    answers with a time is caught whenever the event was not yet reached)."""
    dev = ctx.device
    n = 32 << 20
    stream = dev.stream()
    src, dst = dev.alloc(n), dev.alloc(n)
    start = dev.event()
    start.record(stream)
    start.synchronize()
    refused = 0
    try:
        for _ in range(3):
            for _ in range(6):
                dev.copy_d2d(dst, src, n, stream=stream)
            end = dev.event()
            end.record(stream)
            try:
                ms = start.elapsed_ms(end)
            except dk.DeviceKitError as e:
                assert e.code == "FAILED_PRECONDITION", (
                    f"Event_ElapsedTime of a recorded, not yet reached event failed with "
                    f"{e.code}; the header says DK_ERROR_FAILED_PRECONDITION: {e}")
                refused += 1
            else:
                assert end.query(), (
                    f"Event_ElapsedTime returned {ms} ms for an event that Event_Query then "
                    f"said was not reached; it must fail with DK_ERROR_FAILED_PRECONDITION")
            stream.synchronize()
            assert start.elapsed_ms(end) >= 0, "elapsed time of a reached later event is negative"
    finally:
        stream.synchronize()
        src.free()
        dst.free()
    if not refused:
        raise Skip("each chain of copies had finished before Event_ElapsedTime was asked, so a "
                   "pending event could not be tried (the device is too fast for this check)")


def free_null(ctx):
    dev = ctx.device
    api = _api.of(dev)
    _settle(dev)
    before = dev.memory_stats()
    for _ in range(2):
        got = api.free(dev.index, None)
        assert got[0] == 0, (f"Memory_Free(device={dev.index}, ptr=NULL) returned "
                             f"{_api.describe(got)}; the header says NULL is a no-op (success)")
    after = dev.memory_stats()
    assert after == before, (f"Memory_Free(ptr=NULL) changed the memory statistics: {before} -> "
                             f"{after}; the header says NULL is a no-op")
    buf = dev.alloc(64)  # the device still works
    buf.free()


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def properties_bad_ordinal(ctx):
    dev = ctx.device
    api = _api.of(dev)
    count = len(dev.plugin.devices)
    own = api.ok("Device_GetProperties", _api.Properties(device=dev.index))
    want = dev.properties
    got = {"name": own.name.decode("utf-8", "replace"), "alignment": own.alignment,
           "total_memory": own.total_memory}
    assert got == {k: want[k] for k in got}, (
        f"Device_GetProperties(device={dev.index}) called directly gave {got}; the SDK reports "
        f"{ {k: want[k] for k in got} }")
    for ordinal in (count, count + 1, -1, INT32_MIN, INT32_MAX):
        a = _api.Properties(device=ordinal)
        outcome = api.call("Device_GetProperties", a)
        assert outcome[0] == _api.OUT_OF_RANGE, (
            f"Device_GetProperties(device={ordinal}) on a plugin with {count} device(s) returned "
            f"{_api.describe(outcome)}; the header says DK_ERROR_OUT_OF_RANGE for an invalid "
            f"ordinal")


def load_facts(ctx):
    import re

    dev = ctx.device
    api = _api.of(dev)
    info = api.ok("Plugin_GetInfo", _api.Info())
    for field in ("name", "vendor", "version", "attributes"):
        assert getattr(info, field) is not None, f"Plugin_GetInfo returned {field} = NULL"
    name = info.name.decode("utf-8", "replace")
    assert re.fullmatch(r"[a-z][a-z0-9_]*", name) and name == dev.plugin.name, (
        f"Plugin_GetInfo name {name!r}: expected a non-empty [a-z][a-z0-9_]* identifier, the "
        f"one the device is addressed by ({dev.plugin.name!r})")
    count = api.ok("Device_Count", _api.Count()).count
    assert 0 <= count <= 4096 and count == len(dev.plugin.devices), (
        f"Device_Count returned {count}; the SDK loaded {len(dev.plugin.devices)} devices and the "
        f"header says the count is fixed after Initialize, 0 <= count <= 4096")
    for ordinal in range(count):
        p = api.ok("Device_GetProperties", _api.Properties(device=ordinal))
        assert p.name is not None, f"Device_GetProperties({ordinal}) returned name = NULL"
        a = p.alignment
        assert a >= 16 and a & (a - 1) == 0, (
            f"Device_GetProperties({ordinal}) alignment {a}: expected a power of two >= 16")


def wait_event_other_device(ctx):
    dev = ctx.device
    others = [d for d in dev.plugin.devices if d.index != dev.index]
    if not others:
        raise Skip(f"needs a second device of plugin '{dev.plugin.name}' (it has 1): "
                   "Stream_WaitEvent on another device's event cannot be tried (the CPU "
                   "reference plugin gives two with DEVICEKIT_CPU_DEVICES=2, the emulated CUDA "
                   "one with DEVICEKIT_CUDA_SIM_DEVICES=2)")
    other = others[0]
    n, hops = 16 << 20, 6
    producer, waiter = dev.stream(), other.stream()
    bufs = [dev.alloc(n) for _ in range(hops + 1)]
    try:
        for round_ in range(3):
            host = np.full(n, 11 + round_, np.uint8)
            dev.copy_h2d(bufs[0], host, stream=producer)
            for i in range(hops):
                dev.copy_d2d(bufs[i + 1], bufs[i], n, stream=producer)
            done, passed = dev.event(), other.event()
            done.record(producer)
            waiter.wait_event(done)  # an event of another device of the same plugin
            passed.record(waiter)
            passed.synchronize()
            assert done.query(), (
                f"round {round_}: a stream of {other.name} that waited on an event of "
                f"{dev.name} went on before that event's point was reached (an event recorded "
                f"after the wait was reached first); the header lets the event belong to "
                f"another device of the same plugin")
            assert np.array_equal(_read_all(dev, bufs[-1]), host), f"round {round_}: stale data"
            producer.synchronize()
            waiter.synchronize()
    finally:
        dev.synchronize()
        other.synchronize()
        for b in bufs:
            b.free()


def _read_all(dev, buf):
    out = np.empty(buf.nbytes, np.uint8)
    dev.copy_d2h(out, buf)
    return out


FIXED = {"memory_stats_exact": memory_stats_exact,
         "event_query_while_pending": event_query_while_pending,
         "kernel_error_on_its_own_stream": kernel_error_on_its_own_stream,
         "memory_stats_peak": memory_stats_peak,
         "event_elapsed_milliseconds": event_elapsed_milliseconds,
         "event_elapsed_not_reached": event_elapsed_not_reached,
         "wait_event_edges": wait_event_edges,
         "stream_destroy": stream_destroy,
         "free_null": free_null,
         "properties_bad_ordinal": properties_bad_ordinal,
         "wait_event_other_device": wait_event_other_device,
         "load_facts": load_facts}


def cases(target):
    return [Case(id=f"runtime/{name}", section="runtime", fn=fn) for name, fn in FIXED.items()]
