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
from dataclasses import dataclass
from typing import Optional

from .._util import output as _output

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_OUTPUT = 0, 1, 2, _output.EXIT_OUTPUT
PROG = "devicekit conformance"
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
    p.add_argument("--exclude", dest="excludes", action="append", default=[], metavar="PATTERN",
                   help="leave out cases whose id contains PATTERN (repeatable; applied after "
                        "-k/--case/--op; a partial run)")
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
    p.add_argument("--coverage", metavar="BUILD_DIR",
                   help="the build folder of a plugin built with --coverage (gcc/clang; "
                        "docs/porting_guide.md 'Coverage build'): its counters (.gcda) are reset "
                        "before the run, and after it the plugin's branches no case reached "
                        "are listed per file and function, here and in report.html (needs gcovr: "
                        "pip install 'devicekit[coverage]')")
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


def partial_corpus(why, ran, total, unbuilt=()):
    """The corpus entry of a filtered or stopped run (the floor does not apply);
    ``unbuilt``: sections the filter cannot reach, not counted in ``total``."""
    reason = f"partial run ({why}): {ran} of {total} cases"
    if unbuilt:
        reason += f" (not counting the {', '.join(unbuilt)} section, which the filter cannot select)"
    return {"checked": False, "ok": True, "reason": reason}


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


class _Exit(Exception):
    """An early end of the run: ``message`` on stderr, then exit ``code``."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


def _usage(why):
    return _Exit(EXIT_USAGE, f"{PROG}: error: {why}")


def _filters(args):
    return args.patterns + args.exact + args.ops + [f"not {p}" for p in args.excludes]


@dataclass
class _Selection:
    """The suite's cases (``all_cases``), those the filters select
    (``selected``) and this shard's part of them (``cases``, what runs).
    ``unbuilt``: sections the filters cannot select a case of, whose cases
    were not built (so ``all_cases`` is not the whole suite)."""

    all_cases: list
    unavailable: list
    selected: list
    cases: list
    shard: Optional[tuple]
    unbuilt: tuple = ()


@dataclass
class _Ran:
    """What ran: the finished cases (all asked, unless the run stopped early)."""

    cases: list
    results: dict
    asked: int
    partial: bool
    interrupted: bool
    start: float
    started: str


def _run(args):
    from .. import errors
    from . import console, registry, report
    from .target import describe, open_target

    try:
        shard = _check_args(args)
        try:
            target = open_target(args.device, args.plugin, args.level)
        except errors.DeviceKitError as e:
            raise _usage(_one_line(e)) from None
        sel = _select(args, target, shard)
    except _Exit as e:
        print(e.message, file=sys.stderr)
        return e.code
    if args.list:
        print("\n".join(c.id for c in sel.cases))
        return EXIT_OK
    if not sel.cases:
        print(f"{PROG}: no case matches {_filters(args)}", file=sys.stderr)
        return EXIT_FAILED
    meta = describe(target)
    status = registry.implementation_status(
        target, {c.section for c in sel.all_cases} if sel.unbuilt else None)
    print(console.header(meta, target, len(sel.cases), args), file=sys.stderr)
    print(f"status: {registry.status_line(status)}", file=sys.stderr)
    ran = _execute(args, target, sel)
    corpus = _corpus(args, target, sel, ran)
    rep = report.build(meta, _run_info(args, target, sel, ran), ran.cases, ran.results, corpus,
                       sel.unavailable, status)
    if args.coverage:
        _add_coverage(args.coverage, rep)
    console.print_outcome(rep)
    return _finish(args, rep, ran)


def _check_args(args):
    """The checks made before the device is opened (raise :class:`_Exit`);
    returns the parsed ``--shard`` (K, N), or None."""
    from . import registry

    if not args.device and not args.plugin:
        raise _usage("give --device NAME or --plugin PATH")
    if args.jobs < 1:
        raise _usage("--jobs must be at least 1")
    if not args.timeout > 0:
        raise _usage(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    shard = _parse_shard(args)
    if why := registry.configure_fuzz(args.fuzz_seed, args.fuzz_cases, args.exact):
        raise _usage(why)
    if args.report and (why := _output.output_problem(args.report, "--report", folder=True)):
        raise _Exit(EXIT_OUTPUT, f"{PROG}: error: {why}")
    if args.coverage:
        from . import coverage

        try:
            coverage.reset(args.coverage)
        except coverage.CoverageError as e:
            raise _usage(e) from None
    return shard


def _parse_shard(args):
    if not args.shard:
        return None
    from ..scale import shard as sharding

    try:
        shard = sharding.parse(args.shard)
    except sharding.ShardError as e:
        raise _usage(e) from None
    if args.exitfirst:
        raise _usage("--shard and --exitfirst exclude each other (a shard that stops early "
                     "cannot be merged)")
    return shard


def _select(args, target, shard):
    from . import registry

    reach = registry.reachable_sections(args.patterns, args.exact, args.ops, args.excludes)
    unbuilt = tuple(sorted({s.name for s, _ in registry.sections()} - reach))
    all_cases, unavailable = registry.build(target, reach if unbuilt else None)
    selected = cases = registry.select(all_cases, args.patterns, args.exact, args.ops,
                                       args.excludes)
    if shard and cases:
        from ..scale import shard as sharding

        if why := sharding.too_few(*shard, len(cases), "case"):
            raise _usage(why)
        cases = sharding.pick(cases, *shard)
    return _Selection(all_cases, unavailable, selected, cases, shard, unbuilt)


def _execute(args, target, sel):
    """Runs the cases in the workers, with a progress line; a run stopped by a
    signal (runner.Interrupted) or by --exitfirst keeps the cases that finished."""
    from . import runner

    cases = sel.cases
    progress = Progress(len(cases))
    start = time.monotonic()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())
    interrupted = False
    try:
        results = runner.run(cases, device=target.device.name, plugin=target.plugin,
                             level=args.level, jobs=args.jobs, timeout=args.timeout,
                             on_result=progress, stop_on_failure=args.exitfirst)
    except runner.Interrupted as e:
        interrupted, results = True, e.results
    progress.finish()
    finished, partial = cases, len(cases) != len(sel.all_cases) or bool(sel.unbuilt)
    if interrupted or (args.exitfirst and len(results) < len(cases)):  # stopped early
        finished, partial = [c for c in cases if c.id in results], True
    return _Ran(finished, results, len(cases), partial, interrupted, start, started)


def _corpus(args, target, sel, ran):
    """The report's corpus entry: the op x dtype floor, checked on a whole run;
    otherwise why it is not."""
    from . import registry

    if ran.interrupted:
        n = len(sel.all_cases)
        return {"checked": False, "ok": False,
                "reason": f"interrupted by {_output.interrupt_name()} after {len(ran.results)} of "
                          f"{ran.asked} cases" + (f" ({n} in the {_where(sel)})"
                                                  if ran.asked != n else "")}
    if sel.shard:  # the floor is judged over all shards, by `devicekit report merge`
        return {"checked": False, "ok": True,
                "reason": f"shard {sel.shard[0]}/{sel.shard[1]}: {len(ran.cases)} of "
                          f"{len(sel.selected)} selected cases; 'devicekit report merge' checks "
                          f"the corpus"}
    if ran.partial:  # a filter makes the op x dtype floor meaningless: say so instead
        filters = _filters(args)
        why = f"filter {filters}" if filters else "stopped at the first failure (--exitfirst)"
        return partial_corpus(why, len(ran.cases), len(sel.all_cases), sel.unbuilt)
    return registry.corpus_check(target, ran.cases, ran.results,
                                 {c.section for c in sel.all_cases})


def _where(sel):
    return "sections the filter can select" if sel.unbuilt else "suite"


def _run_info(args, target, sel, ran):
    from . import registry, report

    run_info = {"run_id": report.new_run_id(), "level": args.level, "jobs": args.jobs,
                "filter": _filters(args),
                "partial": ran.partial, "interrupted": ran.interrupted,
                "device_arg": target.device.name, "plugin_arg": target.plugin,
                "duration_s": round(time.monotonic() - ran.start, 3), "started": ran.started}
    if sel.shard:
        from ..scale import shard as sharding

        # what the merge needs to rebuild the single run: whether the
        # selection itself was partial, and the corpus floor of a full one
        whole = len(sel.selected) == len(sel.all_cases) and not sel.unbuilt
        sections = {c.section for c in sel.all_cases}
        run_info["shard"] = sharding.block(
            *sel.shard, "case", [c.id for c in sel.selected], partial=not whole,
            cases_all=len(sel.all_cases), unbuilt=list(sel.unbuilt),
            floor=registry.floor_of(target, sections) if whole else None)
    return run_info


def _add_coverage(build_dir, rep):
    """Adds the plugin's untaken branches (``rep["coverage"]``) after the run.
    A coverage that cannot be read is said in the report and on stderr; it
    does not change the suite's verdict."""
    from . import coverage

    try:
        rep["coverage"] = coverage.report_block(build_dir)
    except coverage.CoverageError as e:
        rep["coverage"] = {"build_dir": os.path.abspath(build_dir), "error": _one_line(e)}
        print(f"{PROG}: coverage: {_one_line(e)}", file=sys.stderr)


def _finish(args, rep, ran):
    """Writes the reports, if asked for; the exit code."""
    from . import report

    if args.report and write_reports(PROG, report.write, rep, args.report):
        return EXIT_OUTPUT
    if ran.interrupted:
        print(stopped_line(PROG, len(ran.results), "cases", args.report), file=sys.stderr)
        return _output.interrupt_exit_code()
    return EXIT_OK if rep["summary"]["passed"] else EXIT_FAILED
