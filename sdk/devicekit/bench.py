"""``devicekit bench --device NAME``: how fast is each of a plugin's kernels?

For every implemented base op that has a recipe below, every selected dtype
the kernel declares and every size: the best time per call (each repeat ends
with a device synchronize, so queued kernels have run), and the throughput it
implies, GB/s (bytes the kernel must read and write) and GFLOP/s (one
operation per output element for elementwise ops, per input element for
reductions, 2*M*N*K for matmul). Printed as a table, written as JSON with
``--json PATH`` (schema: docs/bench.md), progress on stderr.

Inputs are dense tensors of the kernel's own dtype on the device, so no SDK
cast or copy runs around the kernel: the time is the plugin's.
"""

import datetime
import hashlib
import json
import math
import platform
import sys
import time

SCHEMA = "devicekit.bench/1"

# op kind (device_api/spec/base_ops.json) -> how to call it. Kinds without a
# recipe (memory, generator, index, random, scan, select) are reported as
# skipped, never silently left out.
RECIPES = {"unary": 1, "binary": 2, "compare": 2, "logical": 2, "reduction": 1, "linalg": 2}
DEFAULT_SIZES = (1 << 12, 1 << 18, 1 << 22)  # elements
DEFAULT_MATMUL_SIZES = (64, 256, 512)        # M = N = K
ROW = 1024  # reductions run over the last axis of [size / ROW, ROW]


def _op_kinds():
    """op name -> kind, from the op spec shipped in devicekit/data."""
    from importlib import resources

    text = resources.files("devicekit").joinpath("data/base_ops.json").read_text()
    return {op["name"]: op["kind"] for op in json.loads(text)["ops"]}


def _inputs(kind, name, dtype, size, device):
    """(input tensors, output elements, flops) for one measurement."""
    import numpy as np

    import devicekit as dk

    rng = np.random.default_rng(0)
    if kind == "linalg":
        n = size
        a, b = (rng.uniform(-1, 1, (n, n)) for _ in range(2))
        return [dk.tensor(x, device=device, dtype=dtype) for x in (a, b)], n * n, 2 * n ** 3
    shape = (max(1, size // ROW), ROW) if kind == "reduction" else (size,)
    count = RECIPES[kind]
    if dtype == "bool":
        data = [rng.integers(0, 2, shape).astype(bool) for _ in range(count)]
    elif dtype.startswith(("int", "uint")):
        data = [rng.integers(1, 100, shape) for _ in range(count)]
    else:  # positive, away from 0: log, sqrt, rsqrt, reciprocal, pow stay finite
        data = [rng.uniform(0.5, 2.0, shape) for _ in range(count)]
    tensors = [dk.tensor(x, device=device, dtype=dtype) for x in data]
    out_elems = shape[0] if kind == "reduction" else size
    return tensors, out_elems, (size if kind == "reduction" else out_elems)


def _call(kind, name):
    from . import _core, ops

    if kind == "reduction":
        fn = {"reduce_sum": ops.sum, "reduce_max": ops.max, "reduce_min": ops.min,
              "argmax": ops.argmax}[name]
        return lambda xs: fn(xs[0], axis=-1)
    if kind == "linalg":
        return lambda xs: ops.matmul(*xs)
    op = _core.OP_NAMES.index(name)
    if RECIPES[kind] == 1:
        return lambda xs: _core.unary(op, xs[0])
    return lambda xs: _core.binary(op, xs[0], xs[1])


def _time(fn, sync, repeats, budget=0.05):
    """Best seconds per call: calls per repeat sized to ~budget seconds."""
    fn()
    sync()  # warm-up: first-call allocations and caches
    t0 = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - t0, 1e-7)
    calls = max(1, min(1000, int(budget / once)))
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best, calls


def _plugin_record(device):
    import devicekit as dk

    for r in dk.plugins():
        if r.loaded and any(d.name == device.name for d in r.devices):
            with open(r.path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            return {"name": r.name, "version": r.plugin.version,
                    "api_version": r.plugin.api_version, "path": r.path, "sha256": digest}
    return None


def plan(kernels, kinds, ops, dtypes):
    """[(op, kind, dtype)] to measure and [{op, dtype, reason}] skipped."""
    todo, skipped = [], []
    for k in kernels:
        name = k["op"]
        if ops and name not in ops:
            continue
        kind = kinds.get(name)
        if not k["implemented"]:
            if ops:
                skipped.append({"op": name, "dtype": None, "reason": "not implemented"})
            continue
        if kind not in RECIPES:
            skipped.append({"op": name, "dtype": None,
                            "reason": f"no benchmark recipe for {kind} ops"})
            continue
        wanted = k["dtypes"] if dtypes == ["all"] else [d for d in k["dtypes"] if d in dtypes]
        for dt in (dtypes if dtypes != ["all"] else []):
            if dt not in k["dtypes"]:
                skipped.append({"op": name, "dtype": dt, "reason": "dtype not declared"})
        todo += [(name, kind, dt) for dt in wanted]
    unknown = sorted(set(ops or ()) - {k["op"] for k in kernels})
    return todo, skipped, unknown


def measure(device_name, ops=None, dtypes=("float32",), sizes=DEFAULT_SIZES,
            matmul_sizes=DEFAULT_MATMUL_SIZES, repeats=5, progress=None):
    """Runs the benchmark; returns the JSON document (docs/bench.md)."""
    import devicekit as dk
    from . import __version__

    device = dk.device(device_name)
    plugin = next(r.plugin for r in dk.plugins()
                  if r.loaded and any(d.name == device.name for d in r.devices))
    todo, skipped, unknown = plan(plugin.kernels(), _op_kinds(), ops, list(dtypes))
    if unknown:
        raise dk.InvalidArgumentError(f"devicekit bench: unknown op(s) {', '.join(unknown)}; "
                                      f"expected base op names (docs/base_ops.md)")
    runs = [(op, kind, dt, n) for op, kind, dt in todo
            for n in (matmul_sizes if kind == "linalg" else sizes)]
    results = []
    sync = lambda: dk.synchronize(device)  # noqa: E731
    with dk.no_grad():
        for i, (op, kind, dt, n) in enumerate(runs, 1):
            if progress:
                progress(i, len(runs), op, dt, n)
            xs, out_elems, flops = _inputs(kind, op, dt, n, device)
            call = _call(kind, op)
            out = call(xs)
            sync()
            nbytes = sum(x.numpy().nbytes for x in xs) + out.numpy().nbytes
            seconds, calls = _time(lambda: call(xs), sync, repeats)
            results.append({"op": op, "dtype": dt, "size": n,
                            "shapes": [list(x.shape) for x in xs], "seconds": seconds,
                            "calls": calls, "repeats": repeats, "bytes": nbytes,
                            "flops": flops, "gbps": nbytes / seconds / 1e9,
                            "gflops": flops / seconds / 1e9})
    return {"schema": SCHEMA, "devicekit_version": __version__, "device": device.name,
            "plugin": _plugin_record(device),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": {"machine": platform.machine(), "system": platform.system(),
                     "python": platform.python_version()},
            "results": results, "skipped": skipped}


def table(doc):
    from .cli import _table

    rows = [(r["op"], r["dtype"], r["size"], f"{r['seconds'] * 1e6:.1f}", f"{r['gbps']:.2f}",
             f"{r['gflops']:.2f}") for r in doc["results"]]
    text = _table(rows, ["op", "dtype", "size", "us/call", "GB/s", "GFLOP/s"])
    if doc["skipped"]:
        text += "\n\nNot measured:\n" + "\n".join(
            f"- {s['op']}{' ' + s['dtype'] if s['dtype'] else ''}: {s['reason']}"
            for s in doc["skipped"])
    return text


def run(args) -> int:
    def progress(i, total, op, dt, n):
        line = f"[{i}/{total}] {op} {dt} {n}"
        if sys.stderr.isatty():
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    doc = measure(args.device, ops=args.ops or None, dtypes=args.dtypes or ["float32"],
                  sizes=args.sizes or DEFAULT_SIZES,
                  matmul_sizes=args.matmul_sizes or DEFAULT_MATMUL_SIZES,
                  repeats=args.repeats, progress=None if args.quiet else progress)
    if sys.stderr.isatty() and not args.quiet:
        print(file=sys.stderr)
    print(table(doc))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        print(f"\nJSON: {args.json}")
    return 0


def add_parser(sub):
    p = sub.add_parser(
        "bench", help="time each of a plugin's kernels: per op, dtype and size",
        description="Per (op, dtype, size): best time per call and throughput (GB/s, "
                    "GFLOP/s) of the plugin's own kernels on dense inputs of the kernel's "
                    "dtype. A table on stdout; --json writes the document docs/bench.md "
                    "describes.")
    p.add_argument("--device", required=True, help="device to measure, e.g. acme:0")
    p.add_argument("--op", dest="ops", action="append", default=[], metavar="OP",
                   help="only this base op (repeatable; default: every implemented op)")
    p.add_argument("--dtype", dest="dtypes", action="append", default=[], metavar="DTYPE",
                   help="only this dtype (repeatable; 'all': every declared dtype; "
                        "default: float32)")
    p.add_argument("--size", dest="sizes", action="append", type=int, default=[],
                   metavar="N", help="elements per input (repeatable; default: "
                   f"{', '.join(map(str, DEFAULT_SIZES))})")
    p.add_argument("--matmul-size", dest="matmul_sizes", action="append", type=int,
                   default=[], metavar="N",
                   help=f"M = N = K for matmul (default: "
                        f"{', '.join(map(str, DEFAULT_MATMUL_SIZES))})")
    p.add_argument("--repeats", type=int, default=5, help="repeats, best kept (default 5)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)
