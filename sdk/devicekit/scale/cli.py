"""``devicekit report merge`` and ``devicekit ray`` (docs/scale.md).

Exit codes of both: 0 the merged run passed, 1 it failed (as the single run
would exit); 2 usage error, an --out/--report folder that cannot be written
(``ray``: also a shard that produced no report, or ray not installed); 3 a
shard report not found; 4 a truncated or corrupted report, or one made
without --shard; 5 shards of different plugin binaries (sha256); 6 shards
of different DeviceKit versions; 7 shards that do not form one run (another
split or selection, a shard given twice, a shard missing).
Nothing is written unless the merge succeeds.
"""

import argparse
import sys

EXIT_USAGE = 2


def add_parser(sub):
    p = sub.add_parser("report", help="work with suite reports (merge shard reports)")
    s = p.add_subparsers(dest="report_command", metavar="{merge}")
    m = s.add_parser("merge", help="join the reports of --shard K/N runs into the single run's "
                                   "report.json, junit.xml and report.html")
    m.add_argument("shards", nargs="+", metavar="SHARD",
                   help="a shard's --report folder or its report.json (all N of them)")
    m.add_argument("--out", required=True, metavar="DIR", help="where to write the merged reports")
    m.set_defaults(func=_merge)
    p.set_defaults(func=lambda args: (p.print_usage(sys.stderr), EXIT_USAGE)[1])

    r = sub.add_parser("ray", help="run a suite's shards as Ray tasks and merge them "
                                   "(pip install devicekit[ray])",
                       description="Run 'devicekit SUITE ... --shard K/N' for K = 1..N as one Ray "
                                   "task each, placed on nodes that offer the device's custom "
                                   "resource, and merge the reports (docs/scale.md).")
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


def _finish(rep, out, extra="", cmd="report merge"):
    from . import merge

    try:
        paths = merge.write(rep, out)
    except OSError as e:
        print(f"devicekit {cmd}: error: {out}: cannot write the merged reports: "
              f"{e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    s = rep["summary"]
    print(f"merged {len(rep['run']['shards'])} shards{extra}: {s['total']} cases, "
          f"{s['by_outcome'].get('pass', 0)} pass, {s['fatal']} fatal -> "
          f"{'PASSED' if s['passed'] else 'FAILED'}")
    print(f"reports: {', '.join(paths.values())}")
    return 0 if s["passed"] else 1


def _merge(args):
    from . import merge

    try:
        rep = merge.merge([merge.load(p) for p in args.shards])
    except merge.MergeError as e:
        return _fail("report merge", e)
    return _finish(rep, args.out)


def _ray(args):
    from . import merge, ray_runner

    try:
        reps, where = ray_runner.run(args.suite, args.suite_args, args.shards,
                                     address=args.address, resource=args.resource)
        rep = merge.merge(reps)
    except merge.MergeError as e:
        return _fail("ray", e)
    return _finish(rep, args.report, f" from Ray nodes {', '.join(sorted(set(where)))}", "ray")
