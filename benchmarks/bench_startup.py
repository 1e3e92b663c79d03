"""Start-up cost of plugin probing: import devicekit + the first op on cpu:0
(and, separately, discovering every plugin), with one plugin installed (the
reference CPU plugin) and with five (plus four small plugins from
tests/plugins/misbehave.c, named bench1..bench4, on DEVICEKIT_PLUGIN_PATH),
with the probe cache cold (empty) and warm, against a run that skips the
probe entirely (what loading cost before probes existed).

    python benchmarks/bench_startup.py [--runs N]

Each run is a fresh interpreter; the time is measured inside it, from before
``import devicekit`` to the op's result on the host, plus the part of it spent
vetting libraries (probe-cache lookups, probes). Prints the median and the
min..max spread per case and the ratios against no probe. Target: with a
warm cache, vetting plus importing the probe modules adds at most a few
milliseconds (WARM_BUDGET_MS): the cache checks each library's sha256 at every
start (devicekit._plugins.probe_cache), about 1 ms per MB plus ~2 ms to import
hashlib, so a warm start costs about 4 ms with the 1.7 MB CPU plugin. Needs a
C compiler (for the four small plugins).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "plugins" / "misbehave.c"
INCLUDE = REPO / "device_api" / "include"
# Was 5 ms while a cache hit cost a stat and a read; hashing the library at each
# start (an mtime can be put back; the bytes cannot lie) costs ~4 ms here, and noise
# a few more.
WARM_BUDGET_MS = 10.0

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import devicekit as dk
from devicekit._plugins import probe_cache as _probe_cache
from devicekit._plugins import registry as _registry
mode, what = sys.argv[1], sys.argv[2]
vet_s, depth = [0.0], [0]
def timed(fn, skipped):
    def wrapper(*args):
        t = time.perf_counter()
        depth[0] += 1
        try:
            # "no probe": load straight into the process, as before probes existed
            return skipped if mode == "no probe" else fn(*args)
        finally:
            depth[0] -= 1
            if depth[0] == 0:  # lookups inside _vet are counted once
                vet_s[0] += time.perf_counter() - t
    return wrapper
_registry._vet = timed(_registry._vet, (None, None))
_registry._probe_uncached = timed(_registry._probe_uncached, {})
# Finding cpu's candidate by its cached probe (_Discovery._hint) looks up too,
# and that first lookup is the one that hashes the library.
_probe_cache.lookup = timed(_probe_cache.lookup, None)
if what == "all":
    names = [d.name for d in dk.devices()]
t = dk.tensor([1.0, 2.0], device="cpu:0")
(t + t).numpy()
print(json.dumps({"total": time.perf_counter() - t0, "vet": vet_s[0],
                  "loaded": sorted(r.name for r in dk._plugins.registry._current().records if r.loaded)}))
"""


def build_plugins(folder):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench_startup: no C compiler (cc/gcc) to build the four extra plugins")
    libs = []
    for i in range(1, 5):
        lib = folder / f"bench{i}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-std=c11", f"-I{INCLUDE}",
                        f'-DBP_PLUGIN_NAME="bench{i}"', "-o", str(lib), str(SOURCE)], check=True)
        libs.append(str(lib))
    return libs


def run_case(mode, what, plugin_path, cache, runs):
    env = dict(os.environ)
    env.pop("DEVICEKIT_PLUGIN_PATH", None)
    if plugin_path:
        env["DEVICEKIT_PLUGIN_PATH"] = os.pathsep.join(plugin_path)
    totals, vets = [], []
    for _ in range(runs):
        if mode == "cold":
            shutil.rmtree(cache, ignore_errors=True)
        env["DEVICEKIT_PROBE_CACHE"] = str(cache)
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, what], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"bench_startup: the {mode} / {what} run failed:\n{proc.stderr}")
        out = json.loads(proc.stdout)
        totals.append(out["total"] * 1e3)
        vets.append(out["vet"] * 1e3)
    return totals, vets, out["loaded"]


PROBE_MODULES = ("devicekit._plugins.probe_cache", "devicekit._plugins.probe",
                 "devicekit._plugins.probe_child")


def probe_import_ms(runs):
    """Median import time (cumulative, from -X importtime) of the probe
    modules that ``import devicekit`` loads: part of what a warm start pays,
    and not visible in the vetting time (the no-probe runs import them too)."""
    totals = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import devicekit"],
                              capture_output=True, text=True, check=True)
        us = 0
        for line in proc.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] in PROBE_MODULES:
                us += int(parts[1])
        totals.append(us / 1e3)
    return statistics.median(totals)


def fmt(ms):
    return f"{statistics.median(ms):8.1f} ms  ({min(ms):.1f}..{max(ms):.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="interpreters per case (default 7)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_startup."))
    try:
        extra = build_plugins(work)
        print(f"{'case':44s} {'import + first op: median (min..max)':38s} vetting, median")
        warm_vet = []
        for what, label in (("cpu0", "first op on cpu:0"), ("all", "devices() + first op")):
            for plugins, plugin_path in ((1, []), (5, extra)):
                medians = {}
                for mode in ("no probe", "cold", "warm"):
                    cache = work / f"cache-{what}-{plugins}"
                    if mode == "warm":  # fill the cache once, untimed
                        run_case("cold", what, plugin_path, cache, 1)
                    totals, vets, loaded = run_case(mode, what, plugin_path, cache, args.runs)
                    medians[mode] = statistics.median(totals)
                    if mode == "warm":
                        warm_vet.append(statistics.median(vets))
                    case = f"{label}, {plugins} plugin{'s' if plugins > 1 else ''}, {mode}"
                    print(f"{case:44s} {fmt(totals):38s} {statistics.median(vets):6.2f} ms"
                          f"   loaded: {', '.join(loaded)}")
                print(f"{'':44s} warm / no probe = {medians['warm'] / medians['no probe']:.3f}, "
                      f"cold / no probe = {medians['cold'] / medians['no probe']:.2f}")
        imports = probe_import_ms(args.runs)
        worst = max(warm_vet) + imports
        print(f"\nwarm cache: vetting at most {max(warm_vet):.2f} ms + importing the probe "
              f"modules {imports:.2f} ms = {worst:.2f} ms per start-up (medians, measured "
              f"in-process; budget {WARM_BUDGET_MS:g} ms) -> "
              f"{'within budget' if worst <= WARM_BUDGET_MS else 'OVER BUDGET'}. The wall-clock "
              f"ratios above carry the run-to-run noise shown by min..max.")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
