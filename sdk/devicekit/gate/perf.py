"""The short performance set ``devicekit gate certify`` measures.

Certify measures a small fixed set through the public ``devicekit.ops``
(the figures a release compares must not move when ``devicekit bench``'s
default sweep changes):
add, mul, exp (1M elements), reduce_sum over rows of 1024, matmul 256^3, all
float32, each only when the plugin implements the kernel (skips are listed
with their reason, never dropped). The rows use the bench JSON's fields
(``op, dtype, size, shapes, seconds, calls, repeats, bytes, flops``), so a
``devicekit.bench/1`` document can feed the record instead
(``certify --perf-json BENCH.json``, :func:`from_bench`).

Each figure is a *ratio* to a machine-local reference measured interleaved
with it in the same run: numpy doing the same work on the same host data
(:data:`REFERENCE`; matmul through ``np.einsum``'s single-threaded loop).
One round times a batch of plugin calls (~5 ms, ending with a device
synchronize) and a batch of numpy calls, back to back, alternating which
goes first, for :data:`ROUNDS` rounds; the figure is the plugin's best time
per call over the rounds divided by numpy's best (:func:`interleaved`).
Load that lasts the whole run (another job sharing the cores and the memory
bus, a slower or throttled machine) slows both sides alike and cancels in
the ratio; load that comes and goes faster than a round (time slices of
other processes) is filtered by the best-of, which both sides get the same
chances at because their batches alternate. The median of per-round ratios
was tried first: with load changing within a round it spread 1.8-3.9x
between trials on a loaded 2-core machine, the ratio of bests 1.3-1.8x
(docs/gate.md, "Performance"). ``gate check`` compares ratios, new / baseline,
under a policy with ``performance.timing = "recorded"``; the release policy
instead times both binaries alternately in the check itself (:mod:`.paired`,
which reuses :data:`SET`, :func:`calls_for` and :func:`batch_timer`).
"""

import time

import numpy as np

import devicekit as dk
from devicekit import ops

from .errors import BadRecord

SOURCE = "devicekit.gate.perf/2"
REFERENCE = "numpy"
BENCH_SCHEMA = "devicekit.bench/1"
N, ROW, MM = 1 << 20, 1024, 256
# (op, kind, size): size is elements per input, or n of the n x n x n matmul.
SET = (("add", "binary", N), ("mul", "binary", N), ("exp", "unary", N),
       ("reduce_sum", "reduction", N), ("matmul", "linalg", MM))


def _case(op, kind, size, device):
    """(device inputs, plugin call, numpy call on the same data, bytes, flops).
    numpy writes into a preallocated ``out``: a fresh 4 MB result per call
    costs page faults whose number follows the process's allocator history
    (glibc's mmap threshold moves), which moved the reference 40% between
    processes; the plugin side allocates through DeviceKit's caching
    allocator. Single-threaded numpy against the two-threaded reference
    plugin: splitting the reference over one thread per core was tried and
    was no steadier (thread dispatch costs as much as a 1M-element add)."""
    rng = np.random.default_rng(0)
    host = []

    def t(shape):
        a = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        host.append(a)
        return dk.tensor(a, device=device, dtype="float32")

    if kind == "linalg":
        xs = [t((size, size)), t((size, size))]
        # einsum's own loop, not np.matmul: numpy's BLAS runs its own thread
        # pool, whose threads fight other load erratically (ratios spread 46x
        # between trials on a loaded 2-core machine; einsum's: 1.3x)
        out = np.empty((size, size), np.float32)
        return (xs, lambda: ops.matmul(*xs), lambda: np.einsum("ij,jk->ik", *host, out=out),
                3 * size * size * 4, 2 * size ** 3)
    if kind == "reduction":
        xs = [t((size // ROW, ROW))]
        out = np.empty(size // ROW, np.float32)
        return (xs, lambda: ops.sum(xs[0], axis=-1), lambda: host[0].sum(axis=-1, out=out),
                (size + size // ROW) * 4, size)
    out = np.empty(size, np.float32)
    if kind == "unary":
        xs = [t((size,))]
        fn = getattr(np, op)
        return (xs, lambda: getattr(ops, op)(xs[0]), lambda: fn(host[0], out=out),
                2 * size * 4, size)
    xs = [t((size,)), t((size,))]
    fn = {"add": np.add, "mul": np.multiply}[op]
    return xs, lambda: getattr(ops, op)(*xs), lambda: fn(*host, out=out), 3 * size * 4, size


def batch_timer(call, sync, calls, clock=time.perf_counter):
    """A function timing one batch: ``calls`` back-to-back calls, then ``sync``."""
    def run():
        t0 = clock()
        for _ in range(calls):
            call()
        sync()
        return clock() - t0
    return run


def calls_for(call, sync, budget=0.005, clock=time.perf_counter):
    """Calls per batch so that one batch takes about ``budget`` seconds: the
    best of three single calls after a warm-up (one call that other work
    preempted would make every batch too short). Short batches, many rounds:
    the two sides of a round then see the same load."""
    call()
    sync()  # warm-up: first-call allocations and caches
    best = float("inf")
    for _ in range(3):
        t0 = clock()
        call()
        sync()
        best = min(best, clock() - t0)
    return max(1, min(1000, int(budget / max(best, 1e-7))))


def interleaved(plugin_batch, reference_batch, plugin_calls, reference_calls, rounds):
    """Times ``rounds`` pairs of batches, alternating which side goes first
    (ABBA...: a drift in load falls on both sides alike), and returns
    {seconds, reference_seconds (best per call of each side), ratio (their
    quotient), ratios (per round, for a person reading the record)}. The
    batch functions return seconds; tests pass scripted ones."""
    plugin_s, ref_s, ratios = [], [], []
    for i in range(rounds):
        if i % 2 == 0:
            p, r = plugin_batch(), reference_batch()
        else:
            r, p = reference_batch(), plugin_batch()
        p, r = p / plugin_calls, r / reference_calls
        plugin_s.append(p)
        ref_s.append(r)
        ratios.append(p / max(r, 1e-12))
    best, ref_best = min(plugin_s), min(ref_s)
    return {"seconds": best, "reference_seconds": ref_best, "ratio": best / max(ref_best, 1e-12),
            "ratios": [round(x, 6) for x in ratios]}


ROUNDS = 31


def measure(device, kernels, machine, repeats=ROUNDS, progress=None):
    """The performance section of a record, measured on ``device``;
    ``repeats`` is the number of interleaved rounds per figure."""
    implemented = {k["op"] for k in kernels if k.get("implemented") and "float32" in k["dtypes"]}
    results, skipped = [], []
    sync = lambda: dk.synchronize(device)  # noqa: E731
    with dk.no_grad():
        for op, kind, size in SET:
            if op not in implemented:
                skipped.append({"op": op, "dtype": "float32",
                                "reason": "the plugin does not implement this kernel in float32"})
                continue
            if progress:
                progress(f"perf {op} float32 {size}")
            xs, call, ref, nbytes, flops = _case(op, kind, size, device)
            calls, ref_calls = calls_for(call, sync), calls_for(ref, lambda: None)
            m = interleaved(batch_timer(call, sync, calls), batch_timer(ref, lambda: None, ref_calls),
                            calls, ref_calls, repeats)
            results.append({"op": op, "dtype": "float32", "size": size,
                            "shapes": [list(x.shape) for x in xs], "seconds": m["seconds"],
                            "calls": calls, "repeats": repeats, "bytes": nbytes, "flops": flops,
                            "gbps": nbytes / m["seconds"] / 1e9,
                            "gflops": flops / m["seconds"] / 1e9, "reference": REFERENCE,
                            "reference_seconds": m["reference_seconds"],
                            "reference_calls": ref_calls, "ratio": m["ratio"],
                            "ratios": m["ratios"]})
    return {"measured": True, "source": SOURCE, "machine": machine, "results": results,
            "skipped": skipped}


def not_measured(machine, reason):
    return {"measured": False, "source": None, "machine": machine, "results": [],
            "skipped": [], "reason": reason}


def from_bench(doc, machine, path):
    """The performance section from a ``devicekit bench --json`` document."""
    if not isinstance(doc, dict) or doc.get("schema") != BENCH_SCHEMA:
        raise BadRecord(path, f"not a {BENCH_SCHEMA} document (see docs/bench.md)")
    keep = ("op", "dtype", "size", "shapes", "seconds", "calls", "repeats", "bytes", "flops",
            "gbps", "gflops")
    return {"measured": True, "source": BENCH_SCHEMA, "machine": machine,
            "results": [{k: r.get(k) for k in keep} for r in doc.get("results", [])],
            "skipped": doc.get("skipped", [])}


def key(row):
    """How a figure is matched between two records."""
    return f"{row['op']}/{row['dtype']}/{row['size']}"
