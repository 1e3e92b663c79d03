"""The one timing loop the benchmarks share (run them as scripts from any
folder: Python puts benchmarks/ on sys.path, so ``from _timing import best_of``
works)."""

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
