"""The timing loops the benchmarks share (run them as scripts from any
folder: Python puts benchmarks/ on sys.path, so ``from _timing import best_of``
works)."""

import statistics
import time


def best_of(fn, repeats, finish=None, calls=1):
    """Best wall time over ``repeats`` runs of ``calls`` back-to-back calls of
    ``fn`` followed by one ``finish()`` (e.g. a device synchronize, so queued
    kernels have really run), in seconds per call."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if finish:
            finish()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def alternate(sides, repeats, calls=1):
    """Times several sides in turn, ``repeats`` rounds of ``calls`` calls each,
    so a load change on a shared machine hits every side alike.

    ``sides``: {name: (fn, finish or None)}. Returns {name: [(wall, host)]}
    per round, seconds per call: ``wall`` includes ``finish()``; ``host`` is
    the calling thread's CPU time up to the last call's return, before
    ``finish()`` (what the host spent issuing the work: Python, the SDK,
    enqueueing; not the kernels, which run on the device's own threads)."""
    out = {name: [] for name in sides}
    for _ in range(repeats):
        for name, (fn, finish) in sides.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                fn()
            c1 = time.thread_time()
            if finish:
                finish()
            out[name].append(((time.perf_counter() - t0) / calls, (c1 - c0) / calls))
    return out


def spread(values):
    """(median, min, max) of ``values``."""
    return statistics.median(values), min(values), max(values)
