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

(The worker also checks, after every case of every section, that the device
synchronizes cleanly and that the plugin's bytes in use equal what the SDK
holds: a late error or a leak is blamed on the case that caused it.)
"""

import gc

import numpy as np

from devicekit.conformance.case import Case, Section, Skip

from . import _raw

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


FIXED = {"memory_stats_exact": memory_stats_exact,
         "event_query_while_pending": event_query_while_pending,
         "kernel_error_on_its_own_stream": kernel_error_on_its_own_stream}


def cases(target):
    return [Case(id=f"runtime/{name}", section="runtime", fn=fn) for name, fn in FIXED.items()]
