"""``devicekit report merge`` and ``devicekit ray`` (docs/scale.md).

Exit codes of both: 0 the merged run passed, 1 it failed (as the single run
would exit); 2 usage error (``ray``: also a shard that produced no report, or
ray not installed); 3 an --out/--report folder that cannot be written
(checked before anything else) or a shard report not found; 4 a truncated,
corrupted, oversized or malformed report, one made without --shard, or one
listing a case id twice; 5 shards of different plugin binaries (sha256); 6
shards of different DeviceKit versions; 7 shards that do not form one run
(another split or selection, a shard given twice, a shard missing, a case in
two shards). Nothing is written unless the merge succeeds, and then the three
files are replaced as one set.
"""

import argparse
import sys

from .._util.output import EXIT_OUTPUT

EXIT_USAGE = 2
EXIT_BAD_REPORT = 4  # merge.BadReport's

EPILOG = """exit codes: 0 the merged run passed; 1 it failed (as the single run would exit);
2 usage error; 3 --out cannot be written (checked first) or a shard report not
found; 4 a shard report that is truncated, corrupted, larger than 256 MiB,
malformed, made without --shard, or lists a case id twice; 5 shards of different
plugin binaries; 6 of different DeviceKit versions; 7 shards that are not one run
(another split or selection, a shard given twice or missing, a case in two shards).
Nothing is written unless the merge succeeds (docs/scale.md)."""


def add_parser(sub):
    p = sub.add_parser("report", help="work with suite reports (merge shard reports)")
    s = p.add_subparsers(dest="report_command", metavar="{merge}")
    m = s.add_parser("merge", help="join the reports of --shard K/N runs into the single run's "
                                   "report.json, junit.xml and report.html",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("shards", nargs="+", metavar="SHARD",
                   help="a shard's --report folder or its report.json (all N of them)")
    m.add_argument("--out", required=True, metavar="DIR", help="where to write the merged reports")
    m.set_defaults(func=_merge)
    p.set_defaults(func=lambda args: (p.print_usage(sys.stderr), EXIT_USAGE)[1])

    r = sub.add_parser("ray", help="run a suite's shards as Ray tasks and merge them "
                                   "(pip install devicekit[ray])",
                       description="Run 'devicekit SUITE ... --shard K/N' for K = 1..N as one Ray "
                                   "task each, placed on nodes that offer the device's custom "
                                   "resource, and merge the reports (docs/scale.md).",
                       epilog="exit codes: as 'devicekit report merge' (3: --report cannot be "
                              "written); 2 also a shard that produced no report, or ray not "
                              "installed.")
    r.add_argument("--address", default=None,
                   help="the Ray cluster to join (ray.init's address, e.g. 'auto' or "
                        "ray://head:10001); default: a fresh local Ray")
    r.add_argument("--shards", type=int, required=True, metavar="N",
                   help="number of shards (Ray tasks)")
    r.add_argument("--resource", metavar="NAME",
                   help="the custom resource a task needs one unit of (default: devicekit_<plugin> "
                        "from --device, e.g. devicekit_cpu)")
    r.add_argument("--report", required=True, metavar="DIR",
                   help="where to write the merged reports")
    r.add_argument("suite", choices=("conformance", "models"))
    r.add_argument("suite_args", nargs=argparse.REMAINDER,
                   help="the suite's own arguments (--device is required; not --report, --shard)")
    r.set_defaults(func=_ray)


def _fail(cmd, e):
    print(f"devicekit {cmd}: error: {e}", file=sys.stderr)
    return e.exit_code


def _output_ready(out, option, cmd):
    """None if ``out`` can take the merged reports (stale temporaries of a
    killed merge removed), else the exit code, after its one line."""
    from .._util.output import output_problem
    from . import merge

    problem = output_problem(out, option, folder=True)
    if problem:
        print(f"devicekit {cmd}: error: {problem}", file=sys.stderr)
        return EXIT_OUTPUT
    merge.remove_stale_temps(out)
    return None


def _merged(items, cmd):
    """(report, rendered) from the loaded shards, or (None, exit code). A shape
    the field checks of merge.parse did not foresee still ends in one line and
    exit 4, never a traceback."""
    from . import merge

    try:
        rep = merge.merge(items)
        return rep, merge.render(rep)
    except merge.MergeError as e:
        return None, _fail(cmd, e)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        where = ", ".join(str(p) for p, _ in items)[:200]
        print(f"devicekit {cmd}: error: {where}: a field of the shard reports has an unexpected "
              f"shape ({type(e).__name__}: {str(e)[:80]}); they were edited or made by another "
              f"DeviceKit", file=sys.stderr)
        return None, EXIT_BAD_REPORT


def _finish(rep, texts, out, extra="", cmd="report merge"):
    from .._util.output import OutputError
    from . import merge

    try:
        paths = merge.write(rep, out, texts)
    except OutputError as e:
        print(f"devicekit {cmd}: error: {e}", file=sys.stderr)
        return EXIT_OUTPUT
    s = rep["summary"]
    print(f"merged {len(rep['run']['shards'])} shards{extra}: {s['total']} cases, "
          f"{s['by_outcome'].get('pass', 0)} pass, {s['fatal']} fatal -> "
          f"{'PASSED' if s['passed'] else 'FAILED'}")
    print(f"reports: {', '.join(paths.values())}")
    return 0 if s["passed"] else 1


def _merge(args):
    from . import merge

    code = _output_ready(args.out, "--out", "report merge")
    if code is not None:
        return code
    try:
        items = [merge.load(p) for p in args.shards]
    except merge.MergeError as e:
        return _fail("report merge", e)
    rep, texts = _merged(items, "report merge")
    return _finish(rep, texts, args.out) if rep is not None else texts


def _ray(args):
    from . import merge, ray_runner

    code = _output_ready(args.report, "--report", "ray")
    if code is not None:
        return code
    try:
        items, where = ray_runner.run(args.suite, args.suite_args, args.shards,
                                      address=args.address, resource=args.resource)
    except merge.MergeError as e:
        return _fail("ray", e)
    rep, texts = _merged(items, "ray")
    if rep is None:
        return texts
    return _finish(rep, texts, args.report, f" from Ray nodes {', '.join(sorted(set(where)))}",
                   "ray")
