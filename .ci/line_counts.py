#!/usr/bin/env python3
"""Lines per area of the repository, printed by CI so that growth is visible.

Counts the lines of every file git tracks, grouped by the first area whose
prefix matches (AREAS, in order); data files (JSON goldens, baselines, ABI
snapshots) are counted apart, since they grow by regeneration, not by
writing. Run from anywhere in the repository:

    python .ci/line_counts.py
"""

import os
import subprocess
import sys

# (area, path prefix). First match wins, so narrower prefixes come first.
AREAS = [
    ("device API (header, spec, generator)", "device_api/"),
    ("SDK C++ core", "sdk/csrc/"),
    ("SDK conformance runner", "sdk/devicekit/conformance/"),
    ("SDK models", "sdk/devicekit/models/"),
    ("SDK gate", "sdk/devicekit/gate/"),
    ("SDK Python", "sdk/"),
    ("CPU plugin fast paths", "reference_backend/cpu/src/fast/"),
    ("CUDA plugin SIMT dialect and emulator", "reference_backend/cuda/src/simt/"),
    ("CUDA plugin", "reference_backend/cuda/"),
    ("CPU plugin", "reference_backend/"),
    ("conformance cases", "conformance_tests/"),
    ("templates", "templates/"),
    ("tests", "tests/"),
    ("benchmarks", "benchmarks/"),
    ("examples", "examples/"),
    ("docs", "docs/"),
    ("CI and gate policy", ".ci/"),
    ("CI and gate policy", "ci/"),
]
DATA_SUFFIXES = (".json",)


def area_of(path):
    for name, prefix in AREAS:
        if path.startswith(prefix):
            return name
    return "top level"


def count(root):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                           capture_output=True).stdout.decode().split("\0")
    code, data = {}, {}
    for path in filter(None, files):
        full = os.path.join(root, path)
        if not os.path.isfile(full):  # deleted in the work tree, or a submodule
            continue
        with open(full, "rb") as f:
            lines = f.read().count(b"\n")
        table = data if path.endswith(DATA_SUFFIXES) else code
        files_lines = table.setdefault(area_of(path), [0, 0])
        files_lines[0] += 1
        files_lines[1] += lines
    return code, data


def main():
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                          capture_output=True, text=True).stdout.strip()
    code, data = count(root)
    order = list(dict.fromkeys(name for name, _ in AREAS)) + ["top level"]
    width = max(len(n) for n in order)
    print(f"{'area':<{width}}  {'files':>5}  {'lines':>7}")
    for name in order:
        if name in code:
            print(f"{name:<{width}}  {code[name][0]:>5}  {code[name][1]:>7}")
    print(f"{'total (code and docs)':<{width}}  {sum(v[0] for v in code.values()):>5}  "
          f"{sum(v[1] for v in code.values()):>7}")
    print(f"{'data files (*.json)':<{width}}  {sum(v[0] for v in data.values()):>5}  "
          f"{sum(v[1] for v in data.values()):>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
