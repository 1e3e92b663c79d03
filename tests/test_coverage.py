"""Branch coverage under the conformance suite (docs/coverage.md).

A freshly scaffolded plugin built with its ``PLUGIN_COVERAGE`` CMake option
runs a filtered conformance with ``--coverage BUILD_DIR``: the report lists
the plugin's untaken branches per file and function, in report.json, the
text summary and report.html. The exclusion check of
``benchmarks/coverage_run.py`` fails on an untaken branch nobody listed and
counts the ones listed as needing a case; the reviewed list
``ci/coverage_exclusions.toml`` is well-formed and names real code.

Needs: a C compiler, cmake and gcovr (the test extra) for the vendor test.
"""

import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from devicekit import cli

from conftest import _find_c_compiler

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import coverage_run  # noqa: E402


@pytest.fixture(scope="module")
def cov_build(tmp_path_factory):
    """A scaffolded plugin built with -DPLUGIN_COVERAGE=ON: (project, build, library)."""
    if _find_c_compiler() is None or shutil.which("cmake") is None:
        pytest.skip("building the scaffolded plugin needs a C compiler and cmake on PATH")
    project = tmp_path_factory.mktemp("cov") / "acme"
    assert cli.main(["new", "acme", "--dir", str(project)]) == 0
    build = project / "build" / "cov"
    for cmd in (["cmake", "-S", project, "-B", build, "-DPLUGIN_COVERAGE=ON"],
                ["cmake", "--build", build, "--parallel", "2"]):
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{cmd}:\n{r.stdout}{r.stderr}"
    assert list(build.rglob("*.gcno")), "PLUGIN_COVERAGE=ON built no .gcno files"
    return project, build, build / "libdevicekit_acme.so"


def conformance(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "devicekit", "conformance", *map(str, args)],
                          capture_output=True, text=True, timeout=240, cwd=cwd)


def test_scaffolded_plugin_reports_its_untaken_branches(cov_build, tmp_path):
    project, build, lib = cov_build
    (build / "stale.gcda").write_bytes(b"old counters")  # reset before the run
    r = conformance("--plugin", lib, "--coverage", build, "-k", "ops/add/", "-k", "ops/copy/",
                    "--jobs", "1", "--report", tmp_path / "rep")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (build / "stale.gcda").exists()
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    cov = rep["coverage"]
    assert "error" not in cov, cov
    assert cov["root"] == str(project)
    names = {f["file"] for f in cov["files"]}
    assert "src/kernels.c" in names and not any("plugin_" in n for n in names), names
    lc, lt = cov["lines"]
    assert 0 < lc < lt  # add and copy ran; the error paths and other ops did not
    fns = {(u["file"], u["function"]) for u in cov["unreached"]}
    # only add and copy ran: fill's kernel never did
    assert any(f == "src/kernels.c" for f, _ in fns), fns
    assert all(u["branches"] > 0 and u["lines"] for u in cov["unreached"])
    assert "coverage of the plugin" in r.stdout and "src/kernels.c" in r.stdout
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Plugin branches no case reached" in html
    table = html[html.index('<table class="uncovered">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == len(cov["unreached"]) + 1
    assert "src/kernels.c" in table


def test_a_worker_stopped_at_its_timeout_keeps_its_counters(cov_build, tmp_path):
    """Every case runs past a 1 µs --timeout, so every worker is stopped
    (SIGTERM, then SIGKILL) and none exits normally: the counters in the
    report were written by <devicekit/plugin_coverage.h>'s handler, which the
    scaffold includes under PLUGIN_COVERAGE. Without it the run has none."""
    project, build, lib = cov_build
    r = conformance("--plugin", lib, "--coverage", build, "-k", "ops/add/float32/", "--jobs", "1",
                    "--timeout", "0.000001", "--report", tmp_path / "rep")
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    outcomes = {c["outcome"] for c in rep["cases"]}
    assert outcomes == {"error"} and all(c["message"].startswith("timed out")
                                         for c in rep["cases"]), outcomes
    cov = rep["coverage"]
    assert "error" not in cov, cov
    lc, lt = cov["lines"]
    assert lc > 0, cov  # Plugin_Initialize and device setup ran in each stopped worker


def test_an_answer_found_after_the_deadline_is_a_timeout(monkeypatch):
    """The case's time is the parent's clock: an answer already waiting when
    the parent looks, but after the deadline (it was descheduled on a loaded
    host), is a timeout, as the test above needs on any host; one within the
    deadline is the answer."""
    from devicekit.conformance import runner

    class Proc:
        def __init__(self, fd):
            self.stdin, self.stdout = io.BytesIO(), os.fdopen(fd, "rb")

    answer = {"outcome": "pass"}
    for took, expected in ((2.0, "timeout"), (0.5, answer)):
        r, w = os.pipe()
        os.write(w, json.dumps(answer).encode() + b"\n")
        os.close(w)
        worker = runner._Worker.__new__(runner._Worker)
        worker.proc = Proc(r)
        clock = types.SimpleNamespace(monotonic=iter((100.0, 100.0 + took)).__next__)
        monkeypatch.setattr(runner, "time", clock)
        assert worker.run("ops/add/float32/x", 1.0) == expected
        assert worker.proc.stdin.getvalue() == b"ops/add/float32/x\n"
        worker.proc.stdout.close()


def test_coverage_of_a_folder_without_a_coverage_build_is_a_usage_error(tmp_path):
    r = conformance("--device", "cpu:0", "--coverage", tmp_path, "--op", "add")
    assert r.returncode == 2
    assert "no .gcno files" in r.stderr and "--coverage" in r.stderr


def row(file, line, function="f", taken=0, total=2):
    return {"file": file, "line": line, "function": function, "taken": taken, "total": total}


def test_exclusion_check_fails_unlisted_and_counts_needs_case():
    entries = [
        {"file": "a.cpp", "function": "oom", "reason": "allocation failure", "status": "unreachable"},
        {"file": "a.cpp", "lines": [10, 20], "reason": "not yet reached: needs a case",
         "status": "needs-case"},
        {"file": "a.cpp", "function": "wide", "reason": "64-bit loop past 2**31 elements",
         "status": "past-budget"},
        {"file": "a.cpp", "function": "check_args", "reason": "header: args is never NULL",
         "status": "ruled-out"},
        {"file": "gone.cpp", "reason": "stale"},
    ]
    rows = [row("a.cpp", 5, "oom_path"), row("a.cpp", 6, "wide_loop"), row("a.cpp", 7, "check_args"),
            row("a.cpp", 12), row("a.cpp", 30), row("b.cpp", 1)]
    unlisted, needs, excused, stale = coverage_run.check(rows, entries)
    assert [(r["file"], r["line"]) for r in unlisted] == [("a.cpp", 30), ("b.cpp", 1)]
    assert [r["line"] for r in needs] == [12]
    assert [(r["line"], status) for r, status in excused] == [(5, "unreachable"),
                                                              (6, "past-budget"),
                                                              (7, "ruled-out")]
    assert [e["file"] for e in stale] == ["gone.cpp"]


def test_exclusion_status_must_be_a_known_one(tmp_path):
    path = tmp_path / "ex.toml"
    path.write_text('[[exclude]]\nfile = "a.cpp"\nstatus = "someday"\nreason = "r"\n')
    with pytest.raises(SystemExit, match="status must be one of .*past-budget, ruled-out"):
        coverage_run.load_exclusions(str(path), "cpu")


def test_update_exclusions_writes_left_out_cases_apart_from_missing_ones(tmp_path):
    """--update-exclusions --reached-in: lines every branch of which the whole
    suite's run took are left-out-case (this run excluded their cases), the
    others needs-case; another target's generated entries and the hand-written
    part are kept, and the check counts left-out-case lines as excused."""
    path = tmp_path / "ex.toml"
    path.write_text('[[exclude]]\ntarget = "cuda_sim"\nfile = "a.cu"\nfunction = "oom"\nreason = "r"\n\n'
                    f"{coverage_run.GENERATED}\n\n[[exclude]]\nfile = \"k.cpp\"\n"
                    'line_list = [3]\nstatus = "needs-case"\ngenerated = true\nreason = "r"\n')
    rows = [row("a.cu", 1, "oom_path"), row("a.cu", 7), row("a.cu", 9), row("b.cu", 2)]
    reached = {("a.cu", 9, "f"), ("b.cu", 2, "f")}
    coverage_run.update_exclusions(str(path), "cuda_sim", rows, reached)
    entries = coverage_run.load_exclusions(str(path), "cuda_sim")
    got = {(e["file"], e.get("status"), tuple(e.get("line_list", ()))) for e in entries}
    assert got == {("a.cu", None, ()), ("a.cu", "needs-case", (7,)),
                   ("a.cu", "left-out-case", (9,)), ("b.cu", "left-out-case", (2,))}, got
    assert [e["file"] for e in coverage_run.load_exclusions(str(path), "cpu")] == ["k.cpp"]
    unlisted, needs, excused, stale = coverage_run.check(rows, entries)
    assert not unlisted and [r["line"] for r in needs] == [7]
    assert sorted(st for _, st in excused) == ["left-out-case", "left-out-case", "unreachable"]


def test_exclusion_function_re_names_a_set_of_instantiations():
    """``function_re``: one entry for chosen instantiations of a template (here
    kinds 1 and 2 of a reducer), never the others at the same line."""
    entry = {"file": "r.cpp", "function_re": r"pairwise<Reducer<[^>]*, [12]>", "lines": [124, 124],
             "reason": "the empty range of a max or min", "status": "unreachable"}
    rows = [row("r.cpp", 124, f"void pairwise<Reducer<float, {k}>, 16>(long)") for k in (0, 1, 2)]
    rows.append(row("r.cpp", 125, "void pairwise<Reducer<float, 1>, 16>(long)"))
    unlisted, needs, excused, stale = coverage_run.check(rows, [entry])
    assert [(r["line"], r["function"]) for r in unlisted] == [
        (124, "void pairwise<Reducer<float, 0>, 16>(long)"),
        (125, "void pairwise<Reducer<float, 1>, 16>(long)")]
    assert len(excused) == 2 and not needs and not stale


def test_exclusions_file_names_real_code_with_reasons():
    path = REPO / "ci" / "coverage_exclusions.toml"
    entries = coverage_run.load_exclusions(path)
    data = tomllib.loads(path.read_text())
    roots = {"cpu": REPO / "reference_backend" / "cpu" / "src",
             "cuda_sim": REPO / "reference_backend" / "cuda" / "src"}
    assert entries
    for e in data["exclude"]:
        target = e.get("target", "cpu")
        src = roots[target] / e["file"]
        assert src.exists(), e
        assert len(e["reason"]) > 10, e
        if "lines" in e:
            lo, hi = e["lines"]
            assert 1 <= lo <= hi <= len(src.read_text().splitlines()), e


def test_kernel_patterns_name_existing_files():
    import re

    for target, src in (("cpu", "reference_backend/cpu/src"), ("cuda_sim",
                                                                 "reference_backend/cuda/src")):
        files = [os.path.relpath(os.path.join(d, f), REPO / src)
                 for d, _, names in os.walk(REPO / src) for f in names]
        kernels = [f for f in files if re.search(coverage_run.KERNELS[target], f)]
        assert any(f.startswith("kernels") for f in kernels), (target, kernels)


FLUSHED = r"""
#include <stdio.h>
#include <unistd.h>
%s
int main(int argc, char** argv) {
  (void)argv;
  if (argc > 1) puts("a branch");
  puts("ready");
  fflush(stdout);
  for (;;) pause();
}
"""


@pytest.mark.parametrize("lang", ["c", "c++"])
@pytest.mark.parametrize("header", [True, False])
def test_plugin_coverage_header_writes_the_counters_at_sigterm(tmp_path, lang, header):
    """<devicekit/plugin_coverage.h> in a --coverage build: SIGTERM writes the
    .gcda file and still ends the process by SIGTERM; without it, no counters."""
    compiler = _find_c_compiler() if lang == "c" else shutil.which("c++")
    if compiler is None or shutil.which("gcc") is None:
        pytest.skip("needs gcc (its libgcov) and a C/C++ compiler")
    src = tmp_path / "prog.c"
    src.write_text(FLUSHED % ("#include <devicekit/plugin_coverage.h>" if header else ""))
    exe = tmp_path / "prog"
    flags = ["-std=c99"] if lang == "c" else ["-x", "c++"]
    r = subprocess.run([compiler, *flags, "-Wall", "-Wextra", "-Werror", "--coverage", "-O1",
                        f"-I{REPO / 'device_api' / 'include'}", str(src), "-o", str(exe)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout.readline().strip() == b"ready"
    proc.terminate()
    assert proc.wait(timeout=60) == -15
    assert bool(list(tmp_path.glob("*.gcda"))) == header


def test_no_kernel_branch_waits_for_a_case():
    """Both reference plugins' kernel branches are reached by the suite, or
    listed with the reason no case may take them: none is left as needs-case
    (work not yet done), on cpu or on cuda_sim."""
    for target in ("cpu", "cuda_sim"):
        entries = coverage_run.load_exclusions(REPO / "ci" / "coverage_exclusions.toml", target)
        assert entries, target
        assert [e for e in entries if e.get("status", "unreachable") == "needs-case"] == [], target
