"""``devicekit conformance``: run the suite against one device, print a
summary, optionally write report.json / junit.xml / report.html.

Exit codes: 0 every required case passed (and the corpus is complete);
1 any fail/error/crash, a required not-implemented, a collapsed corpus, or a
filter that selected nothing; 2 usage errors or a plugin/device that cannot
be opened (its cause in one line).
"""

import os
import sys
import time

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(sub):
    p = sub.add_parser("conformance", help="run the conformance suite against a device",
                       description="Run the DeviceKit conformance suite against one device.")
    p.add_argument("--device", help="device name, e.g. cpu:0 (with --plugin: one of its devices)")
    p.add_argument("--plugin", help="a plugin library path (development builds; no install needed)")
    p.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                   help="run only cases whose id contains PATTERN (repeatable; a partial run)")
    p.add_argument("--case", dest="exact", action="append", default=[], metavar="ID",
                   help="run exactly this case id (repeatable; how failures replay)")
    p.add_argument("--report", metavar="DIR", help="write report.json, junit.xml, report.html here")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: CPU count)")
    p.add_argument("--level", choices=("core", "full"), default="full",
                   help="core: no large shapes; full (default): everything")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    p.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    p.set_defaults(func=run)
    return p


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


def run(args):
    from .. import errors
    from . import registry, report, runner
    from .target import describe, open_target

    if not args.device and not args.plugin:
        print("devicekit conformance: error: give --device NAME or --plugin PATH", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs < 1:
        print("devicekit conformance: error: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        target = open_target(args.device, args.plugin, args.level)
    except errors.DeviceKitError as e:
        print(f"devicekit conformance: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    all_cases, unavailable = registry.build(target)
    cases = registry.select(all_cases, args.patterns, args.exact)
    if args.list:
        print("\n".join(c.id for c in cases))
        return EXIT_OK
    if not cases:
        print(f"devicekit conformance: no case matches {args.patterns + args.exact}",
              file=sys.stderr)
        return EXIT_FAILED
    partial = len(cases) != len(all_cases)
    print(f"devicekit conformance: {target.device.name} ({target.device.plugin.name} "
          f"{target.device.plugin.version}), {len(cases)} cases, level {args.level}, "
          f"{args.jobs} jobs", file=sys.stderr)
    progress = Progress(len(cases))
    start = time.monotonic()
    results = runner.run(cases, device=target.device.name if not args.plugin else args.device,
                         plugin=os.path.abspath(args.plugin) if args.plugin else None,
                         level=args.level, jobs=args.jobs, timeout=args.timeout,
                         on_result=progress)
    progress.finish()
    if partial:  # a filter makes the op x dtype floor meaningless: say so instead
        corpus = {"checked": False, "ok": True,
                  "reason": f"partial run (filter {args.patterns + args.exact}): "
                            f"{len(cases)} of {len(all_cases)} cases selected"}
    else:
        corpus = registry.corpus_check(target, cases, results, {c.section for c in all_cases})
    run_info = {"level": args.level, "jobs": args.jobs, "filter": args.patterns + args.exact,
                "partial": partial, "device_arg": target.device.name,
                "plugin_arg": os.path.abspath(args.plugin) if args.plugin else None,
                "duration_s": round(time.monotonic() - start, 3),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime())}
    rep = report.build(describe(target), run_info, cases, results, corpus, unavailable)
    _print_outcome(rep)
    if args.report:
        paths = report.write(rep, args.report)
        print(f"reports: {', '.join(paths.values())}")
    return EXIT_OK if rep["summary"]["passed"] else EXIT_FAILED


def _print_outcome(rep):
    from .report import summary_table

    bad = [c for c in rep["cases"] if c["outcome"] in ("fail", "error", "crash")
           or (c["outcome"] == "not-implemented" and c["required"])]
    for c in bad[:20]:
        first = c["message"].splitlines()[0] if c["message"] else ""
        d = c["details"]
        nums = (f" [max abs err {d['max_abs_err']:.3g}, max rel err {d['max_rel_err']:.3g}, "
                f"worst index {d.get('worst_index')}]" if "max_abs_err" in d else "")
        print(f"{c['outcome'].upper()} {c['id']} (seed {c['seed']}){nums}\n    {first[:300]}\n"
              f"    replay: {c['replay']}")
    if len(bad) > 20:
        print(f"... and {len(bad) - 20} more (see --report)")
    print(summary_table(rep))
    corpus = rep["corpus"]
    if corpus["checked"]:
        print(f"corpus: executed {corpus['executed']} cases, expected at least "
              f"{corpus['expected_min']}: {'ok' if corpus['ok'] else 'COLLAPSED'}")
        for s in corpus["short"]:
            print(f"    short: {s}")
    else:
        print(f"corpus: not checked ({corpus['reason']})")
    for s, why in rep["unavailable_sections"].items():
        print(f"section {s} not run: {why}")
    print("PASSED" if rep["summary"]["passed"] else "FAILED")
