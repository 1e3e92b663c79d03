"""``devicekit trace``: record a script's run as Chrome-trace / Perfetto JSON
(``devicekit.trace``), or print the summary of a recorded trace."""

import argparse
import json
import os
import runpy
import sys

from ._util import output as _output

EXIT_CODES_HELP = """\
exit codes:
  0    the script ran (its own exit code when it called sys.exit) and the trace was written
  1    the script raised (the trace of what ran is still written)
  2    usage error, or --summary of a file that is not a trace
  3    --out cannot be written (checked before the script runs)
  130  stopped by Ctrl-C (SIGINT); 143: stopped by SIGTERM
"""


def add_parser(sub):
    p = sub.add_parser(
        "trace", help="record a script's run as a Perfetto/Chrome trace, or summarise one",
        description="Run a Python script in this process with devicekit.trace recording and "
                    "write a Chrome-trace JSON that https://ui.perfetto.dev opens: every "
                    "kernel launch, copy, allocation and synchronize, on a host track and one "
                    "track per device stream (docs/trace.md). "
                    "'devicekit trace --out run.json train.py --steps 2' or "
                    "'devicekit trace -- python train.py --steps 2'.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="devicekit-trace.json",
                   help="the trace file to write (default devicekit-trace.json)")
    p.add_argument("--summary", metavar="TRACE.json",
                   help="print the summary of a recorded trace and exit (runs nothing)")
    p.add_argument("--top", type=int, default=20, help="rows per summary table (default 20)")
    p.add_argument("--no-summary", action="store_true",
                   help="do not print the summary after the run")
    p.add_argument("script", nargs=argparse.REMAINDER,
                   help="the script and its arguments ('--' and a leading 'python' are "
                        "accepted and dropped: the script runs in this process)")
    p.set_defaults(func=run)


def _script_argv(rest):
    if rest and rest[0] == "--":
        rest = rest[1:]
    if rest and os.path.basename(rest[0]).startswith("python") and len(rest) > 1:
        rest = rest[1:]
    return rest


def run(args):
    from . import trace
    from .errors import InvalidArgumentError

    if args.summary:
        if args.script:
            print("devicekit trace: --summary prints a recorded trace; give no script with it",
                  file=sys.stderr)
            return 2
        try:
            print(trace.format_summary(trace.load(args.summary), top=args.top))
        except (OSError, ValueError, InvalidArgumentError) as e:
            print(f"devicekit trace: error: --summary {args.summary}: {e}", file=sys.stderr)
            return 2
        return 0
    argv = _script_argv(args.script)
    if not argv:
        print("devicekit trace: error: give a script to run (or --summary TRACE.json)",
              file=sys.stderr)
        return 2
    problem = _output.output_problem(args.out, "--out")
    if problem:
        print(f"devicekit trace: error: {problem}", file=sys.stderr)
        return _output.EXIT_OUTPUT
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    code = 0
    trace.start()
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        doc = trace.stop()
        sys.argv, sys.path[:] = saved_argv, saved_path
    _output.write_file(args.out, json.dumps(doc))
    n = sum(e["ph"] == "X" for e in doc["traceEvents"])
    print(f"devicekit trace: wrote {args.out} ({n} spans); open it in https://ui.perfetto.dev",
          file=sys.stderr)
    if not args.no_summary:
        print(trace.format_summary(doc, top=args.top))
    return code
