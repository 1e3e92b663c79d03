"""nanoGPT's lesson as a tool: pad matmul sizes to multiples the device likes.

nanoGPT got about 25% faster when its vocabulary went from 50257 to 50304, a
multiple of 64. :func:`advise` records the matmuls one forward of a model
launches (shapes and the layer that launched them), times each distinct
shape on the device at its configured size and with its K or N dimension
padded to the next multiple of 8, 16, 32, 64 and 128, and suggests padding
where the padded matmul does the configured work at least ``threshold``
(default 10%) faster. Throughput counts only the configured (useful) flops,
so padding must pay for its extra work. Timings are best-of-``repeats`` on
the device with a synchronize; they are measurements of this machine, not a
test.
"""

import contextlib
import math
import time

import devicekit as dk

from .. import ops
from ..autograd import no_grad
from ..tensor import ones
from . import harness as H

MULTIPLES = (8, 16, 32, 64, 128)
THRESHOLD = 0.10


@contextlib.contextmanager
def _recording(log):
    """Records ``(a.shape, b.shape)`` of every ``ops.matmul`` call meanwhile.
    The composites call ``ops.matmul`` through the module, so wrapping the
    module attribute for the duration sees them all; it is restored after.
    Process-wide while active: the advisor is a measuring tool, not used
    concurrently with other work in the process."""
    real = ops.matmul

    def recorded(a, b):
        log.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b)
    ops.matmul = recorded
    try:
        yield
    finally:
        ops.matmul = real


def matmul_shapes(model, device):
    """[(a shape, b shape), layers, calls] of one no_grad float32 forward, per distinct shape pair."""
    master = H.master_params(model, device, "float32")
    inp = H.device_inputs(model, device, "float32")
    p = H.cast_params(master, "float32")
    found = {}
    x = None
    with no_grad():
        for layer in model.layers():
            log = []
            with _recording(log):
                x = layer.fn(p, x, inp)
            for key in log:
                entry = found.setdefault(key, {"layers": [], "calls": 0})
                entry["calls"] += 1
                if layer.name not in entry["layers"]:
                    entry["layers"].append(layer.name)
    return [(k, v["layers"], v["calls"]) for k, v in found.items()]


def device_timer(device, repeats=7, min_time=2e-3):
    """``timer([(a_shape, b_shape), ...]) -> [seconds per float32 ops.matmul]``
    on ``device``. The shapes are timed interleaved, round by round, and each
    keeps its best round: load that comes and goes on a shared machine then
    hits every candidate alike instead of favouring whichever ran in a quiet
    moment."""
    def timer(shapes):
        pairs = [(ones(*a, device=device), ones(*b, device=device)) for a, b in shapes]

        def rep(a, b, calls):
            t0 = time.perf_counter()
            for _ in range(calls):
                ops.matmul(a, b)
            dk.synchronize(device)
            return (time.perf_counter() - t0) / calls
        counts = []
        for a, b in pairs:
            rep(a, b, 1)  # warm-up (allocator, packing buffers)
            calls = 1
            while rep(a, b, calls) * calls < min_time and calls < 1 << 12:  # above timer noise
                calls *= 4
            counts.append(calls)
        best = [math.inf] * len(pairs)
        for _ in range(repeats):
            for i, ((a, b), calls) in enumerate(zip(pairs, counts)):
                best[i] = min(best[i], rep(a, b, calls))
        return best
    return timer


def _next_multiple(v, m):
    return int(math.ceil(v / m) * m)


def advise(model, device, threshold=THRESHOLD, timer=None):
    """Rows, one per (matmul shape, padded dim, padded size): the configured
    and padded times, the gain in useful throughput, and ``suggest`` when
    the gain exceeds ``threshold``. ``timer`` (see :func:`device_timer`,
    the default) times a list of (a shape, b shape)."""
    timer = timer or device_timer(device)
    rows = []
    for (a, b), layers, calls in matmul_shapes(model, device):
        if len(a) < 2 or len(b) < 2:
            continue
        k, n = a[-1], b[-1]
        candidates = []
        for dim, size in (("N", n), ("K", k)):
            for padded in sorted({_next_multiple(size, mult) for mult in MULTIPLES} - {size}):
                pa = (*a[:-1], padded) if dim == "K" else a
                pb = (*b[:-2], padded, n) if dim == "K" else (*b[:-1], padded)
                candidates.append((dim, size, padded, pa, pb))
        if not candidates:
            continue
        base, *times = timer([(a, b)] + [(pa, pb) for *_, pa, pb in candidates])
        for (dim, size, padded, _, _), t in zip(candidates, times):
            gain = base / t - 1.0 if t > 0 else 0.0
            rows.append({"a": list(a), "b": list(b), "layers": layers, "calls": calls,
                         "dim": dim, "size": size, "padded": padded,
                         "multiple": max(x for x in MULTIPLES if padded % x == 0),
                         "time_s": base, "padded_time_s": t, "gain": gain,
                         "suggest": bool(gain > threshold)})
    return rows


def summary(rows):
    """One line per suggestion: the best padding of each (shape, dim)."""
    best = {}
    for r in rows:
        if r["suggest"]:
            key = (tuple(r["a"]), tuple(r["b"]), r["dim"])
            if key not in best or r["gain"] > best[key]["gain"]:
                best[key] = r
    return [f"pad {r['dim']} {r['size']} -> {r['padded']} (multiple of {r['multiple']}) in "
            f"matmul {r['a']} @ {r['b']} of {', '.join(r['layers'])}: "
            f"{1 + r['gain']:.2f}x useful throughput" for r in best.values()]
