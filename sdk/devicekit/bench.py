"""``devicekit bench --device NAME``: how fast is each of a plugin's kernels?

For every implemented base op (every kind of the op spec has a recipe,
_recipe), every selected dtype the kernel declares and every size: the best
time per call (each repeat ends with a device synchronize, so queued kernels
have run), and the throughput it implies, GB/s (bytes the kernel must read and
write) and GFLOP/s (one operation per output element for elementwise ops, per
input element for reductions, scans and scatter_add, 2*M*N*K for matmul; none
for copy, fill, cast, gather and random, which only move bytes). Printed as a
table, written as JSON with ``--json PATH`` (schema: docs/bench.md), progress
on stderr. What is not measured is listed with the reason.

Inputs are tensors of the kernel's own dtype on the device, dense except the
transposed view copy materialises, so no SDK cast or copy runs around the
kernel: the time is the plugin's. Each measurement first checks that its call
reached the op's kernel (the SDK's dispatch counters), so no time of an SDK
shortcut is ever reported as the kernel's.

Exit codes (:data:`EXIT_CODES_HELP`, also in ``--help``): 0 measured; 1 an
unknown device or op (one line); 2 usage; 3 a --json path that cannot be
written (checked before measuring) or a write that failed; 130/143 Ctrl-C /
SIGTERM. The JSON is written atomically (``devicekit._util.output``).
"""

import argparse
import datetime
import hashlib
import json
import math
import platform
import sys
import time
from importlib import resources

import numpy as np

import devicekit as dk

from . import _core
from ._util import output as _output
from ._version import __version__
from ._util.text import table as _table
from .dtypes import as_dtype

SCHEMA = "devicekit.bench/1"
EXIT_CODES_HELP = f"""\
exit codes:
  0    measured (what could not be measured is listed with the reason)
  1    an unknown device or op name (one line)
  2    usage error
  3    the --json file cannot be written (checked before measuring), or
       writing it failed (one line; a previous file is left as it was)
{_output.INTERRUPT_CODES_HELP}"""

# Every op kind of device_api/spec/base_ops.json has a recipe (_recipe; the
# table in docs/bench.md): what the kernel is given, and what one call must
# move and compute. An op of a kind not listed here (a newer spec) is reported
# as skipped with the reason, never silently left out.
KINDS = ("unary", "binary", "compare", "logical", "select", "reduction", "scan", "linalg",
         "memory", "generator", "index", "random")
DEFAULT_SIZES = (1 << 12, 1 << 18, 1 << 22)  # elements
DEFAULT_MATMUL_SIZES = (64, 256, 512)        # M = N = K
ROW = 1024  # reductions, scans and index ops run along the last axis of [size / ROW, ROW]


def _op_specs():
    """op name -> its entry in the op spec shipped in devicekit/data."""
    text = resources.files("devicekit").joinpath("data/base_ops.json").read_text()
    return {op["name"]: op for op in json.loads(text)["ops"]}


def _op_kinds():
    return {name: op["kind"] for name, op in _op_specs().items()}


def _rows(size):
    """[rows, cols] for the row-wise recipes: rows of ROW elements, or two
    rows when size is below 2 * ROW (so a transpose is really strided)."""
    cols = ROW if size >= 2 * ROW else max(1, size // 2)
    return (max(1, size // cols), cols)


class _Recipe:
    """One measurement: input tensors, the call, flops per call, and a line
    saying exactly what is timed (the JSON's ``recipe``)."""

    def __init__(self, inputs, call, flops, text):
        self.inputs, self.call, self.flops, self.text = inputs, call, flops, text


def _recipe(spec, dtype, size, device):
    name, kind = spec["name"], spec["kind"]
    op = _core.OP_NAMES.index(name)
    rng = np.random.default_rng(0)

    def data(shape, dt=dtype):
        if dt == "bool":
            x = rng.integers(0, 2, shape).astype(bool)
        elif dt.startswith(("int", "uint")):
            x = rng.integers(1, 100, shape)
        else:  # positive, away from 0: log, sqrt, rsqrt, reciprocal, pow stay finite
            x = rng.uniform(0.5, 2.0, shape)
        return dk.tensor(x, device=device, dtype=dt)

    def dt_id(dt):
        return as_dtype(dt).id

    if kind == "linalg":
        a, b = data((size, size)), data((size, size))
        return _Recipe([a, b], lambda xs: _core.matmul(*xs), 2 * size ** 3,
                       f"matmul [{size},{size}] @ [{size},{size}]")
    if kind in ("unary", "binary", "compare", "logical"):
        xs = [data((size,)) for _ in spec["inputs"]]
        call = ((lambda xs: _core.unary(op, xs[0])) if len(xs) == 1
                else (lambda xs: _core.binary(op, xs[0], xs[1])))
        return _Recipe(xs, call, size, f"{name} of {len(xs)} dense [{size}]")
    if kind == "select":
        xs = [data((size,), "bool"), data((size,)), data((size,))]
        return _Recipe(xs, lambda xs: _core.where(*xs), size,
                       f"where(bool [{size}], [{size}], [{size}])")
    shape = _rows(size)
    n = shape[0] * shape[1]
    if kind == "reduction":
        fn = (lambda x: _core.argmax(x, 1)) if name == "argmax" else \
            (lambda x: _core.reduce(op, x, 1 << 1))
        return _Recipe([data(shape)], lambda xs: fn(xs[0]), n,
                       f"{name} of {list(shape)} over axis 1")
    if kind == "scan":
        return _Recipe([data(shape)], lambda xs: _core.cumsum(xs[0], 1), n,
                       f"{name} of {list(shape)} along axis 1")
    if kind == "index":
        index = dk.tensor(rng.integers(0, shape[1], shape), device=device, dtype="int64")
        if name == "gather":
            return _Recipe([data(shape), index], lambda xs: _core.gather(xs[0], 1, xs[1]), 0,
                           f"gather {list(shape)} along axis 1, random int64 index")
        if name == "scatter_add":
            return _Recipe([data(shape), index, data(shape)],
                           lambda xs: _core.scatter_add(xs[0], 1, xs[1], xs[2]), n,
                           f"scatter_add into {list(shape)} along axis 1, random int64 index")
    if kind == "memory":
        if name == "copy":
            x = data(shape).T  # a transposed view: the copy kernel materialises it
            return _Recipe([x], lambda xs: xs[0].contiguous(), 0,
                           f"copy: transposed view {list(x.shape)} made contiguous")
        if name == "fill":
            value = True if dtype == "bool" else 1
            return _Recipe([], lambda xs: _core.full(device, [size], dt_id(dtype), value), 0,
                           f"fill [{size}] with {value}")
        if name == "cast":
            target = "float16" if dtype == "float32" else "float32"
            tid = dt_id(target)
            return _Recipe([data((size,))], lambda xs: xs[0]._cast(tid), 0,
                           f"cast [{size}] {dtype} -> {target}")
    if kind == "generator" and name == "iota":
        did = dt_id(dtype)
        return _Recipe([], lambda xs: _core.iota(device, [size], did, 0, 0, 1), size,
                       f"iota [{size}] from 0 by 1")
    if kind == "random":
        did = dt_id(dtype)
        return _Recipe([], lambda xs: _core.random(op, device, [size], did, 1, 0), 0,
                       f"{name} [{size}] (seed 1, offset 0)")
    return None


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
    for r in dk.plugins():
        if r.loaded and any(d.name == device.name for d in r.devices):
            with open(r.path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            return {"name": r.name, "version": r.plugin.version,
                    "api_version": r.plugin.api_version, "path": r.path, "sha256": digest}
    return None


def plan(kernels, specs, ops, dtypes):
    """[(op spec, dtype)] to measure and [{op, dtype, reason}] skipped."""
    todo, skipped = [], []
    for k in kernels:
        name = k["op"]
        if ops and name not in ops:
            continue
        spec = specs.get(name)
        if not k["implemented"]:
            if ops:
                skipped.append({"op": name, "dtype": None, "reason": "not implemented"})
            continue
        if spec is None or spec["kind"] not in KINDS:
            kind = spec["kind"] if spec else "unknown"
            skipped.append({"op": name, "dtype": None,
                            "reason": f"no benchmark recipe for {kind} ops"})
            continue
        wanted = k["dtypes"] if dtypes == ["all"] else [d for d in k["dtypes"] if d in dtypes]
        for dt in (dtypes if dtypes != ["all"] else []):
            if dt not in k["dtypes"]:
                skipped.append({"op": name, "dtype": dt, "reason": "dtype not declared"})
        todo += [(spec, dt) for dt in wanted]
    unknown = sorted(set(ops or ()) - {k["op"] for k in kernels})
    return todo, skipped, unknown


def _kernel_calls(name):
    return _core.dispatch_stats()[name]["kernel"]


def measure(device_name, ops=None, dtypes=("float32",), sizes=DEFAULT_SIZES,
            matmul_sizes=DEFAULT_MATMUL_SIZES, repeats=5, progress=None):
    """Runs the benchmark; returns the JSON document (docs/bench.md)."""
    device = dk.device(device_name)
    plugin = next(r.plugin for r in dk.plugins()
                  if r.loaded and any(d.name == device.name for d in r.devices))
    todo, skipped, unknown = plan(plugin.kernels(), _op_specs(), ops, list(dtypes))
    if unknown:
        raise dk.InvalidArgumentError(f"devicekit bench: unknown op(s) {', '.join(unknown)}; "
                                      f"expected base op names (docs/base_ops.md)")
    runs = [(spec, dt, n) for spec, dt in todo
            for n in (matmul_sizes if spec["kind"] == "linalg" else sizes)]
    results = []
    sync = lambda: dk.synchronize(device)  # noqa: E731
    with dk.no_grad():
        for i, (spec, dt, n) in enumerate(runs, 1):
            op = spec["name"]
            if progress:
                progress(i, len(runs), op, dt, n)
            r = _recipe(spec, dt, n, device)
            if r is None:
                skipped.append({"op": op, "dtype": dt, "reason": f"no benchmark recipe for "
                                f"{op} ({spec['kind']} ops)"})
                continue
            before = _kernel_calls(op)
            out = r.call(r.inputs)
            sync()
            if _kernel_calls(op) == before:
                # The SDK answered without the plugin's kernel (e.g. an empty
                # tensor): a time here would not be the kernel's.
                skipped.append({"op": op, "dtype": dt, "size": n,
                                "reason": f"the recipe ({r.text}) did not reach the {op} "
                                          f"kernel"})
                continue
            nbytes = sum(x.numpy().nbytes for x in r.inputs) + out.numpy().nbytes
            xs = r.inputs
            seconds, calls = _time(lambda r=r, xs=xs: r.call(xs), sync, repeats)
            results.append({"op": op, "dtype": dt, "size": n, "recipe": r.text,
                            "shapes": [list(x.shape) for x in xs], "seconds": seconds,
                            "calls": calls, "repeats": repeats, "bytes": nbytes,
                            "flops": r.flops, "gbps": nbytes / seconds / 1e9,
                            "gflops": r.flops / seconds / 1e9})
    return {"schema": SCHEMA, "devicekit_version": __version__, "device": device.name,
            "plugin": _plugin_record(device),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": {"machine": platform.machine(), "system": platform.system(),
                     "python": platform.python_version()},
            "results": results, "skipped": skipped}


def table(doc):

    rows = [(r["op"], r["dtype"], r["size"], f"{r['seconds'] * 1e6:.1f}", f"{r['gbps']:.2f}",
             f"{r['gflops']:.2f}" if r["flops"] else "-") for r in doc["results"]]
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

    if args.json and (why := _output.output_problem(args.json, "--json")):
        print(f"devicekit bench: error: {why}", file=sys.stderr)
        return _output.EXIT_OUTPUT
    doc = measure(args.device, ops=args.ops or None, dtypes=args.dtypes or ["float32"],
                  sizes=args.sizes or DEFAULT_SIZES,
                  matmul_sizes=args.matmul_sizes or DEFAULT_MATMUL_SIZES,
                  repeats=args.repeats, progress=None if args.quiet else progress)
    if sys.stderr.isatty() and not args.quiet:
        print(file=sys.stderr)
    print(table(doc))
    if args.json:
        try:
            _output.write_file(args.json, json.dumps(doc, indent=2) + "\n")
        except _output.OutputError as e:
            print(f"devicekit bench: error: {e}", file=sys.stderr)
            return _output.EXIT_OUTPUT
        print(f"\nJSON: {args.json}")
    return 0


def add_parser(sub):
    p = sub.add_parser(
        "bench", help="time each of a plugin's kernels: per op, dtype and size",
        description="Per (op, dtype, size): best time per call and throughput (GB/s, "
                    "GFLOP/s) of the plugin's own kernels on dense inputs of the kernel's "
                    "dtype. A table on stdout; --json writes the document docs/bench.md "
                    "describes.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
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
