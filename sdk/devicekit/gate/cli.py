"""``devicekit gate``: certify | check | matrix | sign (docs/gate.md).

Exit codes (each subcommand's ``--help`` lists its own): 0 record written /
admitted / matrix written / signed; 1 refused; 2 usage error, a
device/plugin that cannot be opened, a --baseline-binary that is not the
baseline's, or a key that is not an Ed25519 PEM key
(or ``cryptography`` missing); 3 a missing input (record, baseline, policy,
--binary, --baseline-binary, a key) or an output that cannot be written
(checked before any work; a write that fails after it leaves the previous file intact); 4 a
record that cannot be read as one (corrupted, truncated, too large, nested
too deep, a field missing or of the wrong type, content that does not match
its hashes); 5 a record of a newer schema; 6 a bad policy; 7 a record of
another plugin than the baseline; 8 ``--trust`` refused a signature; 124
``certify --timeout`` ran out (no record written); 130/143 Ctrl-C/SIGTERM.
"""

import argparse
import os
import sys
import tempfile
import time

from .._util import output as _output
from .errors import GateError
from .parts import Deadline, OutOfTime, probe_limit, run_child

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_OUTPUT = 0, 1, 2, _output.EXIT_OUTPUT
EXIT_TIMEOUT = 124  # as timeout(1): the run's --timeout ran out

_RECORD_CODES = """\
  4    a record that cannot be read as one: not JSON (truncated, corrupted), larger
       than 256 MiB, nested too deep, a field missing or of the wrong type or value
       (named by its path), content that does not match its hashes
  5    a record of a newer schema"""
CERTIFY_CODES = """exit codes:
  0    record written (whatever the results: judging is `gate check`'s job)
  2    usage error; a device/plugin that cannot be opened; a suite that produced no
       report; a --wheel without the certified library; a --sign key that is not an
       unencrypted Ed25519 PEM private key (or cryptography is not installed); a
       --from-reports report of another suite, binary, device or level
  3    --wheel, --perf-json, the --sign key or a --from-reports report not found;
       --out or --reports cannot be
       written (checked before any work; a write that fails after it leaves the
       previous file as it was)
  4    an unreadable --perf-json or --from-reports report, a --wheel that is not a zip
  124  --timeout ran out: the running part is stopped, no record is written
  130  Ctrl-C (143: SIGTERM)"""
CHECK_CODES = f"""exit codes:
  0    admitted
  1    refused (a table of reasons)
  2    usage error; a --trust key that is not an Ed25519 PEM public key; a
       --baseline-binary that is not the baseline's binary
  3    a missing input (record, baseline, policy, --binary, --baseline-binary,
       --trust key); --junit or
       --html cannot be written (checked before anything is read)
{_RECORD_CODES}
  6    a bad policy
  7    the record and the baseline certify different plugins
  8    --trust: the record or the baseline is unsigned, signed by a key not trusted,
       its signature does not verify, or it was edited after it was signed"""
MATRIX_CODES = f"""exit codes:
  0    matrix written
  2    usage error
  3    a missing record or policy; --out or --json cannot be written (checked first)
{_RECORD_CODES}
  6    a bad policy"""
SIGN_CODES = f"""exit codes:
  0    signed
  2    a --key that is not an unencrypted Ed25519 PEM private key (or cryptography
       is not installed)
  3    the record or the key not found; the output cannot be written
{_RECORD_CODES}"""


def add_parser(sub):
    p = sub.add_parser("gate", help="certify a plugin binary, gate it against its last record, "
                                    "show records as a matrix",
                       description="The release gate (docs/gate.md).")
    s = p.add_subparsers(dest="gate_command", metavar="{certify,check,matrix,sign}")
    fmt = argparse.RawDescriptionHelpFormatter
    c = s.add_parser("certify", help="run conformance (full), models and performance; write one "
                                     "certification record", epilog=CERTIFY_CODES,
                     formatter_class=fmt)
    c.add_argument("--device", help="device name, e.g. cpu:0 (with --plugin: one of its devices)")
    c.add_argument("--plugin", help="a plugin library path (development builds)")
    c.add_argument("--wheel", help="the plugin wheel being released (its sha256 goes in the record)")
    c.add_argument("--out", required=True, metavar="RECORD.json", help="where to write the record")
    c.add_argument("--reports", metavar="DIR",
                   help="also keep the full conformance/ and models/ reports here (CI artifacts)")
    c.add_argument("--from-reports", metavar="DIR",
                   help="do not run the suites: take DIR/conformance/report.json and "
                        "DIR/models/report.json from a run of `devicekit conformance` and "
                        "`devicekit models` on this same binary and device (checked: suite, "
                        "plugin sha256, device, level); performance is still measured")
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
                   help="models: only these (repeatable; default: every model, the zoo and the "
                        "hf-* transformers models)")
    c.add_argument("--model-dtype", action="append", default=[], metavar="DTYPE",
                   help="models: only these dtypes (repeatable; default: all)")
    c.add_argument("--perf-json", metavar="BENCH.json",
                   help="take the performance figures from a `devicekit bench --json` document")
    c.add_argument("--no-perf", action="store_true",
                   help="record no performance figures (a policy with performance enabled refuses it)")
    c.add_argument("--sign", metavar="KEY.pem",
                   help="sign the record with this Ed25519 private key (docs/gate.md, 'Signed "
                        "records'; needs devicekit[sign])")
    c.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="bound the whole run: each part gets what is left (conformance per case, "
                        "models per model, at most their defaults); past it, exit 124, no record")
    c.set_defaults(func=_certify)
    k = s.add_parser("check", help="apply the release policy to a record against the baseline "
                                   "(exit 0 admit, 1 refuse)", epilog=CHECK_CODES,
                     formatter_class=fmt)
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
    k.add_argument("--trust", action="append", default=[], metavar="PUB.pem",
                   help="admit only a record and baseline signed by one of these Ed25519 public "
                        "keys (repeatable; needs devicekit[sign])")
    # hidden: the date waivers expire against (tests pin it)
    k.add_argument("--today", metavar="YYYY-MM-DD", help=argparse.SUPPRESS)
    k.set_defaults(func=_check)
    m = s.add_parser("matrix", help="records side by side: plugins x DeviceKit versions",
                     epilog=MATRIX_CODES, formatter_class=fmt)
    m.add_argument("records", nargs="+", help="certification records")
    m.add_argument("--out", required=True, metavar="matrix.html", help="the HTML page to write")
    m.add_argument("--json", metavar="FILE", help="also write the matrix as JSON")
    m.add_argument("--policy", help="judge each record against the previous one of its plugin "
                                    "(the verdict column); default: no verdicts")
    m.set_defaults(func=_matrix)
    g = s.add_parser("sign", help="sign an existing record (e.g. a baseline) with a key",
                     epilog=SIGN_CODES, formatter_class=fmt)
    g.add_argument("record", help="the certification record")
    g.add_argument("--key", required=True, metavar="KEY.pem", help="an Ed25519 private key (PEM)")
    g.add_argument("--out", metavar="FILE", help="where to write the signed record (default: in "
                                                 "place)")
    g.set_defaults(func=_sign)
    p.set_defaults(func=lambda args: (p.print_usage(sys.stderr), EXIT_USAGE)[1])
    return p


def _err(cmd, message):
    print(f"devicekit gate {cmd}: error: {message}", file=sys.stderr)


def _gate_errors(cmd):
    """Runs a command body, mapping input and output errors to one line and their exit code."""
    def wrap(fn):
        def run(args):
            try:
                return fn(args)
            except GateError as e:
                _err(cmd, str(e))
                return e.exit_code
            except _output.OutputError as e:
                _err(cmd, str(e))
                return EXIT_OUTPUT
        return run
    return wrap


def _unwritable(cmd, *outputs):
    """Exit 3 with one line if an output (path, option, folder) cannot be written."""
    for path, option, folder in outputs:
        if path and (why := _output.output_problem(path, option, folder)):
            _err(cmd, why)
            return EXIT_OUTPUT
    return None


@_gate_errors("certify")
def _certify(args):
    if not args.device and not args.plugin:
        _err("certify", "give --device NAME or --plugin PATH")
        return EXIT_USAGE
    if args.from_reports and (args.op or args.case or args.model or args.model_dtype
                              or args.reports):
        _err("certify", "--from-reports takes the suites' reports as they are: it excludes "
                        "--op, --case, --model, --model-dtype and --reports")
        return EXIT_USAGE
    if args.from_reports and not os.path.isdir(args.from_reports):
        _err("certify", f"{args.from_reports}: --from-reports folder not found")
        return 3
    if args.perf_json and args.no_perf:
        _err("certify", "--perf-json and --no-perf exclude each other")
        return EXIT_USAGE
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        _err("certify", f"--timeout must be > 0 seconds, got {args.timeout:g}")
        return EXIT_USAGE
    for path, option in ((args.wheel, "--wheel"), (args.perf_json, "--perf-json")):
        if path and not os.path.isfile(path):
            _err("certify", f"{path}: {option} not found")
            return 3
    if code := _unwritable("certify", (args.out, "--out", False),
                           (args.reports, "--reports", True)):
        return code
    key = None
    if args.sign:
        from . import sign

        key = sign.load_private(args.sign)
    deadline = Deadline(args.timeout)
    try:
        with probe_limit(deadline):
            return _certify_run(args, key, deadline)
    except OutOfTime as e:
        _err("certify", f"--timeout {args.timeout:g} s ran out during {e.part} (after "
                        f"{time.monotonic() - deadline.start:.1f} s); it was stopped and no record "
                        f"was written")
        return EXIT_TIMEOUT


class _Stop(Exception):
    """A certify step that cannot go on: one line, then exit ``code`` (no record)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


def _certify_run(args, key, deadline):
    from . import record

    timing = {}
    try:
        target = _certify_open(args, deadline)
        p = target.device.plugin
        kernels, fused = p.kernels(), _fused(p)
        _check_wheel(args, p.path)
        with tempfile.TemporaryDirectory(prefix="devicekit-certify-") as tmp:
            if args.from_reports:
                reps = _certify_from_reports(args, target)
            else:
                reps = _certify_suites(args, target.plugin, deadline, args.reports or tmp, timing)
            machine = record.host_info()
            t0 = time.monotonic()
            perf_section = _certify_perf(args, target.plugin, deadline, tmp, machine)
    except _Stop as e:
        _err("certify", e.message)
        return e.code
    timing["performance_s"] = round(time.monotonic() - t0, 3)
    timing["certify_s"] = round(time.monotonic() - deadline.start, 3)
    deadline.enter("writing the record")
    rec = record.build(reps["conformance"], reps["models"], perf_section, kernels, fused,
                       wheel=args.wheel, timing=timing)
    record.write(rec, args.out, key)
    c, m = rec["conformance"], rec["models"]
    print(f"certified {p.name} {p.version} sha256 {rec['plugin']['sha256'][:16]}: conformance "
          f"{c['by_outcome'].get('pass', 0)}/{len(c['cases'])} pass "
          f"({'passed' if c['passed'] else 'FAILED'}), models "
          f"{m['by_outcome'].get('pass', 0)}/{len(m['cases'])} pass "
          f"({'passed' if m['passed'] else 'FAILED'}), {len(perf_section['results'])} perf "
          f"figures, {timing['certify_s']:.0f} s" + (", signed" if key else "")
          + f" -> {args.out}")
    return EXIT_OK


def _certify_open(args, deadline):
    """The device under test (its ``plugin``: the absolute path, or None)."""
    from .. import errors
    from ..conformance.target import open_target

    plugin = os.path.abspath(args.plugin) if args.plugin else None
    deadline.enter("opening the plugin")
    try:
        target = open_target(args.device, plugin)
    except errors.DeviceKitError as e:
        deadline.enter("opening the plugin")  # the probe's time limit was the deadline
        raise _Stop(EXIT_USAGE, " ".join(str(e).split())) from None
    deadline.enter("opening the plugin")
    return target


def _check_wheel(args, lib):
    """--wheel must hold the library being certified."""
    from . import record

    if args.wheel and not record.wheel_info(args.wheel, record.sha256_file(lib))["library_member"]:
        raise _Stop(EXIT_USAGE, f"{args.wheel}: no file in this wheel is the plugin library being "
                                f"certified ({os.path.realpath(lib)}); install this wheel and "
                                f"certify its plugin")


def _certify_suites(args, plugin, deadline, folder, timing):
    """Runs conformance, then models, each a child process writing its report
    under ``folder``; returns their report.json documents by suite."""
    import json

    where = (["--plugin", plugin] if plugin else []) + (["--device", args.device]
                                                        if args.device else [])
    reps = {}
    conf_extra = ["--level", args.level, "--timeout", f"{deadline.cap(120.0):.3f}"] + \
        [x for op in args.op for x in ("--op", op)] + \
        [x for cid in args.case for x in ("--case", cid)]
    models_extra = [x for m in args.model for x in ("--model", m)] + \
        [x for d in args.model_dtype for x in ("--dtype", d)]
    for suite, extra in (("conformance", conf_extra), ("models", models_extra)):
        deadline.enter(suite)
        if suite == "models":  # per model: what is left now
            extra = ["--timeout", f"{deadline.cap(600.0):.3f}", *extra]
        t0 = time.monotonic()
        out = os.path.join(folder, suite)
        print(f"devicekit gate certify: running {suite} ...", file=sys.stderr, flush=True)
        code = run_child(["-m", "devicekit", suite, *where, "--jobs", str(args.jobs),
                          "--report", out, *extra], deadline, suite)
        timing[f"{suite}_s"] = round(time.monotonic() - t0, 3)
        path = os.path.join(out, "report.json")
        if code not in (0, 1) or not os.path.exists(path):
            raise _Stop(EXIT_USAGE, f"devicekit {suite} exited {code} without a report; no "
                                    f"record written")
        with open(path) as f:
            reps[suite] = json.load(f)
    return reps


def _certify_from_reports(args, target):
    """The suites' report.json documents under --from-reports, each checked to
    be the named suite's, of the binary being certified (sha256), on the same
    device, and (conformance) at the requested level: a record must never
    certify one binary with another's results."""
    import json

    from . import record

    sha = record.sha256_file(target.device.plugin.path)
    reps = {}
    for suite in ("conformance", "models"):
        path = os.path.join(args.from_reports, suite, "report.json")
        try:
            with open(path) as f:
                rep = json.load(f)
        except FileNotFoundError:
            raise _Stop(3, f"{path}: not found (--from-reports needs DIR/conformance/ and "
                           f"DIR/models/ as `devicekit {suite} --report DIR/{suite}` writes "
                           f"them)") from None
        except (OSError, ValueError) as e:
            raise _Stop(4, f"{path}: not readable JSON: {e}") from None
        # a models report says so; a conformance report has no "suite" key
        kind = rep.get("suite", "conformance") if isinstance(rep, dict) else None
        if kind != suite or not isinstance(rep.get("cases"), list):
            raise _Stop(EXIT_USAGE, f"{path}: not a `devicekit {suite}` report (suite {kind!r})")
        theirs = (rep.get("plugin") or {}).get("sha256")
        if theirs != sha:
            raise _Stop(EXIT_USAGE, f"{path}: its plugin sha256 {str(theirs)[:16]} is not the "
                                    f"certified binary's {sha[:16]} "
                                    f"({target.device.plugin.path}); run the suites on this binary")
        device = (rep.get("device") or {}).get("name")
        if device != target.device.name:
            raise _Stop(EXIT_USAGE, f"{path}: ran on device {device!r}, not "
                                    f"{target.device.name!r}")
        if suite == "conformance" and (rep.get("run") or {}).get("level") != args.level:
            raise _Stop(EXIT_USAGE, f"{path}: conformance level "
                                    f"{(rep.get('run') or {}).get('level')!r}, not the requested "
                                    f"{args.level!r}")
        reps[suite] = rep
    return reps


def _certify_perf(args, plugin, deadline, tmp, machine):
    """The record's performance section: not measured (--no-perf), read from
    --perf-json, or measured now by a child process."""
    import json

    from . import perf

    if args.no_perf:
        return perf.not_measured(machine, "certify --no-perf")
    if args.perf_json:
        try:
            with open(args.perf_json) as f:
                doc = json.load(f)
        except FileNotFoundError:
            raise _Stop(3, f"{args.perf_json}: --perf-json not found") from None
        except (OSError, ValueError) as e:
            raise _Stop(4, f"{args.perf_json}: not readable JSON: {e}") from None
        return perf.from_bench(doc, machine, args.perf_json)
    deadline.enter("performance")
    print("devicekit gate certify: running the performance set ...", file=sys.stderr, flush=True)
    out = os.path.join(tmp, "performance.json")
    code = run_child(["-m", "devicekit.gate.parts", "performance", args.device or "",
                      plugin or "", out], deadline, "performance")
    if code != 0 or not os.path.exists(out):
        raise _Stop(EXIT_USAGE, f"the performance set exited {code} without figures; no "
                                f"record written")
    with open(out) as f:
        return json.load(f)


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

    if code := _unwritable("check", (args.junit, "--junit", False), (args.html, "--html", False)):
        return code
    today = None
    if args.today:
        try:
            today = datetime.date.fromisoformat(args.today)
        except ValueError:
            _err("check", f"--today {args.today!r} is not YYYY-MM-DD")
            return EXIT_USAGE
    trust = None
    if args.trust:
        from . import sign

        trust = sign.load_trusted(args.trust)
    pol = policy_mod.load(args.policy)
    notes = []
    base = record.load(args.baseline, "baseline", trust, notes)
    new = record.load(args.record, "record", trust, notes)
    from . import paired  # performance timed alternately, if the policy says so (docs/gate.md)
    timed = lambda: paired.time_check(new, base, pol, args.binary,  # noqa: E731
                                      args.baseline_binary, paired.progress_line)
    v = check(new, base, pol, args.record, args.baseline, binary=args.binary, today=today,
              timed=timed)
    v.notes[:0] = notes
    print(reports.text(v))
    files = {path: render(v) for path, render in ((args.junit, reports.junit_xml),
                                                  (args.html, reports.html)) if path}
    _output.write_files(files)  # both or neither; on failure exit 3, previous files intact
    return EXIT_OK if v.admitted else EXIT_REFUSED


@_gate_errors("matrix")
def _matrix(args):
    from . import matrix
    from . import policy as policy_mod
    from . import record

    if code := _unwritable("matrix", (args.out, "--out", False), (args.json, "--json", False)):
        return code
    pol = policy_mod.load(args.policy) if args.policy else None
    recs = [(path, record.load(path, "record")) for path in args.records]
    doc = matrix.build(recs, pol)
    files = {args.out: matrix.html(doc)}
    if args.json:
        files[args.json] = record.dumps(doc) + "\n"
    _output.write_files(files)
    print(matrix.text(doc))
    print(f"matrix: {args.out}" + (f", {args.json}" if args.json else ""))
    return EXIT_OK


@_gate_errors("sign")
def _sign(args):
    from . import record, sign

    out = args.out or args.record
    if code := _unwritable("sign", (out, "--out" if args.out else "record", False)):
        return code
    key = sign.load_private(args.key)
    doc = record.read(args.record, "record")  # checked: a damaged record is not signed
    sealed = record.seal(doc, key)
    record.write_text(record.dumps(sealed) + "\n", out)
    print(f"signed {args.record} with key {sign.short(sign.keyid(key.public_key()))} -> {out}")
    return EXIT_OK
