"""Coverage run: which lines and branches of a reference plugin's kernels
does the conformance suite reach?

    python benchmarks/coverage_run.py [--target cpu|cuda_sim] [--threads N|default ...] [--isa L]
                                      [--jobs N] [-k PATTERN ...] [--exclude PATTERN ...]
                                      [--out DIR] [--workdir DIR]
                                      [--check ci/coverage_exclusions.toml]
    python benchmarks/coverage_run.py --bridge [--device cpu:0] [--level core|full]
                                      [--jobs N] [-k PATTERN ...] [--out DIR]
                                      [--check ci/bridge_coverage_exclusions.toml]
                                      [--collect-only] [--lowering-only]

--bridge measures the torch bridge instead: Python line and branch coverage
(coverage.py) of ``devicekit/torch`` while the conformance ``torch`` section
(``-k torch/`` unless -k says otherwise) runs on the installed plugin's
--device; no build (``_bridge_coverage.py`` says how and what it writes).
With --check, every untaken branch of a lowering file must be listed in that
file (exit 1 otherwise; listed branches now taken are printed as stale);
--collect-only checks the bridge.json already in --out without a run.

Compiles the target's sources straight with the host compiler, as
mutation_run.py does (its Target table and build()), with coverage
instrumentation added:

- ``--coverage``: gcc writes a .gcno (the flow graph) beside each object
  and links libgcov, whose counters the plugin writes to .gcda files when a
  process that loaded it exits (every conformance worker and collective rank);
  runs add up into the same .gcda files.
- ``-fprofile-update=atomic``: the counters are incremented atomically, so
  the kernels' worker threads do not lose counts of each other.
- ``-O1`` instead of the build's ``-O2``: faster to compile and run with
  counters, and fewer branches duplicated by the optimiser (loop
  versioning, unswitching) than at -O2, so a branch in the report is one a
  reader sees in the source. The numerics flags of mutation_run.COMMON stay.

Then runs the FULL conformance suite (``-k`` narrows it) on the build once
per ``--threads`` value (``DEVICEKIT_CPU_THREADS``; ``default`` leaves it
unset: the CPU plugin's pool then has one thread per core, and the
cuda_sim plugin's emulator ignores it), then once per ``--isa`` level at the
default threads with ``DEVICEKIT_CPU_ISA`` capping the CPU plugin's fast
paths to it (each level's copy of a fast path is different code; a host
runs only its own level's otherwise), and prints line and branch coverage
per kernel file. Writes to --out: coverage.json (gcovr's full JSON),
summary.json (gcovr's --json-summary), html/index.html (gcovr's detailed
pages), unreached.txt (every kernel line with an untaken branch, per file
and function), and times.json (the seconds of each phase).

--check: every untaken kernel branch must be covered by an entry of the
exclusions file (see ci/coverage_exclusions.toml for its format); an entry
of status "needs-case" is a branch not reached yet that a case should reach:
the check prints how many lines and branches are in that state (it does not
pass them silently; unreached.txt lists them) but does not fail on them, and
prints the entries that match nothing (stale). Exit 1 when an untaken branch
is not listed, or when the suite itself failed; 0 otherwise.
"""

import argparse
import concurrent.futures as futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _bridge_coverage  # noqa: E402
import mutation_run as mr  # noqa: E402
from devicekit.conformance import coverage as cov  # noqa: E402

COVERAGE_FLAGS = ["-O1", "--coverage", "-fprofile-update=atomic"]

#: What counts as kernel code, per target (regex on the path relative to src/):
#: the kernel units and the headers their bodies live in. The runtime
#: (memory, streams, errors), collectives and graphs are not kernels.
KERNELS = {
    "cpu": r"^(kernels[^/]*\.cpp|fast/[^/]*\.cpp|(gelu|tanh|fused_half|fused_common|"
           r"attention_backward|kernel_common|dtype)\.h)$",
    "cuda_sim": r"^(kernels[^/]*\.cu|[^/]*_kernels\.h|(fused_device|ops_math|half|convert)\.h)$",
}


def coverage_target(name):
    base = mr.TARGETS[name]
    return mr.Target(base.name, base.src, base.exports, base.lib, base.mutants_module,
                     skip=base.skip, flags=base.flags + COVERAGE_FLAGS, ldflags=["--coverage"])


#: One more unit in every coverage build: <devicekit/plugin_coverage.h>'s
#: SIGTERM handler, which writes the counters when the suite stops a worker
#: (a case past --timeout gets SIGTERM, then SIGKILL a few seconds later), so
#: the cases that worker ran still count. Not a kernel file (KERNELS).
FLUSH_UNIT = ("coverage_flush.cpp",
              "// coverage_run.py: write the counters on SIGTERM (see the header)\n"
              "#include <devicekit/plugin_coverage.h>\n")


def build(target, workdir, build_jobs):
    src = os.path.join(workdir, "src")
    shutil.copytree(target.src, src)
    shutil.copytree(os.path.join(mr.INCLUDE, "devicekit"), os.path.join(src, "devicekit"))
    with open(os.path.join(src, FLUSH_UNIT[0]), "w") as f:
        f.write(FLUSH_UNIT[1])
    with futures.ThreadPoolExecutor(max_workers=build_jobs) as pool:
        lib, _ = mr.build(src, os.path.join(workdir, "obj"), os.path.join(workdir, target.lib),
                          pool=pool, target=target)
    return src, lib


def conformance(lib, report, jobs, threads, patterns, timeout, isa=None, excludes=()):
    env = dict(os.environ)
    env.pop("DEVICEKIT_CPU_THREADS", None)
    env.pop("DEVICEKIT_CPU_ISA", None)
    if threads != "default":
        env["DEVICEKIT_CPU_THREADS"] = str(threads)
    if isa:
        env["DEVICEKIT_CPU_ISA"] = isa
    cmd = [sys.executable, "-m", "devicekit", "conformance", "--plugin", lib, "--jobs", str(jobs),
           "--report", report, "--timeout", str(timeout)]
    for pat in patterns:
        cmd += ["-k", pat]
    for pat in excludes:
        cmd += ["--exclude", pat]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
    return r.returncode, "\n".join(tail)


def load_exclusions(path, target=None):
    """The [[exclude]] entries of the file (those of target only, when given;
    an entry without 'target' is the CPU plugin's)."""
    import tomllib
    with open(path, "rb") as f:
        data = tomllib.load(f)
    entries = [e for e in data.get("exclude", [])
               if target is None or e.get("target", "cpu") == target]
    for e in entries:
        if "file" not in e or "reason" not in e:
            raise SystemExit(f"{path}: every [[exclude]] needs 'file' and 'reason': {e}")
        if e.get("status", "unreachable") not in STATUSES:
            raise SystemExit(f"{path}: status must be one of {', '.join(STATUSES)}: {e}")
    return entries


#: unreachable: no call through the device API can take it (reviewed, with the reason);
#: needs-host: only another host's CPU takes it (an ISA level this one lacks);
#: needs-case: reachable, not reached yet: a missing case (counted, never silent);
#: left-out-case: reached by cases the run leaves out for time (--exclude) and a
#: run of the whole suite takes (written by --update-exclusions --reached-in);
#: past-budget: taken only by a call past the suite's documented size budget (a
#: tensor past 2**31 elements in this dtype or job type); the reason names the
#: size and the case that takes the same source line in another instantiation;
#: ruled-out: a plugin's own check of a call the header rules out for every
#: caller (a kernel before Plugin_Initialize, a NULL DK_Kernel_Args, a view
#: whose extent does not fit in int64, a reduction the SDK refuses first):
#: the header asks no plugin to answer it, so no case may demand an answer;
#: the reason quotes the header's sentence.
STATUSES = ("unreachable", "needs-host", "needs-case", "left-out-case", "past-budget",
            "ruled-out")
GENERATED = "# ---- generated by coverage_run.py --update-exclusions: not yet reached, needs a case ----"


def update_exclusions(path, target, rows, reached=None):
    """Rewrites the generated part of the exclusions file (after GENERATED):
    one needs-case entry per file, listing its lines with untaken branches
    that no hand-written entry covers. The hand-written part is kept as is.
    ``reached``: the (file, line, function) rows whose every branch a run of
    the whole suite took (--reached-in): those lines get one left-out-case
    entry per file instead (a case exists; this run left it out for time)."""
    with open(path) as f:
        text = f.read()
    head = text.split(GENERATED)[0].rstrip() + "\n\n"
    # another target's generated entries are kept (read before the rewrite)
    others = [e for e in load_exclusions(path) if e.get("target", "cpu") != target
              and e.get("generated")]
    with open(path, "w") as f:
        f.write(head)
    hand = [e for e in load_exclusions(path, target) if not e.get("generated")]
    groups = {}
    for r in rows:
        if any(matches(e, r) for e in hand):
            continue
        left_out = reached is not None and (r["file"], r["line"], r["function"]) in reached
        g = groups.setdefault((r["file"], left_out),
                              {"lines": set(), "branches": 0, "functions": set()})
        g["lines"].add(r["line"])
        g["branches"] += r["total"] - r["taken"]
        g["functions"].add(r["function"])
    out = [head, GENERATED, "\n"]
    for e in others:
        out.append(_toml_entry(e))
    for (file, left_out), g in sorted(groups.items()):
        counts = (f"{g['branches']} untaken branches on {len(g['lines'])} lines in "
                  f"{len(g['functions'])} functions or instantiations")
        reason = (f"reached only by cases this run leaves out for time (--exclude; the whole "
                  f"suite's run takes them): {counts}" if left_out else
                  f"not yet reached: needs a case ({counts}; unreached.txt lists them)")
        out.append(_toml_entry({"target": target, "file": file, "line_list": sorted(g["lines"]),
                                "status": "left-out-case" if left_out else "needs-case",
                                "generated": True, "reason": reason}))
    with open(path, "w") as f:
        f.write("".join(out))
    return len(groups)


def _toml_entry(e):
    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(map(str, v)) + "]"
        return json.dumps(v)
    return "\n[[exclude]]\n" + "".join(f"{k} = {val(v)}\n" for k, v in e.items())


def matches(entry, row):
    if entry["file"] != row["file"]:
        return False
    if "function" in entry and entry["function"] not in row["function"]:
        return False
    if "function_re" in entry and not re.search(entry["function_re"], row["function"]):
        return False
    if "lines" in entry:
        lo, hi = entry["lines"]
        if not lo <= row["line"] <= hi:
            return False
    if "line_list" in entry and row["line"] not in entry["line_list"]:
        return False
    return True


def check(rows, entries):
    """Splits unreached rows into (unlisted, needs_case, excused) and returns
    the entries that matched nothing (stale: the code moved, or a case now
    reaches it). excused: every other listed row (unreachable, needs-host,
    left-out-case, past-budget, ruled-out), as (row, status). The bridge list's check,
    with this list's entry matching."""
    return _bridge_coverage.check(rows, entries, matches)


def fmt_row(r):
    return (f"  {r['file']}:{r['line']}  {r['function']}  "
            f"{r['total'] - r['taken']}/{r['total']} branches untaken")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=sorted(KERNELS), default="cpu")
    ap.add_argument("--threads", action="append", default=[],
                    help="DEVICEKIT_CPU_THREADS of one run, or 'default' (unset); repeatable "
                         "(default: 1 and default)")
    ap.add_argument("--isa", action="append", default=[], choices=("base", "avx2"),
                    help="with --target cpu: one more run at the default threads with "
                         "DEVICEKIT_CPU_ISA set to this level, so the fast paths' copies for "
                         "that level (below the host's) are reached too; repeatable")
    ap.add_argument("--cap-isa", choices=("avx2",),
                    help="with --target cpu: the runs without --isa capped at this level "
                         "(DEVICEKIT_CPU_ISA), so the counters are those of a host of that "
                         "level on a host above it too (an AVX-512 host runs the AVX2 copies); "
                         "the exclusion list's needs-host entries are written for it")
    ap.add_argument("--jobs", type=int, default=2, help="conformance worker processes")
    ap.add_argument("--build-jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds per case (default 300: the instrumented build at one thread "
                         "is slow on the 2**31-element cases; a worker stopped at its timeout "
                         "keeps its counters (FLUSH_UNIT), but the case is a failure)")
    ap.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                    help="run only the conformance cases whose id contains PATTERN")
    ap.add_argument("--exclude", dest="excludes", action="append", default=[], metavar="PATTERN",
                    help="leave out the conformance cases whose id contains PATTERN (after -k)")
    ap.add_argument("--out", default="coverage-out", help="the reports (default coverage-out/)")
    ap.add_argument("--workdir", help="keep the build here (default: a temporary folder)")
    ap.add_argument("--collect-only", action="store_true",
                    help="with --workdir: read the counters already there (no build, no run); "
                         "with --bridge: read --out/bridge.json (no run)")
    ap.add_argument("--reuse-build", action="store_true",
                    help="with --workdir: reuse the build there (its counters are reset first)")
    ap.add_argument("--check", metavar="TOML", help="check untaken branches against this list")
    ap.add_argument("--update-exclusions", action="store_true",
                    help="with --check: rewrite the file's generated needs-case part from this "
                         "run (after adding cases, or when code moved; review the diff)")
    ap.add_argument("--reached-in", metavar="DIR",
                    help="with --update-exclusions: the --out of a run of the whole suite; lines "
                         "every branch of which it took are written as left-out-case, not "
                         "needs-case")
    ap.add_argument("--bridge", action="store_true",
                    help="Python branch coverage of devicekit/torch under the conformance torch "
                         "section (coverage.py; no plugin build)")
    ap.add_argument("--device", default="cpu:0", help="with --bridge: the device (default cpu:0)")
    ap.add_argument("--lowering-only", action="store_true",
                    help="with --bridge: measure only the lowering files (_lower_*.py, "
                         "_dispatch.py, _table.py: what --check reads), not all of devicekit/torch")
    ap.add_argument("--level", choices=("core", "full"), default="full",
                    help="with --bridge: the conformance level (default full)")
    args = ap.parse_args(argv)
    if args.bridge:
        return _bridge_coverage.run(args)
    threads = args.threads or ["1", "default"]
    target = coverage_target(args.target)
    os.makedirs(args.out, exist_ok=True)
    times = {}
    with tempfile.TemporaryDirectory(prefix="dk-coverage-") as tmp:
        workdir = os.path.abspath(args.workdir or tmp)
        start = time.monotonic()
        src, lib = os.path.join(workdir, "src"), os.path.join(workdir, target.lib)
        if args.collect_only:
            threads = []
        elif args.reuse_build and os.path.exists(lib):
            for d, _, names in os.walk(os.path.join(workdir, "obj")):
                for n in names:
                    if n.endswith(".gcda"):
                        os.unlink(os.path.join(d, n))
        else:
            src, lib = build(target, workdir, args.build_jobs)
        times["build"] = time.monotonic() - start
        print(f"built {lib} with {' '.join(COVERAGE_FLAGS)} ({times['build']:.0f} s)", flush=True)
        failed = False
        runs = [(t, args.cap_isa if args.target == "cpu" else None) for t in threads]
        runs += [("default", isa) for isa in (args.isa if threads else [])]
        for t, isa in runs:
            start = time.monotonic()
            name = f"threads={t}" + (f" isa={isa}" if isa else "")
            folder = f"conformance-threads-{t}" + (f"-isa-{isa}" if isa else "")
            rc, tail = conformance(lib, os.path.join(args.out, folder), args.jobs, t,
                                   args.patterns, args.timeout, isa, args.excludes)
            times[f"conformance {name}"] = time.monotonic() - start
            print(f"conformance, {name}: exit {rc} ({times[f'conformance {name}']:.0f} s)"
                  f"\n{tail}", flush=True)
            failed |= rc != 0
        start = time.monotonic()
        data = cov.collect(os.path.join(workdir, "obj"), root=src,
                           html=os.path.join(os.path.abspath(args.out), "html", "index.html"),
                           summary=os.path.join(args.out, "summary.json"),
                           jobs=args.build_jobs)
        times["gcovr"] = time.monotonic() - start
    with open(os.path.join(args.out, "coverage.json"), "w") as f:
        json.dump(data, f)
    include = KERNELS[args.target]
    table = cov.files(data, include)
    print(f"\nkernel coverage of the {args.target} plugin (threads: {', '.join(threads)}"
          f"{'; isa: ' + ', '.join(args.isa) if args.isa else ''}"
          f"{', -k ' + ' -k '.join(args.patterns) if args.patterns else ''}"
          f"{', --exclude ' + ' --exclude '.join(args.excludes) if args.excludes else ''}):")
    print(cov.format_table(table))
    rows = cov.unreached(data, include)
    with open(os.path.join(args.out, "unreached.txt"), "w") as f:
        for file, fn, lines, n in cov.by_function(rows):
            f.write(f"{file}  {fn}: {n} untaken branches on lines {', '.join(map(str, lines))}\n")
    lc, lt, bc, bt = cov.totals(table)
    summary = {"target": args.target, "threads": threads, "isa": args.isa,
               "patterns": args.patterns, "excludes": args.excludes,
               "lines": [lc, lt], "branches": [bc, bt], "seconds": times,
               "untaken_branch_lines": len(rows)}
    status = 1 if failed else 0
    if args.check and args.update_exclusions:
        reached = None
        if args.reached_in:
            with open(os.path.join(args.reached_in, "coverage.json")) as f:
                whole = cov.unreached(json.load(f), include)
            untaken = {(r["file"], r["line"], r["function"]) for r in whole}
            reached = {(r["file"], r["line"], r["function"]) for r in rows} - untaken
        n = update_exclusions(args.check, args.target, rows, reached)
        print(f"\n{args.check}: {n} generated entries written")
    if args.check:
        unlisted, needs, excused, stale = check(rows, load_exclusions(args.check, args.target))
        n = {k: sum(1 for _, st in excused if st == k) for k in STATUSES}
        print(f"\ncheck against {args.check}: lines with untaken kernel branches: "
              f"{n['unreachable']} unreachable through the device API "
              f"(reviewed); {n['needs-host']} taken only on another host's ISA; "
              f"{n['past-budget']} taken only past the size budget (reviewed); "
              f"{n['ruled-out']} checks of calls the header rules out (reviewed); "
              f"{n['left-out-case']} taken by cases this run leaves out (--exclude); "
              f"{len(needs)} NOT YET REACHED, listed as needing a case "
              f"({sum(r['total'] - r['taken'] for r in needs)} branches); "
              f"{len(unlisted)} not listed")
        for r in unlisted:
            print("  NOT LISTED:  " + fmt_row(r)[2:])
        for e in stale:
            print(f"  stale entry (matches no untaken branch): {e}")
        summary.update(needs_case=len(needs), needs_host=n["needs-host"],
                       left_out_case=n["left-out-case"], unlisted=len(unlisted),
                       unreachable=n["unreachable"], past_budget=n["past-budget"],
                       ruled_out=n["ruled-out"], stale=len(stale))
        if unlisted:
            status = 1
    with open(os.path.join(args.out, "times.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("\ntimes: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()))
    if failed:
        print("coverage run: the conformance suite failed on the coverage build "
              "(see the reports)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
