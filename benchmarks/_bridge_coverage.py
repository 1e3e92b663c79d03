"""``coverage_run.py --bridge``: Python line and branch coverage of the torch
bridge (``devicekit/torch``) under the conformance ``torch`` section.

coverage.py measures every Python process of the run: the CLI and each
conformance worker start it themselves through coverage's ``.pth`` hook
(``COVERAGE_PROCESS_START`` names the rc file written to --out), each
writes its own data file (``parallel``), and they are combined after the
run. ``source`` is the folder of the installed ``devicekit/torch`` (a path,
not ``source_pkgs``: resolving a package at start-up imports devicekit and
numpy before the process does, and numpy refuses a second load). A worker
killed at its per-case timeout loses its data, as in the gcov run.

Writes to --out: ``bridge.json`` (coverage.py's JSON report: per file and
function, executed and missing lines and branches), ``bridge-html/``
(coverage.py's HTML pages, branches marked per line), ``bridge-unreached.txt``
(per file and function, the branches no case took, as ``line->destination``;
a negative destination is the function's exit), and ``bridge-summary.json``.

``--check FILE`` (``ci/bridge_coverage_exclusions.toml``): every untaken
branch of a lowering file (``LOWERING``) must be listed there with a reason;
exit 1 on one that is not, and the entries that match no untaken branch are
printed as stale (a case reaches the branch now, or the code moved).
``--collect-only`` checks (and tabulates) the ``bridge.json`` already in --out
instead of running the section again.
"""

import json
import os
import subprocess
import sys
import time

#: The files a lowering lives in (the table and the dispatch too): the ones
#: the per-file table prints first.
LOWERING = ("_lower_", "_dispatch.py", "_table.py")


def torch_dir():
    import devicekit
    return os.path.join(os.path.dirname(os.path.abspath(devicekit.__file__)), "torch")


def write_rc(out, lowering_only=False):
    """The rc file; ``lowering_only``: the other files of devicekit/torch
    omitted, so only the lowering files (``LOWERING``, what --check reads) are
    traced. (``omit`` beside ``source``, not ``include``: a lowering file no
    case imports, ``_lower_dist.py``, must still be reported, unexecuted.)"""
    data = os.path.join(out, ".coverage")
    rc = os.path.join(out, ".coveragerc-bridge")
    where = f"source =\n    {torch_dir()}\n"
    if lowering_only:
        where += "omit =\n" + "".join(
            f"    {os.path.join(torch_dir(), n)}\n" for n in sorted(os.listdir(torch_dir()))
            if n.endswith(".py") and not any(m in n for m in LOWERING))
    with open(rc, "w") as f:
        f.write(f"[run]\nbranch = True\nparallel = True\n{where}data_file = {data}\n")
    for n in os.listdir(out):  # a previous run's data would add up with this one's
        if n.startswith(".coverage") and n != os.path.basename(rc):
            os.unlink(os.path.join(out, n))
    return rc


def run(args):
    """Runs the torch section under coverage.py and writes the reports; the exit status."""
    try:
        import coverage
    except ImportError:
        print("coverage_run.py --bridge needs coverage.py: pip install 'devicekit[coverage]'",
              file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if getattr(args, "collect_only", False):
        return report(args, out, None)
    rc = write_rc(out, getattr(args, "lowering_only", False))
    # backward passes on the case's own thread, which coverage.py traces (torch
    # runs a dk backward on a C++ device thread otherwise: torch_opinfo.py)
    env = dict(os.environ, COVERAGE_PROCESS_START=rc, DEVICEKIT_COVERAGE_BACKWARD_IN_CALLER="1")
    patterns = args.patterns or ["torch/"]
    cmd = [sys.executable, "-m", "devicekit", "conformance", "--device", args.device,
           "--jobs", str(args.jobs), "--level", args.level, "--timeout", str(args.timeout),
           "--report", os.path.join(out, "conformance-bridge")]
    for p in patterns:
        cmd += ["-k", p]
    times = {}
    start = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    times["conformance"] = time.monotonic() - start
    tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-3:])
    print(f"conformance {' '.join('-k ' + p for p in patterns)} --level {args.level} under "
          f"coverage.py: exit {r.returncode} ({times['conformance']:.0f} s)\n{tail}", flush=True)

    start = time.monotonic()
    cov = coverage.Coverage(config_file=rc)
    cov.combine()
    cov.save()
    cov.json_report(outfile=os.path.join(out, "bridge.json"), pretty_print=False)
    cov.html_report(directory=os.path.join(out, "bridge-html"),
                    title="devicekit.torch under the conformance torch section")
    times["report"] = time.monotonic() - start
    return report(args, out, (r.returncode, patterns, times))


def report(args, out, run_info):
    """Tabulates --out/bridge.json, writes bridge-unreached.txt and
    bridge-summary.json, and checks against --check; the exit status.
    run_info: (conformance exit, patterns, seconds), None with --collect-only."""
    returncode, patterns, times = run_info or (0, args.patterns or ["torch/"], {})
    old = os.path.join(out, "bridge-summary.json")
    if run_info is None and os.path.exists(old):  # --collect-only: the run's own figures stay
        with open(old) as f:
            prev = json.load(f)
        returncode, patterns = prev.get("conformance_exit", 0), prev.get("patterns", patterns)
        times = prev.get("seconds", {})
    with open(os.path.join(out, "bridge.json")) as f:
        data = json.load(f)
    table = files(data)
    print(f"\nbridge coverage (devicekit/torch; {', '.join(patterns)}, level {args.level}):")
    print(format_table(table))
    rows = unreached(data)
    with open(os.path.join(out, "bridge-unreached.txt"), "w") as f:
        for file, fn, arcs in rows:
            f.write(f"{file}  {fn}: {len(arcs)} untaken branches: "
                    f"{', '.join(f'{a}->{b}' for a, b in arcs)}\n")
    lc, lt, bc, bt = (sum(row[i] for row in table.values()) for i in range(4))
    summary = {"patterns": patterns, "level": args.level, "lines": [lc, lt],
               "branches": [bc, bt], "files": {k: list(v) for k, v in table.items()},
               "seconds": times, "conformance_exit": returncode}
    status = 1 if returncode else 0
    if getattr(args, "check", None):
        unlisted, needs, excused, stale = check(branches(data), load_exclusions(args.check))
        print(format_check(args.check, unlisted, needs, excused, stale))
        summary.update(unlisted=len(unlisted), needs_case=len(needs), stale=len(stale),
                       **{k: sum(1 for _, st in excused if st == k) for k in EXCUSED})
        if unlisted:
            status = 1
    with open(os.path.join(out, "bridge-summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\nreports: {out}/bridge-html/index.html, bridge-unreached.txt ({len(rows)} functions "
          f"with untaken branches), bridge.json")
    return status


def _name(path):
    """devicekit/torch/FILE, wherever that package was installed (a report
    made from another venv reads the same)."""
    p = path.replace(os.sep, "/")
    i = p.rfind("/devicekit/torch/")
    return p[i + 1:] if i >= 0 else p


def files(data):
    """{devicekit/torch/FILE: (lines covered, lines, branches covered, branches)}"""
    out = {}
    for path, f in data["files"].items():
        s = f["summary"]
        out[_name(path)] = (s["covered_lines"], s["num_statements"], s["covered_branches"],
                            s["num_branches"])
    return dict(sorted(out.items(), key=lambda kv: (not any(m in kv[0] for m in LOWERING),
                                                    kv[0])))


def unreached(data):
    """[(file, function, [(line, destination) of each untaken branch])], the
    functions with the most untaken branches first."""
    rows = []
    for path, f in data["files"].items():
        for fn, g in f.get("functions", {}).items():
            if g.get("missing_branches"):
                rows.append((_name(path), fn or "(module)", [tuple(a) for a in g["missing_branches"]]))
    return sorted(rows, key=lambda r: (-len(r[2]), r[0], r[1]))


def format_table(table):
    def pct(a, b):
        return f"{100 * a / b:5.1f}%" if b else "    -"
    lines = [f"  {'file':<40} {'lines':>13} {'':>6} {'branches':>11} {'':>6}"]
    for name, (lc, lt, bc, bt) in table.items():
        lines.append(f"  {name:<40} {lc:>6}/{lt:<6} {pct(lc, lt)} {bc:>5}/{bt:<5} {pct(bc, bt)}")
    lc, lt, bc, bt = (sum(row[i] for row in table.values()) for i in range(4))
    lines.append(f"  {'total':<40} {lc:>6}/{lt:<6} {pct(lc, lt)} {bc:>5}/{bt:<5} {pct(bc, bt)}")
    return "\n".join(lines)


# ---- the check against the reviewed list ------------------------------------------

#: unreachable: no torch call takes it (reviewed, the reason says why);
#: other-tests: reached by tests outside the torch section (the reason names them);
#: needs-host: only another interpreter or torch version takes it;
#: needs-case: reachable by a torch call, no case yet (counted, never silent).
STATUSES = ("unreachable", "other-tests", "needs-host", "needs-case")
EXCUSED = ("unreachable", "other-tests", "needs-host")


def load_exclusions(path):
    """The [[exclude]] entries of a bridge exclusions file: file (relative to
    the folder above ``devicekit``, e.g. ``devicekit/torch/_lower_nn.py``),
    function (coverage.py's name, exactly: ``_CTC.__init__``; optional),
    arcs (``["110->111", ...]``) or lines (``[first, last]``, the branch's
    source line); reason; status (one of STATUSES)."""
    import tomllib
    with open(path, "rb") as f:
        entries = tomllib.load(f).get("exclude", [])
    for e in entries:
        if "file" not in e or not e.get("reason"):
            raise SystemExit(f"{path}: every [[exclude]] needs 'file' and 'reason': {e}")
        if e.get("status") not in STATUSES:
            raise SystemExit(f"{path}: status must be one of {', '.join(STATUSES)}: {e}")
        if "arcs" in e:
            e["arcs"] = [tuple(int(v) for v in a.split("->")) for a in e["arcs"]]
    return entries


def branches(data):
    """Every untaken branch of a lowering file: [{file, function, arc}]."""
    rows = []
    for file, fn, arcs in unreached(data):
        if any(m in file for m in LOWERING):
            rows += [{"file": file, "function": fn, "arc": a} for a in arcs]
    return rows


def matches(entry, row):
    if entry["file"] != row["file"]:
        return False
    if "function" in entry and entry["function"] != row["function"]:
        return False
    if "arcs" in entry and row["arc"] not in entry["arcs"]:
        return False
    if "lines" in entry:
        lo, hi = entry["lines"]
        if not lo <= row["arc"][0] <= hi:
            return False
    return True


def check(rows, entries, match=None):
    """(unlisted rows, needs-case rows, [(row, status)] excused, stale entries):
    stale entries match no untaken branch. ``match(entry, row)``: this module's
    ``matches`` unless given (``coverage_run.check`` passes the kernel list's);
    an entry without a status is unreachable (the kernel list's default; this
    list's loader requires one)."""
    match = match or matches
    unlisted, needs, excused, used = [], [], [], set()
    for r in rows:
        hit = next((i for i, e in enumerate(entries) if match(e, r)), None)
        if hit is None:
            unlisted.append(r)
            continue
        used.add(hit)
        status = entries[hit].get("status", "unreachable")
        if status == "needs-case":
            needs.append(r)
        else:
            excused.append((r, status))
    return unlisted, needs, excused, [e for i, e in enumerate(entries) if i not in used]


def _arc(r):
    return f"{r['file']}  {r['function']}: {r['arc'][0]}->{r['arc'][1]}"


def format_check(path, unlisted, needs, excused, stale):
    counts = {k: sum(1 for _, st in excused if st == k) for k in EXCUSED}
    lines = [f"\ncheck against {path}: untaken lowering branches: "
             f"{counts['unreachable']} unreachable by a torch call (reviewed); "
             f"{counts['other-tests']} reached by other tests only; "
             f"{counts['needs-host']} taken only on another Python or torch; "
             f"{len(needs)} NOT YET REACHED, listed as needing a case; "
             f"{len(unlisted)} not listed"]
    lines += [f"  NOT LISTED:  {_arc(r)}" for r in unlisted]
    lines += [f"  needs a case:  {_arc(r)}" for r in needs]
    for e in stale:
        arcs = ", ".join(f"{a}->{b}" for a, b in e.get("arcs", ()))
        lines.append(f"  stale entry (matches no untaken branch): {e['file']}  "
                     f"{e.get('function', '*')}{': ' + arcs if arcs else ''}")
    return "\n".join(lines)
