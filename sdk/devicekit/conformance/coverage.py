"""Branch coverage of a plugin under the conformance suite, from gcov data.

A plugin built with ``--coverage`` (gcc or clang) writes ``.gcda`` counters
next to its ``.gcno`` files when a process that loaded it exits. After a
conformance run on such a build, :func:`collect` hands the build folder to
gcovr (a maintained gcov front end; we do not parse gcov output ourselves)
and :func:`unreached` lists the kernel branches no case took, per file and
function: what ``devicekit conformance --coverage BUILD_DIR`` shows in the
report, and what ``benchmarks/coverage_run.py`` checks against the reviewed
exclusions of the reference plugins (``ci/coverage_exclusions.toml``).

gcovr runs with ``--exclude-throw-branches`` (the exception edges the C++
compiler adds to every call that may throw: no kernel case can take them)
and ``--exclude-unreachable-branches`` (branches on lines with no code of
their own, e.g. a closing brace).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Optional

GCOVR_HINT = "install it with: pip install 'devicekit[coverage]' (or pip install gcovr)"


class CoverageError(Exception):
    """The coverage data could not be read (message says why and what to do)."""


def _gcno_files(build_dir):
    return [os.path.join(d, f) for d, _, names in os.walk(build_dir) for f in names
            if f.endswith(".gcno")]


def _coverage_build(build_dir, who):
    """build_dir as an absolute path, once it is known to hold a coverage
    build (.gcno files) and gcovr is installed; else a CoverageError that
    begins with ``who`` and says what to do."""
    if not _gcovr_available():
        raise CoverageError(f"{who} needs gcovr, which is not installed; {GCOVR_HINT}")
    build_dir = os.path.abspath(build_dir)
    if not os.path.isdir(build_dir):
        raise CoverageError(f"{who}: build folder {build_dir} does not exist")
    if not _gcno_files(build_dir):
        raise CoverageError(f"{who}: no .gcno files under {build_dir}; build the plugin with "
                            "--coverage (see docs/porting_guide.md, 'Coverage build') and pass "
                            "its build folder")
    return build_dir


def reset(build_dir):
    """Checks build_dir holds a coverage build (and that gcovr is there) and
    removes its counters (.gcda), so the report counts one run alone."""
    build_dir = _coverage_build(build_dir, "--coverage")
    for d, _, names in os.walk(build_dir):
        for f in names:
            if f.endswith(".gcda"):
                os.unlink(os.path.join(d, f))


def report_block(build_dir, include=None):
    """The report's ``coverage`` entry: per-file totals and the untaken
    branches per file and function, of the sources gcov names (system
    headers and DeviceKit's own plugin headers left out)."""
    import devicekit

    pkg = os.path.dirname(os.path.abspath(devicekit.__file__))
    root = source_root(build_dir)
    data = collect(build_dir, root=root,
                   exclude=[re.escape(pkg) + ".*", r".*/devicekit/plugin_[^/]*\.h"])
    rows = files(data, include)
    lc, lt, bc, bt = totals(rows)
    return {"build_dir": os.path.abspath(build_dir), "root": root,
            "files": [{"file": f, "lines": [a, b], "branches": [c, d]} for f, a, b, c, d in rows],
            "lines": [lc, lt], "branches": [bc, bt],
            "unreached": [{"file": f, "function": fn, "lines": ls, "branches": n}
                          for f, fn, ls, n in by_function(unreached(data, include))]}


def source_root(build_dir):
    """The plugin's source folder: a CMake build folder names it
    (CMAKE_HOME_DIRECTORY in CMakeCache.txt); otherwise the current folder.
    Only sources under it are reported."""
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache, errors="replace") as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    return os.getcwd()


def _gcovr_available():
    try:
        import gcovr  # noqa: F401
    except ImportError:
        return False
    return True


def collect(build_dir, root=None, html=None, summary=None, exclude=(), jobs=1):
    """Runs gcovr over the .gcda/.gcno files under build_dir; returns its JSON.

    root: the source folder (default: the current one); only the sources
    under it are reported, named relative to it. html: write gcovr's
    detailed HTML page here (a file path). summary: write gcovr's
    --json-summary (per-file line/branch totals) here. exclude: regexes of
    source paths to leave out (system headers are always left out).
    """
    build_dir = _coverage_build(build_dir, "DeviceKit coverage")
    with tempfile.TemporaryDirectory(prefix="dk-gcovr-") as tmp:
        out = os.path.join(tmp, "coverage.json")
        cmd = [sys.executable, "-m", "gcovr", "--root", os.path.abspath(root or os.getcwd()),
               build_dir,
               "--json", out, "--exclude-throw-branches", "--exclude-unreachable-branches",
               # counts past 2**32 on the 2**31-element cases are real, not gcov's bug 68080
               "--gcov-ignore-parse-errors=negative_hits.warn_once_per_file",
               "--gcov-ignore-parse-errors=suspicious_hits.warn_once_per_file",
               "--merge-mode-functions=separate", "-j", str(jobs),
               "--exclude", r"/usr/.*"]
        for pat in exclude:
            cmd += ["--exclude", pat]
        if summary:
            cmd += ["--json-summary", summary, "--json-summary-pretty"]
        if html:
            os.makedirs(os.path.dirname(os.path.abspath(html)), exist_ok=True)
            cmd += ["--html-details", html]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise CoverageError(f"DeviceKit coverage: gcovr failed (exit {r.returncode}):\n"
                                f"{r.stderr[-2000:]}")
        with open(out) as f:
            return json.load(f)


def files(data, include: Optional[str] = None):
    """[(file, lines covered, lines, branches covered, branches)] per source
    file whose name matches the regex include (every file when None)."""
    rows = []
    for entry in data["files"]:
        name = entry["file"]
        if include and not re.search(include, name):
            continue
        lines = [ln for ln in entry["lines"] if not ln.get("gcovr/noncode")]
        branches = [b for ln in lines for b in ln.get("branches", ())]
        rows.append((name, sum(1 for ln in lines if ln["count"] > 0), len(lines),
                     sum(1 for b in branches if b["count"] > 0), len(branches)))
    return sorted(rows)


def unreached(data, include: Optional[str] = None):
    """The branches no case took: [{file, function, line, taken, total}],
    one row per source line that has an untaken branch (taken: how many of
    its branches ran), for the files whose name matches include."""
    rows = []
    for entry in data["files"]:
        name = entry["file"]
        if include and not re.search(include, name):
            continue
        for ln in entry["lines"]:
            br = ln.get("branches") or []
            missed = [b for b in br if b["count"] == 0]
            if missed:
                rows.append({"file": name, "function": ln.get("function_name") or "?",
                             "line": ln["line_number"], "taken": len(br) - len(missed),
                             "total": len(br), "line_count": ln["count"]})
    rows.sort(key=lambda r: (r["file"], r["line"]))
    return rows


def by_function(rows):
    """unreached() rows grouped: [(file, function, [lines], untaken branches)]."""
    groups = {}
    for r in rows:
        g = groups.setdefault((r["file"], r["function"]), [[], 0])
        g[0].append(r["line"])
        g[1] += r["total"] - r["taken"]
    return [(f, fn, lines, n) for (f, fn), (lines, n) in sorted(groups.items())]


def totals(rows):
    """(lines covered, lines, branches covered, branches) over files() rows."""
    return tuple(sum(r[i] for r in rows) for i in range(1, 5))


def pct(a, b):
    return 100.0 * a / b if b else 100.0


def format_table(rows):
    """files() rows as a text table, with a total line."""
    out = [f"{'file':40s} {'lines':>16s} {'branches':>16s}"]
    for name, lc, lt, bc, bt in rows:
        out.append(f"{name:40s} {lc:6d}/{lt:<6d}{pct(lc, lt):3.0f}% {bc:6d}/{bt:<6d}{pct(bc, bt):3.0f}%")
    lc, lt, bc, bt = totals(rows)
    out.append(f"{'total':40s} {lc:6d}/{lt:<6d}{pct(lc, lt):3.0f}% {bc:6d}/{bt:<6d}{pct(bc, bt):3.0f}%")
    return "\n".join(out)
