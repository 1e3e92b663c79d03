"""Mutation run: does the conformance suite fail every single-bug variant of
a reference plugin?

    python benchmarks/mutation_run.py [--target cpu|cuda_sim] [--only NAME ...] [--kind KIND ...]
                                      [-k PATTERN ...] [--wall SECONDS] [--json FILE]
                                      [--kernel] [--narrow] [--opt FLAGS] [--max-units N]

Targets: ``cpu``, the reference CPU plugin (reference_backend/cpu/src,
mutants in benchmarks/mutants.py), and ``cuda_sim``, the reference CUDA
plugin's kernels in its emulated build (reference_backend/cuda/src compiled
by the host compiler against the SIMT emulator, mutants in
benchmarks/mutants_cuda.py): the same kernel source nvcc builds for a GPU.

Copies the target's src into a temporary folder, compiles it once (the flags
of its CMakeLists.txt that matter for numerics), then for each mutant applies
its one textual patch (a patch whose target text is not found exactly once
stops the run), recompiles only the translation units that include the
patched file, links a variant library, and runs ``devicekit conformance
--plugin VARIANT --exitfirst`` on it. The unpatched build must pass first.
Prints each mutant as killed (with the first case that failed) or SURVIVED,
the kill rate per kind, and the survivors; exits 1 if any survived. Each
survivor is a missing case.

Sections: ``-k PATTERN`` runs only the conformance cases whose id contains
PATTERN (the unpatched build and every variant alike). A kind whose bugs only
one section can see has its patterns in SECTIONS and gets them by default
when every selected mutant is of such a kind: ``--kind collectives`` runs the
``collectives/`` section alone (a communicator bug is invisible to the
single-device sections; running them would only cost time).

What "killed" means: the suite reported a case as fail, error or crash, or
gave its failing verdict otherwise (exit 1: a required case not implemented,
a collapsed corpus; exit 2: the plugin cannot be opened). An interrupted run
(130, 143) is no verdict. A bug that
makes a call hang (a collective whose timeout never fires) is killed only
when the suite itself reports the hang: its case fails because the expected
error did not come within the communicator's timeout, or the runner's
per-case limit (``--timeout``, 60 s here) turns the stuck case into an error
"timed out after 60 s". The run's own wall-clock limit per variant
(``--wall``) is a safety net, not a verdict: when it expires the conformance
run is interrupted (SIGINT, then SIGKILL of its process group) and the variant
counts as killed only if its partial report already holds a failing case;
otherwise it is listed as SURVIVED (hung), a missing never-a-hang case.

The kernel check (CI: tests/test_conformance_catches.py; docs/conformance.md
"The kernel-mutant check"): ``--kernel`` takes every kind but NOT_KERNEL's and the target's
KERNEL_CHECK_LEFT_OUT, and never runs KERNEL_EXCLUDE's cases; ``--narrow``
runs each variant on its own ops' cases first (the target's SEES; there only
a failing case kills) and on every section only if they do not kill it, the
unpatched build on their union; ``--opt`` replaces -O2; ``--max-units N``
leaves out, and lists, each mutant whose patch rebuilds more than N units.

Collective variants can leave shared-memory segments behind (one mutant
skips shm_unlink on purpose); after each variant the run removes the
reference plugin's segments (/dev/shm/dkcpu-coll-<pid>-...) that appeared
during it and whose creating process is gone, after the suite has judged.
"""

import argparse
import concurrent.futures as futures
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

SRC = os.path.join(REPO, "reference_backend", "cpu", "src")
EXPORTS = os.path.join(REPO, "reference_backend", "cpu", "exports.map")
INCLUDE = os.path.join(REPO, "device_api", "include")
COMMON = ["-O2", "-fPIC", "-fvisibility=hidden", "-fno-math-errno", "-pthread", "-w",
          f"-I{INCLUDE}"]


class Target:
    """A plugin the run mutates: where its sources are and how they build."""

    def __init__(self, name, src, exports, lib, mutants_module, skip=(), flags=(), ldflags=()):
        self.name, self.src, self.exports, self.lib = name, src, exports, lib
        self.mutants_module = mutants_module
        self.skip = set(skip)  # units of another build (the CUDA runtime backend)
        self.flags = list(flags)  # after COMMON: a later -O wins (coverage_run.py's -O1)
        self.ldflags = list(ldflags)

    def mutants(self):
        return __import__(self.mutants_module).MUTANTS


TARGETS = {
    "cpu": Target("cpu", SRC, EXPORTS, "libdevicekit_cpu.so", "mutants"),
    # The emulated CUDA plugin as its CMakeLists.txt builds it with
    # DEVICEKIT_CUDA_SIM=ON: every unit but gpu_cuda.cpp, .cu files as C++.
    "cuda_sim": Target(
        "cuda_sim", os.path.join(REPO, "reference_backend", "cuda", "src"),
        os.path.join(REPO, "reference_backend", "cuda", "exports.map"),
        "libdevicekit_cuda_sim.so", "mutants_cuda", skip={"gpu_cuda.cpp"},
        flags=['-DDKCUDA_NAME="cuda_sim"', '-DDKCUDA_VERSION="0.0.0-mutant"', "-I{src}"]),
}


#: Kinds whose bugs one section alone can see: its case-id patterns (-k).
SECTIONS = {"collectives": ("collectives/",), "graphs": ("graphs/",)}
#: Kinds whose bugs are not in kernel code: left out of the kernel check
#: (--kernel), which CI runs (test_the_suite_alone_kills_every_kernel_mutant);
#: the full run keeps them.
NOT_KERNEL = {
    "runtime": "the runtime contract (streams, events, memory statistics), not a kernel",
    "collectives": "the communicators (collectives.cpp), not a kernel; the collectives/ "
                   "section sees them, with multi-process ranks and timeouts",
    "graphs": "capture and replay (graphs.cpp), not a kernel; the graphs/ section sees them",
}
#: Cases the kernel check never runs: the torch bridge (a layer above the
#: plugin, and the suite's costliest section), the non-kernel sections, and
#: the tensors past 2**31 elements (GiBs of memory, minutes of CPU each).
KERNEL_EXCLUDE = ("torch/", "collectives/", "graphs/", "huge_2g")
#: The compile flags of every unit (--opt replaces them; COMMON's -O2 is the default).
OPT = []
#: The per-case limit the suite applies (conformance --timeout).
CASE_TIMEOUT_S = 60
SHM_GLOB = "/dev/shm/dkcpu-coll-*"


class PatchError(Exception):
    pass


def apply(text, old, new, name):
    count = text.count(old)
    if count != 1:
        raise PatchError(f"mutant '{name}': its target text occurs {count} times (expected once); "
                         f"the plugin changed: update benchmarks/mutants.py\n  target: {old!r}")
    return text.replace(old, new)


def files(src):
    """Every file under src, as a path relative to it ('fast/gemm.cpp')."""
    return sorted(os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/")
                  for d, _, names in os.walk(src) for f in names)


def units(src, fast=True, target=None):
    """The translation units; without the fast paths (src/fast/) when fast is False."""
    target = target or TARGETS["cpu"]
    return [f for f in files(src) if f.endswith((".c", ".cpp", ".cu"))
            and f not in target.skip and (fast or not f.startswith("fast/"))]


def includes(src):
    """{file: set of files it includes transitively} for the files in src,
    each include resolved against the including file's folder."""
    direct = {}
    for f in files(src):
        with open(os.path.join(src, f), errors="replace") as fh:
            text = fh.read()
        found = re.findall(r'#include "([^"]+)"', text)
        direct[f] = {os.path.normpath(os.path.join(os.path.dirname(f), g)).replace(os.sep, "/")
                     for g in found}
        # the shared plugin runtime headers, copied to src/devicekit/ by run()
        direct[f] |= set(re.findall(r'#include <(devicekit/[^>]+)>', text))
    closure = {}

    def walk(f, seen):
        for g in direct.get(f, ()):
            if g not in seen:
                seen.add(g)
                walk(g, seen)
        return seen
    for f in direct:
        closure[f] = walk(f, set())
    return closure


def compile_unit(src, unit, obj, fast=True, target=None):
    target = target or TARGETS["cpu"]
    is_c = unit.endswith(".c")
    cmd = ["cc", "-std=c11"] if is_c else ["c++", "-std=c++17", "-fvisibility-inlines-hidden"]
    if unit.endswith(".cu"):
        cmd += ["-x", "c++"]  # a SIMT kernel file: the host compiler builds the emulated kernels
    # DKCPU_FAST as CMakeLists.txt's DEVICEKIT_CPU_FAST sets it
    # -I{src} first: a copy of the shared headers in src/devicekit/ (run()) wins
    cmd += [f"-I{src}", *COMMON, *OPT, *(f.format(src=src) for f in target.flags),
            f"-DDKCPU_FAST={int(fast)}",
            "-c", os.path.join(src, unit), "-o", obj]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"compiling {unit} failed:\n{r.stderr[-3000:]}")
    return obj


def link(objs, lib, target=None):
    target = target or TARGETS["cpu"]
    cmd = ["c++", "-shared", "-pthread", *target.ldflags, "-o", lib, *objs,
           f"-Wl,--version-script={target.exports}",
           "-Wl,--no-undefined", "-Wl,-z,nodelete"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"linking {lib} failed:\n{r.stderr[-3000:]}")
    return lib


def build(src, objdir, libpath, only=None, base_objs=None, pool=None, fast=True, target=None):
    """Compiles `only` units (all when None) into objdir, links with base_objs for the rest.
    fast=False builds the plain core alone (no src/fast/, DKCPU_FAST=0)."""
    os.makedirs(objdir, exist_ok=True)
    todo = units(src, fast, target) if only is None else sorted(only)
    objs = dict(base_objs or {})
    jobs = {u: pool.submit(compile_unit, src, u,
                           os.path.join(objdir, u.replace("/", "_") + ".o"), fast, target)
            for u in todo}
    for u, fut in jobs.items():
        objs[u] = fut.result()
    return link([objs[u] for u in units(src, fast, target)], libpath, target), objs


def conformance(lib, report, jobs, exitfirst=True, wall=900, patterns=(), excludes=()):
    """Runs the suite on lib; returns (killed, first failure, seconds, output tail).
    killed: the report lists a fail/error/crash case (see the module docstring)."""
    cmd = [sys.executable, "-m", "devicekit", "conformance", "--plugin", lib, "--jobs", str(jobs),
           "--report", report, "--timeout", str(CASE_TIMEOUT_S)]
    for pat in patterns:
        cmd += ["-k", pat]
    for pat in excludes:
        cmd += ["--exclude", pat]
    if exitfirst:
        cmd.append("--exitfirst")
    start = time.monotonic()
    # its own process group: the workers and the ranks they spawn go with it
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    hung = False
    try:
        out, err = p.communicate(timeout=wall)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(p.pid, signal.SIGINT)  # the suite writes its partial report
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    took = time.monotonic() - start
    first, killed = None, False
    try:
        with open(os.path.join(report, "report.json")) as f:
            rep = json.load(f)
        bad = [c for c in rep["cases"] if c["outcome"] in ("fail", "error", "crash")]
        if bad:
            killed = True
            first = f"{bad[0]['outcome']} {bad[0]['id']}"
            if str(bad[0].get("message", "")).startswith("timed out after"):
                first += " (the suite's per-case limit: it hung)"
    except (OSError, ValueError):
        first = (err.strip().splitlines() or ["no report"])[-1][:200]
    if not killed and not hung and p.returncode in (1, 2):
        # the suite's verdict without a failing case: a required case not
        # implemented, a collapsed corpus, a plugin that cannot be opened
        killed = True
        first = first or f"exit {p.returncode}: {(err.strip().splitlines() or [''])[-1][:160]}"
    if hung and not killed:
        first = f"hung: no case failed within the run's wall-clock limit ({wall:g} s)"
    return killed, first, took, out[-2000:] + err[-2000:]


def child_cpu():
    """CPU seconds (user + system) of the finished child processes so far: a
    variant's cost on a loaded machine, where wall time says little."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def shm_segments():
    return set(glob.glob(SHM_GLOB))


def remove_orphan_segments(before):
    """Removes the segments that appeared since `before` and whose creator
    (the pid in the name) is gone; a live run's segments are left alone."""
    for path in shm_segments() - before:
        m = re.match(r"dkcpu-coll-(\d+)-", os.path.basename(path))
        if m is None:
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # its creator is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            os.unlink(path)
        except OSError:
            pass


def run(selected, jobs, build_jobs, workdir, baseline=True, target=None, patterns=(), wall=900,
        sees=None, excludes=(), max_units=None):
    """sees: {mutant: its case-id patterns} (--narrow): each variant runs its
    own patterns first and, if not killed, every section but `excludes`
    before it counts as survived; the unpatched build runs their union."""
    target = target or TARGETS["cpu"]
    src = os.path.join(workdir, "src")
    shutil.copytree(target.src, src)
    # The plugin runtime both plugins share (device_api/include/devicekit/), so
    # a mutant may name "devicekit/plugin_half.h" like one of the plugin's files.
    shutil.copytree(os.path.join(INCLUDE, "devicekit"), os.path.join(src, "devicekit"))
    deps = includes(src)

    def affected_by(file):
        return {u for u in units(src, target=target) if u == file or file in deps.get(u, ())}
    if max_units is not None:
        wide = [(m[0], len(affected_by(m[1])), m[1]) for m in selected
                if len(affected_by(m[1])) > max_units]
        for name, n, file in wide:
            print(f"left out (its patch of {file} rebuilds {n} units > --max-units "
                  f"{max_units}): {name}", flush=True)
        selected = [m for m in selected if m[0] not in {w[0] for w in wide}]
    pool = futures.ThreadPoolExecutor(max_workers=build_jobs)
    print(f"building the unpatched {target.name} plugin in {workdir} ...", flush=True)
    t0 = time.monotonic()
    base_lib, base_objs = build(src, os.path.join(workdir, "obj"),
                                os.path.join(workdir, target.lib), pool=pool, target=target)
    print(f"built in {time.monotonic() - t0:.1f} s (cpu {child_cpu():.1f} s)", flush=True)
    if baseline:
        base_patterns = sorted({p for m in selected for p in sees[m[0]]}) if sees else patterns
        killed, first, took, tail = conformance(base_lib, os.path.join(workdir, "rep-base"), jobs,
                                                exitfirst=True, wall=wall, patterns=base_patterns,
                                                excludes=excludes)
        if killed or first:
            raise SystemExit(f"the unpatched build does not pass conformance ({first}); "
                             f"a mutation run needs a passing baseline:\n{tail}")
        print(f"unpatched build passes ({took:.1f} s)", flush=True)
    results = []
    for name, file, old, new, kind in selected:
        path = os.path.join(src, file)
        with open(path) as f:
            original = f.read()
        patched = apply(original, old, new, name)  # raises PatchError: stop loudly
        affected = affected_by(file)
        t0, c0 = time.monotonic(), child_cpu()
        try:
            with open(path, "w") as f:
                f.write(patched)
            mdir = os.path.join(workdir, "m", name)
            lib, _ = build(src, os.path.join(mdir, "obj"), os.path.join(mdir, target.lib),
                           only=affected, base_objs=base_objs, pool=pool, target=target)
        finally:
            with open(path, "w") as f:
                f.write(original)
        built = time.monotonic() - t0
        before = shm_segments()
        mine = sees[name] if sees else patterns
        killed, first, took, _ = conformance(lib, os.path.join(mdir, "rep"), jobs, wall=wall,
                                             patterns=mine, excludes=excludes)
        widened = False
        if sees and killed and not first.startswith(("fail ", "error ", "crash ")):
            killed = False  # narrowed, only a failing case counts (not "selected nothing")
        if sees and not killed and not (first or "").startswith("hung"):
            # its own ops' cases did not see it: every section may (a narrow
            # pattern costs time here, never a verdict)
            widened = True
            killed, first, more, _ = conformance(lib, os.path.join(mdir, "rep-wide"), jobs,
                                                 wall=wall, excludes=excludes)
            took += more
        remove_orphan_segments(before)
        cpu = child_cpu() - c0
        results.append((name, kind, killed, first, took, built, len(affected), widened, cpu))
        print(f"{'killed  ' if killed else 'SURVIVED'} {name:40s} {kind:10s} build {built:5.1f} s "
              f"({len(affected)} units)  conformance {took:6.1f} s{' (widened)' if widened else ''}"
              f"  cpu {cpu:5.1f} s  {first or ''}", flush=True)
    return results


def summary(results):
    killed = sum(r[2] for r in results)
    kinds = {}
    for _, kind, k, *_ in results:
        a = kinds.setdefault(kind, [0, 0])
        a[0] += k
        a[1] += 1
    print(f"\nkill rate: {killed}/{len(results)} = {100.0 * killed / max(1, len(results)):.1f}%")
    for kind, (k, n) in sorted(kinds.items()):
        print(f"  {kind:10s} {k}/{n}")
    survivors = [r[0] for r in results if not r[2]]
    print("survivors: " + (", ".join(survivors) if survivors else "none"))
    return survivors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=sorted(TARGETS), default="cpu",
                    help="the plugin to mutate (default cpu)")
    ap.add_argument("--only", nargs="*", default=[], help="mutant names")
    ap.add_argument("--kind", nargs="*", default=[], help="mutant kinds")
    ap.add_argument("--headers", choices=("only", "skip"),
                    help="only/skip mutants of headers (each rebuilds every unit that includes "
                         "it: run the two halves side by side)")
    ap.add_argument("--jobs", type=int, default=2, help="conformance worker processes")
    ap.add_argument("--build-jobs", type=int, default=2)
    ap.add_argument("--workdir", help="keep the builds here (default: a temporary folder)")
    ap.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                    help="run only the conformance cases whose id contains PATTERN (repeatable; "
                         "default: the section of the selected kinds, if SECTIONS names one)")
    ap.add_argument("--wall", type=float, default=900,
                    help="wall-clock limit of one variant's conformance run, in seconds "
                         "(default 900; a safety net, not a verdict: see the docstring)")
    ap.add_argument("--kernel", action="store_true",
                    help="the kernel check: every mutant but the kinds in NOT_KERNEL, each run "
                         "on every section but KERNEL_EXCLUDE (the CI check)")
    ap.add_argument("--narrow", action="store_true",
                    help="each mutant runs its own ops' cases first (the target's SEES) and every "
                         "section only if they do not kill it")
    ap.add_argument("--opt", help="compile flags replacing -O2, e.g. -O1 (the unpatched "
                                  "build must still pass: run with the baseline)")
    ap.add_argument("--max-units", type=int,
                    help="leave out (and list) the mutants whose patch rebuilds more units")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip checking that the unpatched build passes (CI: the installed "
                         "reference plugin's full run checks that already)")
    args = ap.parse_args(argv)
    target = TARGETS[args.target]
    MUTANTS = target.mutants()
    names = {m[0] for m in MUTANTS}
    unknown = set(args.only) - names
    if unknown:
        ap.error(f"unknown mutants: {sorted(unknown)}")
    if args.opt:
        OPT[:] = args.opt.split()
        COMMON[:] = [f for f in COMMON if not f.startswith("-O")]
    left_out = getattr(__import__(target.mutants_module), "KERNEL_CHECK_LEFT_OUT", {})
    if args.kernel:
        for kind, why in NOT_KERNEL.items():
            left = [m[0] for m in MUTANTS if m[4] == kind]
            if left:
                print(f"left out ({kind}: {why}): {', '.join(left)}", flush=True)
        for name, why in left_out.items():
            print(f"left out ({why}): {name}", flush=True)
    selected = [m for m in MUTANTS if (not args.only or m[0] in args.only)
                and (not args.kind or m[4] in args.kind)
                and (not args.kernel or (m[4] not in NOT_KERNEL and m[0] not in left_out))
                and (args.headers is None or (m[1].endswith(".h") == (args.headers == "only")))]
    patterns = args.patterns
    if not patterns and selected and all(m[4] in SECTIONS for m in selected):
        patterns = sorted({p for m in selected for p in SECTIONS[m[4]]})
    sees = __import__(target.mutants_module).SEES if args.narrow else None
    if sees and args.patterns:
        ap.error("--narrow takes each mutant's patterns from SEES: no -k with it")
    excludes = KERNEL_EXCLUDE if args.kernel else ()
    if patterns and not sees:
        print(f"conformance cases: -k {' -k '.join(patterns)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="dk-mutants-") as tmp:
        workdir = args.workdir or tmp
        try:
            results = run(selected, args.jobs, args.build_jobs, workdir, not args.no_baseline,
                          target, patterns, args.wall, sees, excludes, args.max_units)
        except PatchError as e:
            print(f"mutation run: error: {e}", file=sys.stderr)
            return 2
    survivors = summary(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(zip(("name", "kind", "killed", "first_failure", "seconds", "build_s",
                                 "units", "widened", "cpu_s"), r))
                       for r in results], f, indent=1)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
