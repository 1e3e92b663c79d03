"""``devicekit conformance``: run the suite against one device, print a
summary, optionally write report.json / junit.xml / report.html.

Exit codes (also in ``--help``, :data:`EXIT_CODES_HELP`): 0 every required
case passed (and the corpus is complete); 1 any fail/error/crash, a required
not-implemented, a collapsed corpus, or a filter that selected nothing; 2
usage errors (including --timeout <= 0) or a plugin/device that cannot be
opened (its cause in one line); 3 a --report folder that cannot be written
(checked before any case runs) or a report write that failed (one line; the
previous reports are left as they were); 130 Ctrl-C (SIGINT), 143 SIGTERM:
the workers are stopped and the report, if asked for, is written, marked
partial and interrupted. ``diff`` has its own (``diff.EXIT_CODES_HELP``).
"""

import argparse
import os
import sys
import time

from .. import _output

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_OUTPUT = 0, 1, 2, _output.EXIT_OUTPUT
EXIT_CODES_HELP = f"""\
exit codes:
  0    every required case passed (and the corpus is complete)
  1    a fail/error/crash, a required not-implemented, a collapsed corpus, or a
       filter that selected nothing
  2    usage error (including --timeout <= 0), or the plugin/device cannot be
       opened (its cause in one line)
  3    --report cannot be written (checked before any case runs), or writing
       the reports failed (one line; the previous reports are left as they were)
{_output.INTERRUPT_CODES_HELP}\
       130 and 143 stop the workers and still write the --report, marked
       partial (run.partial and run.interrupted true)
"""


def add_parser(sub):
    p = sub.add_parser("conformance", help="run the conformance suite against a device",
                       description="Run the DeviceKit conformance suite against one device.",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", help="device name, e.g. cpu:0 (with --plugin: one of its devices)")
    p.add_argument("--plugin", help="a plugin library path (development builds; no install needed)")
    p.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                   help="run only cases whose id contains PATTERN (repeatable; a partial run)")
    p.add_argument("--case", dest="exact", action="append", default=[], metavar="ID",
                   help="run exactly this case id (repeatable; how failures replay)")
    p.add_argument("--op", dest="ops", action="append", default=[], metavar="NAME",
                   help="run only the cases of op NAME exactly (repeatable; 'add' is not "
                        "'scatter_add')")
    p.add_argument("--report", metavar="DIR", help="write report.json, junit.xml, report.html here")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: CPU count)")
    p.add_argument("--level", choices=("core", "full"), default="full",
                   help="core: no large shapes; full (default): everything")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    p.add_argument("--fuzz-seed", type=int, help="seed set of the fuzz section (default: this release's)")
    p.add_argument("--fuzz-cases", type=int, help="fuzz cases per (op, dtype) (level full; default 12)")
    p.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    p.add_argument("-x", "--exitfirst", action="store_true",
                   help="stop after the first fail/error/crash (a partial report; mutation runs)")
    p.add_argument("--shard", metavar="K/N",
                   help="run only part K of N (K from 1; round-robin over the selected cases); "
                        "join the parts with 'devicekit report merge' (docs/scale.md)")
    p.set_defaults(func=run)
    sub2 = p.add_subparsers(dest="conformance_command", metavar="{diff}")
    from .diff import EXIT_CODES_HELP as diff_codes
    d = sub2.add_parser("diff", help="compare two report.json files (exit 1 if anything that "
                                     "passed no longer does)",
                        description="Compare two conformance report.json files: regressed, "
                                    "newly passing, newly (not) implemented.",
                        epilog=diff_codes, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("old", help="the older report.json (or its folder)")
    d.add_argument("new", help="the newer report.json (or its folder)")
    d.add_argument("--html", metavar="FILE", help="also write the comparison as HTML")
    d.set_defaults(func=_diff)
    return p


def _diff(args):
    from .diff import main
    return main(args)


def _one_line(exc):
    return " ".join(str(exc).split())


class Progress:
    """A counter on a TTY (rewritten in place), a line every ~10% otherwise."""

    def __init__(self, total, stream=sys.stderr):
        self.total, self.done, self.bad, self.stream = total, 0, 0, stream
        self.tty = stream.isatty()
        self.next_mark = max(1, total // 10)
        self.start = time.monotonic()

    def __call__(self, case, result):
        self.done += 1
        if result["outcome"] in ("fail", "error", "crash"):
            self.bad += 1
            lead = "\r" if self.tty else ""
            print(f"{lead}{result['outcome'].upper()}: {case.id}", file=self.stream, flush=True)
        if self.tty:
            print(f"\r[{self.done}/{self.total}] {self.bad} problems  {case.id[:60]:<60}",
                  end="", file=self.stream, flush=True)
        elif self.done >= self.next_mark or self.done == self.total:
            self.next_mark += max(1, self.total // 10)
            print(f"[{self.done}/{self.total}] {self.bad} problems, "
                  f"{time.monotonic() - self.start:.1f} s", file=self.stream, flush=True)

    def finish(self):
        if self.tty:
            print(file=self.stream)


def partial_corpus(why, ran, total):
    """The corpus entry of a filtered or stopped run (the floor does not apply)."""
    return {"checked": False, "ok": True, "reason": f"partial run ({why}): {ran} of {total} cases"}


def run(args):
    try:
        return _run(args)
    except KeyboardInterrupt:  # before or after the cases (during them: a partial report)
        print(f"devicekit conformance: stopped by {_output.interrupt_name()}", file=sys.stderr)
        return _output.interrupt_exit_code()


def write_reports(prog, write, rep, folder):
    """``write(rep, folder)`` -> exit code: 0 (the paths printed) or
    EXIT_OUTPUT with one line (the previous reports are left as they were)."""
    try:
        paths = write(rep, folder)
    except _output.OutputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_OUTPUT
    print(f"reports: {', '.join(paths.values())}")
    return EXIT_OK


def stopped_line(prog, finished, unit, report):
    """The one line an interrupted suite run ends with."""
    return (f"{prog}: stopped by {_output.interrupt_name()}; {finished} {unit} finished" +
            (" (the report is written, marked partial)" if report else ""))


def _run(args):
    from .. import errors
    from . import console, registry, report, runner
    from .target import describe, open_target

    prog = "devicekit conformance"
    if not args.device and not args.plugin:
        print(f"{prog}: error: give --device NAME or --plugin PATH", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs < 1:
        print(f"{prog}: error: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if not args.timeout > 0:
        print(f"{prog}: error: --timeout must be > 0 seconds, got {args.timeout:g}",
              file=sys.stderr)
        return EXIT_USAGE
    shard = None
    if args.shard:
        from ..scale import shard as sharding
        try:
            shard = sharding.parse(args.shard)
        except sharding.ShardError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        if args.exitfirst:
            print(f"{prog}: error: --shard and --exitfirst exclude each other (a shard that "
                  f"stops early cannot be merged)", file=sys.stderr)
            return EXIT_USAGE
    if why := registry.configure_fuzz(args.fuzz_seed, args.fuzz_cases, args.exact):
        print(f"{prog}: error: {why}", file=sys.stderr)
        return EXIT_USAGE
    if args.report and (why := _output.output_problem(args.report, "--report", folder=True)):
        print(f"{prog}: error: {why}", file=sys.stderr)
        return EXIT_OUTPUT
    try:
        target = open_target(args.device, args.plugin, args.level)
    except errors.DeviceKitError as e:
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    all_cases, unavailable = registry.build(target)
    cases = registry.select(all_cases, args.patterns, args.exact, args.ops)
    selected = cases
    if shard and cases:
        if why := sharding.too_few(*shard, len(cases), "case"):
            print(f"{prog}: error: {why}", file=sys.stderr)
            return EXIT_USAGE
        cases = sharding.pick(cases, *shard)
    if args.list:
        print("\n".join(c.id for c in cases))
        return EXIT_OK
    if not cases:
        print(f"{prog}: no case matches {args.patterns + args.exact + args.ops}", file=sys.stderr)
        return EXIT_FAILED
    partial = len(cases) != len(all_cases)
    meta = describe(target)
    status = registry.implementation_status(target)
    print(console.header(meta, target, len(cases), args), file=sys.stderr)
    print(f"status: {registry.status_line(status)}", file=sys.stderr)
    progress = Progress(len(cases))
    start = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())
    interrupted = False
    try:
        results = runner.run(cases, device=target.device.name, plugin=target.plugin,
                             level=args.level, jobs=args.jobs, timeout=args.timeout,
                             on_result=progress, stop_on_failure=args.exitfirst)
    except runner.Interrupted as e:
        interrupted, results, asked = True, e.results, len(cases)
        cases = [c for c in cases if c.id in results]
        partial = True
    if args.exitfirst and len(results) < len(cases):  # stopped at the first failure
        cases = [c for c in cases if c.id in results]
        partial = True
    progress.finish()
    filters = args.patterns + args.exact + args.ops
    if interrupted:
        corpus = {"checked": False, "ok": False,
                  "reason": f"interrupted by {_output.interrupt_name()} after {len(results)} of "
                            f"{asked} cases" + (f" ({len(all_cases)} in the suite)"
                                                if asked != len(all_cases) else "")}
    elif shard:  # the floor is judged over all shards, by `devicekit report merge`
        corpus = {"checked": False, "ok": True,
                  "reason": f"shard {shard[0]}/{shard[1]}: {len(cases)} of {len(selected)} "
                            f"selected cases; 'devicekit report merge' checks the corpus"}
    elif partial:  # a filter makes the op x dtype floor meaningless: say so instead
        why = f"filter {filters}" if filters else "stopped at the first failure (--exitfirst)"
        corpus = partial_corpus(why, len(cases), len(all_cases))
    else:
        corpus = registry.corpus_check(target, cases, results, {c.section for c in all_cases})
    run_info = {"run_id": report.new_run_id(), "level": args.level, "jobs": args.jobs,
                "filter": filters,
                "partial": partial, "interrupted": interrupted, "device_arg": target.device.name,
                "plugin_arg": target.plugin,
                "duration_s": round(time.monotonic() - start, 3), "started": started}
    if shard:
        # what the merge needs to rebuild the single run: whether the
        # selection itself was partial, and the corpus floor of a full one
        whole = len(selected) == len(all_cases)
        run_info["shard"] = sharding.block(
            *shard, "case", [c.id for c in selected], partial=not whole,
            cases_all=len(all_cases),
            floor=registry.floor_of(target, {c.section for c in all_cases}) if whole else None)
    rep = report.build(meta, run_info, cases, results, corpus, unavailable, status)
    console.print_outcome(rep)
    if args.report and write_reports(prog, report.write, rep, args.report):
        return EXIT_OUTPUT
    if interrupted:
        print(stopped_line(prog, len(results), "cases", args.report), file=sys.stderr)
        return _output.interrupt_exit_code()
    return EXIT_OK if rep["summary"]["passed"] else EXIT_FAILED
