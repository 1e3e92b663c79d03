"""``devicekit gate``: certify | check | matrix (docs/gate.md).

Exit codes: 0 record written / admitted / matrix written; 1 refused;
2 usage error or a device/plugin that cannot be opened (check: also a
--baseline-binary that is not the baseline's); 3 a missing input (record,
baseline, policy, --binary, --baseline-binary); 4 a corrupted or truncated record;
5 a record of a newer schema; 6 a bad policy; 7 a record of another plugin
than the baseline. Every output file is written to a temporary name and
renamed, so a failed command leaves no partial file behind.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time

from .errors import GateError

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def add_parser(sub):
    p = sub.add_parser("gate", help="certify a plugin binary, gate it against its last record, "
                                    "show records as a matrix",
                       description="The release gate (docs/gate.md).")
    s = p.add_subparsers(dest="gate_command", metavar="{certify,check,matrix}")
    c = s.add_parser("certify", help="run conformance (full), models and performance; write one "
                                     "certification record")
    c.add_argument("--device", help="device name, e.g. cpu:0 (with --plugin: one of its devices)")
    c.add_argument("--plugin", help="a plugin library path (development builds)")
    c.add_argument("--wheel", help="the plugin wheel being released (its sha256 goes in the record)")
    c.add_argument("--out", required=True, metavar="RECORD.json", help="where to write the record")
    c.add_argument("--reports", metavar="DIR",
                   help="also keep the full conformance/ and models/ reports here (CI artifacts)")
    c.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes for conformance and models (default: CPU count)")
    c.add_argument("--level", choices=("core", "full"), default="full",
                   help="conformance level (default full; the release policy requires full)")
    c.add_argument("--op", action="append", default=[], metavar="NAME",
                   help="conformance: only op NAME (repeatable; a partial record, which the "
                        "release policy refuses; for development loops and tests)")
    c.add_argument("--case", action="append", default=[], metavar="ID",
                   help="conformance: only this case id (repeatable; a partial record)")
    c.add_argument("--model", action="append", default=[], metavar="NAME",
                   help="models: only these (repeatable; default: the whole zoo)")
    c.add_argument("--model-dtype", action="append", default=[], metavar="DTYPE",
                   help="models: only these dtypes (repeatable; default: all)")
    c.add_argument("--perf-json", metavar="BENCH.json",
                   help="take the performance figures from a `devicekit bench --json` document")
    c.add_argument("--no-perf", action="store_true",
                   help="record no performance figures (a policy with performance enabled refuses it)")
    c.set_defaults(func=_certify)
    k = s.add_parser("check", help="apply the release policy to a record against the baseline "
                                   "(exit 0 admit, 1 refuse)")
    k.add_argument("record", help="the new certification record")
    k.add_argument("--baseline", required=True, help="the plugin's last certified record")
    k.add_argument("--policy", required=True,
                   help="the policy file (e.g. ci/policy.toml), or 'release': the release "
                        "policy installed with devicekit")
    k.add_argument("--binary", help="the file being released (library or wheel; default: the "
                                    "library the record names)")
    k.add_argument("--baseline-binary", metavar="FILE",
                   help="the baseline's certified library or wheel, when the library its record "
                        "names is gone or rebuilt (timing performance.timing = 'alternate')")
    k.add_argument("--junit", metavar="FILE", help="write the verdict as JUnit XML")
    k.add_argument("--html", metavar="FILE", help="write the verdict as HTML")
    # hidden: the date waivers expire against (tests pin it)
    k.add_argument("--today", metavar="YYYY-MM-DD", help=argparse.SUPPRESS)
    k.set_defaults(func=_check)
    m = s.add_parser("matrix", help="records side by side: plugins x DeviceKit versions")
    m.add_argument("records", nargs="+", help="certification records")
    m.add_argument("--out", required=True, metavar="matrix.html", help="the HTML page to write")
    m.add_argument("--json", metavar="FILE", help="also write the matrix as JSON")
    m.add_argument("--policy", help="judge each record against the previous one of its plugin "
                                    "(the verdict column); default: no verdicts")
    m.set_defaults(func=_matrix)
    p.set_defaults(func=lambda args: (p.print_usage(sys.stderr), EXIT_USAGE)[1])
    return p


def _err(cmd, message):
    print(f"devicekit gate {cmd}: error: {message}", file=sys.stderr)


def _gate_errors(cmd):
    """Runs a command body, mapping input errors to one line and their exit code."""
    def wrap(fn):
        def run(args):
            try:
                return fn(args)
            except GateError as e:
                _err(cmd, str(e))
                return e.exit_code
        return run
    return wrap


@_gate_errors("certify")
def _certify(args):
    import json

    from .. import cli as dk_cli
    from .. import errors
    from ..conformance.target import open_target
    from . import perf, record

    if not args.device and not args.plugin:
        _err("certify", "give --device NAME or --plugin PATH")
        return EXIT_USAGE
    if args.wheel and not os.path.isfile(args.wheel):
        _err("certify", f"{args.wheel}: --wheel not found")
        return 3
    if args.perf_json and args.no_perf:
        _err("certify", "--perf-json and --no-perf exclude each other")
        return EXIT_USAGE
    plugin = os.path.abspath(args.plugin) if args.plugin else None
    try:
        target = open_target(args.device, plugin)
    except errors.DeviceKitError as e:
        _err("certify", " ".join(str(e).split()))
        return EXIT_USAGE
    lib = target.device.plugin.path
    if args.wheel and not record.wheel_info(args.wheel, record.sha256_file(lib))["library_member"]:
        _err("certify", f"{args.wheel}: no file in this wheel is the plugin library being "
                        f"certified ({os.path.realpath(lib)}); install this wheel and certify "
                        f"its plugin")
        return EXIT_USAGE
    where = (["--plugin", plugin] if plugin else []) + (["--device", args.device]
                                                        if args.device else [])
    timing, start = {}, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="devicekit-certify-") as tmp:
        folder = args.reports or tmp
        reps = {}
        conf_extra = ["--level", args.level] + [x for op in args.op for x in ("--op", op)] + \
            [x for cid in args.case for x in ("--case", cid)]
        models_extra = [x for m in args.model for x in ("--model", m)] + \
            [x for d in args.model_dtype for x in ("--dtype", d)]
        for suite, extra in (("conformance", conf_extra), ("models", models_extra)):
            t0 = time.monotonic()
            out = os.path.join(folder, suite)
            print(f"devicekit gate certify: running {suite} ...", file=sys.stderr)
            with contextlib.redirect_stdout(sys.stderr):  # stdout keeps only the verdict
                code = dk_cli.main([suite, *where, "--jobs", str(args.jobs), "--report", out,
                                    *extra])
            timing[f"{suite}_s"] = round(time.monotonic() - t0, 3)
            path = os.path.join(out, "report.json")
            if code not in (0, 1) or not os.path.exists(path):
                _err("certify", f"devicekit {suite} exited {code} without a report; no record "
                                f"written")
                return EXIT_USAGE
            with open(path) as f:
                reps[suite] = json.load(f)
    machine = record.host_info()
    t0 = time.monotonic()
    if args.no_perf:
        perf_section = perf.not_measured(machine, "certify --no-perf")
    elif args.perf_json:
        try:
            with open(args.perf_json) as f:
                doc = json.load(f)
        except FileNotFoundError:
            _err("certify", f"{args.perf_json}: --perf-json not found")
            return 3
        except (OSError, ValueError) as e:
            _err("certify", f"{args.perf_json}: not readable JSON: {e}")
            return 4
        perf_section = perf.from_bench(doc, machine, args.perf_json)
    else:
        print("devicekit gate certify: running the performance set ...", file=sys.stderr)
        perf_section = perf.measure(target.device, target.device.plugin.kernels(), machine)
    timing["performance_s"] = round(time.monotonic() - t0, 3)
    timing["certify_s"] = round(time.monotonic() - start, 3)
    p = target.device.plugin
    rec = record.build(reps["conformance"], reps["models"], perf_section, p.kernels(),
                       _fused(p), wheel=args.wheel, timing=timing)
    record.write(rec, args.out)
    c, m = rec["conformance"], rec["models"]
    print(f"certified {p.name} {p.version} sha256 {rec['plugin']['sha256'][:16]}: conformance "
          f"{c['by_outcome'].get('pass', 0)}/{len(c['cases'])} pass "
          f"({'passed' if c['passed'] else 'FAILED'}), models "
          f"{m['by_outcome'].get('pass', 0)}/{len(m['cases'])} pass "
          f"({'passed' if m['passed'] else 'FAILED'}), {len(perf_section['results'])} perf "
          f"figures, {timing['certify_s']:.0f} s -> {args.out}")
    return EXIT_OK


def _fused(plugin):
    """[{op, name}] of the plugin's fused kernels (empty if this SDK cannot list them)."""
    try:
        rows = plugin.fused_kernels()
    except (AttributeError, TypeError):
        return []
    out = []
    for r in rows:
        out.append({k: r[k] for k in ("op", "name") if k in r} if isinstance(r, dict) else str(r))
    return out


@_gate_errors("check")
def _check(args):
    import datetime

    from . import policy as policy_mod
    from . import record, reports
    from .check import check

    for opt in ("junit", "html"):
        path = getattr(args, opt)
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            _err("check", f"{path}: --{opt} folder does not exist")
            return EXIT_USAGE
    today = None
    if args.today:
        try:
            today = datetime.date.fromisoformat(args.today)
        except ValueError:
            _err("check", f"--today {args.today!r} is not YYYY-MM-DD")
            return EXIT_USAGE
    pol = policy_mod.load(args.policy)
    base = record.load(args.baseline, "baseline")
    new = record.load(args.record, "record")
    from . import paired  # performance timed alternately, if the policy says so (docs/gate.md)
    timed = lambda: paired.time_check(new, base, pol, args.binary,  # noqa: E731
                                      args.baseline_binary, paired.progress_line)
    v = check(new, base, pol, args.record, args.baseline, binary=args.binary, today=today,
              timed=timed)
    print(reports.text(v))
    if args.junit:
        record.write_text(reports.junit_xml(v), args.junit)
    if args.html:
        record.write_text(reports.html(v), args.html)
    return EXIT_OK if v.admitted else EXIT_REFUSED


@_gate_errors("matrix")
def _matrix(args):
    from . import matrix
    from . import policy as policy_mod
    from . import record

    pol = policy_mod.load(args.policy) if args.policy else None
    recs = [(path, record.load(path, "record")) for path in args.records]
    doc = matrix.build(recs, pol)
    record.write_text(matrix.html(doc), args.out)
    if args.json:
        record.write(doc, args.json)
    print(matrix.text(doc))
    print(f"matrix: {args.out}" + (f", {args.json}" if args.json else ""))
    return EXIT_OK
