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

Timing is bench's own (``devicekit.bench._time``): a warm-up call, then ``repeats`` timed runs of
``calls`` back-to-back calls (sized to ~50 ms) ending with a device
synchronize; the best run is kept, which is what keeps noise from flapping
the gate's ratio (docs/gate.md).
"""

from ..bench import _time as _best_time

SOURCE = "devicekit.gate.perf/1"
BENCH_SCHEMA = "devicekit.bench/1"
N, ROW, MM = 1 << 20, 1024, 256
# (op, kind, size): size is elements per input, or n of the n x n x n matmul.
SET = (("add", "binary", N), ("mul", "binary", N), ("exp", "unary", N),
       ("reduce_sum", "reduction", N), ("matmul", "linalg", MM))


def _case(op, kind, size, device):
    import numpy as np

    import devicekit as dk
    from devicekit import ops

    rng = np.random.default_rng(0)
    t = lambda shape: dk.tensor(rng.uniform(0.5, 2.0, shape), device=device,  # noqa: E731
                                dtype="float32")
    if kind == "linalg":
        xs = [t((size, size)), t((size, size))]
        return xs, lambda: ops.matmul(*xs), 3 * size * size * 4, 2 * size ** 3
    if kind == "reduction":
        xs = [t((size // ROW, ROW))]
        return xs, lambda: ops.sum(xs[0], axis=-1), (size + size // ROW) * 4, size
    if kind == "unary":
        xs = [t((size,))]
        return xs, lambda: getattr(ops, op)(xs[0]), 2 * size * 4, size
    xs = [t((size,)), t((size,))]
    return xs, lambda: getattr(ops, op)(*xs), 3 * size * 4, size


def measure(device, kernels, machine, repeats=7, progress=None):
    """The performance section of a record, measured on ``device``."""
    import devicekit as dk

    implemented = {k["op"] for k in kernels if k.get("implemented") and "float32" in k["dtypes"]}
    results, skipped = [], []
    with dk.no_grad():
        for op, kind, size in SET:
            if op not in implemented:
                skipped.append({"op": op, "dtype": "float32",
                                "reason": "the plugin does not implement this kernel in float32"})
                continue
            if progress:
                progress(f"perf {op} float32 {size}")
            xs, call, nbytes, flops = _case(op, kind, size, device)
            seconds, calls = _best_time(call, lambda: dk.synchronize(device), repeats)
            results.append({"op": op, "dtype": "float32", "size": size,
                            "shapes": [list(x.shape) for x in xs], "seconds": seconds,
                            "calls": calls, "repeats": repeats, "bytes": nbytes, "flops": flops,
                            "gbps": nbytes / seconds / 1e9, "gflops": flops / seconds / 1e9})
    return {"measured": True, "source": SOURCE, "machine": machine, "results": results,
            "skipped": skipped}


def not_measured(machine, reason):
    return {"measured": False, "source": None, "machine": machine, "results": [],
            "skipped": [], "reason": reason}


def from_bench(doc, machine, path):
    """The performance section from a ``devicekit bench --json`` document."""
    from .errors import BadRecord

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
