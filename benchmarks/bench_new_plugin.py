"""Time from `devicekit new` to a finished runtime-conformance run on the fresh
plugin, build included. Target: at most 3 minutes on a 2-core machine.

    python benchmarks/bench_new_plugin.py [--keep DIR]

Steps, each timed: render (devicekit new), build the wheel (pip wheel
--no-build-isolation, a cold build: new project, new build folder), install it
into a throwaway prefix, `devicekit devices`, and
`devicekit conformance --device NAME:0 -k runtime`. Exit code 1 when a step
fails or the total is over the target.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "benchplug"
TARGET_SECONDS = 180


def step(label, cmd, env=None, results=None):
    t0 = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    results.append((label, dt, proc.returncode))
    return proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (default: temp)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_new_plugin."))
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    project, wheels, prefix = work / "plugin", work / "wheels", work / "site"
    results = []
    try:
        for label, cmd in [
            ("devicekit new", [py, "-m", "devicekit", "new", NAME, "--dir", project, "--force"]),
            ("pip wheel (cold build)", [py, "-m", "pip", "wheel", "--no-build-isolation",
                                        "--no-deps", "-q", "-w", wheels, project]),
        ]:
            proc = step(label, cmd, results=results)
            if proc.returncode != 0:
                sys.exit(f"{label} failed:\n{proc.stdout}{proc.stderr}")
        (wheel,) = wheels.glob("*.whl")
        proc = step("pip install (no deps)", [py, "-m", "pip", "install", "-q", "--no-deps",
                                              "--target", prefix, wheel], results=results)
        if proc.returncode != 0:
            sys.exit(f"install failed:\n{proc.stderr}")
        # The plugin is installed into a side folder: put it on the path so its
        # entry point is discovered, as a real install into site-packages would.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(prefix), *filter(None, [os.environ.get("PYTHONPATH")])])}
        env.pop("DEVICEKIT_PLUGIN_PATH", None)
        proc = step("devicekit devices", [py, "-m", "devicekit", "devices"], env, results)
        if proc.returncode != 0 or f"{NAME}:0" not in proc.stdout:
            sys.exit(f"the plugin was not listed:\n{proc.stdout}{proc.stderr}")
        step("conformance -k runtime", [py, "-m", "devicekit", "conformance", "--device",
                                        f"{NAME}:0", "-k", "runtime", "--report", work / "reports"],
             env, results)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    total = sum(dt for _, dt, _ in results)
    for label, dt, rc in results:
        print(f"{label:28s} {dt:7.2f} s{'' if rc == 0 else f'  (exit {rc})'}")
    print(f"{'total':28s} {total:7.2f} s  (target <= {TARGET_SECONDS} s; "
          f"{os.cpu_count()} cores)")
    ok = all(rc == 0 for _, _, rc in results) and total <= TARGET_SECONDS
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
